"""The MCP Skills extension end to end: a capsule's skills/ folder, built with `astrid capsule build`, served by
`astrid mcp serve` to the SDK's Client on the 2026-07-28 revision (skills/list, skills/get,
resources/directory/read, resources/read). docs/skills.md."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import anyio
import mcp.types as types
import pytest
import yaml
from mcp import MCPError

from tests.e2e.builds import TEST_CAPSULES, build
from tests.support.files import clean_copy
from tests.support.processes import astrid_exe, server_env
from tests.support.skills import (
    EXTENSION,
    get_skill,
    list_skills,
    modern_client,
    read_directory,
    verified_files,
    with_claims,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOTES = "skill://skilled/release-notes/SKILL.md"
RUNBOOK = "skill://skilled/private-runbook/SKILL.md"
DAILY = "skill://skilled/daily-brief/SKILL.md"  # dynamic: written per principal
SKILL_FOLDER = TEST_CAPSULES / "skilled" / "skills" / "release-notes"


@pytest.fixture(scope="module")
def skilled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = clean_copy(TEST_CAPSULES / "skilled", tmp_path_factory.mktemp("skills") / "skilled")
    build(folder)
    return folder


def by_uri(listing: dict) -> dict[str, dict]:
    return {entry["uri"]: entry for entry in listing["skills"]}


async def test_discover_declares_the_extension_with_directory_read(skilled, capsule_home, stderr_file):
    async with modern_client(skilled, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            raw = await client.session.send_discover("2026-07-28")
    assert raw["capabilities"]["extensions"][EXTENSION] == {"directoryRead": True}
    assert "resources" in raw["capabilities"]


async def test_skills_list_gives_frontmatter_verbatim_and_every_file_with_its_digest(
    skilled, capsule_home, stderr_file
):
    async with modern_client(skilled, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            listing = await list_skills(client.session)
            entries = by_uri(listing)
            reads = await verified_files(client.session, entries[NOTES])
    assert listing["resultType"] == "complete" and "nextCursor" not in listing
    assert listing["cacheScope"] == "private"
    assert set(entries) == {NOTES, RUNBOOK, DAILY}
    notes = entries[NOTES]
    # every field the author wrote, in the author's order; a date stays the text written
    assert list(notes["frontmatter"].items()) == [
        ("name", "release-notes"),
        (
            "description",
            "Write release notes from a list of merged changes. "
            "Use when the user asks for a changelog or release notes.",
        ),
        ("license", "MIT"),
        ("metadata", {"author": "astrid tests", "version": "1.2"}),
        ("released", "2026-01-02"),
        ("allowed-tools", "Read Grep"),
    ]
    on_disk = {
        "skill://skilled/release-notes/" + p.relative_to(SKILL_FOLDER).as_posix(): p.read_bytes()
        for p in sorted(SKILL_FOLDER.rglob("*"))
        if p.is_file()
    }
    assert {f["uri"]: f for f in notes["resources"]} == {
        uri: {"uri": uri, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
        for uri, data in on_disk.items()
    }
    [skill_md] = reads[NOTES].contents
    assert isinstance(skill_md, types.TextResourceContents) and skill_md.mime_type == "text/markdown"
    [icon] = reads["skill://skilled/release-notes/icon.png"].contents
    assert isinstance(icon, types.BlobResourceContents) and icon.mime_type == "image/png"


async def test_a_dynamic_skill_is_dynamic_and_its_file_s_frontmatter_is_the_entry_s(skilled, capsule_home, stderr_file):
    async with modern_client(skilled, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            entry = (await get_skill(client.session, DAILY))["skill"]
            read = await client.read_resource(DAILY)
    assert entry["resources"] == "dynamic"
    assert entry["frontmatter"] == {
        "name": "daily-brief",
        "description": "Today's brief for the signed-in user. Use at the start of a working day.",
        "license": "MIT",
        "metadata": {"generated": "per principal"},
    }
    [chunk] = read.contents
    _, frontmatter, body = chunk.text.split("---\n", 2)
    assert yaml.safe_load(frontmatter) == entry["frontmatter"]  # what a host compares, field by field
    assert chunk.mime_type == "text/markdown" and body.startswith("# Brief for alice")


async def test_skills_get_returns_the_entry_and_refuses_what_is_not_a_skill(skilled, capsule_home, stderr_file):
    async with modern_client(skilled, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            listed = by_uri(await list_skills(client.session))
            got = await get_skill(client.session, NOTES)
            refusals = []
            for uri in (
                "skill://skilled/release-notes/template.md",  # a file of the skill, not its SKILL.md
                "skill://skilled/release-notes",  # its folder
                "astrid://skilled/about",  # a resource, no skill
                "skill://skilled/nowhere/SKILL.md",
            ):
                with pytest.raises(MCPError) as caught:
                    await get_skill(client.session, uri)
                refusals.append((uri, caught.value.code, caught.value.message))
    assert got["resultType"] == "complete" and got["skill"] == listed[NOTES]
    for uri, code, message in refusals:
        assert code == -32602, uri
        assert uri in message


async def test_directory_read_lists_direct_children_and_refuses_a_file(skilled, capsule_home, stderr_file):
    async with modern_client(skilled, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            root = await read_directory(client.session, "skill://skilled/release-notes")
            scripts = await read_directory(client.session, "skill://skilled/release-notes/scripts")
            with pytest.raises(MCPError) as on_file:
                await read_directory(client.session, NOTES)
            with pytest.raises(MCPError) as with_slash:
                await read_directory(client.session, "skill://skilled/release-notes/")
    children = {r["uri"]: r for r in root["resources"]}
    assert sorted(children) == [
        "skill://skilled/release-notes/SKILL.md",
        "skill://skilled/release-notes/icon.png",
        "skill://skilled/release-notes/scripts",
        "skill://skilled/release-notes/template.md",
    ]
    assert children["skill://skilled/release-notes/scripts"]["mimeType"] == "inode/directory"
    assert children[NOTES]["mimeType"] == "text/markdown" and children[NOTES]["name"] == "release-notes"
    assert children[NOTES]["description"].startswith("Write release notes")
    assert [r["uri"] for r in scripts["resources"]] == ["skill://skilled/release-notes/scripts/group.py"]
    assert on_file.value.code == -32602 and with_slash.value.code == -32602


async def test_a_principal_the_capsule_hides_its_skills_from_sees_none(skilled, capsule_home, stderr_file):
    async with modern_client(skilled, principal="bob", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            listing = await list_skills(client.session)
            resources = await client.list_resources()
            refused = []
            for call in (
                lambda: get_skill(client.session, NOTES),
                lambda: read_directory(client.session, "skill://skilled/release-notes"),
                lambda: client.read_resource(NOTES),
            ):
                with pytest.raises(MCPError) as caught:
                    await call()
                refused.append(caught.value.code)
    assert listing["skills"] == []
    assert [r.uri for r in resources.resources] == ["astrid://skilled/about"]  # the capsule is there for bob
    assert refused == [-32602, -32602, -32602]


async def test_skill_files_are_plain_resources_on_2025_11_25(skilled, capsule_home, stderr_file):
    from tests.support.stdio import stdio_session

    async with stdio_session(skilled, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as served:
        with anyio.fail_after(60):
            listed = await served.session.list_resources()
            read = await served.session.read_resource(NOTES)
    uris = {r.uri for r in listed.resources}
    assert NOTES in uris and RUNBOOK in uris
    skill_md = next(r for r in listed.resources if r.uri == NOTES)
    assert skill_md.mime_type == "text/markdown" and skill_md.name == "release-notes"
    assert json.dumps(skill_md.meta["dev.astrid/skill"]["frontmatter"]).startswith('{"name": "release-notes"')
    assert read.contents[0].text.startswith("---\nname: release-notes\n")


# -- signed: pack, sign, trust, install, serve ----------------------------------------------------------------


async def test_a_signed_capsules_skill_is_served_and_verifies_after_install(skilled, tmp_path):
    from tests.e2e.test_publishing import Operator, publish

    home = tmp_path / "home"
    home.mkdir()
    operator = Operator(tmp_path / "config", home)
    folder = with_claims(skilled, tmp_path / "src" / "skilled", "astrid://skilled/", "skill://skilled/")
    artifact, public = publish(operator, folder, "acme", tmp_path / "skilled-0.1.0.capsule")
    operator("trust", "add", public, "--publisher", "acme")
    installed = operator("capsule", "install", artifact, "--yes")
    assert f"skills      {DAILY}, {RUNBOOK}, {NOTES}" in installed.stderr  # the review names them
    env = server_env(home, ASTRID_CONFIG_DIR=str(operator.config))
    async with modern_client(principal="alice", capsule_home=home, stderr=tmp_path / "serve.log", env=env) as client:
        with anyio.fail_after(120):
            entries = by_uri(await list_skills(client.session))
            reads = await verified_files(client.session, entries[NOTES])
    assert set(entries) == {NOTES, RUNBOOK, DAILY}
    assert len(reads) == len([p for p in SKILL_FOLDER.rglob("*") if p.is_file()])
    listed = json.loads(operator("resources", "list", "--json", "--principal", "alice").stdout)
    owner = next(r["capsule"] for r in listed if r["uri"] == NOTES)
    assert owner["publisher"] == "acme" and owner["signed"] and "skill://skilled/" in owner["namespaces"]


async def test_the_bundled_docs_capsule_ships_a_skill_on_using_astrid_resources(built_docs, capsule_home, stderr_file):
    folder = built_docs.folder
    async with modern_client(folder, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            entries = by_uri(await list_skills(client.session))
            entry = entries["skill://docs/astrid-resources/SKILL.md"]
            reads = await verified_files(client.session, entry)
    assert entry["frontmatter"]["name"] == "astrid-resources"
    assert "resources" in entry["frontmatter"]["description"]
    assert sorted(reads) == [
        "skill://docs/astrid-resources/SKILL.md",
        "skill://docs/astrid-resources/checklist.md",
    ]


# -- visible: capsule list, the serve banner, resources list ----------------------------------------------------


async def test_capsule_list_the_banner_and_resources_list_name_the_skills(skilled, capsule_home, stderr_file):
    def astrid(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [astrid_exe(), *args], capture_output=True, text=True, timeout=300, env=server_env(capsule_home)
        )

    shown = astrid("capsule", "list", str(skilled))
    assert shown.returncode == 0, shown.stderr
    assert f"  skills: {DAILY}, {RUNBOOK}, {NOTES}" in shown.stdout
    listed = astrid("resources", "list", "--principal", "alice", "--capsules", str(skilled))
    assert listed.returncode == 0, listed.stderr
    assert NOTES in listed.stdout and "skill://skilled/release-notes/template.md" in listed.stdout
    async with modern_client(skilled, principal="alice", capsule_home=capsule_home, stderr=stderr_file) as client:
        with anyio.fail_after(60):
            await list_skills(client.session)
            while "  skills: " not in stderr_file.read_text():
                await anyio.sleep(0.05)
    assert f"astrid:   skills: {DAILY}, {RUNBOOK}, {NOTES}" in stderr_file.read_text()
