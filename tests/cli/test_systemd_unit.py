"""`astrid mcp install systemd`: the unit of a hardened HTTP service, from astrid.toml, run as a user runs it.

`systemd-analyze verify` checks the written unit (`make test` installs systemd for it when it is absent).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from astrid.cli.systemd_unit import quote
from astrid.host.settings import CAPSULE_HOME_ENV, CONFIG_DIR_ENV
from tests.support.processes import astrid_exe

HARDENING = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "StateDirectory=astrid",
    "CacheDirectory=astrid",
    "Restart=on-failure",
    "User=astrid",
    "WantedBy=multi-user.target",
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    (folder / "notes").mkdir(parents=True)
    (folder / "astrid.toml").write_text(
        "[serve]\n"
        'http = "0.0.0.0:8443"\n'
        'capsules = ["notes"]\n'
        "access-log = false\n"
        'allowed-origins = ["https://app.example.com"]\n'
        "[serve.http-limit]\n"
        "connections-per-client = 0\n"
    )
    return folder


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, CONFIG_DIR_ENV: str(tmp_path / "config"), CAPSULE_HOME_ENV: str(tmp_path / "home")}


def astrid(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([astrid_exe(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def unit_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_the_unit_runs_the_files_http_server_hardened(workdir: Path, env) -> None:
    done = astrid("mcp", "install", "systemd", cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr
    lines = unit_lines(done.stdout)
    for line in HARDENING:
        assert line in lines
    [exec_start] = [line for line in lines if line.startswith("ExecStart=")]
    notes = workdir / "notes"
    assert exec_start == (
        f"ExecStart={astrid_exe()} mcp serve --capsules {notes} --http 0.0.0.0:8443 "
        "--allowed-origin https://app.example.com --http-limit connections-per-client=0 --no-access-log"
    )
    # every folder astrid writes to is one systemd made writable for the service user
    assert "Environment=ASTRID_DATA_DIR=/var/lib/astrid" in lines
    assert "Environment=ASTRID_CONFIG_DIR=/var/lib/astrid/config" in lines
    assert "Environment=ASTRID_CACHE_DIR=/var/cache/astrid/components" in lines
    assert "Environment=ASTRID_BUILD_CACHE_DIR=/var/cache/astrid/builds" in lines
    assert not any(line.startswith("MemoryDenyWriteExecute") for line in lines)  # wasmtime compiles code
    # how to enable it, and that the capsule folder (under /tmp here) is one the service cannot see
    assert "systemctl daemon-reload && systemctl enable --now astrid.service" in done.stderr
    assert f"warning: {notes}: in /tmp" in done.stderr


def test_the_user_names_the_unit_and_its_folders(workdir: Path, env) -> None:
    done = astrid("mcp", "install", "systemd", "--user", "mcp-notes", cwd=workdir, env=env)
    lines = unit_lines(done.stdout)
    assert {"User=mcp-notes", "StateDirectory=mcp-notes", "CacheDirectory=mcp-notes"} <= set(lines)
    assert "enable --now mcp-notes.service" in done.stderr
    assert "--user" in one_line_error(astrid("mcp", "install", "systemd", "--user", "Root;rm", cwd=workdir, env=env))


def test_output_writes_the_file_and_refuses_to_overwrite_it_without_force(workdir: Path, env) -> None:
    target = workdir / "astrid.service"
    first = astrid("mcp", "install", "systemd", "--output", str(target), cwd=workdir, env=env)
    assert first.returncode == 0 and first.stdout == "", first.stderr
    written = target.read_text()
    assert "ProtectSystem=strict" in written
    target.write_text("# the operator's own edits\n")
    refused = one_line_error(astrid("mcp", "install", "systemd", "-o", str(target), cwd=workdir, env=env))
    assert "exists" in refused and "--force" in refused
    assert target.read_text() == "# the operator's own edits\n"
    forced = astrid("mcp", "install", "systemd", "-o", str(target), "--force", cwd=workdir, env=env)
    assert forced.returncode == 0, forced.stderr
    assert target.read_text() == written


def test_without_an_http_address_there_is_nothing_to_run_as_a_service(workdir: Path, env) -> None:
    (workdir / "astrid.toml").write_text('[serve]\ncapsules = ["notes"]\n')
    line = one_line_error(astrid("mcp", "install", "systemd", cwd=workdir, env=env))
    assert "sets no http" in line and 'http = "127.0.0.1:8000"' in line
    (workdir / "astrid.toml").unlink()
    line = one_line_error(astrid("mcp", "install", "systemd", cwd=workdir, env=env))
    assert "no astrid.toml" in line and "--config FILE" in line


def test_a_bus_password_never_goes_into_the_world_readable_unit(workdir: Path, env) -> None:
    (workdir / "astrid.toml").write_text('[serve]\nhttp = "8000"\nbus = "nats://astrid:s3cret@nats.internal:4222"\n')
    line = one_line_error(astrid("mcp", "install", "systemd", cwd=workdir, env=env))
    assert "nats-creds" in line and "s3cret" not in line


def test_arguments_are_quoted_and_escaped_as_systemd_reads_them() -> None:
    assert quote("/srv/capsules") == "/srv/capsules"
    assert quote("/srv/my capsules") == '"/srv/my capsules"'
    assert quote("100%") == '"100%%"'  # % starts a systemd specifier
    assert quote("$HOME") == '"$$HOME"'  # $ expands an environment variable
    assert quote('say "hi"') == '"say \\"hi\\""'


def test_systemd_analyze_verify_accepts_the_unit(workdir: Path, env, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is absent: `make test` installs it (apt-get install systemd)")
    (workdir / "my capsules").mkdir()
    (workdir / "astrid.toml").write_text(
        '[serve]\nhttp = "127.0.0.1:8000"\ncapsules = ["notes", "my capsules"]\nworkers = "auto"\n'
    )
    target = tmp_path / "astrid.service"
    done = astrid("mcp", "install", "systemd", "-o", str(target), cwd=workdir, env=env)
    assert done.returncode == 0, done.stderr
    assert f'"{workdir / "my capsules"}"' in target.read_text()
    verified = subprocess.run([analyze, "verify", str(target)], capture_output=True, text=True, timeout=60)
    # a line systemd does not understand is only a warning: the unit must produce none
    assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified.stderr
