"""The important attacks again, through a real MCP client over stdio (`astrid mcp serve`)."""

from __future__ import annotations

import hashlib
import json
import time

import anyio
import mcp.types as types
import pytest

from astrid.host.capsule.provenance import source_id_for
from tests.security.hostile import hostile_source_id, make_hostile, name_sorting
from tests.security.mcp_stdio import TRACEBACK, mcp_session
from tests.support.capsules import BUNDLED_URIS

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_a_zoo_of_hostile_capsules_behind_a_real_mcp_client(bundled, hostile_wasm, tmp_path):
    caps = tmp_path / "caps"
    docs_sid = source_id_for("docs", hashlib.sha256((bundled[0] / "docs.wasm").read_bytes()).hexdigest())
    squatter = name_sorting(hostile_wasm, "squat", after=docs_sid)
    folders = [
        make_hostile(caps, squatter, "squat", hostile_wasm, target="astrid://docs/index"),
        make_hostile(caps, "flood", "flood", hostile_wasm),
        make_hostile(caps, "spin", "spin", hostile_wasm),
        make_hostile(caps, "bad", "malformed", hostile_wasm),
        make_hostile(caps, "trap", "trap", hostile_wasm),
        make_hostile(caps, "memory", "memory", hostile_wasm),
        make_hostile(caps, "reserved", "reserved", hostile_wasm),
    ]
    home = tmp_path / "home"
    home.mkdir()
    async with mcp_session(*bundled, *folders, home=home, stderr_path=tmp_path / "stderr.log") as served:
        resources = {}
        with anyio.fail_after(30):
            for resource in (await served.session.list_resources()).resources:
                resources[resource.uri] = resource
        uris = set(resources)
        assert uris >= BUNDLED_URIS
        assert resources["astrid://docs/index"].title != f"SQUATTED by {squatter}"
        assert not [u for u in uris if u.startswith(("astrid://flood/flood/", "astrid://trap/"))]
        assert [u for u in uris if u.startswith("astrid://memory/seen/")] == ["astrid://memory/seen/alice"]
        # malformed definitions, reshaped at the last trusted choke point
        assert resources["astrid://bad/priority"].annotations.priority == 1.0
        assert resources["astrid://bad/priority"].annotations.last_modified is None
        assert len(resources["astrid://bad/icons"].icons) == 8
        assert resources["astrid://bad/meta-list"].meta is None

        # the squatted reply loses to docs; docs and introspect keep answering
        for uri in ("astrid://docs/index", "astrid://docs/tour", "astrid://docs/resources"):
            assert "SQUATTED" not in await served.text(uri)
        assert (await served.text("astrid://docs/index")).startswith("# ")
        who = json.loads(await served.text("astrid://whoami"))
        assert who["principal"] == "alice" and who["attribution"] == "verified"

        # a spinning read is cut by the 2 s call limit and answered -32603
        started = time.perf_counter()
        error = await served.error("astrid://spin/spin", timeout_s=20)
        assert error.code == types.INTERNAL_ERROR and error.data["uri"] == "astrid://spin/spin"
        assert time.perf_counter() - started < 10
        # malformed read replies fail closed, as -32603 errors naming the URI
        for key in ("badtype", "badb64", "toomany", "toobig"):
            error = await served.error(f"astrid://bad/{key}")
            assert error.code == types.INTERNAL_ERROR and error.data["uri"] == f"astrid://bad/{key}"
        # the reserved topics held
        report = json.loads(await served.text("astrid://reserved/report"))
        assert report["describe"]["publish-read-frontdoor"] == "CapabilityDenied"
        assert (await served.error("astrid://nowhere")).code == -32002

        # and afterwards everything still works
        assert set(await served.uris()) >= BUNDLED_URIS
        assert (await served.text("astrid://docs/logo.png")) == ""  # a blob: no text
        assert (await served.text("astrid://spin/ok")) == "hostile ok for alice"
    log = served.log()
    squat_sid = hostile_source_id(squatter, hostile_wasm)
    audit = [line for line in log.splitlines() if "resource uri collision" in line]
    # both capsules by name (the source-ids only with -v); docs sorts first
    assert audit and all("astrid://docs/index" in line and f"winner=docs loser={squatter} " in line for line in audit)
    assert not any(docs_sid in line or squat_sid in line for line in audit)
    assert not TRACEBACK.search(log), log


async def test_forged_read_replies_lose_to_the_listed_owners_behind_a_real_client(bundled, hostile_wasm, tmp_path):
    caps = tmp_path / "caps"
    folders = [
        make_hostile(caps, "forger", "forge", hostile_wasm),
        make_hostile(caps, "victim", "slow", hostile_wasm, ms=300),
    ]
    home = tmp_path / "home"
    home.mkdir()
    async with mcp_session(*bundled, *folders, home=home, stderr_path=tmp_path / "stderr.log") as served:
        # a read before any list: the broker learns the owners first
        assert await served.text("astrid://victim/slow") == "slow but here"
        assert BUNDLED_URIS | {"astrid://victim/slow"} <= set(await served.uris())
        assert await served.text("astrid://victim/slow") == "slow but here"
        for uri in ("astrid://docs/index", "astrid://docs/tour", "astrid://whoami", "astrid://capsules"):
            assert "FORGED" not in await served.text(uri)
    assert not TRACEBACK.search(served.log())


async def test_two_principals_through_two_real_clients_never_see_each_other(bundled, hostile_wasm, tmp_path):
    caps = tmp_path / "caps"
    folders = [
        make_hostile(caps, "memory", "memory", hostile_wasm),
        make_hostile(caps, "body", "body-principal", hostile_wasm),
    ]
    home = tmp_path / "home"
    home.mkdir()
    async with mcp_session(
        *bundled, *folders, home=home, stderr_path=tmp_path / "alice.log", principal="alice"
    ) as alice:
        async with mcp_session(*bundled, *folders, home=home, stderr_path=tmp_path / "bob.log", principal="bob") as bob:
            for served, name, other in ((alice, "alice", "bob"), (bob, "bob", "alice")):
                uris = await served.uris()
                assert f"astrid://memory/seen/{name}" in uris
                assert not [u for u in uris if other in u]
                assert json.loads(await served.text("astrid://whoami"))["principal"] == name
                body = json.loads(await served.text("astrid://body/body"))
                assert body["caller"] == name and other not in json.dumps(body)
