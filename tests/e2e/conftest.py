"""End-to-end: a real MCP client (ClientSession over stdio) spawning `astrid mcp serve`.

Capsules are copied into a temporary folder (a clean checkout: no stale
.wasm) and built with `astrid capsule build`, as a user would; builds and
compiled components are cached by content hash (tests/conftest.py points the
caches at `.cache/`), so only the first run on a machine pays for them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from astrid.capsules import CAPSULES_DIR
from astrid.host.toolpaths import tool_path
from tests.conftest import server_env

HERE = Path(__file__).resolve().parent
TEST_CAPSULES = HERE / "capsules"
BUILD_TIMEOUT_S = 1800


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds real components with componentize-py (cached by content hash)")


def astrid() -> str:
    return tool_path("astrid")


def clean_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.wasm", "*.cwasm", "__pycache__", ".*"))
    return target


def build(folder: Path) -> None:
    result = subprocess.run(
        [astrid(), "capsule", "build", str(folder)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert result.returncode == 0, f"building {folder.name} failed:\n{result.stdout}\n{result.stderr}"


MUTABLE_VARIANTS = {
    # variant: (uris.txt, body.txt)
    "v1": ("astrid://mutable/one\n", "version 1"),
    "v2": ("astrid://mutable/one\nastrid://mutable/two\n", "version 1"),
    "v3": ("astrid://mutable/one\nastrid://mutable/two\n", "version 3"),
}


def write_variant(folder: Path, variant: str) -> None:
    uris, body = MUTABLE_VARIANTS[variant]
    (folder / "uris.txt").write_text(uris, encoding="utf-8")
    (folder / "body.txt").write_text(body, encoding="utf-8")


@dataclass
class Capsules:
    root: Path
    folders: dict[str, Path] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Path:
        return self.folders[name]


@pytest.fixture(scope="session")
def capsules(tmp_path_factory: pytest.TempPathFactory) -> Capsules:
    """Every capsule the e2e tests use, built (bundled: docs, introspect)."""
    root = tmp_path_factory.mktemp("e2e-capsules")
    built = Capsules(root)
    for name in ("docs", "introspect"):
        built.folders[name] = clean_copy(CAPSULES_DIR / name, root / name)
    for name in ("probe", "clash-a", "clash-b"):
        built.folders[name] = clean_copy(TEST_CAPSULES / name, root / name)
    for variant in MUTABLE_VARIANTS:
        folder = clean_copy(TEST_CAPSULES / "mutable", root / f"mutable-{variant}" / "mutable")
        write_variant(folder, variant)
        built.folders[f"mutable-{variant}"] = folder
    # Warm the build cache for every variant: a rebuild during a test is then
    # the real `astrid capsule build`, served from the cache in well under a second.
    with ThreadPoolExecutor(max_workers=max(1, min(4, (os.cpu_count() or 2)))) as pool:
        list(pool.map(build, built.folders.values()))
    return built


@dataclass
class Served:
    session: ClientSession
    init: types.InitializeResult
    notifications: list
    stderr: Path
    transport_errors: list = field(default_factory=list)

    def log(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")


@asynccontextmanager
async def serve(*folders: Path, principal: str, capsule_home: Path, stderr: Path) -> AsyncIterator[Served]:
    """`astrid mcp serve --principal P --capsules F...` under a ClientSession (2025-11-25 handshake)."""
    args = ["mcp", "serve", "--principal", principal]
    for folder in folders:
        args += ["--capsules", str(folder)]
    params = StdioServerParameters(command=astrid(), args=args, env=server_env(capsule_home))
    notifications: list = []
    transport_errors: list = []

    async def on_message(message) -> None:
        if isinstance(message, Exception):  # e.g. a stdout line that is not JSON-RPC
            transport_errors.append(message)
            return
        notifications.append(message)

    with stderr.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                with anyio.fail_after(30):
                    init = await session.initialize()
                yield Served(session, init, notifications, stderr, transport_errors)
                assert not transport_errors, f"stdout carried something else than JSON-RPC: {transport_errors}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def stderr_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "server-stderr.log"
    yield path
    if os.environ.get("ASTRID_E2E_SHOW_STDERR") and path.exists():
        sys.stderr.write(path.read_text())
