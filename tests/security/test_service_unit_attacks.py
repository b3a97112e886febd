"""Attacks on the unit `astrid mcp install systemd` writes: a path in astrid.toml that would smuggle flags or
systemd specifiers into ExecStart, and a credential that a world-readable unit would show every local user."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import astrid_exe

# A folder name that, split on spaces, would switch auth off and listen on every address.
SMUGGLED = "notes --no-auth --http 0.0.0.0:80"


def unit_for(folder: Path, serve: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    (folder / "astrid.toml").write_text(serve)
    env = {**os.environ, "ASTRID_CONFIG_DIR": str(folder / "config")}
    target = folder / "astrid.service"
    done = subprocess.run(
        [astrid_exe(), "mcp", "install", "systemd", "-o", str(target)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, target


def exec_start(unit: str) -> str:
    [line] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=")


def test_a_folder_name_cannot_add_flags_to_execstart(tmp_path: Path) -> None:
    (tmp_path / SMUGGLED).mkdir()
    done, target = unit_for(tmp_path, f'[serve]\nhttp = "127.0.0.1:8000"\ncapsules = ["{SMUGGLED}"]\n')
    assert done.returncode == 0, done.stderr
    words = shlex.split(exec_start(target.read_text()))  # systemd splits as the shell does, for these characters
    assert words[words.index("--capsules") + 1] == str(tmp_path / SMUGGLED)
    assert "--no-auth" not in words and words.count("--http") == 1
    assert words[words.index("--http") + 1] == "127.0.0.1:8000"
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:  # systemd reads it as one word too
        verified = subprocess.run([analyze, "verify", str(target)], capture_output=True, text=True, timeout=60)
        assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified.stderr


@pytest.mark.parametrize("name", ["100%h", "cost$HOME"])
def test_a_folder_name_cannot_expand_specifiers_or_variables(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    done, target = unit_for(tmp_path, f'[serve]\nhttp = "127.0.0.1:8000"\ncapsules = ["{name}"]\n')
    assert done.returncode == 0, done.stderr
    line = exec_start(target.read_text())
    escaped = name.replace("%", "%%").replace("$", "$$")
    assert f'"{tmp_path / escaped}"' in line  # %% and $$ are systemd's literal % and $


def test_a_folder_name_cannot_start_a_directive_of_its_own(tmp_path: Path) -> None:
    name = "notes\nUser=root"  # a newline in ExecStart would end it; the next line would run the service as root
    (tmp_path / name).mkdir()
    done, target = unit_for(tmp_path, '[serve]\nhttp = "127.0.0.1:8000"\ncapsules = ["notes\\nUser=root"]\n')
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "control character" in done.stderr and "rename it" in done.stderr
    assert not target.exists()


def test_a_bus_password_is_refused_not_written(tmp_path: Path) -> None:
    done, target = unit_for(tmp_path, '[serve]\nhttp = "8000"\nbus = "nats://host-a:hunter2@nats.internal:4222"\n')
    assert done.returncode == 1 and "nats-creds" in done.stderr and "hunter2" not in done.stderr
    assert not target.exists()
