"""Tiny WAT capsules, turned into components in milliseconds (no componentize-py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from astrid.host.toolpaths import wasm_tools
from astrid.wit import CAPSULE_WORLD, WIT_DIR

TIMEOUT_S = 60


def build_wat(wat: Path, out: Path, *, wit: Path = WIT_DIR, world: str = CAPSULE_WORLD) -> Path:
    """The component of the core module in `wat` (of `world` in the WIT folder `wit`), written to `out`."""
    core = out.with_suffix(".core.wasm")
    tools = wasm_tools()
    subprocess.run(
        [tools, "component", "embed", str(wit), "--world", world, str(wat), "-o", str(core)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    subprocess.run(
        [tools, "component", "new", str(core), "-o", str(out)], check=True, capture_output=True, timeout=TIMEOUT_S
    )
    core.unlink()
    return out
