"""`ctx.fs`, `ctx.kv`, `ctx.http`: the host capabilities, as a handler uses them.

Each call goes to the host, which serves it only when Capsule.toml asks for
the capability and the operator granted it, for the principal of the call
(docs/capabilities.md). A refusal raises a `HostError` subclass
(`NotGranted`, `Denied`, `FileNotFound`, `TooLarge`, `QuotaExceeded`,
`InvalidArgument`) a handler can catch; the message is the host's and names
the fix. Stdlib only: this runs inside the guest.
"""

from __future__ import annotations

import json


class Entry:
    """One entry of `ctx.fs.list`: kind is "file", "directory", "symlink" or "other"."""

    __slots__ = ("kind", "modified_ms", "name", "size")

    def __init__(self, name: str, kind: str, size: int, modified_ms: int) -> None:
        self.name = name
        self.kind = kind
        self.size = size
        self.modified_ms = modified_ms  # milliseconds since the UNIX epoch

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.kind}, {self.size} bytes)"


class Stat:
    """What `ctx.fs.stat` says of a path (a symlink is reported as itself)."""

    __slots__ = ("kind", "modified_ms", "size")

    def __init__(self, kind: str, size: int, modified_ms: int) -> None:
        self.kind = kind
        self.size = size
        self.modified_ms = modified_ms


class Files:
    """Read-only files under the mounts granted to this capsule: `notes/today.md` is
    `today.md` in the mount `notes`."""

    def __init__(self, host) -> None:
        self._host = host

    def read(self, path: str) -> bytes:
        """The whole file (at most 8 MiB)."""
        return self._host.fs_read(path)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, path: str) -> list:
        """The folder's entries (`Entry`), sorted by name, at most 4096."""
        return [Entry(*entry) for entry in self._host.fs_list(path)]

    def stat(self, path: str) -> Stat:
        return Stat(*self._host.fs_stat(path))


class KeyValue:
    """Durable state of this capsule for the calling principal (nobody else sees it)."""

    def __init__(self, host) -> None:
        self._host = host

    def get(self, key: str) -> bytes | None:
        return self._host.kv_get(key)

    def set(self, key: str, value: bytes | str) -> None:
        """Keep `value` (bytes, or text stored as UTF-8) under `key`; at most 1 MiB."""
        self._host.kv_set(key, value.encode("utf-8") if isinstance(value, str) else bytes(value))

    def delete(self, key: str) -> None:
        self._host.kv_delete(key)

    def keys(self, prefix: str = "") -> list:
        """The keys starting with `prefix`, sorted, at most 1024."""
        return self._host.kv_keys(prefix)


class Response:
    """An HTTP answer: `status`, `headers` (a list of (name, value) pairs, names lower-case), `body` bytes."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list, body: bytes) -> None:
        self.status = status
        self.headers = [(name.lower(), value) for name, value in headers]
        self.body = body

    def header(self, name: str) -> str | None:
        """The first value of header `name` (any case), or None."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key == wanted), None)

    def text(self, encoding: str = "utf-8") -> str:
        return self.body.decode(encoding, "replace")

    def json(self):
        return json.loads(self.body)


class Http:
    """Outbound HTTP to the hosts granted to this capsule (https unless the grant says http)."""

    def __init__(self, host) -> None:
        self._host = host

    def get(self, url: str, headers=None) -> Response:
        return self.request("GET", url, headers)

    def request(self, method: str, url: str, headers=None, body: bytes | str | None = None) -> Response:
        pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or ())
        payload = body.encode("utf-8") if isinstance(body, str) else body
        status, answer_headers, answer_body = self._host.http_fetch(method.upper(), url, pairs, payload)
        return Response(status, answer_headers, answer_body)
