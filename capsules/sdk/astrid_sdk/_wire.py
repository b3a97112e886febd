"""Resource definitions, read chunks and their JSON encoding.

The rules: docs/contract/interface.md §3, §4 and docs/contract/limits.md §7.

Pure Python, stdlib only: this module runs inside the wasm guest. It must not
touch the clock, the filesystem, randomness or stdout (the guest has no WASI:
any such call traps).

Encoding rule (one for every record): snake_case keys, an option that is None
is left out, lists are always present (possibly empty), a chunk carries
`"type": "text" | "blob"`.
"""

from __future__ import annotations

import base64
import json
import math
import re

from astrid_sdk._errors import DefinitionError
from astrid_sdk._template import UriTemplate

# docs/contract/limits.md §7 defaults; the SDK enforces them on its own output so an over-limit
# reply becomes a read error (or a logged drop in describe), never a message
# the host refuses.
KIB = 1024
MIB = 1024 * KIB
MAX_RESOURCES_PER_DESCRIBE = 256
MAX_URI_BYTES = 2048
MAX_TITLE_BYTES = 4096
MAX_DESCRIPTION_BYTES = 4096
MAX_META_BYTES = 4096
MAX_ICONS = 8
MAX_CHUNKS_PER_READ = 64
MAX_BYTES_PER_READ = 700 * KIB
MAX_MESSAGE_BYTES = 1 * MIB
MAX_TOPIC_BYTES = 256
MAX_TEMPLATES_PER_DESCRIBE = 64  # templates per templates-response
MAX_COMPLETION_VALUES = 100  # values per complete-response (as MCP's completion/complete)
MAX_AGE_S = 86_400  # the longest declared freshness (max_age_s) the host honours: one day

# The meta key the host reads its own hints from (docs/contract/resources.md §5.7):
# {"astrid": {"max_age_s": 60}}. The SDK writes it from max_age_s=; user meta may not.
ASTRID_META_KEY = "astrid"

ROLES = ("user", "assistant")
THEMES = ("light", "dark")

