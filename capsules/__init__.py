"""Bundled capsules and the guest SDK, shipped as package data."""

from pathlib import Path

CAPSULES_DIR = Path(__file__).resolve().parent
SDK_DIR = CAPSULES_DIR / "sdk"
BUNDLED = ("introspect", "docs", "files", "feeds")
