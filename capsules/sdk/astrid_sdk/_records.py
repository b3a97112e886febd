"""The definition records: `Resource`, `ResourceTemplate` and their `Annotations` and `Icon`.

Each is validated on construction (docs/contract/interface.md §3, §4): a bad
field is a DefinitionError naming it. `to_wire()` gives the JSON-ready dict.

Encoding rule (one for every record, chunks too): snake_case keys, an option
that is None is left out, lists are always present (possibly empty).

Pure Python, stdlib only: this module runs inside the wasm guest.
"""

from __future__ import annotations

import math

from astrid_sdk._checks import check_text, check_uri, opt_text
from astrid_sdk._errors import DefinitionError
from astrid_sdk._limits import MAX_DESCRIPTION_BYTES, MAX_ICONS, MAX_TITLE_BYTES, MAX_URI_BYTES
from astrid_sdk._meta import declared_max_age, freshness_meta
from astrid_sdk._template import UriTemplate

ROLES = ("user", "assistant")
THEMES = ("light", "dark")


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
        self.last_modified = opt_text(last_modified, "last_modified", 64)

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
        self.src = check_text(src, "icon src", MAX_URI_BYTES * 16)
        self.mime_type = opt_text(mime_type, "icon mime_type", 256)
        if isinstance(sizes, str):
            sizes = (sizes,)
        self.sizes = tuple(check_text(s, "icon size", 64) for s in sizes)
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


def _shared_fields(name, title, description, mime_type, annotations, icons) -> tuple:
    """The fields a resource and a template share, checked (each its own error), in this order."""
    texts = (
        check_text(name, "name", MAX_URI_BYTES),
        opt_text(title, "title", MAX_TITLE_BYTES),
        opt_text(description, "description", MAX_DESCRIPTION_BYTES),
        opt_text(mime_type, "mime_type", 256),
    )
    checked_annotations = Annotations.coerce(annotations)
    checked_icons = [Icon.coerce(icon) for icon in icons or ()]
    if len(checked_icons) > MAX_ICONS:
        raise DefinitionError(f"{len(checked_icons)} icons, over the limit of {MAX_ICONS}")
    return (*texts, checked_annotations, tuple(checked_icons))


def _shared_wire(record, wire: dict, optional: tuple[str, ...]) -> dict:
    """`wire` (the record's key field) with the shared fields and `optional` of its own, by the
    encoding rule above; in the order the wire always had."""
    wire["name"] = record.name
    for key in ("title", "description", "mime_type", *optional):
        value = getattr(record, key)
        if value is not None:
            wire[key] = value
    if record.annotations is not None:
        wire["annotations"] = record.annotations.to_wire()
    wire["icons"] = [icon.to_wire() for icon in record.icons]
    if record.meta is not None:
        wire["meta"] = record.meta
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
        name = name if name is not None else uri
        self.name, self.title, self.description, self.mime_type, self.annotations, self.icons = _shared_fields(
            name, title, description, mime_type, annotations, icons
        )
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**32):
            raise DefinitionError("size must be an integer from 0 to 2**32-1 (bytes before base64)")
        self.size = size
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
        return _shared_wire(self, {"uri": self.uri}, ("size",))

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
        self.uri_template = check_text(uri_template, "uri_template", MAX_URI_BYTES)
        self.parsed = UriTemplate.parse(self.uri_template)
        name = name if name is not None else uri_template
        self.name, self.title, self.description, self.mime_type, self.annotations, self.icons = _shared_fields(
            name, title, description, mime_type, annotations, icons
        )
        self.meta = freshness_meta(meta, max_age_s)

    @property
    def max_age_s(self) -> int | float | None:
        """The freshness this template declares for every URI it serves (from its meta), or None."""
        return declared_max_age(self.meta)

    def to_wire(self) -> dict:
        return _shared_wire(self, {"uri_template": self.uri_template}, ())

    def __repr__(self) -> str:
        return f"ResourceTemplate({self.uri_template!r}, name={self.name!r})"