_SEGMENT = re.compile(r"[a-z0-9_-]+")


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def is_clean_segment(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TOPIC_BYTES and _SEGMENT.fullmatch(value) is not None


def clean_segment(name: str) -> str:
    """`name` folded into one topic segment ([a-z0-9_-], at most 64 chars)."""
    folded = "".join(c if ("a" <= c <= "z" or "0" <= c <= "9" or c in "_-") else "-" for c in name.lower())
    return folded[:64] or "capsule"


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _check_text(value: object, what: str, limit: int | None = None) -> str:
    if not isinstance(value, str):
        raise DefinitionError(f"{what} must be a string, not {type(value).__name__}")
    try:
        size = utf8_len(value)
    except UnicodeEncodeError:
        raise DefinitionError(f"{what} is not valid UTF-8 (it holds a lone surrogate)") from None
    if limit is not None and size > limit:
        raise DefinitionError(f"{what} is {size} bytes, over the {limit}-byte limit")
    return value


def _opt_text(value: object, what: str, limit: int | None = None) -> str | None:
    return None if value is None else _check_text(value, what, limit)


def meta_json(meta: object) -> str | None:
    """`meta` (a dict, or a JSON object as a string) as the wire string."""
    if meta is None:
        return None
    if isinstance(meta, dict):
        try:
            encoded = dumps(meta)
        except (TypeError, ValueError) as exc:
            raise DefinitionError(f"meta is not JSON-serialisable: {exc}") from None
    elif isinstance(meta, str):
        try:
            decoded = json.loads(meta)
        except ValueError:
            raise DefinitionError("meta is not JSON (give a dict or a JSON object as a string)") from None
        if not isinstance(decoded, dict):
            raise DefinitionError("meta must be a JSON object")
        encoded = meta
    else:
        raise DefinitionError(f"meta must be a dict, not {type(meta).__name__}")
    _check_text(encoded, "meta", MAX_META_BYTES)
    return encoded


def check_max_age(max_age_s: object) -> int | float | None:
    """`max_age_s` when it is None or a number of seconds in (0, MAX_AGE_S], else DefinitionError."""
    if max_age_s is None:
        return None
    if isinstance(max_age_s, bool) or not isinstance(max_age_s, (int, float)):
        raise DefinitionError(f"max_age_s must be a number of seconds, not {type(max_age_s).__name__}")
    if not math.isfinite(max_age_s) or not 0 < max_age_s <= MAX_AGE_S:
        raise DefinitionError(f"max_age_s must be more than 0 and at most {MAX_AGE_S} seconds, not {max_age_s!r}")
    return max_age_s


def freshness_meta(meta: object, max_age_s: object) -> str | None:
    """The wire `meta`: the user's `meta` plus `{"astrid": {"max_age_s": ...}}` when declared.

    The `astrid` key is the host's (docs/contract/resources.md §5.7): a user meta that
    holds it is a DefinitionError, so the only way to declare freshness is
    `max_age_s=`.
    """
    encoded = meta_json(meta)
    age = check_max_age(max_age_s)
    user = json.loads(encoded) if encoded is not None else {}
    if ASTRID_META_KEY in user:
        raise DefinitionError(f"the meta key {ASTRID_META_KEY!r} is reserved for the host (use max_age_s=)")
    if age is None:
        return encoded
    return meta_json({**user, ASTRID_META_KEY: {"max_age_s": age}})


def declared_max_age(meta: str | None) -> int | float | None:
    """The max_age_s a wire `meta` declares, or None."""
    if meta is None:
        return None
    section = json.loads(meta).get(ASTRID_META_KEY)
    return section.get("max_age_s") if isinstance(section, dict) else None


class Annotations:
    """Client hints: who the resource is for, how important, when it changed."""

    __slots__ = ("audience", "priority", "last_modified")

    def __init__(self, audience=(), priority=None, last_modified=None):
        if isinstance(audience, str):
            audience = (audience,)
        audience = tuple(audience)
        for role in audience:
            if role not in ROLES:
                raise DefinitionError(f"audience role {role!r} is not one of {', '.join(ROLES)}")
        if priority is not None:
            if isinstance(priority, bool) or not isinstance(priority, (int, float)):
                raise DefinitionError("priority must be a number from 0.0 to 1.0")
            priority = float(priority)
            if not (0.0 <= priority <= 1.0) or math.isnan(priority):
                raise DefinitionError(f"priority {priority} is outside 0.0-1.0")
        self.audience = audience
        self.priority = priority
        self.last_modified = _opt_text(last_modified, "last_modified", 64)

    @classmethod
    def coerce(cls, value) -> Annotations | None:
        if value is None or isinstance(value, Annotations):
            return value
        if isinstance(value, dict):
            try:
                return cls(**value)
            except TypeError as exc:
                raise DefinitionError(f"annotations: {exc}") from None
        raise DefinitionError(f"annotations must be Annotations or a dict, not {type(value).__name__}")

    def to_wire(self) -> dict:
        wire: dict = {"audience": list(self.audience)}
        if self.priority is not None:
            wire["priority"] = self.priority
        if self.last_modified is not None:
            wire["last_modified"] = self.last_modified
        return wire


class Icon:
    """An icon a client may show: an http(s) or data: URI."""

    __slots__ = ("src", "mime_type", "sizes", "theme")

    def __init__(self, src, mime_type=None, sizes=(), theme=None):
        self.src = _check_text(src, "icon src", MAX_URI_BYTES * 16)
        self.mime_type = _opt_text(mime_type, "icon mime_type", 256)
        if isinstance(sizes, str):
            sizes = (sizes,)
        self.sizes = tuple(_check_text(s, "icon size", 64) for s in sizes)
        if theme is not None and theme not in THEMES:
            raise DefinitionError(f"icon theme {theme!r} is not one of {', '.join(THEMES)}")
        self.theme = theme

    @classmethod
    def coerce(cls, value) -> Icon:
        if isinstance(value, Icon):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, dict):
            try:
                return cls(**value)
            except TypeError as exc:
                raise DefinitionError(f"icon: {exc}") from None
        raise DefinitionError(f"an icon must be Icon, a dict or a src string, not {type(value).__name__}")

    def to_wire(self) -> dict:
        wire: dict = {"src": self.src}
        if self.mime_type is not None:
            wire["mime_type"] = self.mime_type
        wire["sizes"] = list(self.sizes)
        if self.theme is not None:
            wire["theme"] = self.theme
        return wire


class Resource:
    """One listed resource (`resource-definition`), validated on construction."""

    __slots__ = ("uri", "name", "title", "description", "mime_type", "size", "annotations", "icons", "meta")

    def __init__(
        self,
        uri,
        name=None,
        *,
        title=None,
        description=None,
        mime_type=None,
        size=None,
        annotations=None,
        icons=(),
        meta=None,
        max_age_s=None,
    ):
        self.uri = check_uri(uri)
        self.name = _check_text(name if name is not None else uri, "name", MAX_URI_BYTES)
        self.title = _opt_text(title, "title", MAX_TITLE_BYTES)
        self.description = _opt_text(description, "description", MAX_DESCRIPTION_BYTES)
        self.mime_type = _opt_text(mime_type, "mime_type", 256)
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**32):
            raise DefinitionError("size must be an integer from 0 to 2**32-1 (bytes before base64)")
        self.size = size
        self.annotations = Annotations.coerce(annotations)
        icons = [Icon.coerce(icon) for icon in icons or ()]
        if len(icons) > MAX_ICONS:
            raise DefinitionError(f"{len(icons)} icons, over the limit of {MAX_ICONS}")
        self.icons = tuple(icons)
        self.meta = freshness_meta(meta, max_age_s)

    @property
    def max_age_s(self) -> int | float | None:
        """The freshness this resource declares (from its meta), or None."""
        return declared_max_age(self.meta)

    def with_max_age(self, max_age_s) -> Resource:
        """A copy declaring `max_age_s` (a family lends its own to a member that declares none)."""
        copy = object.__new__(Resource)
        for slot in Resource.__slots__:
            setattr(copy, slot, getattr(self, slot))
        copy.meta = freshness_meta(self.meta, max_age_s)
        return copy

    def to_wire(self) -> dict:
        wire: dict = {"uri": self.uri, "name": self.name}
        for key in ("title", "description", "mime_type", "size"):
            value = getattr(self, key)
            if value is not None:
                wire[key] = value
        if self.annotations is not None:
            wire["annotations"] = self.annotations.to_wire()
        wire["icons"] = [icon.to_wire() for icon in self.icons]
        if self.meta is not None:
            wire["meta"] = self.meta
        return wire

    def __repr__(self) -> str:
        return f"Resource({self.uri!r}, name={self.name!r})"


