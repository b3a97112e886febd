"""What a TypeScript capsule hides from a principal stays hidden: its `visible` filters, and its family's
flat keys, behind a real MCP client over stdio.

`tests/e2e/capsules/tsparity` (one componentize-js build, shared with tests/e2e/test_ts_sdk_parity.py)
shows `astrid://parity/secret` and the template `astrid://parity/admin/{page}` to alice only. bob, who
knows their URIs, gets neither by listing, reading nor completing; nor does the host's static describe
(`astrid.static`) hand him alice's listing. A family key that is not one flat segment (`..`, an encoded
`/`) never reaches the family's handler, which would answer any key it gets.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import MCPError, types

from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "astrid://parity/secret"
ADMIN = "astrid://parity/admin/{page}"


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(TEST_CAPSULES / "tsparity", tmp_path_factory.mktemp("tsparity") / "parity").folder


async def _complete_admin(session) -> list[str]:
    try:
        completed = await session.complete(
            types.ResourceTemplateReference(type="ref/resource", uri=ADMIN), argument={"name": "page", "value": ""}
        )
    except MCPError:
        return []
    return completed.completion.values


async def test_what_visible_hides_from_bob_he_cannot_list_read_or_complete(
    parity: Path, capsule_home: Path, tmp_path: Path
):
    async with stdio_session(
        parity, capsule_home=capsule_home, stderr=tmp_path / "stderr.log", principal="bob", init_timeout_s=60
    ) as bob:
        with anyio.fail_after(120):
            uris = await bob.uris()
        assert "astrid://parity/sized" in uris and SECRET not in uris  # the control, and the hidden one
        templates = [t.uri_template for t in (await bob.session.list_resource_templates()).resource_templates]
        assert templates == ["astrid://parity/day/{day}"]
        for uri in (SECRET, "astrid://parity/admin/settings"):
            refused = await bob.error(uri)
            assert refused.error.data["reason"] == "not_found", refused
        assert await _complete_admin(bob.session) == []
    async with stdio_session(
        parity, capsule_home=capsule_home, stderr=tmp_path / "stderr.log", principal="alice"
    ) as alice:
        with anyio.fail_after(120):
            assert SECRET in await alice.uris()
        assert await alice.text(SECRET) == "for alice only"
        assert await alice.text("astrid://parity/admin/settings") == "admin settings"
        assert await _complete_admin(alice.session) == ["settings"]


async def test_a_family_key_that_is_not_flat_never_reaches_the_handler(
    parity: Path, capsule_home: Path, tmp_path: Path
):
    async with stdio_session(
        parity, capsule_home=capsule_home, stderr=tmp_path / "stderr.log", init_timeout_s=60
    ) as served:
        with anyio.fail_after(120):
            assert await served.text("astrid://parity/notes/other") == "no note other"  # the control
        for key in ("..", "%2e%2e", "a%2Fb", "a%5Cb", "%ff", "a/b"):
            refused = await served.error(f"astrid://parity/notes/{key}")
            assert refused.error.data["reason"] == "not_found", (key, refused)
