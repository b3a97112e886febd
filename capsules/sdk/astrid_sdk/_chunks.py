"""Read chunks: `text(...)`, `blob(...)`, what a read handler returned as chunks, and the read limits.

A chunk is encoded as the records are (`_records`), plus `"type": "text" |
"blob"`; a blob's bytes go base64-encoded (docs/contract/interface.md §4,
docs/contract/limits.md §7).

Pure Python, stdlib only: this module runs inside the wasm guest.
"""

from __future__ import annotations

import base64

from astrid_sdk._checks import check_text, check_uri, opt_text, utf8_len
from astrid_sdk._encoding import dumps
from astrid_sdk._errors import DefinitionError
from astrid_sdk._limits import MAX_BYTES_PER_READ, MAX_CHUNKS_PER_READ
from astrid_sdk._meta import meta_json


class Chunk:
    """One piece of a read: `text(...)` or `blob(...)`; uri defaults to the requested one."""

    __slots__ = ("kind", "data", "uri", "mime_type", "meta")

    def __init__(self, kind: str, data, uri=None, mime_type=None, meta=None):
        self.kind = kind
        self.data = data
        self.uri = None if uri is None else check_uri(uri)
        self.mime_type = opt_text(mime_type, "chunk mime_type", 256)
        self.meta = meta_json(meta)

    def raw_size(self) -> int:
        return utf8_len(self.data) if self.kind == "text" else len(self.data)

    def head(self, default_uri: str) -> dict:
        """The chunk's JSON fields except its payload (`text` or `blob`)."""
        wire: dict = {"type": self.kind, "uri": self.uri if self.uri is not None else default_uri}
        if self.mime_type is not None:
            wire["mime_type"] = self.mime_type
        if self.meta is not None:
            wire["meta"] = self.meta
        return wire

    def to_wire(self, default_uri: str) -> dict:
        wire = self.head(default_uri)
        if self.kind == "text":
            wire["text"] = self.data
        else:
            wire["blob"] = base64_of(self.data)
        return wire

    def to_json(self, default_uri: str, encoded_default_uri: str | None = None) -> str:
        """The chunk as JSON text, built without re-scanning a large blob.

        Base64 needs no JSON escaping, so a blob's text is spliced in as is:
        in the guest, encoding it through `json.dumps` costs more than the
        base64 itself. `encoded_default_uri` is `dumps(default_uri)` when the
        caller has it already (same bytes either way).
        """
        if self.uri is None and encoded_default_uri is not None:
            head = '{"type":' + dumps(self.kind) + ',"uri":' + encoded_default_uri
            if self.mime_type is not None:
                head += ',"mime_type":' + dumps(self.mime_type)
            if self.meta is not None:
                head += ',"meta":' + dumps(self.meta)
        else:
            head = dumps(self.head(default_uri))[:-1]
        if self.kind == "text":
            return head + ',"text":' + dumps(self.data) + "}"
        return head + ',"blob":"' + base64_of(self.data) + '"}'


# id(data) -> (data, base64). Holding `data` keeps its id from being reused, so
# an identity hit is exact. Handlers that return the same bytes object (a
# bundled asset) pay for base64 once per instance.
_BASE64_CACHE: dict[int, tuple[bytes, str]] = {}
_BASE64_CACHE_ENTRIES = 16
_BASE64_CACHE_MIN_BYTES = 4096


def base64_of(data: bytes) -> str:
    hit = _BASE64_CACHE.get(id(data))
    if hit is not None and hit[0] is data:
        return hit[1]
    encoded = base64.b64encode(data).decode("ascii")
    if len(data) >= _BASE64_CACHE_MIN_BYTES and type(data) is bytes:
        if len(_BASE64_CACHE) >= _BASE64_CACHE_ENTRIES:
            _BASE64_CACHE.pop(next(iter(_BASE64_CACHE)))
        _BASE64_CACHE[id(data)] = (data, encoded)
    return encoded


def text(value: str, *, uri=None, mime_type=None, meta=None) -> Chunk:
    """A text chunk (UTF-8)."""
    return Chunk("text", check_text(value, "text"), uri, mime_type, meta)


def blob(data, *, uri=None, mime_type=None, meta=None) -> Chunk:
    """A binary chunk; `data` is bytes (sent base64-encoded)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DefinitionError(f"blob data must be bytes, not {type(data).__name__}")
    return Chunk("blob", bytes(data), uri, mime_type, meta)


def to_chunks(value, mime_type=None) -> list[Chunk]:
    """What a read handler returned, as chunks; DefinitionError when it is not usable.

    str -> one text chunk, bytes -> one blob chunk (both with the resource's
    mime type), a Chunk, or a list/tuple of those.
    """
    if isinstance(value, str):
        return [text(value, mime_type=mime_type)]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return [blob(value, mime_type=mime_type)]
    if isinstance(value, Chunk):
        return [value]
    if isinstance(value, (list, tuple)):
        chunks = []
        for index, item in enumerate(value):
            if isinstance(item, Chunk):
                chunks.append(item)
            elif isinstance(item, str):
                chunks.append(text(item, mime_type=mime_type))
            elif isinstance(item, (bytes, bytearray, memoryview)):
                chunks.append(blob(item, mime_type=mime_type))
            else:
                raise DefinitionError(
                    f"item {index} of the returned list is {type(item).__name__}; "
                    "items must be str, bytes or text()/blob() chunks"
                )
        return chunks
    raise DefinitionError(
        f"returned {type(value).__name__}; return str, bytes, a text()/blob() chunk or a list of them"
        + (" (raise NotFound for a URI this capsule does not serve)" if value is None else "")
    )


def check_read_limits(chunks: list[Chunk]) -> None:
    if len(chunks) > MAX_CHUNKS_PER_READ:
        raise DefinitionError(f"{len(chunks)} chunks, over the limit of {MAX_CHUNKS_PER_READ} per read")
    total = sum(chunk.raw_size() for chunk in chunks)
    if total > MAX_BYTES_PER_READ:
        raise DefinitionError(
            f"{total} bytes of content, over the limit of {MAX_BYTES_PER_READ} bytes (700 KiB) per read"
        )
