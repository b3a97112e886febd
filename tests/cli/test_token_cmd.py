"""`astrid mcp token add|list|revoke`, run as a user runs it (the real `astrid` executable)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from astrid.host.auth.tokens import TokenStore
from astrid.host.settings import CONFIG_DIR_ENV
from astrid.host.toolpaths import tool_path


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def astrid(config_dir: Path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, CONFIG_DIR_ENV: str(config_dir)}
        return subprocess.run([tool_path("astrid"), *args], capture_output=True, text=True, timeout=60, env=env)

    return run


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


def test_add_prints_the_token_once_on_stdout_and_how_to_use_it_on_stderr(astrid, config_dir: Path) -> None:
    result = astrid("mcp", "token", "add", "alice")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert result.stdout == token + "\n" and len(token) >= 43
    assert "Authorization: Bearer <token>" in result.stderr
    assert token not in result.stderr
    assert TokenStore(config_dir / "tokens.json").principal_for(token) == "alice"


def test_list_shows_names_and_times_never_tokens_or_digests(astrid, config_dir: Path) -> None:
    token = astrid("mcp", "token", "add", "alice").stdout.strip()
    astrid("mcp", "token", "add", "bob")
    result = astrid("mcp", "token", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["alice", "bob"]
    assert all(line.split()[1].endswith("+00:00") for line in lines)
    digests = [entry["sha256"] for entry in json.loads((config_dir / "tokens.json").read_text())["tokens"]]
    for secret in (token, *digests):
        assert secret not in result.stdout + result.stderr


def test_list_of_no_tokens_says_how_to_make_one(astrid) -> None:
    result = astrid("mcp", "token", "list")
    assert result.returncode == 0 and result.stdout == ""
    assert "astrid mcp token add NAME" in result.stderr


def test_revoke_removes_the_token(astrid, config_dir: Path) -> None:
    token = astrid("mcp", "token", "add", "alice").stdout.strip()
    result = astrid("mcp", "token", "revoke", "alice")
    assert result.returncode == 0, result.stderr
    assert "revoked" in result.stderr
    assert astrid("mcp", "token", "list").stdout == ""
    assert TokenStore(config_dir / "tokens.json").principal_for(token) is None


def test_revoke_of_an_unknown_name_is_a_one_line_error(astrid) -> None:
    line = one_line_error(astrid("mcp", "token", "revoke", "bob"))
    assert "no token for 'bob'" in line and "astrid mcp token list" in line


def test_adding_a_name_twice_says_to_revoke_first(astrid) -> None:
    astrid("mcp", "token", "add", "alice")
    line = one_line_error(astrid("mcp", "token", "add", "alice"))
    assert "already exists" in line and "astrid mcp token revoke alice" in line


def test_a_bad_name_is_a_one_line_error(astrid, config_dir: Path) -> None:
    line = one_line_error(astrid("mcp", "token", "add", " alice"))
    assert "printable characters without surrounding spaces" in line
    assert not (config_dir / "tokens.json").exists()


def test_a_corrupt_file_is_a_one_line_error_naming_it(astrid, config_dir: Path) -> None:
    config_dir.mkdir(mode=0o700)
    (config_dir / "tokens.json").write_text("{")
    (config_dir / "tokens.json").chmod(0o600)
    line = one_line_error(astrid("mcp", "token", "list"))
    assert str(config_dir / "tokens.json") in line and "corrupt" in line


def test_tokens_option_picks_another_file(astrid, tmp_path: Path, config_dir: Path) -> None:
    other = tmp_path / "elsewhere" / "team.json"
    token = astrid("mcp", "token", "add", "alice", "--tokens", str(other)).stdout.strip()
    assert TokenStore(other).principal_for(token) == "alice"
    assert not (config_dir / "tokens.json").exists()
    assert astrid("mcp", "token", "list", "--tokens", str(other)).stdout.split()[0] == "alice"
    assert astrid("mcp", "token", "revoke", "alice", "--tokens", str(other)).returncode == 0


def test_the_mcp_group_lists_token(astrid) -> None:
    result = astrid("mcp", "--help")
    assert result.returncode == 0 and "  token " in result.stdout


def test_principal_option_keeps_its_error_format(astrid) -> None:
    line = one_line_error(astrid("mcp", "config", "--principal", " x"))
    assert line == "error: --principal ' x': use 1-128 printable characters without surrounding spaces"


def test_mcp_config_hands_the_config_dir_on(astrid, config_dir: Path) -> None:
    result = astrid("mcp", "config")
    assert result.returncode == 0, result.stderr
    env = json.loads(result.stdout)["mcpServers"]["astrid"]["env"]
    assert env[CONFIG_DIR_ENV] == str(config_dir)
