"""Hostile capsules against the real kernel, broker and MCP server: the fixtures.

Builds are few and cached by content hash (tests/conftest.py points the caches
at `.cache/`):

- one componentize-py build of `tests/fixtures/hostile/app.py`
  (tests/security/hostile.py), copied under many names and modes;
- the bundled `docs` and `introspect` (`bundled`, tests/conftest.py);
- tiny WAT components (milliseconds) for what Python cannot do at run time,
  such as trapping while being instantiated.

The in-process servers are in tests/security/servers.py, `astrid mcp serve`
over stdio in tests/security/mcp_stdio.py. Every wait in these tests is
bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from astrid.host.kernel.compile_cache import CompileCache
from tests.security.hostile import HOSTILE_WAT, hostile_wasm_path, make_hostile
from tests.security.servers import InProcessServers
from tests.support.wat import build_wat


@pytest.fixture(scope="session")
def hostile_wasm() -> Path:
    path = hostile_wasm_path()
    # Compile it into the compile cache once, so every kernel loads it in milliseconds.
    CompileCache().precompile(path)
    return path


@pytest.fixture(scope="session")
def hostile_wasi_wasm() -> Path:
    """The hostile capsule linked to the host's WASI (its `wasi` mode)."""
    path = hostile_wasm_path(stub_wasi=False)
    CompileCache().precompile(path)
    return path


@pytest.fixture(scope="session")
def trap_on_load_wasm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wat(HOSTILE_WAT / "trap_on_load.wat", tmp_path_factory.mktemp("wat") / "trap_on_load.wasm")


@pytest.fixture
def hostile_dir(tmp_path: Path, hostile_wasm: Path) -> Callable[..., Path]:
    """`hostile_dir(name, mode, capabilities="", **config)`: a hostile capsule folder under tmp/capsules."""
    parent = tmp_path / "capsules"

    def make(name: str, mode: str, capabilities: str = "", **config: str | int) -> Path:
        return make_hostile(parent, name, mode, hostile_wasm, capabilities, **config)

    return make


@pytest.fixture
def serve() -> Iterator[InProcessServers]:
    """`serve(*folders, principal="alice", limits=None)`: a started Runtime, closed after the test."""
    servers = InProcessServers()
    yield servers
    servers.close()
