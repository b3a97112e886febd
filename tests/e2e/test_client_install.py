"""`astrid mcp install claude-desktop` end to end: the entry it writes starts a server a real MCP client talks to.

The server is started as Claude Desktop starts it: the entry's command and
args, its env over the SDK's minimal default environment, from another
working directory, over stdio with the Python SDK's ClientSession.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from astrid.host.settings import CAPSULE_HOME_ENV
from tests.support.capsules import BUNDLED_URIS
from tests.support.processes import astrid_exe

pytestmark = pytest.mark.anyio


def install(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [astrid_exe(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


@asynccontextmanager
async def session_from(config_file: Path, name: str, cwd: Path, stderr: Path) -> AsyncIterator[ClientSession]:
    """A ClientSession on the server the entry `name` of claude_desktop_config.json starts, as Claude Desktop does."""
    entry = json.loads(config_file.read_text())["mcpServers"][name]
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=entry["env"], cwd=cwd)
    with stderr.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(30):
                init = await session.initialize()
            assert init.server_info.name == "astrid"
            yield session


async def test_an_installed_entry_starts_the_server_with_its_config_file(tmp_path: Path) -> None:
    work, elsewhere, home = tmp_path / "work", tmp_path / "elsewhere", tmp_path / "home"
    for folder in (work / "caps", elsewhere, home):
        folder.mkdir(parents=True)
    (work / "astrid.toml").write_text('[serve]\ncapsules = ["caps"]\nprincipal = "carol"\n')
    desktop = tmp_path / "Claude" / "claude_desktop_config.json"
    desktop.parent.mkdir()
    desktop.write_text('{"mcpServers": {"other": {"command": "other"}}, "globalShortcut": ""}')
    env = {**os.environ, CAPSULE_HOME_ENV: str(home)}
    done = install("mcp", "install", "claude-desktop", "--config-file", str(desktop), cwd=work, env=env)
    assert "added the server 'astrid-caps'" in done.stderr

    log = tmp_path / "server.log"
    async with session_from(desktop, "astrid-caps", elsewhere, log) as session:
        with anyio.fail_after(30):
            assert (await session.list_resources()).resources == []
    text = log.read_text()
    assert f"settings from {work / 'astrid.toml'} (--config FILE" in text  # found in work/, carried as absolute
    assert "for principal 'carol'" in text and f"capsule paths: {home}, {work / 'caps'}" in text


@pytest.mark.slow
async def test_an_installed_entry_serves_the_capsules_to_a_client(bundled: list[Path], tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    desktop = tmp_path / "claude_desktop_config.json"
    env = {**os.environ, CAPSULE_HOME_ENV: str(home)}
    folders = [arg for folder in bundled for arg in ("--capsules", str(folder))]
    install(
        "mcp",
        "install",
        "claude-desktop",
        "--config-file",
        str(desktop),
        *folders,
        "--principal",
        "alice",
        cwd=tmp_path,
        env=env,
    )
    [name] = json.loads(desktop.read_text())["mcpServers"]
    assert name == "astrid-docs-introspect"

    async with session_from(desktop, name, elsewhere, tmp_path / "server.log") as session:
        with anyio.fail_after(60):
            uris = {resource.uri for resource in (await session.list_resources()).resources}
            whoami = await session.read_resource("astrid://whoami")
    assert BUNDLED_URIS <= uris
    assert json.loads(whoami.contents[0].text)["principal"] == "alice"  # type: ignore[union-attr]
