"""`--workers N` over HTTP: a resource update one front end checked reaches the subscribers of all.

Each front-end process runs its own capsules, so a capsule's `ctx.updated`
(or the file watch of a folder a read touched) is heard by the broker of the
process that ran that read, while the subscriber may sit in another one: a
2025-11-25 session held there, or a 2026-07-28 `listen` stream whose reads
land anywhere. `PeerUpdates` wraps the runtime the MCP server reads updates
from: every update its own broker checked goes to its own subscribers and,
over each other process's unix socket, to theirs (`PeerEndpoint` takes it
there). An update a peer sent is never sent on again.

The peers trust each other's checks (one trust store, one capsule set, the
same rules): the endpoint answers only on the unix socket, in a folder only
this user can open; on the TCP address that path is an unknown one (404).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from astrid.host.event_stream import EventStream

log = logging.getLogger("astrid.host.mcp.http")

PEER_UPDATES_PATH = "/_astrid/peer/updated"
MAX_BATCH_BYTES = 1 << 20
TELL_TIMEOUT_S = 2.0  # a peer that takes longer is stopping (its subscribers go with it)
WAIT_S = 1.0  # how often the relay thread looks whether its stream was closed


class PeerUpdates:
    """The runtime as the MCP server's backend, its `updates()` shared with the other front ends."""

    def __init__(
        self, backend: Any, *, own: int, count: int, socket_of: Callable[[int], Path], tls: bool = False
    ) -> None:
        self.backend = backend
        self.tls = tls  # uvicorn speaks TLS on the unix sockets too under --tls-cert
        self.own_socket = socket_of(own)
        self.peers = [socket_of(number) for number in range(1, count + 1) if number != own]
        self._streams: list[EventStream[tuple[str, str]]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # the rest of the backend, as it is
        return getattr(self.backend, name)

    def updates(self) -> EventStream[tuple[str, str]]:
        """This process's checked updates and those its peers heard (close it when done)."""
        local = self.backend.updates()
        merged = EventStream[tuple[str, str]]()

        def close() -> None:
            local.close()
            with self._lock:
                self._streams.remove(merged)

        merged.on_close = close
        with self._lock:
            self._streams.append(merged)
        threading.Thread(target=self._relay, args=(local, merged), name="astrid-peer-updates", daemon=True).start()
        return merged

    def heard(self, batch: list[tuple[str, str]]) -> None:
        """Updates a peer's broker checked: to this process's subscribers only."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            for item in batch:
                stream.put(item)

    def _relay(self, local: EventStream[tuple[str, str]], merged: EventStream[tuple[str, str]]) -> None:
        while not merged.closed and not local.closed:
            batch = local.wait(WAIT_S)
            for item in batch:
                merged.put(item)
            if batch:
                self._tell_peers(batch)

    def _tell_peers(self, batch: list[tuple[str, str]]) -> None:
        body = json.dumps(batch).encode()
        for path in self.peers:
            connection = _UnixTlsConnection(path) if self.tls else _UnixConnection(path)
            try:
                connection.request("POST", PEER_UPDATES_PATH, body, {"Content-Type": "application/json"})
                connection.getresponse().read()
            except OSError as exc:  # stopping, or gone: its subscribers are too
                log.debug("resource updates not passed to %s: %s", path.name, exc)
            finally:
                connection.close()


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=TELL_TIMEOUT_S)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


class _UnixTlsConnection(http.client.HTTPSConnection):
    """TLS over the unix socket, unverified: a socket in a folder only this user can open has no name to check."""

    def __init__(self, path: Path) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        super().__init__("localhost", timeout=TELL_TIMEOUT_S, context=context)
        self.path = path

    def connect(self) -> None:
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.settimeout(self.timeout)
        raw.connect(str(self.path))
        self.sock = self._context.wrap_socket(raw, server_hostname="localhost")  # type: ignore[attr-defined]


class PeerEndpoint:
    """ASGI: `POST /_astrid/peer/updated` from a peer, on this process's unix socket only."""

    def __init__(self, app: ASGIApp, updates: PeerUpdates) -> None:
        self.app = app
        self.updates = updates
        self.own = (str(updates.own_socket), None)  # the scope's "server" of a unix-socket connection

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] == PEER_UPDATES_PATH
            and tuple(scope.get("server") or ()) == self.own
        ):
            status = 204 if self.updates_heard(await _body(receive)) else 400
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)

    def updates_heard(self, body: bytes | None) -> bool:
        try:
            batch = json.loads(body) if body is not None else None
        except ValueError:
            return False
        if not isinstance(batch, list) or not all(_is_pair(item) for item in batch):
            return False
        self.updates.heard([(principal, uri) for principal, uri in batch])
        return True


def _is_pair(item: object) -> bool:
    return isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)


async def _body(receive: Receive) -> bytes | None:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BATCH_BYTES:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)