class ResourceTemplate:
    """One template (`resource-template`, MCP `ResourceTemplate`), validated on construction."""

    __slots__ = ("uri_template", "parsed", "name", "title", "description", "mime_type", "annotations", "icons", "meta")

    def __init__(
        self,
        uri_template,
        name=None,
        *,
        title=None,
        description=None,
        mime_type=None,
        annotations=None,
        icons=(),
        meta=None,
        max_age_s=None,
    ):
        self.uri_template = _check_text(uri_template, "uri_template", MAX_URI_BYTES)
        self.parsed = UriTemplate.parse(self.uri_template)
        self.name = _check_text(name if name is not None else uri_template, "name", MAX_URI_BYTES)
        self.title = _opt_text(title, "title", MAX_TITLE_BYTES)
        self.description = _opt_text(description, "description", MAX_DESCRIPTION_BYTES)
        self.mime_type = _opt_text(mime_type, "mime_type", 256)
        self.annotations = Annotations.coerce(annotations)
        icons = [Icon.coerce(icon) for icon in icons or ()]
        if len(icons) > MAX_ICONS:
            raise DefinitionError(f"{len(icons)} icons, over the limit of {MAX_ICONS}")
        self.icons = tuple(icons)
        self.meta = freshness_meta(meta, max_age_s)

    @property
    def max_age_s(self) -> int | float | None:
        """The freshness this template declares for every URI it serves (from its meta), or None."""
        return declared_max_age(self.meta)

    def to_wire(self) -> dict:
        wire: dict = {"uri_template": self.uri_template, "name": self.name}
        for key in ("title", "description", "mime_type"):
            value = getattr(self, key)
            if value is not None:
                wire[key] = value
        if self.annotations is not None:
            wire["annotations"] = self.annotations.to_wire()
        wire["icons"] = [icon.to_wire() for icon in self.icons]
        if self.meta is not None:
            wire["meta"] = self.meta
        return wire

    def __repr__(self) -> str:
        return f"ResourceTemplate({self.uri_template!r}, name={self.name!r})"


def check_uri(uri: object) -> str:
    uri = _check_text(uri, "uri", MAX_URI_BYTES)
    if not uri:
        raise DefinitionError("uri is empty")
    return uri


class Chunk:
    """One piece of a read: `text(...)` or `blob(...)`; uri defaults to the requested one."""

    __slots__ = ("kind", "data", "uri", "mime_type", "meta")

    def __init__(self, kind: str, data, uri=None, mime_type=None, meta=None):
        self.kind = kind
        self.data = data
        self.uri = None if uri is None else check_uri(uri)
        self.mime_type = _opt_text(mime_type, "chunk mime_type", 256)
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

    def to_json(self, default_uri: str) -> str:
        """The chunk as JSON text, built without re-scanning a large blob.

        Base64 needs no JSON escaping, so a blob's text is spliced in as is:
        in the guest, encoding it through `json.dumps` costs more than the
        base64 itself.
        """
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
    return Chunk("text", _check_text(value, "text"), uri, mime_type, meta)


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


def read_response(uri: str, chunks=None, error=None) -> dict:
    """The `read-response` record as a JSON-ready dict."""
    wire: dict = {"uri": uri, "contents": [] if error is not None else [c.to_wire(uri) for c in chunks or ()]}
    if error is not None:
        wire["error"] = error
    return wire


def read_response_json(uri: str, chunks) -> str:
    """A successful `read-response` as JSON text (same bytes as `dumps(read_response(...))`)."""
    return '{"uri":' + dumps(uri) + ',"contents":[' + ",".join(c.to_json(uri) for c in chunks) + "]}"


def describe_response(resources) -> dict:
    return {"resources": [resource.to_wire() for resource in resources]}


def templates_response(templates) -> dict:
    return {"templates": [template.to_wire() for template in templates]}


def complete_response(values=(), total=None, has_more=False, error=None) -> dict:
    """The `complete-response` record as a JSON-ready dict (no values when `error` is set)."""
    wire: dict = {"values": [] if error is not None else list(values)}
    if total is not None and error is None:
        wire["total"] = total
    wire["has_more"] = bool(has_more) and error is None
    if error is not None:
        wire["error"] = error
    return wire
