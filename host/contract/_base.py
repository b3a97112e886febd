"""The JSON encoding rule shared by every bus record (docs/contract/interface.md §4).

snake_case keys, options absent or null, unknown keys ignored, a value of the
wrong type rejects the whole message (strict: no "1" -> 1 coercion).
Limits come from the validation context (`{"limits": Limits}`) so they stay
configurable in one place; without a context the defaults apply.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo

from astrid.host.bus.topics import is_clean_segment
from astrid.host.limits import DEFAULT_LIMITS, Limits

# Bad metadata is dropped where the broker takes a capsule's reply in: log it there.
log = logging.getLogger("astrid.host.broker")

# A text field, required or optional: a check hands back what it was given.
_Text = TypeVar("_Text", str, str | None)
_Item = TypeVar("_Item")


class WireModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict: options that are None are left out."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_json(self) -> str:
        return json.dumps(self.to_wire(), separators=(",", ":"), ensure_ascii=False)


class DeferredWireModel(WireModel):
    """A `WireModel` whose validation schema is built at first use, not at import: for the models
    a stdio start never needs (front doors, completion, events)."""

    model_config = ConfigDict(defer_build=True)


class WitType:
    """Marks the WIT type of a field whose Python type is ambiguous (u32, f32)."""

    def __init__(self, name: str) -> None:
        self.name = name


U32 = Annotated[int, Field(ge=0, le=2**32 - 1), WitType("u32")]
F32 = Annotated[float, WitType("f32")]
U64 = Annotated[int, Field(ge=0, le=2**64 - 1), WitType("u64")]


def limits_of(info: ValidationInfo) -> Limits:
    context = info.context or {}
    return context.get("limits", DEFAULT_LIMITS)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def check_bytes(value: _Text, limit: int, what: str) -> _Text:
    if value is not None and utf8_len(value) > limit:
        raise ValueError(f"{what} is longer than {limit} bytes")
    return value


def check_segment(value: str, what: str) -> str:
    """An id that the reply's topic ends with: one topic segment."""
    if not is_clean_segment(value):
        raise ValueError(f"{what} must be one topic segment of [a-z0-9_-]")
    return value


def check_count(items: list[_Item], limit: int, what: str) -> list[_Item]:
    """A list in one reply: more than `limit` entries refuse the whole reply."""
    if len(items) > limit:
        raise ValueError(f"more than {limit} {what}")
    return items


def check_meta(value: str | None, limit: int) -> str | None:
    """`meta` is a JSON object encoded as a string, at most `limit` bytes."""
    if value is None:
        return None
    check_bytes(value, limit, "meta")
    try:
        decoded = json.loads(value)
    except ValueError:
        raise ValueError("meta is not JSON (it must be a JSON object encoded as a string)") from None
    if not isinstance(decoded, dict):
        raise ValueError("meta must encode a JSON object")
    return value


@overload
def strip_bad_meta(record: dict[str, Any], limits: Limits, where: str) -> dict[str, Any]: ...
@overload
def strip_bad_meta(record: object, limits: Limits, where: str) -> object: ...
def strip_bad_meta(record: object, limits: Limits, where: str) -> object:
    """A `meta` over the cap or not encoding a JSON object loses the field, not the record.

    docs/contract/limits.md §7.
    """
    record, problem = without_bad_meta(record, limits)
    if problem is not None:
        log.warning("%s: meta dropped: %s", where, problem)
    return record


def without_bad_meta(record: object, limits: Limits) -> tuple[object, str | None]:
    """`strip_bad_meta` without its log line: (the record, why its meta was dropped or None)."""
    if not isinstance(record, dict) or not isinstance(record.get("meta"), str):
        return record, None
    try:
        check_meta(record["meta"], limits.meta_bytes)
    except ValueError as exc:
        return {key: value for key, value in record.items() if key != "meta"}, str(exc)
    return record, None
