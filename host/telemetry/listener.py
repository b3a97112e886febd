"""A small HTTP/1.1 server for one WSGI app (the metrics endpoint), bounded in connections, threads and time.

The metrics listener asks no credential and shares the process's file
descriptors with the MCP front door, so whoever connects to it must not be
able to hold many of them, nor for long:

- one thread accepts connections and reads their request heads (non-blocking,
  `selectors`) under the connection guard the MCP front door uses
  (`host/connection_guard.py`): a cap on open connections, at which the oldest
  one still waiting for its head makes room, and a deadline for the head;
- a fixed pool of threads answers complete heads with the app's answer,
  written within a deadline;
- one request per connection (`Connection: close`), so no idle keep-alive
  connection is ever held. A scraper opens a connection per scrape, as it did
  with prometheus-client's own server (HTTP/1.0).

A request body is never read (a scrape is a GET); a head longer than its
limit is refused (431). The app is prometheus-client's own WSGI app
(`make_wsgi_app`), so what a scraper gets (format, content type, gzip) is
byte for byte what prometheus-client serves. Only the standard library is
imported: a stdio server with `--metrics` starts no event loop for it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import resource
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Any
from urllib.parse import unquote

from astrid.host.connection_guard import ConnectionGuard, Phase
from astrid.host.log_throttle import LogThrottle

log = logging.getLogger("astrid.host.telemetry.listener")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass(frozen=True)
class ListenerLimits:
    """The listener's bounds; the attribute names are those the connection guard reads."""

    connections: int
    header_timeout_s: float
    head_bytes: int
    answer_timeout_s: float
    threads: int
    sweep_every_s: float
    connections_per_client: int = 0  # every scraper comes from the same loopback address: no per-address cap
    body_timeout_s: float = 0.0  # unused: a body is never waited for


