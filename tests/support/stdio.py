"""A real MCP client (the Python SDK's ClientSession) on `astrid mcp serve` over stdio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import MCPError as McpError

from tests.support.processes import astrid_exe, serve_args, server_env


@dataclass
class StdioSession:
    """One client session on one `astrid mcp serve` process, and what the server sent besides replies."""

    session: ClientSession
    stderr: Path
    init: types.InitializeResult = field(init=False, repr=False)  # the server's answer to `initialize`
    notifications: list = field(default_factory=list)
    transport_errors: list = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)  # set by notifications/resources/list_changed

    def log(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    async def said(self, text: str, timeout_s: float = 30) -> None:
        """Wait until the server's stderr holds `text` (its banner is written by a thread of its own)."""
        with anyio.fail_after(timeout_s):
            while text not in self.log():
                await anyio.sleep(0.05)

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


@asynccontextmanager
async def stdio_session(
    *folders: Path,
    capsule_home: Path,
    stderr: Path,
    principal: str = "alice",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    init_timeout_s: float = 30,
    check_stdout: bool = True,
    args: list[str] | None = None,
    command: str | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[StdioSession]:
    """`astrid mcp serve --principal P [EXTRA...] --capsules F...` under a ClientSession (2025-11-25 handshake).

    The server's stderr goes to the file `stderr`. With `check_stdout`, a
    session that ends normally checks that stdout carried nothing but JSON-RPC. `args`: another
    command than `mcp serve` (`capsule dev DIR`), whole. `command`: another astrid executable than the
    test environment's (an installed wheel's), run in `cwd`.
    """
    args = args if args is not None else serve_args(*folders, principal=principal, extra=extra)
    params = StdioServerParameters(
        command=command or astrid_exe(), args=args, env=env or server_env(capsule_home), cwd=cwd
    )
    holder: list[StdioSession] = []

    async def on_message(message) -> None:
        if not holder:
            return
        held = holder[0]
        if isinstance(message, Exception):  # e.g. a stdout line that is not JSON-RPC
            held.transport_errors.append(message)
            return
        held.notifications.append(message)
        if isinstance(message, types.ResourceListChangedNotification):
            held.changed.set()

    with stderr.open("w", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            held = StdioSession(session, stderr)
            holder.append(held)
            with anyio.fail_after(init_timeout_s):
                held.init = await session.initialize()
            yield held
            if check_stdout:
                assert not held.transport_errors, (
                    f"stdout carried something else than JSON-RPC: {held.transport_errors}"
                )
