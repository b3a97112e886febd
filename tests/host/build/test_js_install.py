"""Where a JS/TS build finds the pinned toolchain (host/build/js_install.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from astrid.host.build.js_install import SHIPPED_DIR, TOOLCHAIN_ENV, ready_toolchain, toolchain_dir, user_copy
from astrid.host.errors import BuildError


def test_the_operators_folder_wins_and_is_never_installed_into(tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "tools"
    empty.mkdir()
    monkeypatch.setenv(TOOLCHAIN_ENV, str(empty))
    assert toolchain_dir(tmp_path / "cache") == empty
    with pytest.raises(BuildError) as caught:
        ready_toolchain(tmp_path / "cache", None)
    assert f"not installed in {empty}" in str(caught.value) and "npm ci" in str(caught.value)
    assert list(empty.iterdir()) == [] and not (tmp_path / "cache").exists()


def test_the_user_copy_lives_in_the_build_cache_named_by_the_pinned_manifest(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(TOOLCHAIN_ENV, raising=False)
    copy = user_copy(tmp_path)
    assert copy.parent == tmp_path and copy.name.startswith("js-toolchain-")
    assert user_copy(tmp_path) == copy  # the same manifest, the same folder: installed once
    assert toolchain_dir(tmp_path) in (SHIPPED_DIR, copy)  # the checkout's `make js-toolchain`, else the copy
