"""The one JSON encoding of everything the SDK sends: compact, UTF-8 as is, no NaN.

Pure Python, stdlib only: this module runs inside the wasm guest.
"""

from __future__ import annotations

import json


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
