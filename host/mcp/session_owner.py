"""`--workers N` over HTTP: a 2025-11-25 session answered by the front-end process that holds it.

N processes accept on one listening socket, so a session's requests may land
on any of them (a client opens several connections: its POSTs, its GET
stream). The session lives in one process only: its id starts with the
number of that process (`w2.<hex>`, `id_prefix`), and a request naming
another process's session is forwarded to it, unchanged, over that
process's private unix socket (`OwnerRouter`). Requests without a session id
(an `initialize`, and every 2026-07-28 request: stateless) are answered where
they land.

Nothing here is trusted: the owner authenticates the forwarded request as if
it came straight from the client (same headers, same bearer credential, same
Host/Origin checks), so a forged id reaches at most an owner that answers 404.
The unix sockets live in a folder only this user can open (0700).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx2
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("astrid.host.mcp.http")

SESSION_HEADER = b"mcp-session-id"
WORKER_HEADER = b"astrid-worker"  # diagnostics: which process answered (its number, 1..N)
FORWARDED_HEADER = b"astrid-forwarded-by"  # diagnostics: the process that took the connection and forwarded
_OWNER = re.compile(r"w(\d{1,4})\.")
# Not forwarded either way: they describe one hop's connection, not the request.
_HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-authorization",
    b"proxy-authenticate",
}
FORWARD_CONNECTIONS = 64  # per peer: under the owner's per-client connection cap (128 by default)


def id_prefix(number: int) -> str:
    """The start of every session id process `number` makes."""
    return f"w{number}."


def owner_of(session_id: str) -> int | None:
    """The number of the process that made `session_id`, or None when it names none."""
    found = _OWNER.match(session_id)
    return int(found[1]) if found else None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


class OwnerRouter:
    """ASGI: a request for another process's session goes to that process; everything else to `app`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        own: int,
        count: int,
        socket_of: Callable[[int], Path],
        path: str,
        max_body: int,
        tls: bool = False,
    ) -> None:
        self.app = app
        self.own = own
        self.own_value = str(own).encode()
        self.count = count
        self.path = path
        self.max_body = max_body
        # with --tls-cert uvicorn speaks TLS on every socket, the unix ones too: the hop does as well, unverified
        # (a unix socket in a folder only this user can open has no name to check)
        self.origin = "https://owner" if tls else "http://owner"
        self._clients = {
            number: httpx2.AsyncClient(
                transport=httpx2.AsyncHTTPTransport(uds=str(socket_of(number)), verify=False),
                limits=httpx2.Limits(max_connections=FORWARD_CONNECTIONS),
                timeout=httpx2.Timeout(None),  # the owner's deadlines apply; a GET stream lasts
            )
            for number in range(1, count + 1)
            if number != own
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == self.path:
            session_id = _header(scope, SESSION_HEADER)
            owner = owner_of(session_id) if session_id else None
            if owner is not None and owner in self._clients:
                await self._forward(owner, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _forward(self, owner: int, scope: Scope, receive: Receive, send: Send) -> None:
        client = self._clients[owner]
        body = await self._body(receive)
        if body is None:
            await _plain(send, 413, b"request body too large")
            return
        query = scope.get("query_string", b"")
        target = scope["path"] + (("?" + query.decode("latin-1")) if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP and k != b"content-length"]
        request = client.build_request(scope["method"], self.origin + target, headers=headers, content=body)
        try:
            response = await client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            # the owner is gone (stopping, or dead): its sessions are too, as the spec's 404 says
            log.warning(
                "a request of session %s not forwarded to its front end: %s", _header(scope, SESSION_HEADER), exc
            )
            await _plain(send, 404, b"session not found")
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        *((k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP),
                        (FORWARDED_HEADER, self.own_value),
                    ],
                }
            )
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_until_disconnect, receive, tasks.cancel_scope)
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                tasks.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError as exc:  # the client left: nothing to answer
            log.debug("a forwarded answer ended early: %s", exc)
        finally:
            await response.aclose()

    async def _body(self, receive: Receive) -> bytes | None:
        """The whole request body (the MCP bodies are small), None past `max_body`."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(parts)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()


async def _until_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """The client hung up (a GET stream it closed): stop relaying the owner's answer."""
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _plain(send: Send, status: int, text: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text, "more_body": False})


class AnsweredBy:
    """ASGI: every response says which process answered it (`astrid-worker: N`), for diagnostics."""

    def __init__(self, app: ASGIApp, number: int) -> None:
        self.app = app
        self.value = str(number).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (WORKER_HEADER, self.value)]}
            await send(message)

        await self.app(scope, receive, marked)
