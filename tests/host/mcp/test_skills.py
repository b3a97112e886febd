"""`host/mcp/skills.py`'s pure part: skill entries and directory children from one principal's resources.

The MCP side (skills/list, skills/get, resources/directory/read through a real client against real
capsules) is tests/e2e/test_skills.py; these pin the rules an entry is built by."""

from __future__ import annotations

import hashlib
import json

from astrid.host.contract.resource import ResourceDefinition
from astrid.host.mcp.skills import DIGEST_META, SKILL_META, directory_children, skill_uris, skills_in

FRONTMATTER = {"name": "refunds", "description": "Process refunds."}


def file(uri: str, data: bytes | None = b"x", *, owner_meta: dict | None = None) -> ResourceDefinition:
    meta = dict(owner_meta or {})
    if data is not None:
        meta[DIGEST_META] = hashlib.sha256(data).hexdigest()
    return ResourceDefinition(
        uri=uri, name=uri.rsplit("/", 1)[-1], size=len(data or b""), meta=json.dumps(meta) if meta else None
    )


def skill_md(uri: str, frontmatter: dict = FRONTMATTER, data: bytes | None = b"---\n") -> ResourceDefinition:
    return file(uri, data, owner_meta={SKILL_META: {"frontmatter": frontmatter}})


OWNERS = {"skill://acme/refunds/evil.md": "mallory"}


def owner(uri: str) -> str:
    return OWNERS.get(uri, "acme")


def test_an_entry_lists_its_owner_s_files_under_its_folder_only():
    listed = [
        skill_md("skill://acme/refunds/SKILL.md"),
        file("skill://acme/refunds/a.md", b"a"),
        file("skill://acme/refunds/sub/b.md", b"b"),
        file("skill://acme/refunds/evil.md", b"evil"),  # another capsule's, in the same folder
        file("skill://acme/refunds-old/SKILL.md"),  # a sibling folder sharing the prefix's text
        file("skill://acme/other.md"),
    ]
    [entry] = skills_in(listed, owner)
    assert entry.uri == "skill://acme/refunds/SKILL.md" and entry.frontmatter == FRONTMATTER
    assert [f["uri"] for f in entry.to_json()["resources"]] == [
        "skill://acme/refunds/SKILL.md",
        "skill://acme/refunds/a.md",
        "skill://acme/refunds/sub/b.md",
    ]
    assert entry.to_json()["resources"][1] == {
        "uri": "skill://acme/refunds/a.md",
        "digest": "sha256:" + hashlib.sha256(b"a").hexdigest(),
        "size": 1,
    }


def test_a_file_without_a_digest_makes_the_skill_dynamic():
    listed = [skill_md("skill://acme/refunds/SKILL.md", data=None), file("skill://acme/refunds/a.md")]
    [entry] = skills_in(listed, owner)
    assert entry.to_json()["resources"] == "dynamic"


def test_what_is_not_a_skill_gets_no_entry():
    listed = [
        skill_md("skill://acme/refunds/SKILL.md", {"name": "other", "description": "x"}),  # name is not its folder
        skill_md("skill://acme/nodesc/SKILL.md", {"name": "nodesc"}),
        skill_md("skill://acme/readme/README.md", {"name": "readme", "description": "x"}),  # not a SKILL.md
        file("skill://acme/plain/SKILL.md"),  # no frontmatter in its meta
    ]
    assert skills_in(listed, owner) == [] and skill_uris(listed) == []


def test_directory_children_are_files_and_subfolders_one_level_down():
    listed = [file("skill://a/s/SKILL.md"), file("skill://a/s/t/x.md"), file("skill://a/s/t/u/y.md")]
    children = directory_children(listed, "skill://a/s")
    assert [c if isinstance(c, str) else c.uri for c in children or []] == ["skill://a/s/SKILL.md", "skill://a/s/t"]
    assert directory_children(listed, "skill://a/s/") is None  # no trailing '/'
    assert directory_children(listed, "skill://a/s/SKILL.md") is None  # a file
    assert directory_children(listed, "skill://a/nothing") is None


def test_the_sdk_and_the_host_agree_on_the_meta_keys_and_the_index():
    # The guest SDK cannot import the host: the same names live on both sides, held together here.
    from astrid.host.build import skills as build
    from astrid.host.mcp import skills as served
    from astrid_sdk import _skills as sdk

    assert (sdk.SKILL_META, sdk.DIGEST_META, sdk.SKILL_FILE) == (served.SKILL_META, served.DIGEST_META, "SKILL.md")
    assert (sdk.INDEX_MODULE, sdk.INDEX_VERSION, sdk.SKILL_FILE) == (
        build.INDEX_MODULE,
        build.INDEX_VERSION,
        build.SKILL_FILE,
    )
