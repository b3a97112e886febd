"""Hostile capsules against the real kernel, broker and MCP server.

Builds are few and cached by content hash (tests/conftest.py points the caches
at `.cache/`):

- one componentize-py build of `tests/fixtures/hostile/app.py`, written
  straight against the generated bindings (no SDK to protect it); every
  hostile capsule is a copy of that folder with another name and
  `[config] mode`, so they share the one component (and one compile-cache
  entry) and differ only in their source-id;
- the bundled `docs` and `introspect`, built from clean copies with the real
  `astrid capsule build` code path (`build_capsule`);
- tiny WAT components (milliseconds) for what Python cannot do at run time,
  such as trapping while being instantiated.

Every wait in these tests is bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import MCPError as McpError

from astrid.capsules import CAPSULES_DIR, SDK_DIR
from astrid.host.build import build_capsule
from astrid.host.build.builder import componentize_py_version
from astrid.host.kernel.bus import Principal
from astrid.host.kernel.loader import source_id_for
from astrid.host.limits import Limits
from astrid.host.mcp.frontdoor import FrontDoorClient
from astrid.host.mcp.runtime import Runtime, RuntimeConfig
from astrid.host.toolpaths import componentize_py, tool_path, wasm_tools
from astrid.wit import CAPSULE_WORLD, WIT_DIR
from tests.conftest import LineReader, server_env

REPO = Path(__file__).resolve().parents[2]
HOSTILE = REPO / "tests" / "fixtures" / "hostile"
HOSTILE_WAT = HOSTILE / "wat"
BUNDLED = ("docs", "introspect")
BUILD_TIMEOUT_S = 900

if str(SDK_DIR) not in sys.path:
    sys.path.insert(0, str(SDK_DIR))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds real components with componentize-py (cached by content hash)")


# -- builds ------------------------------------------------------------------------------


def _build_cache_dir() -> Path:
    path = Path(os.environ["ASTRID_BUILD_CACHE_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


def hostile_wasm_path() -> Path:
    """The hostile component, built once per content hash of app.py, the WIT and componentize-py."""
    digest = hashlib.sha256()
    for path in sorted([HOSTILE / "app.py", *WIT_DIR.rglob("*.wit")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(componentize_py_version().encode())
    cached = _build_cache_dir() / f"hostile-{digest.hexdigest()[:32]}.wasm"
    if not cached.exists():
        tmp = cached.with_name(f"{cached.name}.{uuid.uuid4().hex}.tmp")
        subprocess.run(
            [componentize_py(), "-d", str(WIT_DIR), "-w", CAPSULE_WORLD, "componentize", "-s",
             "-p", str(HOSTILE), "app", "-o", str(tmp)],
            check=True, capture_output=True, timeout=BUILD_TIMEOUT_S, cwd=str(HOSTILE),
        )  # fmt: skip
        os.replace(tmp, cached)
    return cached


def build_wat(wat: Path, out: Path) -> Path:
    core = out.with_suffix(".core.wasm")
    tools = wasm_tools()
    subprocess.run(
        [tools, "component", "embed", str(WIT_DIR), "--world", CAPSULE_WORLD, str(wat), "-o", str(core)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    subprocess.run([tools, "component", "new", str(core), "-o", str(out)], check=True, capture_output=True, timeout=60)
    core.unlink()
    return out


@pytest.fixture(scope="session")
def hostile_wasm() -> Path:
    path = hostile_wasm_path()
    # Compile it into the compile cache once, so every kernel loads it in milliseconds.
    from astrid.host.kernel.compile_cache import CompileCache

    CompileCache().precompile(path)
    return path


@pytest.fixture(scope="session")
def bundled_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs and introspect, copied clean and built with `astrid capsule build`'s code path."""
    root = tmp_path_factory.mktemp("bundled")
    for name in BUNDLED:
        folder = root / name
        shutil.copytree(CAPSULES_DIR / name, folder, ignore=shutil.ignore_patterns("*.wasm", "*.cwasm", "__pycache__", ".*"))
        build_capsule(folder)
    return root


@pytest.fixture(scope="session")
def bundled(bundled_root: Path) -> list[Path]:
    return [bundled_root / name for name in BUNDLED]


@pytest.fixture(scope="session")
def trap_on_load_wasm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wat(HOSTILE_WAT / "trap_on_load.wat", tmp_path_factory.mktemp("wat") / "trap_on_load.wasm")


