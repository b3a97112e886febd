"""The unit `astrid mcp install systemd` writes runs a working server: its ExecStart, with its Environment
(the service's folders moved under tmp), serves a real MCP client over HTTP with a token of the service's own
token file. systemd itself is not started (tests/cli/test_systemd_unit.py verifies the unit's syntax)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.capsules import Built
from tests.support.http import http_server, http_session, text_of
from tests.support.processes import astrid_exe

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STATE = "/var/lib/astrid"
# the test's shared caches stay (compiled components); the state folder moves under tmp
KEPT = ("ASTRID_CACHE_DIR", "ASTRID_BUILD_CACHE_DIR", "ASTRID_CACHE_KEY_FILE")


def unit_of(config: Path, cwd: Path) -> str:
    done = subprocess.run(
        [astrid_exe(), "--config", str(config), "mcp", "install", "systemd"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def service_of(unit: str, state: Path) -> tuple[list[str], dict[str, str]]:
    """ExecStart's words and the Environment of `unit`, /var/lib/astrid replaced by `state`."""
    [exec_start] = [line.removeprefix("ExecStart=") for line in unit.splitlines() if line.startswith("ExecStart=")]
    env = {}
    for line in unit.splitlines():
        if line.startswith("Environment="):
            [pair] = shlex.split(line.removeprefix("Environment="))
            key, _, value = pair.partition("=")
            if key not in KEPT:
                env[key] = value.replace(STATE, str(state))
    return shlex.split(exec_start), env


async def test_the_units_command_serves_a_client_with_the_services_tokens(built_docs: Built, tmp_path: Path) -> None:
    config = tmp_path / "astrid.toml"
    config.write_text(
        f'[serve]\nhttp = "127.0.0.1:0"\ncapsules = ["{built_docs.folder}"]\n'
        "[serve.http-limit]\nconnections-per-client = 0\n"
    )
    state = tmp_path / "state"
    command, env = service_of(unit_of(config, tmp_path), state)
    assert command[0] == astrid_exe() and command[1:3] == ["mcp", "serve"]
    assert env["ASTRID_CONFIG_DIR"] == str(state / "config")
    token_dir = state / "config"  # the token file the service reads by default: its own config folder
    token_dir.mkdir(parents=True, mode=0o700)  # systemd creates the state folder 0700 (StateDirectoryMode)
    with http_server(capsule_home=state / "capsules", token_dir=token_dir, env=env, args=command[1:]) as served:
        # the flags from astrid.toml are in force, and the tokens are the service's own
        assert "no cap per client address" in served.log()
        assert f"static tokens from {token_dir / 'tokens.json'}" in served.log()
        token = served.add_token("alice")
        async with http_session(served.url, token) as session:
            page = text_of(await session.read_resource("astrid://docs/index"))
        assert page.strip()
