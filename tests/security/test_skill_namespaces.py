"""Skills under another publisher's namespace: a skill URI is a URI, and the namespace authority covers it.

A signed capsule whose publisher owns `skill://skilled/` is the only one that
may serve skills there (docs/skills.md, "Trust"). The attacks: a second
publisher's capsule claiming the namespace (refused at install), and an
unsigned copy of the same component dropped into the capsule home once the
owner is gone (it serves nothing inside the namespace: no skill is listed,
none can be fetched or read). Without the authority (host/identity/vetting.py
`may_serve`), the squatter's skills would be listed and read as the owner's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest
from mcp import MCPError

from tests.e2e.builds import TEST_CAPSULES, build
from tests.e2e.test_publishing import Operator, publish
from tests.support.files import clean_copy
from tests.support.processes import server_env
from tests.support.skills import get_skill, list_skills, modern_client, with_claims

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NAMESPACE = "skill://skilled/"
NOTES = "skill://skilled/release-notes/SKILL.md"


@pytest.fixture(scope="module")
def skilled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = clean_copy(TEST_CAPSULES / "skilled", tmp_path_factory.mktemp("skills") / "skilled")
    build(folder)
    return folder


@pytest.fixture
def owned(skilled, tmp_path: Path) -> Operator:
    """acme's signed `skilled` installed, owning skill://skilled/ (only: astrid://skilled/ stays anyone's)."""
    home = tmp_path / "home"
    home.mkdir()
    operator = Operator(tmp_path / "config", home)
    folder = with_claims(skilled, tmp_path / "acme" / "skilled", NAMESPACE)
    artifact, public = publish(operator, folder, "acme", tmp_path / "skilled.capsule")
    operator("trust", "add", public, "--publisher", "acme")
    operator("capsule", "install", artifact, "--yes")
    return operator


def test_another_publisher_cannot_claim_a_skill_namespace_nor_a_folder_inside_it(owned, skilled, tmp_path):
    for index, namespace in enumerate((NAMESPACE, NAMESPACE + "release-notes/")):
        folder = with_claims(skilled, tmp_path / f"rival{index}" / "skilled", namespace, name="rival")
        rival, public = publish(owned, folder, "mallory", tmp_path / f"rival{index}.capsule")
        if index == 0:
            owned("trust", "add", public, "--publisher", "mallory")
        line = owned.refused("capsule", "install", rival, "--yes")
        assert "acme" in line and NAMESPACE in line
    assert sorted(p.name for p in owned.home.iterdir()) == ["skilled"]


async def test_an_unsigned_copy_serves_no_skill_inside_an_owned_namespace(owned, skilled, tmp_path):
    owned("capsule", "remove", "skilled")
    shutil.copytree(skilled, owned.home / "squatter")  # the very same component, unsigned, claiming nothing
    env = server_env(owned.home, ASTRID_CONFIG_DIR=str(owned.config))
    async with modern_client(principal="alice", capsule_home=owned.home, stderr=tmp_path / "serve.log", env=env) as c:
        with anyio.fail_after(120):
            listing = await list_skills(c.session)
            listed = await c.list_resources()
            with pytest.raises(MCPError) as fetched:
                await get_skill(c.session, NOTES)
            with pytest.raises(MCPError) as read:
                await c.read_resource(NOTES)
    assert listing["skills"] == []
    assert not [r.uri for r in listed.resources if r.uri.startswith(NAMESPACE)]
    assert "astrid://skilled/about" in {r.uri for r in listed.resources}  # it loaded, outside the namespace
    assert fetched.value.code == -32602 and read.value.code == -32602
