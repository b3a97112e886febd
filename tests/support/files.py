"""Capsule folders copied as a fresh checkout would have them."""

from __future__ import annotations

import shutil
from pathlib import Path

# build outputs, bytecode and dot-files (editor state, caches) never come from a checkout
CHECKOUT_IGNORE = shutil.ignore_patterns("*.wasm", "*.cwasm", "__pycache__", ".*")


def clean_copy(source: Path, target: Path) -> Path:
    """Copy the folder `source` to `target` (which must not exist yet) without build outputs; returns `target`."""
    shutil.copytree(source, target, ignore=CHECKOUT_IGNORE)
    return target
