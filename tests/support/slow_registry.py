"""A registry that is slow on purpose: a real loopback HTTP server speaking just enough of the OCI
distribution API (`GET /v2/`, one manifest, one blob) to serve a pull, stalling where the test says.

    with SlowRegistry(artifact_bytes, stall="blob-body") as registry:
        run astrid capsule install registry.ref("notes:1.0") --yes

`stall`:

- None: an honest registry (the control: a pull from it succeeds);
- "blob-body": the blob's headers at once, then its body `piece` bytes every `pace_s`
  (with one pause of `pause_s` halfway);
- "manifest-headers": the manifest's status line, then one header byte every `pace_s`, never the
  blank line that ends the headers;
- "silent": every connection accepted, never read from, never answered.

`declared_size` is the blob size the manifest states (default: the blob's length): a registry
may claim a large artifact to earn a long deadline. The repository is `notes`, the tag `1.0`.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from astrid.host.identity import oci

REPOSITORY = "notes"
TAG = "1.0"
STALLS = (None, "blob-body", "manifest-headers", "silent")


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def capsule_manifest(blob: bytes, declared_size: int | None = None) -> bytes:
    """The OCI manifest `astrid capsule push` makes for the artifact `blob`."""
    empty = b"{}"
    manifest = {
        "schemaVersion": 2,
        "mediaType": oci.MANIFEST_MEDIA_TYPE,
        "artifactType": oci.ARTIFACT_TYPE,
        "config": {"mediaType": oci.EMPTY_CONFIG_MEDIA_TYPE, "digest": _sha256(empty), "size": len(empty)},
        "layers": [
            {
                "mediaType": oci.LAYER_MEDIA_TYPE,
                "digest": _sha256(blob),
                "size": len(blob) if declared_size is None else declared_size,
                "annotations": {oci.TITLE_ANNOTATION: "notes-1.0.0.capsule"},
            }
        ],
    }
    return json.dumps(manifest, separators=(",", ":")).encode()


class SlowRegistry:
    def __init__(
        self,
        blob: bytes,
        stall: str | None = None,
        *,
        pace_s: float = 1.0,
        piece: int = 1,
        pause_s: float = 0.0,
        declared_size: int | None = None,
    ) -> None:
        assert stall in STALLS, stall
        self.blob, self.stall, self.pace_s, self.piece, self.pause_s = blob, stall, pace_s, piece, pause_s
        self.manifest = capsule_manifest(blob, declared_size)
        self.manifest_digest = _sha256(self.manifest)
        self.requests: list[str] = []  # "GET /v2/..." as they arrived (none when silent)
        self.stopping = threading.Event()
        self._held: list[socket.socket] = []
        if stall == "silent":
            self._listener = socket.create_server(("127.0.0.1", 0))
            self.port = self._listener.getsockname()[1]
            self._thread = threading.Thread(target=self._accept_and_hold, daemon=True)
        else:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
            self.port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SlowRegistry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        if self.stall == "silent":
            self._thread.join(5)
            self._listener.close()
            for held in self._held:
                held.close()
        else:
            self._server.shutdown()
            self._server.server_close()

    def ref(self, reference: str = f"{REPOSITORY}:{TAG}") -> str:
        return f"oci://127.0.0.1:{self.port}/{reference}"

    def answer(self, path: str) -> tuple[bytes, str] | None:
        """The body and content type for `path`, None when it is not one this registry serves."""
        if path == "/v2/":
            return b"{}", "application/json"
        if path in (f"/v2/{REPOSITORY}/manifests/{TAG}", f"/v2/{REPOSITORY}/manifests/{self.manifest_digest}"):
            return self.manifest, oci.MANIFEST_MEDIA_TYPE
        if path == f"/v2/{REPOSITORY}/blobs/{_sha256(self.blob)}":
            return self.blob, "application/octet-stream"
        return None

    def trickle(self, out: Any, data: bytes | None) -> None:
        """`data` (endless header bytes when None) `piece` bytes every `pace_s`, until the client or the test stops."""
        offset = 0
        pause_at = len(data) // 2 if data is not None and self.pause_s else None
        while data is None or offset < len(data):
            chunk = b"a" * self.piece if data is None else data[offset : offset + self.piece]
            offset += len(chunk)
            try:
                out.write(chunk)
            except OSError:
                return  # the client cut the connection: what it is for
            pause = self.pace_s
            if pause_at is not None and offset >= pause_at:
                pause, pause_at = self.pace_s + self.pause_s, None
            if self.stopping.wait(pause):
                return

    def _accept_and_hold(self) -> None:
        self._listener.settimeout(0.1)
        while not self.stopping.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(connection)


def _handler(registry: SlowRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            registry.requests.append(f"GET {self.path}")
            found = registry.answer(self.path)
            if found is None:
                self._send_head(404, "application/json", 2)
                self.wfile.write(b"{}")
                return
            body, content_type = found
            if registry.stall == "manifest-headers" and "/manifests/" in self.path:
                self.close_connection = True
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Stalling: ")
                registry.trickle(self.wfile, None)
                return
            self._send_head(200, content_type, len(body))
            if registry.stall == "blob-body" and "/blobs/" in self.path:
                self.close_connection = True
                registry.trickle(self.wfile, body)
                return
            self.wfile.write(body)

        def _send_head(self, status: int, content_type: str, length: int) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(length))
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    return Handler
