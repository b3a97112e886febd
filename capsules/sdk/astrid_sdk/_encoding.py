"""The one JSON encoding of everything the SDK sends: compact, UTF-8 as is, no NaN.

Pure Python, stdlib only: this module runs inside the wasm guest.
"""

from __future__ import annotations

import json

# One encoder, made once: `json.dumps` with these options builds a new JSONEncoder on every
# call, which in the guest costs more than encoding a short string. Same output.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps(value: object) -> str:
    return _ENCODER.encode(value)
