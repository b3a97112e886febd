"""`astrid mcp bundle` end to end: a Claude Desktop bundle of the files capsule, checked by the MCP Bundle CLI,
unpacked and started as Claude Desktop starts it, and read through by a real MCP client.

The server entry is made by the mcpb library itself from the manifest, with a
tmp folder as the user's chosen directory (tests/support/bundles.py); the
user's own grants, trusted keys and capsule home are set up beside it and must
not matter (tests/security/test_bundle_isolation.py attacks that).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
import zipfile
from pathlib import Path

import anyio
import pytest
from mcp import MCPError

from tests.support.bundles import (
    desktop_entry,
    desktop_session,
    make_bundle,
    mcpb,
    server_env,
    signed_files,
    start_fails,
    unpack,
)
from tests.support.capsules import Built, build_clean
from tests.support.paths import REPO
from tests.support.processes import astrid_exe

pytestmark = pytest.mark.anyio

FOLDER_KEY = "files_files_folder"


@pytest.fixture(scope="module")
def files_bundle(built_files: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built files capsule as a bundle, made once for the module (it builds astrid's wheel)."""
    out = tmp_path_factory.mktemp("bundle") / "astrid-files.mcpb"
    done = make_bundle(built_files.folder, out=out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)  # stdout: only the bundle's path
    assert "bundling files 1.0.0" in done.stderr and f"asks the user for {FOLDER_KEY} (directory)" in done.stderr
    return out


def test_the_bundle_is_valid_for_the_mcp_bundle_cli(files_bundle: Path, tmp_path: Path) -> None:
    extension = unpack(files_bundle, tmp_path / "extension")
    assert "Manifest schema validation passes" in mcpb("validate", extension / "manifest.json")
    assert "astrid-files.mcpb" in mcpb("info", files_bundle)
    manifest = json.loads((extension / "manifest.json").read_text())
    assert manifest["manifest_version"] == "0.4" and manifest["name"] == "astrid-files"
    assert manifest["server"]["type"] == "uv" and manifest["server"]["entry_point"] == "server/main.py"
    assert "files 1.0.0 (unsigned, local)" in manifest["description"]
    assert manifest["user_config"] == {
        FOLDER_KEY: {
            "type": "directory",
            "title": "Folder for files",
            "description": manifest["user_config"][FOLDER_KEY]["description"],
            "required": True,
        }
    }
    assert manifest["compatibility"]["platforms"] == ["darwin", "linux"]
    # the capsule, built, without its sources; astrid as a wheel; its dependencies pinned as installed here
    assert sorted(p.name for p in (extension / "capsules" / "files").iterdir()) == ["Capsule.toml", "files.wasm"]
    project = tomllib.loads((extension / "pyproject.toml").read_text())
    wheel = project["tool"]["uv"]["sources"]["astrid-py"]["path"]
    assert (extension / wheel).is_file() and wheel.startswith("server/wheels/astrid_py-")
    dependencies = project["project"]["dependencies"]
    assert "wasmtime==50.0.1" in dependencies and "mcp==2.3.0" in dependencies
    assert not any(dep.startswith("componentize-py") for dep in dependencies)  # build-only: not in the bundle
    # `mcpb pack` packs the unpacked folder again: it is a bundle source as the CLI sees it
    mcpb("pack", extension, tmp_path / "repacked.mcpb")
    with zipfile.ZipFile(tmp_path / "repacked.mcpb") as repacked:
        assert "capsules/files/files.wasm" in repacked.namelist()


