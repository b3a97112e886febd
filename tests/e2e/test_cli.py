"""`astrid mcp config`, `astrid resources list/read` and the CLI's one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import astrid_exe, server_env


def run(*args: str, env=None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([astrid_exe(), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_mcp_config_prints_a_ready_claude_desktop_entry(tmp_path):
    capsule_dir = tmp_path / "caps"
    capsule_dir.mkdir()
    result = run("mcp", "config", "--name", "my-astrid", "--capsules", str(capsule_dir), "--principal", "alice")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    entry = config["mcpServers"]["my-astrid"]
    command = Path(entry["command"])
    assert command.is_absolute() and command.exists()
    args = entry["args"]
    assert args[args.index("mcp") : args.index("mcp") + 2] == ["mcp", "serve"]
    assert args[args.index("--capsules") + 1] == str(capsule_dir.resolve())
    assert args[args.index("--principal") + 1] == "alice"
    for where in ("macOS", "Windows", "Linux", "claude_desktop_config.json"):
        assert where in result.stderr


def test_mcp_config_entry_starts_a_server(tmp_path):
    """The printed command line really is `astrid mcp serve` (checked with --help)."""
    entry = json.loads(run("mcp", "config").stdout)["mcpServers"]["astrid"]
    result = subprocess.run([entry["command"], *entry["args"], "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "Serve capsule resources" in result.stdout


def test_a_missing_capsule_folder_is_a_one_line_error(tmp_path):
    for command in (("mcp", "serve"), ("resources", "list"), ("mcp", "config")):
        result = run(*command, "--capsules", str(tmp_path / "nope"), "--principal", "alice")
        assert result.returncode != 0
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("error: --capsules")
        assert len(result.stderr.strip().splitlines()) == 1


def test_resources_list_without_capsules_says_so(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    result = run("resources", "list", "--principal", "alice", env=server_env(home))
    assert result.returncode == 0, result.stderr
    assert "no resources for 'alice'" in result.stdout


@pytest.mark.slow
def test_resources_list_and_read_with_real_capsules(capsules, capsule_home):
    env = server_env(capsule_home)
    where = ["--capsules", str(capsules["docs"]), "--capsules", str(capsules["introspect"]), "--principal", "alice"]

    table = run("resources", "list", *where, env=env)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["URI", "NAME", "MIME", "SIZE", "TITLE"]
    assert any(row.startswith("astrid://docs/index ") for row in rows)

    listed = json.loads(run("resources", "list", "--json", *where, env=env).stdout)
    assert "astrid://whoami" in [r["uri"] for r in listed]

    page = run("resources", "read", "astrid://docs/index", *where, env=env)
    assert page.returncode == 0 and page.stdout.startswith("# ")

    who = json.loads(run("resources", "read", "astrid://whoami", *where, env=env).stdout)
    assert who["principal"] == "alice"

    chunks = json.loads(run("resources", "read", "astrid://docs/tour", "--json", *where, env=env).stdout)
    assert {c["type"] for c in chunks} == {"text", "blob"}

    missing = run("resources", "read", "astrid://nowhere", *where, env=env)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: not_found:") and "Traceback" not in missing.stderr


def test_mcp_config_carries_the_astrid_settings_of_the_shell(tmp_path):
    """Clients start servers with a minimal environment: the entry must bring them."""
    settings = {
        "ASTRID_CAPSULE_HOME": str(tmp_path / "home"),
        "ASTRID_CACHE_DIR": str(tmp_path / "cache"),
        "ASTRID_BUILD_CACHE_DIR": str(tmp_path / "builds"),
        "ASTRID_CACHE_KEY_FILE": str(tmp_path / "key"),
        "ASTRID_CONFIG_DIR": str(tmp_path / "config"),  # the grants and tokens
        "ASTRID_DATA_DIR": str(tmp_path / "data"),  # the kv state
    }
    shell = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}  # carried too: not under test here
    result = run("mcp", "config", env={**shell, **settings, "UNRELATED": "x"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["mcpServers"]["astrid"]["env"] == settings