def connection_cap(wanted: int, fd_limit: int) -> int:
    """At most `wanted`, and at most a sixteenth of the open-file limit (at least 4)."""
    return max(4, min(wanted, fd_limit // 16))


class _Connection:
    """One accepted connection and the head read so far. It is its own `transport` for the guard."""

    def __init__(self, sock: socket.socket, client: str, selector: selectors.BaseSelector) -> None:
        self.sock = sock
        self.client = client
        self.head = bytearray()
        self.watched = False  # registered with the reading thread's selector
        self._selector = selector
        self._closed = False

    @property
    def transport(self) -> _Connection:
        return self

    def is_closing(self) -> bool:
        return self._closed

    def write(self, data: bytes) -> None:
        """Best effort, never blocking: a refusal the peer may or may not read."""
        with contextlib.suppress(OSError):  # the peer left or its buffer is full: it was a courtesy
            self.sock.send(data)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.watched:  # only the reading thread closes a watched connection
            self._selector.unregister(self.sock)
            self.watched = False
        self.sock.close()


class BoundedListener:
    """`app` served at HOST:PORT until `close()`: one reading thread, `limits.threads` answering ones."""

    def __init__(self, host: str, port: int, app: WsgiApp, *, limits: ListenerLimits, name: str) -> None:
        self.app = app
        self.limits = limits
        self.name = name
        # connections queued in the kernel cost no descriptor; a short queue would drop a burst's SYNs
        # (the client retries a second later)
        self.socket = _listen(host, port, backlog=socket.SOMAXCONN)
        self.port = int(self.socket.getsockname()[1])
        self.guard = ConnectionGuard(limits, log=log, what=f"{name} connections")
        self.guard.max_connections = connection_cap(limits.connections, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self._lock = threading.Lock()  # the guard's books, kept by the reading and the answering threads
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.socket, selectors.EVENT_READ, None)
        self._accepting = True
        self._stopping = False
        self._requests: SimpleQueue[tuple[_Connection, bytes] | None] = SimpleQueue()
        self._accept_failures = LogThrottle(10.0)
        self._failures = LogThrottle(10.0)
        self._reader = threading.Thread(target=self._read_loop, name=f"astrid-{name}-listener", daemon=True)
        self._answerers = [
            threading.Thread(target=self._answer_loop, name=f"astrid-{name}-answer-{n}", daemon=True)
            for n in range(1, limits.threads + 1)
        ]
        self._reader.start()
        for thread in self._answerers:
            thread.start()

    def close(self) -> None:
        """Stop accepting, close every connection; returns once the threads are gone (bounded)."""
        self._stopping = True
        self._reader.join(self.limits.sweep_every_s + 5)
        for _ in self._answerers:
            self._requests.put(None)
        for thread in self._answerers:
            thread.join(self.limits.answer_timeout_s + 5)
        for key in list(self._selector.get_map().values()):
            if isinstance(key.data, _Connection):
                key.data.close()
        self._selector.close()
        self.socket.close()

    # -- the reading thread ------------------------------------------------------------------

    def _read_loop(self) -> None:
        next_sweep = time.monotonic() + self.limits.sweep_every_s
        while not self._stopping:
            # heads first, then newcomers: a connection whose head has arrived is answered before a
            # newcomer can make room by closing it
            events = sorted(self._selector.select(timeout=self.limits.sweep_every_s), key=lambda e: e[0].data is None)
            for key, _ in events:
                try:
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                except Exception as exc:  # a bug here must not end the listener: said, and that connection dropped
                    self._say_failure("reading", exc)
                    if key.data is not None:
                        self._drop(key.data)
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + self.limits.sweep_every_s
                with self._lock:
                    self.guard.sweep()
                self._resume_accepting()

    def _accept(self) -> None:
        # fewer than the cap at once: the newest connections live to the next round, to have their heads read
        for _ in range(max(1, self.guard.max_connections // 2)):
            try:
                sock, address = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of descriptors or memory: try again at the next sweep, not in a spin
                self._pause_accepting(exc)
                return
            sock.setblocking(False)
            connection = _Connection(sock, str(address[0]), self._selector)
            with self._lock:
                admitted = self.guard.admit(connection, connection.client)
            if admitted:
                self._selector.register(sock, selectors.EVENT_READ, connection)
                connection.watched = True

    def _pause_accepting(self, exc: OSError) -> None:
        if self._accepting:
            self._selector.unregister(self.socket)
            self._accepting = False
        skipped = self._accept_failures.ready()
        if skipped is not None:
            more = f" ({skipped} more not logged)" if skipped else ""
            log.error("%s listener: cannot accept a connection (%s); trying again shortly%s", self.name, exc, more)

    def _resume_accepting(self) -> None:
        if not self._accepting:
            self._selector.register(self.socket, selectors.EVENT_READ, None)
            self._accepting = True

    def _read(self, connection: _Connection) -> None:
        if connection.is_closing():  # closed for another one earlier in this round
            return
        try:
            data = connection.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the peer left before its head was complete
            self._drop(connection)
            return
        connection.head += data
        end = HEAD_END.search(connection.head)
        if end is None:
            if len(connection.head) > self.limits.head_bytes:
                connection.write(_plain_answer("431 Request Header Fields Too Large"))
                self._drop(connection)
            return
        self._selector.unregister(connection.sock)
        connection.watched = False
        with self._lock:
            self.guard.moved(connection, Phase.ANSWERING)  # never evicted from now on
        self._requests.put((connection, bytes(connection.head[: end.start()])))

    def _drop(self, connection: _Connection) -> None:
        with self._lock:
            self.guard.forget(connection)
        connection.close()

    def _say_failure(self, doing: str, exc: Exception) -> None:
        skipped = self._failures.ready()
        if skipped is not None:
            more = f" ({skipped} more not logged)" if skipped else ""
            log.error(
                "%s listener: %s failed: %s%s", self.name, doing, exc, more, exc_info=log.isEnabledFor(logging.DEBUG)
            )

    # -- the answering threads ---------------------------------------------------------------

    def _answer_loop(self) -> None:
        while (request := self._requests.get()) is not None:
            connection, head = request
            try:
                _send_within(connection.sock, self._answer(head), self.limits.answer_timeout_s)
                _discard_unread(connection.sock)
            except Exception as exc:  # a bug here must not shrink the pool: said, and that connection dropped
                self._say_failure("answering", exc)
            finally:
                self._drop(connection)

    def _answer(self, head: bytes) -> bytes:
        environ = _environ(head, self.socket.getsockname())
        if environ is None:
            return _plain_answer("400 Bad Request")
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            started[:] = [status, headers]

        try:
            body = b"".join(self.app(environ, start_response))
            status, headers = started
        except Exception as exc:  # the app's own failure: answered, and said now and then
            self._say_failure("answering", exc)
            return _plain_answer("500 Internal Server Error")
        return _answer_bytes(status, headers, b"" if environ["REQUEST_METHOD"] == "HEAD" else body, len(body))


def _listen(host: str, port: int, *, backlog: int) -> socket.socket:
    """A non-blocking listening socket on HOST:PORT (the first address HOST resolves to)."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _environ(head: bytes, server: tuple[Any, ...]) -> dict[str, Any] | None:
    """The WSGI environ of a request head; None when it is not one."""
    lines = head.decode("iso-8859-1").splitlines()
    parts = lines[0].split() if lines else []
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    method, target, version = parts
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote(path, "iso-8859-1"),
        "QUERY_STRING": query,
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": version,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return None
        key = name.upper().replace("-", "_")
        key = key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"
        value = value.strip()
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _answer_bytes(status: str, headers: list[tuple[str, str]], body: bytes, length: int) -> bytes:
    """A whole response, closing the connection after it."""
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in ("connection", "content-length")]
    lines += [f"Content-Length: {length}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1") + body


def _plain_answer(status: str) -> bytes:
    return _answer_bytes(status, [], b"", 0)


def _send_within(sock: socket.socket, data: bytes, seconds: float) -> bool:
    """Send all of `data` within `seconds` (a reader too slow for it is cut off); False if it was not."""
    deadline = time.monotonic() + seconds
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        sock.settimeout(remaining)
        try:
            sent = sock.send(view)
        except OSError:  # a timeout, or the peer left
            return False
        view = view[sent:]
    return True


def _discard_unread(sock: socket.socket) -> None:
    """Read what the peer sent beyond the head (up to a little): closing on unread bytes would reset the
    connection, and the peer could lose the answer."""
    sock.setblocking(False)
    try:
        for _ in range(4):
            if not sock.recv(65536):
                return
    except OSError:
        return
