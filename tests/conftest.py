"""Shared test setup: one content-addressed cache for builds and compiled components.

Builds (componentize-py, ~8 s each) and compiled components (~5 s each) are
cached by content hash under `.cache/` in the work tree, so only the first run
on a machine pays for them.
"""

from __future__ import annotations

import os
import queue
import threading
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


@pytest.fixture
def capsule_home(tmp_path: Path) -> Path:
    """An empty capsule home, so the user's own capsules never leak into a test."""
    home = tmp_path / "home"
    home.mkdir()
    return home


def server_env(capsule_home: Path, **extra: str) -> dict[str, str]:
    """The environment of an `astrid mcp serve` a test starts (unbuffered stderr)."""
    return {**os.environ, "ASTRID_CAPSULE_HOME": str(capsule_home), "PYTHONUNBUFFERED": "1", **extra}


class LineReader:
    """Reads a binary pipe on a thread so every wait for a line is bounded."""

    def __init__(self, stream) -> None:
        self.lines: "queue.Queue[bytes | None]" = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        for line in iter(stream.readline, b""):
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout_s: float) -> bytes | None:
        """The next line, or None at end of stream; TimeoutError when none comes in time."""
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no line within {timeout_s} s") from None
