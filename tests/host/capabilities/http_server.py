"""A small HTTP server on loopback for the `astrid:http` tests: fixed routes, and what it was asked."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Seen:
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)  # method, path, headers, body


@dataclass
class LoopbackServer:
    port: int
    seen: Seen
    redirect_to: dict[str, str]  # path -> Location

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def loopback_server() -> Iterator[LoopbackServer]:
    seen = Seen()
    redirects: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.requests.append((self.command, self.path, dict(self.headers.items()), body))
            if self.path in redirects:
                self.send_response(302 if not self.path.endswith("307") else 307)
                self.send_header("Location", redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/slow":
                time.sleep(2)
            if self.path == "/big":
                self.send_response(200)
                self.send_header("Content-Length", str((4 << 20) + 1))
                self.end_headers()
                chunk = b"x" * 65536
                for _ in range(65):
                    self.wfile.write(chunk)
                return
            payload = b"hello" if self.path != "/echo" else body
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("X-Seen-Method", self.command)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield LoopbackServer(server.server_address[1], seen, redirects)
    finally:
        server.shutdown()
        server.server_close()
