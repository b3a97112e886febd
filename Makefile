# Two commands matter: `make serve` runs the product, `make test` passes the tests.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CAPSULE_DIR := capsules
TS_CLIENT := tests/e2e/ts_client
TS_STAMP := $(TS_CLIENT)/node_modules/.installed
CONFORMANCE := tests/e2e/conformance
CONFORMANCE_STAMP := $(CONFORMANCE)/node_modules/.installed
REGISTRY_BIN := /usr/bin/docker-registry
SYSTEMD_ANALYZE := /usr/bin/systemd-analyze
JS_TOOLCHAIN := toolchains/js
JS_STAMP := $(JS_TOOLCHAIN)/node_modules/.installed
MCPB := tests/e2e/mcpb
MCPB_STAMP := $(MCPB)/node_modules/.installed

.PHONY: serve test test-fast lint bench soak build-capsules js-toolchain mcpb clean

js-toolchain: $(JS_STAMP)

# Set-up output goes to stderr: `make serve`'s stdout carries only JSON-RPC.

$(BIN)/python:
	@echo "creating $(VENV) with $(PYTHON) ..." 1>&2
	@$(PYTHON) -m venv $(VENV) 1>&2
	@$(BIN)/pip install -q --upgrade pip 1>&2

# pip's "Collecting ..." lines say what is being installed (a minute or so on a fresh clone).
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing astrid-py and its test extras into $(VENV) (pinned: wasmtime, componentize-py, mcp) ..." 1>&2
	@$(BIN)/pip install --progress-bar off --disable-pip-version-check -e '.[test,bench]' > $(VENV)/pip-install.log 2>&1 & pid=$$!; \
	  tail -n +1 -F --pid=$$pid $(VENV)/pip-install.log 2>/dev/null | grep --line-buffered -E '^(Collecting|Successfully installed)' 1>&2; \
	  wait $$pid || { tail -n 30 $(VENV)/pip-install.log 1>&2; echo "pip install failed: the whole log is $(VENV)/pip-install.log" 1>&2; exit 1; }
	@touch $(STAMP)

# The MCP TypeScript SDK's client, for the interop test (needs Node.js 20+ and npm).
$(TS_STAMP): $(TS_CLIENT)/package-lock.json
	@command -v npm >/dev/null || { echo "make test needs Node.js 20+ and npm (the TypeScript client of the interop test)" 1>&2; exit 1; }
	@echo "installing the MCP TypeScript SDK client into $(TS_CLIENT) ..." 1>&2
	@cd $(TS_CLIENT) && { npm ci --no-audit --no-fund --loglevel=error 1>&2 || { sleep 5; npm ci --no-audit --no-fund --loglevel=error 1>&2; }; }
	@touch $(TS_STAMP)

# The official MCP conformance suite (0.1.16 and 0.2.0-alpha.12) and the Node.js 22
# it runs on, both npm packages installed into $(CONFORMANCE): nothing system-wide.
$(CONFORMANCE_STAMP): $(CONFORMANCE)/package.json $(CONFORMANCE)/package-lock.json
	@command -v npm >/dev/null || { echo "make test needs Node.js 20+ and npm (the MCP conformance suite)" 1>&2; exit 1; }
	@echo "installing the MCP conformance suite and Node.js 22 into $(CONFORMANCE) ..." 1>&2
	@cd $(CONFORMANCE) && { npm ci --no-audit --no-fund --loglevel=error 1>&2 || { sleep 5; npm ci --no-audit --no-fund --loglevel=error 1>&2; }; }
	@touch $(CONFORMANCE_STAMP)

# The JS/TS capsule toolchain (esbuild bundles, componentize-js builds the component), pinned in
# $(JS_TOOLCHAIN)/package-lock.json and installed there: `astrid capsule build` of an app.ts uses it.
$(JS_STAMP): $(JS_TOOLCHAIN)/package.json $(JS_TOOLCHAIN)/package-lock.json
	@command -v npm >/dev/null || { echo "make test and make build-capsules need Node.js 20+ and npm (the JS/TS capsule toolchain)" 1>&2; exit 1; }
	@echo "installing the JS/TS capsule toolchain (componentize-js, esbuild) into $(JS_TOOLCHAIN) ..." 1>&2
	@cd $(JS_TOOLCHAIN) && { npm ci --no-audit --no-fund --loglevel=error 1>&2 || { sleep 5; npm ci --no-audit --no-fund --loglevel=error 1>&2; }; }
	@touch $(JS_STAMP)