def hostile_manifest(name: str, mode: str, **config: str | int) -> str:
    text = (HOSTILE / "Capsule.toml").read_text(encoding="utf-8")
    text = text.replace('name = "hostile"', f'name = "{name}"', 1).replace('id = "hostile"', f'id = "{name}"', 1)
    settings = {"mode": mode, "base": f"astrid://{name}/", "suffix": name, **config}
    head, _, _ = text.partition("[config]")
    lines = [f"{key} = {value!r}" if isinstance(value, int) else f'{key} = "{value}"' for key, value in settings.items()]
    return head + "[config]\n" + "\n".join(lines) + "\n"


def make_hostile(parent: Path, name: str, mode: str, wasm: Path, **config: str | int) -> Path:
    """A copy of the hostile capsule named `name` running `mode`."""
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(hostile_manifest(name, mode, **config), encoding="utf-8")
    shutil.copy(HOSTILE / "app.py", folder / "app.py")  # for the reader; the component is what runs
    shutil.copy(wasm, folder / "hostile.wasm")
    return folder


def hostile_source_id(name: str, wasm: Path) -> str:
    return source_id_for(name, hashlib.sha256(wasm.read_bytes()).hexdigest())


def name_sorting(wasm: Path, prefix: str, *, before: str | None = None, after: str | None = None) -> str:
    """A capsule name `prefix-N` whose source-id sorts before/after the given source-id."""
    for n in range(1000):
        name = f"{prefix}-{n}"
        sid = hostile_source_id(name, wasm)
        if (before is None or sid < before) and (after is None or sid > after):
            return name
    raise AssertionError("no such name")


@pytest.fixture
def hostile_dir(tmp_path: Path, hostile_wasm: Path) -> Callable[..., Path]:
    """`hostile_dir(name, mode, **config)`: a hostile capsule folder under tmp/capsules."""
    parent = tmp_path / "capsules"

    def make(name: str, mode: str, **config: str | int) -> Path:
        return make_hostile(parent, name, mode, hostile_wasm, **config)

    return make


# -- runtimes ------------------------------------------------------------------------------


@dataclass
class Served:
    """A started Runtime (kernel + broker + MCP front-door client) for one principal."""

    runtime: Runtime

    @property
    def kernel(self):
        return self.runtime.kernel

    @property
    def broker(self):
        return self.runtime.broker

    def as_(self, name: str, kind: str = "verified") -> FrontDoorClient:
        """A front-door client for another principal, through the trusted MCP ingress."""
        client = self.runtime.client
        principal = Principal.verified(name) if kind == "verified" else Principal.claimed(name)
        return FrontDoorClient(client.bus, client.participant, principal, limits=self.runtime.limits)

    def uris(self, name: str | None = None) -> list[str]:
        client = self.runtime.client if name is None else self.as_(name)
        return [r.uri for r in client.list_resources()]

    def read(self, uri: str, name: str | None = None):
        client = self.runtime.client if name is None else self.as_(name)
        return client.read_resource(uri)

    def text(self, uri: str, name: str | None = None) -> str:
        reply = self.read(uri, name)
        assert reply.error is None, f"read of {uri}: {reply.error}"
        return "".join(getattr(c, "text", "") for c in reply.contents)

    def source_id(self, capsule: str) -> str:
        return next(c.source_id for c in self.kernel.loaded() if c.name == capsule)


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    """`serve(*folders, principal="alice", limits=None)`: a started Runtime, closed after the test."""
    runtimes: list[Runtime] = []

    def start(*folders: Path, principal: str = "alice", limits: Limits | None = None, expect_ok: bool = True) -> Served:
        config = RuntimeConfig(capsule_paths=[Path(f) for f in folders], principal=principal)
        if limits is not None:
            config.limits = limits
        runtime = Runtime(config)
        runtimes.append(runtime)
        runtime.start(background=False)
        if expect_ok:
            assert not runtime.status.failures, runtime.status.failures
        return Served(runtime)

    yield start
    for runtime in runtimes:
        runtime.close()


BUNDLED_URIS = {"astrid://docs/index", "astrid://docs/logo.png", "astrid://docs/tour", "astrid://whoami", "astrid://capsules", "astrid://host"}


