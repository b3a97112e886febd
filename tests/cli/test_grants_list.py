"""`astrid grants list`, and `astrid capsule grant` warning about a folder that is not there (the real `astrid`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from astrid.host.capabilities.grants import GrantStore
from astrid.host.capabilities.plugins.fs import FS
from astrid.host.settings import CAPSULE_HOME_ENV, CONFIG_DIR_ENV
from astrid.host.toolpaths import tool_path


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def astrid(config_dir: Path, tmp_path: Path):
    home = tmp_path / "capsule-home"
    home.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, CONFIG_DIR_ENV: str(config_dir), CAPSULE_HOME_ENV: str(home)}
        return subprocess.run([tool_path("astrid"), *args], capture_output=True, text=True, timeout=60, env=env)

    return run


def manifest(name: str) -> str:
    return f"""
[package]
name = "{name}"
version = "1.0.0"

[[component]]
id = "{name}"
file = "{name}.wasm"

[capabilities]
fs = ["notes"]
kv = true
"""


def capsule_folder(parent: Path, name: str) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(manifest(name))
    return folder


def test_grants_list_shows_every_grant_its_identity_and_whether_the_capsule_is_found(astrid, tmp_path) -> None:
    caps = tmp_path / "caps"
    reader = capsule_folder(caps, "reader")
    notes = tmp_path / "notes"
    notes.mkdir()
    assert astrid("capsule", "grant", "reader", f"fs:notes={notes}", "kv", "--capsules", str(reader)).returncode == 0
    assert astrid("capsule", "grant", "ghost", "kv").returncode == 0  # no capsule of that name anywhere

    listed = astrid("grants", "list", "--capsules", str(caps))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "ghost: kv",
        "  bound to: nobody yet (the first capsule named ghost that loads takes these grants)",
        "  found: no capsule named ghost in the capsule home or the --capsules paths",
        f"reader: fs:notes={notes}, kv",
        f"  bound to: folder:{reader.resolve()}",
        f"  found: the capsule at {reader.resolve()} (local, unsigned)",
    ]
    assert "the grants in" in listed.stderr

    # without --capsules the reader folder is not where a server would look
    assert f"  found: the capsule at {reader.resolve()}" not in astrid("grants", "list").stdout


def test_grants_list_json_and_a_capsule_of_the_same_name_elsewhere(astrid, tmp_path, config_dir) -> None:
    reader = capsule_folder(tmp_path / "caps", "reader")
    impostor = capsule_folder(tmp_path / "elsewhere", "reader")
    gone = tmp_path / "gone"
    astrid("capsule", "grant", "reader", f"fs:notes={gone}", "--capsules", str(reader))

    done = astrid("grants", "list", "--json", "--capsules", str(impostor))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["grants_file"] == str(config_dir / "grants.json")
    [entry] = document["capsules"]
    assert entry["name"] == "reader" and entry["grants"] == [f"fs:notes={gone}"]
    assert entry["identity"] == f"folder:{reader.resolve()}"
    assert entry["found"] is False and entry["capsule"] is None
    assert [other["folder"] for other in entry["others"]] == [str(impostor.resolve())]
    assert entry["missing_folders"] == [str(gone)]

    text = astrid("grants", "list", "--capsules", str(impostor)).stdout
    assert "  found: no capsule named reader with this identity" in text
    assert f"  another capsule named reader, at {impostor.resolve()} (local, unsigned), gets none of these" in text
    assert f"  warning: the folder {gone} does not exist (yet)" in text


def test_grants_list_with_no_grants_says_so(astrid, config_dir) -> None:
    done = astrid("grants", "list")
    assert done.returncode == 0 and done.stdout == ""
    assert f"no grants in {config_dir / 'grants.json'}" in done.stderr
    assert json.loads(astrid("grants", "list", "--json").stdout)["capsules"] == []


def test_granting_a_folder_that_does_not_exist_warns_in_one_line_and_still_grants(astrid, tmp_path, config_dir):
    missing = tmp_path / "not-yet"
    done = astrid("capsule", "grant", "reader", f"fs:notes={missing}")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warnings == [
        f"astrid: warning: {missing} does not exist (yet): the capsule gets nothing from it until it is a folder"
    ]
    assert GrantStore(config_dir / "grants.json").for_capsule("reader").of(FS) == (("notes", str(missing)),)

    missing.mkdir()
    assert "warning" not in astrid("capsule", "grant", "reader", f"fs:notes={missing}").stderr
    # one folder per principal: the folder above them is what must be there
    assert "warning" not in astrid("capsule", "grant", "reader", f"fs:notes={missing}/{{principal}}").stderr
    done = astrid("capsule", "grant", "reader", f"fs:notes={tmp_path}/nowhere/{{principal}}")
    assert done.returncode == 0
    assert f"astrid: warning: {tmp_path}/nowhere does not exist (yet)" in done.stderr