# The MCP Bundle CLI and library (@anthropic-ai/mcpb, pinned in $(MCPB)/package-lock.json): the
# `astrid mcp bundle` tests validate, pack and start the bundles with it, as Claude Desktop would.
mcpb: $(MCPB_STAMP)

$(MCPB_STAMP): $(MCPB)/package.json $(MCPB)/package-lock.json
	@command -v npm >/dev/null || { echo "make test needs Node.js 20+ and npm (the MCP Bundle CLI of the bundle tests)" 1>&2; exit 1; }
	@echo "installing the MCP Bundle CLI (@anthropic-ai/mcpb) into $(MCPB) ..." 1>&2
	@cd $(MCPB) && { npm ci --no-audit --no-fund --loglevel=error 1>&2 || { sleep 5; npm ci --no-audit --no-fund --loglevel=error 1>&2; }; }
	@touch $(MCPB_STAMP)

# The OCI registry the capsule push/pull tests start on loopback: the CNCF distribution
# registry of Debian's docker-registry package, installed once (root only; anyone else is
# told what to run). The tests start their own, never the package's service.
$(REGISTRY_BIN):
	@command -v docker-registry >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	    echo "make test needs docker-registry (the OCI registry of the push/pull tests): run 'sudo apt-get update && sudo apt-get install -y docker-registry'" 1>&2; \
	    exit 1; \
	  fi; \
	  echo "installing docker-registry (Debian package) for the OCI registry tests ..." 1>&2; \
	  apt-get update -qq 1>&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry 1>&2; \
	}

# systemd-analyze checks the unit `astrid mcp install systemd` writes (tests/cli/test_systemd_unit.py):
# Debian's systemd package, installed once like docker-registry (nothing is started).
$(SYSTEMD_ANALYZE):
	@command -v systemd-analyze >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	    echo "make test needs systemd-analyze (it checks the systemd unit of astrid mcp install systemd): run 'sudo apt-get update && sudo apt-get install -y systemd'" 1>&2; \
	    exit 1; \
	  fi; \
	  echo "installing systemd (Debian package) for systemd-analyze verify ..." 1>&2; \
	  apt-get update -qq 1>&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd 1>&2; \
	}

# feeds is TypeScript: its build needs the JS toolchain (Node.js 20+ and npm).
build-capsules: $(STAMP) $(JS_STAMP)
	@$(BIN)/astrid capsule build $(CAPSULE_DIR)/introspect 1>&2
	@$(BIN)/astrid capsule build $(CAPSULE_DIR)/docs 1>&2
	@$(BIN)/astrid capsule build $(CAPSULE_DIR)/files 1>&2
	@$(BIN)/astrid capsule build $(CAPSULE_DIR)/feeds 1>&2

# stdio MCP server on the bundled capsules (plus the capsule home); stderr says
# what is served, `astrid mcp config` how to connect Claude Desktop.
serve: build-capsules
	@$(BIN)/astrid mcp serve --capsules $(CAPSULE_DIR)/introspect --capsules $(CAPSULE_DIR)/docs --capsules $(CAPSULE_DIR)/files \
	  --capsules $(CAPSULE_DIR)/feeds

test: lint $(TS_STAMP) $(CONFORMANCE_STAMP) $(JS_STAMP) $(MCPB_STAMP) $(REGISTRY_BIN) $(SYSTEMD_ANALYZE)
	$(BIN)/python -m pytest -q

# ruff (lint + format) and mypy on the whole tree. mypy finds the `astrid.*`
# import names through links under .typecheck/ (setuptools maps the folders).
lint: $(STAMP)
	@mkdir -p .typecheck/astrid
	@for dir in host cli capsules wit; do ln -sfn ../../$$dir .typecheck/astrid/$$dir; done
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test-fast: $(STAMP) $(JS_STAMP) $(MCPB_STAMP) $(REGISTRY_BIN) $(SYSTEMD_ANALYZE)
	$(BIN)/python -m pytest -q -m "not slow"

bench: build-capsules
	$(BIN)/python -m bench

soak: build-capsules
	$(BIN)/python -m soak

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .typecheck $(TS_CLIENT)/node_modules $(CONFORMANCE)/node_modules $(JS_TOOLCHAIN)/node_modules $(MCPB)/node_modules
