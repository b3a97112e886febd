"""A record's `meta`: the user's JSON object as the wire string, and the host's freshness section in it.

The host reads its own hints from one key (docs/contract/resources.md §5.7):
`{"astrid": {"max_age_s": 60}}`. The SDK writes it from `max_age_s=`; user
meta may not.

Pure Python, stdlib only: this module runs inside the wasm guest.
"""

from __future__ import annotations

import json
import math

from astrid_sdk._checks import check_text
from astrid_sdk._encoding import dumps
from astrid_sdk._errors import DefinitionError
from astrid_sdk._limits import MAX_AGE_S, MAX_META_BYTES

ASTRID_META_KEY = "astrid"


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
    check_text(encoded, "meta", MAX_META_BYTES)
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
