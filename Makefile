# Two commands matter: `make serve` runs the product, `make test` passes the tests.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CAPSULE_DIR := capsules

.PHONY: serve test test-fast bench soak build-capsules clean

# Set-up output goes to stderr: `make serve`'s stdout carries only JSON-RPC.

$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) 1>&2
	@$(BIN)/pip install -q --upgrade pip 1>&2

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing astrid-py and its test extras into $(VENV) ..." 1>&2
	@$(BIN)/pip install -q -e '.[test,bench]' 1>&2
	@touch $(STAMP)

build-capsules: $(STAMP)
	@$(BIN)/astrid capsule build $(CAPSULE_DIR)/introspect 1>&2
	@$(BIN)/astrid capsule build $(CAPSULE_DIR)/docs 1>&2

# stdio MCP server on the bundled capsules (plus the capsule home); stderr says
# what is served, `astrid mcp config` how to connect Claude Desktop.
serve: build-capsules
	@$(BIN)/astrid mcp serve --capsules $(CAPSULE_DIR)/introspect --capsules $(CAPSULE_DIR)/docs

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
