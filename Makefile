# Two commands matter: `make serve` runs the product, `make test` passes the tests.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CAPSULE_DIR := capsules

.PHONY: serve test test-fast bench soak lint build-capsules clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $(STAMP)

build-capsules: $(STAMP)
	$(BIN)/astrid capsule build $(CAPSULE_DIR)/introspect
	$(BIN)/astrid capsule build $(CAPSULE_DIR)/docs

# stdio MCP server on the bundled capsules (plus the capsule home); stderr says
# what is served, `astrid mcp config` how to connect Claude Desktop.
serve: build-capsules
	$(BIN)/astrid mcp serve --capsules $(CAPSULE_DIR)/introspect --capsules $(CAPSULE_DIR)/docs

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: build-capsules
	$(BIN)/python -m bench

soak: build-capsules
	$(BIN)/python -m soak

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
