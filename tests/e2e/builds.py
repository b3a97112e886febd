"""The capsules the e2e tests serve, built with `astrid capsule build` as a user builds them.

Capsules are copied into a temporary folder first (a clean checkout: no stale
.wasm); builds and compiled components are cached by content hash
(tests/conftest.py points the caches at `.cache/`), so only the first run on a
machine pays for them.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import astrid_exe

TEST_CAPSULES = Path(__file__).resolve().parent / "capsules"
BUILD_TIMEOUT_S = 1800

MUTABLE_VARIANTS = {
    # variant: (uris.txt, body.txt)
    "v1": ("astrid://mutable/one\n", "version 1"),
    "v2": ("astrid://mutable/one\nastrid://mutable/two\n", "version 1"),
    "v3": ("astrid://mutable/one\nastrid://mutable/two\n", "version 3"),
    "v4": ("astrid://mutable/one\nastrid://mutable/two\nastrid://mutable/mine @alice\n", "version 3"),
}


def build(folder: Path) -> None:
    """`astrid capsule build FOLDER`, which must succeed."""
    result = subprocess.run(
        [astrid_exe(), "capsule", "build", str(folder)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert result.returncode == 0, f"building {folder.name} failed:\n{result.stdout}\n{result.stderr}"


def write_variant(folder: Path, variant: str) -> None:
    """Turn the `mutable` capsule in `folder` into one of `MUTABLE_VARIANTS`."""
    uris, body = MUTABLE_VARIANTS[variant]
    (folder / "uris.txt").write_text(uris, encoding="utf-8")
    (folder / "body.txt").write_text(body, encoding="utf-8")


@dataclass
class Capsules:
    """Built capsule folders by name (`mutable-v1` ... for the variants)."""

    root: Path
    folders: dict[str, Path] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Path:
        return self.folders[name]
