"""The checks on text the SDK sends: UTF-8 size, a string within a limit, a URI, a topic segment.

A failed check is a DefinitionError naming the field. Pure Python, stdlib
only: this module runs inside the wasm guest.
"""

from __future__ import annotations

import re

from astrid_sdk._errors import DefinitionError
from astrid_sdk._limits import MAX_TOPIC_BYTES, MAX_URI_BYTES

_SEGMENT = re.compile(r"[a-z0-9_-]+")


def utf8_len(text: str) -> int:
    # ASCII (a flag CPython keeps on the string): one byte per character, no encoded copy to count.
    # Anything else is encoded, so a lone surrogate still raises UnicodeEncodeError.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def is_clean_segment(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TOPIC_BYTES and _SEGMENT.fullmatch(value) is not None


def clean_segment(name: str) -> str:
    """`name` folded into one topic segment ([a-z0-9_-], at most 64 chars)."""
    folded = "".join(c if ("a" <= c <= "z" or "0" <= c <= "9" or c in "_-") else "-" for c in name.lower())
    return folded[:64] or "capsule"


def check_text(value: object, what: str, limit: int | None = None) -> str:
    """`value` when it is a string of valid UTF-8 within `limit` bytes, else DefinitionError."""
    if not isinstance(value, str):
        raise DefinitionError(f"{what} must be a string, not {type(value).__name__}")
    try:
        size = utf8_len(value)
    except UnicodeEncodeError:
        raise DefinitionError(f"{what} is not valid UTF-8 (it holds a lone surrogate)") from None
    if limit is not None and size > limit:
        raise DefinitionError(f"{what} is {size} bytes, over the {limit}-byte limit")
    return value


def opt_text(value: object, what: str, limit: int | None = None) -> str | None:
    """None, or `value` checked as `check_text` does."""
    return None if value is None else check_text(value, what, limit)


def check_uri(uri: object) -> str:
    uri = check_text(uri, "uri", MAX_URI_BYTES)
    if not uri:
        raise DefinitionError("uri is empty")
    return uri