def assert_bundled_serve(served: Served, principal: str | None = None) -> None:
    """docs and introspect still list and answer, for the right principal."""
    name = principal or served.runtime.principal
    uris = set(served.uris(principal))
    assert BUNDLED_URIS <= uris, sorted(BUNDLED_URIS - uris)
    assert served.text("astrid://docs/index", principal).startswith("# ")
    who = json.loads(served.text("astrid://whoami", principal))
    assert who["principal"] == name and who["attribution"] == "verified"


# -- MCP over stdio ------------------------------------------------------------------------


def astrid_exe() -> str:
    return tool_path("astrid")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


class RawServer:
    """`astrid mcp serve` on pipes, spoken to in raw newline-delimited JSON-RPC.

    stderr goes to a file (a full pipe would block the server). Every wait is
    bounded: `until_id` reads responses until the one with the given id, and
    returns everything that came before it, so "the bad line was ignored" is
    checked by what arrived before a later, valid request's answer.
    """

    def __init__(self, args: list[str], env: dict[str, str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.process = subprocess.Popen(
            [astrid_exe(), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        self.reader = LineReader(self.process.stdout)
        self.stray: list[dict] = []

    def send(self, line: bytes | str | dict) -> None:
        if isinstance(line, dict):
            line = json.dumps(line)
        if isinstance(line, str):
            line = line.encode("utf-8")
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def until_id(self, request_id: object, timeout_s: float = 30.0) -> tuple[dict, list[dict]]:
        deadline = time.monotonic() + timeout_s
        before: list[dict] = []
        while True:
            line = self.reader.next(max(0.01, deadline - time.monotonic()))
            if line is None:
                raise EOFError(f"the server closed stdout before answering {request_id!r}; stderr:\n{self.stderr()}")
            message = json.loads(line)
            if message.get("id") == request_id and ("result" in message or "error" in message):
                return message, before
            before.append(message)

    def request(self, method: str, params: dict | None = None, request_id: object = None, timeout_s: float = 30.0) -> dict:
        request_id = request_id if request_id is not None else uuid.uuid4().hex
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.until_id(request_id, timeout_s)[0]

    def initialize(self) -> dict:
        reply = self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def close(self, timeout_s: float = 20.0) -> int:
        """Close stdin (the client goes away) and wait, bounded, for the server to exit."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            return self.process.wait(timeout_s)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            self._stderr.close()


def raw_server(*folders: Path, home: Path, stderr_path: Path, principal: str = "alice", extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> RawServer:
    args = ["mcp", "serve", "--principal", principal, *extra]
    for folder in folders:
        args += ["--capsules", str(folder)]
    return RawServer(args, env or server_env(home), stderr_path)


@asynccontextmanager
async def mcp_session(
    *folders: Path,
    home: Path,
    stderr_path: Path,
    principal: str = "alice",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> AsyncIterator[McpSession]:
    """A real MCP client (ClientSession over stdio) on `astrid mcp serve`."""
    args = ["mcp", "serve", "--principal", principal, *extra]
    for folder in folders:
        args += ["--capsules", str(folder)]
    params = StdioServerParameters(command=astrid_exe(), args=args, env=env or server_env(home))
    session_holder: list[McpSession] = []

    async def on_message(message) -> None:
        if isinstance(message, Exception) or not session_holder:
            return
        held = session_holder[0]
        held.notifications.append(message)
        if isinstance(message, types.ResourceListChangedNotification):
            held.changed.set()

    with stderr_path.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                held = McpSession(session, stderr_path)
                session_holder.append(held)
                with anyio.fail_after(60):
                    held.init = await session.initialize()
                yield held


@dataclass
class McpSession:
    session: ClientSession
    stderr_path: Path
    init: object = None
    notifications: list = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def log(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def rearm(self) -> None:
        self.changed = anyio.Event()

    async def uris(self) -> list[str]:
        with anyio.fail_after(30):
            return [r.uri for r in (await self.session.list_resources()).resources]

    async def text(self, uri: str) -> str:
        with anyio.fail_after(30):
            result = await self.session.read_resource(uri)
        return "".join(getattr(c, "text", "") for c in result.contents)

    async def error(self, uri: str, timeout_s: float = 30) -> McpError:
        with anyio.fail_after(timeout_s):
            try:
                await self.session.read_resource(uri)
            except McpError as exc:
                return exc
        raise AssertionError(f"read of {uri} succeeded")
