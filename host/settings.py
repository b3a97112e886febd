"""Where astrid keeps its files: each place is an `ASTRID_*` variable, else a platform default."""

from __future__ import annotations

import os
from pathlib import Path

CAPSULE_HOME_ENV = "ASTRID_CAPSULE_HOME"
CACHE_DIR_ENV = "ASTRID_CACHE_DIR"
BUILD_CACHE_ENV = "ASTRID_BUILD_CACHE_DIR"
CACHE_KEY_ENV = "ASTRID_CACHE_KEY_FILE"
# Every place setting: a client starts its server with a minimal environment,
# so `astrid mcp config` hands these on.
PATH_SETTINGS = (CAPSULE_HOME_ENV, CACHE_DIR_ENV, BUILD_CACHE_ENV, CACHE_KEY_ENV)


def path_setting(env: str, default: Path) -> Path:
    """`$env` when it is set and not empty, else `default`."""
    return Path(os.environ.get(env) or default)
