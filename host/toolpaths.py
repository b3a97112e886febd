"""Where the build tools shipped as Python dependencies live."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def tool_path(name: str) -> str:
    """The executable `name` from this interpreter's environment, else from PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: reinstall astrid-py (it ships {name} as a dependency)")
    return found


def wasm_tools() -> str:
    return tool_path("wasm-tools")


def componentize_py() -> str:
    return tool_path("componentize-py")
