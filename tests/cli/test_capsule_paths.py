"""`--capsules PATH` that would serve nothing says so: an empty folder warns, a Capsule.toml stands for
its folder, another file is an error (the real `astrid`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from astrid.host.settings import CAPSULE_HOME_ENV
from astrid.host.toolpaths import tool_path


@pytest.fixture
def astrid(tmp_path: Path):
    home = tmp_path / "capsule-home"
    home.mkdir()

    def run(*args: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, CAPSULE_HOME_ENV: str(home)}
        return subprocess.run(
            [tool_path("astrid"), *args], stdin=stdin, capture_output=True, text=True, timeout=120, env=env
        )

    return run


def test_an_empty_capsules_folder_is_warned_about_when_serving(astrid, tmp_path, built_docs) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a capsule")
    (empty / "sub").mkdir()
    served = astrid("mcp", "serve", "--principal", "alice", "--capsules", str(empty))  # stdin ends at once
    assert served.returncode == 0, served.stderr
    assert served.stdout == ""
    warning = [line for line in served.stderr.splitlines() if "warning" in line]
    assert warning == [
        f"astrid: warning: --capsules {empty}: no capsule there (no Capsule.toml in it nor in its subfolders), "
        f"so nothing is served from it; create one with `astrid capsule new NAME --dir {empty}`"
    ]
    listed = astrid("resources", "list", "--principal", "alice", "--capsules", str(empty))
    assert listed.returncode == 0 and "no capsule there" in listed.stderr
    # a folder of capsules, or a capsule folder, is not warned about
    for path in (built_docs.folder, built_docs.folder.parent):
        listed = astrid("resources", "list", "--principal", "alice", "--capsules", str(path))
        assert listed.returncode == 0, listed.stderr
        assert "warning" not in listed.stderr and "astrid://docs/index" in listed.stdout


def test_a_capsule_toml_stands_for_its_folder(astrid, built_docs) -> None:
    manifest = built_docs.folder / "Capsule.toml"
    listed = astrid("resources", "list", "--principal", "alice", "--capsules", str(manifest))
    assert listed.returncode == 0, listed.stderr
    assert "astrid://docs/index" in listed.stdout
    assert f"astrid: --capsules {manifest}: serving the capsule folder it is in, {built_docs.folder}" in listed.stderr


def test_another_file_is_an_error_naming_the_fix(astrid, built_docs, tmp_path) -> None:
    component = next(built_docs.folder.glob("*.wasm"))
    served = astrid("mcp", "serve", "--capsules", str(component))
    assert served.returncode == 1 and "Traceback" not in served.stderr
    assert served.stderr.strip().splitlines() == [
        f"error: --capsules {component}: a file, not a folder: give the capsule's folder (the one with "
        "Capsule.toml) or a folder of capsule folders"
    ]
    artifact = tmp_path / "notes.capsule"
    artifact.write_bytes(b"not really")
    served = astrid("mcp", "serve", "--capsules", str(artifact))
    assert served.returncode == 1 and f"`astrid capsule install {artifact}`" in served.stderr