def test_the_same_capsule_gives_the_same_bundle(files_bundle: Path, built_files: Built, tmp_path: Path) -> None:
    with zipfile.ZipFile(files_bundle) as archive:
        wheel = next(name for name in archive.namelist() if name.endswith(".whl"))
        (tmp_path / Path(wheel).name).write_bytes(archive.read(wheel))
    again = tmp_path / "again.mcpb"
    done = subprocess.run(
        [astrid_exe(), "mcp", "bundle", str(built_files.folder), "-o", str(again)]
        + ["--wheel", str(tmp_path / Path(wheel).name)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert again.read_bytes() == files_bundle.read_bytes()


async def test_started_as_claude_desktop_starts_it_serves_the_chosen_folder(files_bundle: Path, tmp_path: Path) -> None:
    extension = unpack(files_bundle, tmp_path / "extension")
    chosen = tmp_path / "chosen"
    (chosen / "sub").mkdir(parents=True)
    (chosen / "notes.md").write_text("# my notes\n")
    (chosen / "sub" / "todo.txt").write_text("buy milk\n")
    entry = desktop_entry(extension, {FOLDER_KEY: str(chosen)})
    assert entry["args"][-2:] == ["--set", f"{FOLDER_KEY}={chosen}"]
    env = server_env(ASTRID_DATA_DIR=tmp_path / "data", ASTRID_CONFIG_DIR=tmp_path / "config")
    log = tmp_path / "server.log"
    async with desktop_session(entry, env, log) as session:
        with anyio.fail_after(60):
            uris = sorted(r.uri for r in (await session.list_resources()).resources)
            assert uris == ["astrid://files/notes.md", "astrid://files/sub/todo.txt"]
            read = await session.read_resource("astrid://files/sub/todo.txt")
            assert read.contents[0].text == "buy milk\n"  # type: ignore[union-attr]
            with pytest.raises(MCPError):
                await session.read_resource("astrid://files/missing.txt")
    text = log.read_text()
    assert f"granted files fs:files={chosen} (for this bundle only)" in text
    assert f"capsule paths: {extension / 'capsules'}" in text
    state = tmp_path / "data" / "bundles" / "astrid-files"
    grants = json.loads((state / "config" / "grants.json").read_text())["capsules"]
    assert grants["files"]["fs"] == {"files": str(chosen)}
    assert grants["files"]["identity"] == f"folder:{extension.resolve() / 'capsules' / 'files'}"


def test_a_missing_or_wrong_folder_is_one_line_at_start(files_bundle: Path, tmp_path: Path) -> None:
    extension = unpack(files_bundle, tmp_path / "extension")
    env = server_env(ASTRID_DATA_DIR=tmp_path / "data", ASTRID_CONFIG_DIR=tmp_path / "config")
    line = start_fails(desktop_entry(extension, {FOLDER_KEY: str(tmp_path / "nowhere")}), env)
    assert f"{FOLDER_KEY}: {tmp_path / 'nowhere'} is not a folder" in line
    # Claude Desktop starts nothing without a required setting; a client that passes it unsubstituted:
    entry = desktop_entry(extension, {FOLDER_KEY: str(tmp_path)})
    entry["args"][-1] = f"{FOLDER_KEY}=${{user_config.{FOLDER_KEY}}}"
    line = start_fails(entry, env)
    assert f"no folder chosen for {FOLDER_KEY}" in line


# -- signed capsules stay verified inside the bundle ----------------------------------------------------


@pytest.mark.slow
async def test_a_signed_capsule_is_bundled_with_its_publisher_and_verified_at_start(
    built_files: Built, tmp_path: Path
) -> None:
    artifact, config = signed_files(built_files.folder, tmp_path)
    out = tmp_path / "signed.mcpb"
    done = make_bundle(artifact, out=out, env={**os.environ, "ASTRID_CONFIG_DIR": str(config)})
    assert done.returncode == 0, done.stderr
    extension = unpack(out, tmp_path / "extension")
    manifest = json.loads((extension / "manifest.json").read_text())
    assert "files 1.0.0 (signed by acme, key " in manifest["description"] and manifest["author"]["name"] == "acme"
    assert (extension / "capsules" / "files" / "identity.json").is_file()

    chosen = tmp_path / "chosen"
    chosen.mkdir()
    (chosen / "a.txt").write_text("signed and served\n")
    entry = desktop_entry(extension, {FOLDER_KEY: str(chosen)})
    # a user who trusts nobody: the bundle brings its publisher's key
    env = server_env(ASTRID_DATA_DIR=tmp_path / "data", ASTRID_CONFIG_DIR=tmp_path / "user-config")
    log = tmp_path / "server.log"
    async with desktop_session(entry, env, log) as session:
        with anyio.fail_after(60):
            assert [r.uri for r in (await session.list_resources()).resources] == ["astrid://files/a.txt"]
    assert "verified files 1.0.0 (publisher acme (key " in log.read_text()
    assert not (tmp_path / "user-config" / "trust.json").exists()  # the user's trust store is never written


# -- bad input: one line naming the cause and the fix, nothing written ---------------------------------


def _refused(*sources: str | Path, out: Path, env: dict[str, str] | None = None) -> str:
    done = make_bundle(*sources, out=out, env=env)
    assert done.returncode == 1 and not out.exists(), done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    return errors[0]


def test_bad_capsules_are_refused_with_one_line(built_files: Built, tmp_path: Path) -> None:
    out = tmp_path / "out.mcpb"
    env = {**os.environ, "ASTRID_CAPSULE_HOME": str(tmp_path / "home")}
    assert "nosuch: no such capsule folder, artifact or installed capsule" in _refused("nosuch", out=out, env=env)
    assert "./nowhere/files: no such file or folder" in _refused("./nowhere/files", out=out)
    unbuilt = tmp_path / "unbuilt"
    unbuilt.mkdir()
    shutil.copy(built_files.folder / "Capsule.toml", unbuilt / "Capsule.toml")
    line = _refused(unbuilt, out=out)
    assert "capsule files is not built (files.wasm is missing): run `astrid capsule build" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no capsule there" in _refused(empty, out=out)
    assert "two capsules are named files" in _refused(built_files.folder, built_files.folder, out=out)
    line = _refused(built_files.folder, "--name", "Not A Name", out=out)
    assert "--name 'Not A Name': 1-64 characters" in line


@pytest.mark.slow
async def test_an_installed_capsule_is_bundled_by_its_name(built_files: Built, tmp_path: Path) -> None:
    artifact, config = signed_files(built_files.folder, tmp_path)
    env = {**os.environ, "ASTRID_CONFIG_DIR": str(config), "ASTRID_CAPSULE_HOME": str(tmp_path / "home")}
    installed = subprocess.run(
        [astrid_exe(), "capsule", "install", str(artifact), "--yes"], capture_output=True, text=True, env=env
    )
    assert installed.returncode == 0, installed.stderr
    out = tmp_path / "installed.mcpb"
    done = make_bundle("files", out=out, env=env)
    assert done.returncode == 0, done.stderr
    assert f"bundling files 1.0.0 installed at {tmp_path / 'home' / 'files'} (publisher acme" in done.stderr
    extension = unpack(out, tmp_path / "extension")
    publishers = json.loads((extension / "server" / "publishers.json").read_text())["publishers"]
    assert [(p["name"], p["namespaces"], p["capsule"]) for p in publishers] == [("acme", ["astrid://files/"], "files")]
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    (chosen / "b.txt").write_text("installed, bundled\n")
    server = server_env(ASTRID_DATA_DIR=tmp_path / "data", ASTRID_CONFIG_DIR=tmp_path / "user-config")
    async with desktop_session(
        desktop_entry(extension, {FOLDER_KEY: str(chosen)}), server, tmp_path / "s.log"
    ) as session:
        with anyio.fail_after(60):
            read = await session.read_resource("astrid://files/b.txt")
            assert read.contents[0].text == "installed, bundled\n"  # type: ignore[union-attr]


@pytest.mark.slow
async def test_kv_state_is_the_bundles_own_kept_across_starts_and_off_when_the_user_says(tmp_path: Path) -> None:
    counter = build_clean(REPO / "tests" / "e2e" / "capsules" / "counter", tmp_path / "src" / "counter")
    out = tmp_path / "counter.mcpb"
    assert make_bundle(counter.folder, out=out).returncode == 0
    extension = unpack(out, tmp_path / "extension")
    fields = json.loads((extension / "manifest.json").read_text())["user_config"]
    assert fields["counter_state"]["type"] == "boolean" and fields["counter_state"]["default"] is True
    assert fields["counter_notes_folder"]["type"] == "directory"
    notes = tmp_path / "notes"
    notes.mkdir()
    data = tmp_path / "data"
    env = server_env(ASTRID_DATA_DIR=data, ASTRID_CONFIG_DIR=tmp_path / "user-config")

    async def visits(settings: dict) -> str:
        entry = desktop_entry(extension, {"counter_notes_folder": str(notes), **settings})
        async with desktop_session(entry, env, tmp_path / "server.log") as session:
            with anyio.fail_after(60):
                read = await session.read_resource("astrid://counter/visits")
        return read.contents[0].text  # type: ignore[union-attr]

    assert await visits({}) == "1"
    assert await visits({}) == "2"  # kept across starts, in the bundle's own data folder
    assert (data / "bundles" / "astrid-counter" / "data" / "kv.sqlite3").is_file()
    assert not (data / "kv.sqlite3").exists()
    assert (await visits({"counter_state": False})).startswith("NotGranted: ")
