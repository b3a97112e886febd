"""`astrid capsule list`: capsules found, their source-ids, handlers and whether they load."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.capsule.provenance import source_id_for
from tests.support.capsules import build_clean
from tests.support.files import clean_copy
from tests.support.processes import run_astrid as astrid


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("listed")
    build_clean(CAPSULES_DIR / "docs", root / "docs")
    clean_copy(CAPSULES_DIR / "introspect", root / "unbuilt")
    return root


def test_list_shows_source_ids_handlers_and_load_status(parent: Path):
    result = astrid("capsule", "list", str(parent), cwd=parent)
    assert result.returncode == 1  # one capsule does not load
    out = result.stdout
    sha = hashlib.sha256((parent / "docs" / "docs.wasm").read_bytes()).hexdigest()
    assert f"source-id: {source_id_for('docs', sha)}" in out
    assert "handler: resource.v1.request.describe -> describe" in out
    assert "handler: resource.v1.request.read -> read" in out
    assert "introspect 1.0.0" in out and "does not load" in out and "astrid capsule build" in out
    assert "\n  load: " not in out  # only with -v


def test_list_verbose_shows_load_time_and_cache(parent: Path):
    result = astrid("capsule", "list", "-v", str(parent / "docs"), cwd=parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "status: loads" in result.stdout
    assert "(compile cache)" in result.stdout and " ms " in result.stdout


def test_list_with_nothing_to_list(tmp_path: Path):
    result = astrid("capsule", "list", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1 and "no capsules" in result.stderr
