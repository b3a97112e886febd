"""Attacks on a Claude Desktop bundle (`astrid mcp bundle`): it must use only what its own settings grant.

- The user's own grants (which may give the same capsule name another
  folder), trusted keys and installed capsules are neither used nor changed
  by the bundle's server: it has its own config, data and capsule home
  (cli/bundle_serve.py, `use_own_folders`).
- A signed capsule whose bytes changed inside the unpacked bundle, or whose
  publisher key the bundle no longer ships, refuses to start with one line
  (`verify_signed`, and the kernel's check at every load).
- Bundling an artifact nobody the bundle maker trusts signed is refused.
- An `http` host the capsule asks for is reached only as the user's setting
  allows: kept, restricted to one port, or cleared.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import MCPError

from astrid.host.capabilities.grants import GrantStore
from tests.host.capabilities.http_server import loopback_server
from tests.support.bundles import (
    desktop_entry,
    desktop_session,
    make_bundle,
    server_env,
    signed_files,
    start_fails,
    unpack,
)
from tests.support.capsules import Built, build_clean
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.anyio

FOLDER_KEY = "files_files_folder"


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    chosen, outside = tmp_path / "chosen", tmp_path / "outside"
    chosen.mkdir()
    outside.mkdir()
    (chosen / "mine.txt").write_text("chosen\n")
    (outside / "secret.txt").write_text("not for this bundle\n")
    return chosen, outside


async def test_the_users_own_grants_and_capsules_are_neither_used_nor_changed(
    built_files: Built, built_docs: Built, tmp_path: Path
) -> None:
    out = tmp_path / "files.mcpb"
    assert make_bundle(built_files.folder, out=out).returncode == 0
    extension = unpack(out, tmp_path / "extension")
    chosen, outside = _folders(tmp_path)
    # the user's own astrid: a grant of another folder to a capsule named files (not bound to any identity, so
    # any capsule of that name would adopt it), and an installed docs capsule
    user_config, user_home = tmp_path / "user-config", tmp_path / "user-capsules"
    GrantStore(user_config / "grants.json").grant("files", f"fs:files={outside}")
    GrantStore(user_config / "grants.json").grant("docs", "kv")
    shutil.copytree(built_docs.folder, user_home / "docs")
    before = (user_config / "grants.json").read_bytes()

    entry = desktop_entry(extension, {FOLDER_KEY: str(chosen)})
    env = server_env(ASTRID_CONFIG_DIR=user_config, ASTRID_CAPSULE_HOME=user_home, ASTRID_DATA_DIR=tmp_path / "data")
    async with desktop_session(entry, env, tmp_path / "server.log") as session:
        with anyio.fail_after(60):
            uris = [r.uri for r in (await session.list_resources()).resources]
            assert uris == ["astrid://files/mine.txt"]  # not the user's docs capsule, not the user's folder
            for uri in ("astrid://files/secret.txt", "astrid://files/../outside/secret.txt"):
                with pytest.raises(MCPError):
                    await session.read_resource(uri)
    assert (user_config / "grants.json").read_bytes() == before
    assert sorted(p.name for p in user_config.iterdir()) == [".grants.json.lock", "grants.json"]


@pytest.mark.slow
async def test_a_changed_signed_capsule_or_a_dropped_publisher_refuses_to_start(
    built_files: Built, tmp_path: Path
) -> None:
    artifact, publisher_config = signed_files(built_files.folder, tmp_path)
    out = tmp_path / "signed.mcpb"
    assert (
        make_bundle(artifact, out=out, env={**os.environ, "ASTRID_CONFIG_DIR": str(publisher_config)}).returncode == 0
    )
    chosen, _ = _folders(tmp_path)
    env = server_env(ASTRID_CONFIG_DIR=tmp_path / "user-config", ASTRID_DATA_DIR=tmp_path / "data")

    changed = unpack(out, tmp_path / "changed")
    wasm = changed / "capsules" / "files" / "files.wasm"
    data = bytearray(wasm.read_bytes())
    data[len(data) // 2] ^= 0x01
    wasm.write_bytes(bytes(data))
    line = start_fails(desktop_entry(changed, {FOLDER_KEY: str(chosen)}), env)
    assert "bundled capsule files does not verify" in line

    dropped = unpack(out, tmp_path / "dropped")
    (dropped / "server" / "publishers.json").write_text(json.dumps({"publishers": []}))
    line = start_fails(desktop_entry(dropped, {FOLDER_KEY: str(chosen)}), env)
    assert "bundled capsule files does not verify" in line


@pytest.mark.slow
def test_an_artifact_the_bundle_maker_does_not_trust_is_not_bundled(built_files: Built, tmp_path: Path) -> None:
    artifact, _ = signed_files(built_files.folder, tmp_path)
    out = tmp_path / "signed.mcpb"
    done = make_bundle(artifact, out=out, env={**os.environ, "ASTRID_CONFIG_DIR": str(tmp_path / "trusts-nobody")})
    assert done.returncode == 1 and not out.exists()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(artifact) in errors[0] and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
async def test_an_http_host_is_reached_only_as_the_users_setting_allows(tmp_path: Path) -> None:
    weather = build_clean(FIXTURES / "weather", tmp_path / "src" / "weather")  # asks for http://127.0.0.1, any port
    out = tmp_path / "weather.mcpb"
    assert make_bundle(weather.folder, out=out).returncode == 0
    extension = unpack(out, tmp_path / "extension")
    manifest = json.loads((extension / "manifest.json").read_text())
    assert manifest["user_config"]["weather_http_1"]["default"] == "http://127.0.0.1"
    env = server_env(ASTRID_CONFIG_DIR=tmp_path / "user-config", ASTRID_DATA_DIR=tmp_path / "data")
    with loopback_server() as service:
        uri = f"astrid://weather/{service.port}"
        for setting, served in (
            ({}, False),  # the default, the entry as asked: its scheme's default port (80), not the service's
            ({"weather_http_1": f"http://127.0.0.1:{service.port}"}, True),
            ({"weather_http_1": "http://127.0.0.1:1"}, False),  # another port only
            ({"weather_http_1": ""}, False),  # cleared: refused
        ):
            log = tmp_path / "server.log"
            async with desktop_session(desktop_entry(extension, setting), env, log) as session:
                with anyio.fail_after(60):
                    if served:
                        read = await session.read_resource(uri)
                        assert read.contents[0].text == "hello", setting  # type: ignore[union-attr]
                    else:
                        with pytest.raises(MCPError):
                            await session.read_resource(uri)
