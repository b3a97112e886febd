"""`astrid mcp serve --http` as a test starts it, and MCP clients that reach it over HTTP.

    with http_server(folder, capsule_home=home, token_dir=tmp) as served:
        token = served.add_token("alice")
        async with http_session(served.url, token) as session:
            await session.read_resource("astrid://whoami")

The server binds port 0 on loopback; its URL comes from the stderr banner.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.processes import astrid_exe, run_astrid, server_env, stop

URL_LINE = re.compile(rb"serving MCP resources at (http\S+/mcp)")
READY_LINE = b"ready in "


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]
    stderr_path: Path
    token_dir: Path

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def add_token(self, name: str) -> str:
        """A new static token for principal `name` (`astrid mcp token add`)."""
        done = run_astrid("mcp", "token", "add", name, "--tokens", str(self.token_file), cwd=self.token_dir)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def revoke_token(self, name: str) -> None:
        done = run_astrid("mcp", "token", "revoke", name, "--tokens", str(self.token_file), cwd=self.token_dir)
        assert done.returncode == 0, done.stderr

    @property
    def token_file(self) -> Path:
        return self.token_dir / "tokens.json"


@contextmanager
def http_server(
    *folders: Path,
    capsule_home: Path,
    token_dir: Path,
    extra: tuple[str, ...] = (),
    ready_s: float = 120,
    verbose: bool = False,
    fd_limit: int | None = None,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
) -> Iterator[HttpServer]:
    """Start `astrid mcp serve --http 127.0.0.1:0` on `folders`; stop it at the end.

    `verbose` runs it with `-v`: the broker logs every list and read it serves.
    `fd_limit` starts it with that soft and hard open-file limit (a small machine's).
    `env`: more environment (a user's own config and data dirs, OTEL_* variables, ...). `args`: another
    command than `mcp serve` (`capsule dev DIR --http 127.0.0.1:0`), whole."""
    if args is not None:
        args = [astrid_exe(), *args]
    else:
        args = [astrid_exe(), *(["-v"] if verbose else []), "mcp", "serve", "--http", "127.0.0.1:0", *extra]
        if "--jwks" not in extra and "--no-auth" not in extra:
            args += ["--tokens", str(token_dir / "tokens.json")]
        for folder in folders:
            args += ["--capsules", str(folder)]
    stderr_path = token_dir / "server.log"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=server_env(capsule_home, **(env or {})),
            preexec_fn=None if fd_limit is None else lambda: _limit_files(fd_limit),
        )
    try:
        url = _wait_for_banner(process, stderr_path, ready_s)
        yield HttpServer(url, process, stderr_path, token_dir)
    finally:
        stop(process)


def _limit_files(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def _wait_for_banner(process: subprocess.Popen[bytes], stderr_path: Path, timeout_s: float) -> str:
    """The server's URL, once its capsules are loaded (the `ready in` line)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = stderr_path.read_bytes()
        found = URL_LINE.search(text)
        if found and READY_LINE in text:
            return found.group(1).decode()
        if process.poll() is not None:
            raise AssertionError(f"astrid mcp serve --http exited ({process.returncode}):\n{text.decode()}")
        time.sleep(0.05)
    raise TimeoutError(f"no ready banner within {timeout_s} s:\n{stderr_path.read_text()}")


@asynccontextmanager
async def http_session(
    url: str, token: str | None, *, headers: dict[str, str] | None = None, message_handler=None
) -> AsyncIterator[ClientSession]:
    """An initialized MCP session (2025-11-25, the SDK's default) over streamable HTTP."""
    all_headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    async with (
        httpx2.AsyncClient(headers=all_headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, message_handler=message_handler) as session,
    ):
        await session.initialize()
        yield session


def text_of(result: types.ReadResourceResult) -> str:
    """The text of a read's first chunk (a text chunk, or the test fails here)."""
    chunk = result.contents[0]
    assert isinstance(chunk, types.TextResourceContents), f"expected text, got {type(chunk).__name__}"
    return chunk.text
