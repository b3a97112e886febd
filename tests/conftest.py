"""Shared test setup: one content-addressed cache for builds and compiled components.

Builds (componentize-py, ~8 s each) and compiled components (~5 s each) are
cached by content hash under `.cache/` in the work tree, so only the first run
on a machine pays for them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CACHE_ROOT = Path(os.environ.get("ASTRID_TEST_CACHE", REPO / ".cache"))
os.environ.setdefault("ASTRID_CACHE_DIR", str(CACHE_ROOT / "components"))
os.environ.setdefault("ASTRID_BUILD_CACHE_DIR", str(CACHE_ROOT / "builds"))


@pytest.fixture(scope="session")
def component_cache_dir() -> Path:
    path = Path(os.environ["ASTRID_CACHE_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path
