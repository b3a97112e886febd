"""URI helpers: the one percent-decoder of the SDK, and what a family's flat key is.

A template's variables (`_template`) and a family's keys (`_registry`) are
decoded by the same `percent_decode`: strict UTF-8, so a value whose escapes
are not UTF-8 is refused in both places (a template does not match it, a
family does not own it). Stdlib only: this module runs inside the wasm guest.
"""

from __future__ import annotations

import re

_ASCII_RUN = re.compile(r"[\x00-\x7f]+")
_HEX = frozenset("0123456789abcdefABCDEF")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # what a flat key may not hold (one scan, not a loop per character)


def percent_decode(text: str) -> str:
    """`%XX` escapes decoded as UTF-8 (strict: UnicodeDecodeError when the bytes are not UTF-8).

    A `%` not followed by two hex digits stays as it is. Characters outside
    ASCII pass through untouched; each run of ASCII is decoded on its own
    (as `urllib.parse.unquote` does).
    """
    if "%" not in text:
        return text
    parts: list[str] = []
    last = 0
    for run in _ASCII_RUN.finditer(text):
        parts.append(text[last : run.start()])
        parts.append(_unescape(run.group()).decode("utf-8"))
        last = run.end()
    parts.append(text[last:])
    return "".join(parts)


def _unescape(run: str) -> bytes:
    out = bytearray()
    index = 0
    size = len(run)
    while index < size:
        char = run[index]
        if char == "%" and index + 2 < size and run[index + 1] in _HEX and run[index + 2] in _HEX:
            out.append(int(run[index + 1 : index + 3], 16))
            index += 3
        else:
            out.append(ord(char))
            index += 1
    return bytes(out)


def flat_key(key: str) -> bool:
    """Whether `key` is one flat segment: non-empty, no `/`, `\\` or control character, never
    `.` or `..`, and none of that smuggled in percent-encoded (escapes that are not UTF-8 are refused)."""
    if not key or "/" in key or "\\" in key:
        return False
    if _CONTROL.search(key) is not None:
        return False
    try:
        decoded = percent_decode(key)
    except UnicodeDecodeError:
        return False
    return decoded not in (".", "..") and "/" not in decoded and "\\" not in decoded
