"""An impostor capsule: same name, another identity, none of the real one's grants (issue 19).

The finding: a capsule named `files`, dropped into the capsule home, received
the real `files` capsule's grant and read a user's notes, because grants
were keyed by the name a manifest gives itself. Grants now belong to an
identity: the publisher's key and the name for a signed capsule, the folder
for a local one. Here the impostor is an exact copy of the real capsule's
build, so nothing but its identity tells them apart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import NO_GRANTS, GrantStore
from astrid.host.capabilities.plugins.kv import KV
from tests.support.capsules import build_clean
from tests.support.processes import astrid_exe

pytestmark = pytest.mark.slow

SECRET = "THE-USERS-PRIVATE-NOTE-5d1e"
NOTE = "astrid://files/diary.md"


@pytest.fixture(scope="module")
def files_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled `files` capsule, built (content-hash cached)."""
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("files") / "files").folder


@pytest.fixture
def setup(tmp_path: Path, files_build: Path):
    """The real capsule in the operator's folder, a notes folder, an empty capsule home; `astrid` runs there."""
    real = tmp_path / "mine" / "files"
    shutil.copytree(files_build, real)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "diary.md").write_text(f"# Diary\n\n{SECRET}\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "ASTRID_CONFIG_DIR": str(tmp_path / "config"), "ASTRID_CAPSULE_HOME": str(home)}

    def astrid(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [astrid_exe(), *map(str, args)], capture_output=True, text=True, timeout=300, env=env, check=False
        )

    return real, notes, home, astrid


def _read_note(astrid, *capsule_args: str | Path) -> subprocess.CompletedProcess[str]:
    return astrid("resources", "read", NOTE, "--principal", "alice", *capsule_args)


def test_a_same_named_copy_in_the_capsule_home_gets_none_of_the_real_capsules_grants(setup):
    real, notes, home, astrid = setup
    granted = astrid("capsule", "grant", "files", f"fs:files={notes}", "--capsules", real)
    assert granted.returncode == 0 and f"belong to the capsule at {real}" in granted.stderr

    assert SECRET in _read_note(astrid, "--capsules", real).stdout  # the real one reads the note

    shutil.copytree(real, home / "files")  # the impostor: the very same build, another folder
    stolen = _read_note(astrid)  # serves the capsule home only
    assert SECRET not in stolen.stdout + stolen.stderr
    assert stolen.returncode != 0
    listed = astrid("capsule", "list", "-v", home)
    assert "fs files: not granted" in listed.stdout


def test_grants_made_before_identity_binding_go_to_the_capsule_they_were_made_for_once(setup, tmp_path):
    real, notes, home, astrid = setup
    legacy = {"version": 1, "capsules": {"files": {"fs": {"files": str(notes)}}}}  # keyed by the name only
    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    grants_file = config / "grants.json"
    grants_file.write_text(json.dumps(legacy))
    grants_file.chmod(0o600)

    first = _read_note(astrid, "--capsules", real)
    assert SECRET in first.stdout
    assert "now belong to the capsule at" in first.stderr  # the one-time note
    assert "now belong to" not in _read_note(astrid, "--capsules", real).stderr  # once

    shutil.copytree(real, home / "files")
    assert SECRET not in _read_note(astrid).stdout  # bound: the copy gets nothing


def test_a_capsule_signed_by_another_key_gets_none_of_a_publishers_grants(tmp_path):
    store = GrantStore(tmp_path / "grants.json")
    store.grant("files", "kv", "key:" + "a" * 64 + "/files")
    assert store.for_capsule("files", "key:" + "a" * 64 + "/files").of(KV)
    assert store.for_capsule("files", "key:" + "b" * 64 + "/files") == NO_GRANTS
    assert store.for_capsule("files", f"folder:{tmp_path}/files") == NO_GRANTS


def test_granting_a_name_two_capsules_share_names_both_and_grants_neither(setup, tmp_path):
    real, notes, home, astrid = setup
    shutil.copytree(real, home / "files")
    other = tmp_path / "elsewhere" / "files"
    shutil.copytree(real, other)
    refused = astrid("capsule", "grant", "files", f"fs:files={notes}", "--capsules", real, "--capsules", other)
    assert refused.returncode == 1
    assert str(real) in refused.stderr and str(other) in refused.stderr and "--capsules PATH" in refused.stderr
    assert not (tmp_path / "config" / "grants.json").exists()
