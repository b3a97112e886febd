"""Resource update attacks (docs/contract/subscriptions.md §11): a real hostile component announcing
`resource.v1.event.updated` (astrid-bus:resource-events), and a real MCP client subscribing to
what it cannot read, against the real kernel, broker and MCP server.

What the broker hands on is what the MCP server sends subscribers, so these tests listen where
the server listens (`Runtime.updates()`): the broker's checked updates, each with its principal.
"""

from __future__ import annotations

import json
import logging
import time
import warnings

import anyio
import pytest
from mcp import Client, MCPError

from astrid.host.bus import Principal
from astrid.host.mcp.server import AstridMcpServer
from tests.security.servers import InProcessServer, assert_bundled_serve

pytestmark = pytest.mark.slow

ALICE = Principal.verified("alice")
DOCS_URI = "astrid://docs/index"  # the bundled docs capsule's


def heard(updates, quiet_s: float = 0.5, timeout_s: float = 10.0) -> list[tuple[str, str]]:
    """(principal, uri) of every update the broker handed on, until `quiet_s` passes with none."""
    got: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = updates.wait(quiet_s)
        if not batch:
            break
        got.extend(batch)
    return got


def announce(served: InProcessServer, name: str, what: str, principal: str | None = None) -> dict:
    return json.loads(served.text(f"astrid://{name}/announce-{what}", principal))


def test_a_capsule_cannot_announce_another_capsules_uri(serve, bundled, hostile_dir, caplog) -> None:
    served = serve(*bundled, hostile_dir("announcer", "announce", target=DOCS_URI))
    updates = served.runtime.updates()
    try:
        assert DOCS_URI in served.uris()  # alice has a snapshot: an update could reach her
        assert announce(served, "announcer", "own") == {"own": "ok"}  # the control: its own URI goes out
        assert heard(updates) == [("alice", "astrid://announcer/ok")]
        with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
            for _ in range(3):
                assert announce(served, "announcer", "other") == {"other": "ok"}  # the bus took it ...
            assert heard(updates) == []  # ... the broker handed nothing on
        assert served.broker.stats.updates_refused == 3
        refusals = [r.getMessage() for r in caplog.records if "does not serve" in r.getMessage()]
        assert len(refusals) == 1 and "announcer" in refusals[0] and DOCS_URI in refusals[0]  # said once
    finally:
        updates.close()
    assert_bundled_serve(served)


def test_an_announcement_goes_to_the_principal_being_served_never_to_one_it_names(serve, bundled, hostile_dir) -> None:
    served = serve(*bundled, hostile_dir("announcer", "announce"))
    updates = served.runtime.updates()
    try:
        for who in ("alice", "bob"):
            assert "astrid://announcer/ok" in served.uris(who)  # both have a snapshot
        assert announce(served, "announcer", "bob") == {"bob": "ok"}  # served for alice, naming bob
        assert heard(updates) == [("alice", "astrid://announcer/ok")]  # alice's own, never bob's
        assert announce(served, "announcer", "own", "bob") == {"own": "ok"}
        assert heard(updates) == [("bob", "astrid://announcer/ok")]
    finally:
        updates.close()


def test_a_flood_of_announcements_is_rate_limited_and_said_once(serve, bundled, hostile_dir, caplog) -> None:
    served = serve(*bundled, hostile_dir("flooder", "announce", count=200))
    limits = served.broker.events.announcements.limits
    updates = served.runtime.updates()
    try:
        assert "astrid://flooder/ok" in served.uris()
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
            for _ in range(6):  # 200 a call (a call may publish 256 messages): 1,200 announcements
                assert announce(served, "flooder", "flood")["flood"] == {"ok": 200}
            got = heard(updates)
        elapsed = time.monotonic() - started
        allowed = limits.announcements_burst + limits.announcements_per_s * elapsed + 1
        assert 0 < len(got) <= allowed, (len(got), allowed)
        assert served.broker.events.announcements.limited >= 1200 - allowed
        floods = [r.getMessage() for r in caplog.records if "faster than" in r.getMessage()]
        assert len(floods) == 1 and "flooder" in floods[0]  # at most once a minute per capsule and principal
    finally:
        updates.close()
    assert_bundled_serve(served)  # and everyone else is still served


@pytest.mark.anyio
async def test_a_principal_cannot_subscribe_to_a_uri_it_cannot_read(serve, bundled, hostile_dir) -> None:
    served = await anyio.to_thread.run_sync(lambda: serve(*bundled, hostile_dir("memo", "memory"), principal="bob"))
    await anyio.to_thread.run_sync(lambda: served.uris("alice"))  # alice's instance lists seen/alice, for her only
    server = AstridMcpServer(served.runtime)
    with anyio.fail_after(60), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated
        async with Client(server.server, mode="legacy") as client:  # 2025-11-25: resources/subscribe
            listed = [r.uri for r in (await client.list_resources()).resources]
            assert "astrid://memo/seen/bob" in listed and "astrid://memo/seen/alice" not in listed
            await client.session.subscribe_resource("astrid://memo/seen/bob")  # the control
            for uri in ("astrid://memo/seen/alice", "astrid://nobody/serves/this"):
                with pytest.raises(MCPError) as caught:
                    await client.session.subscribe_resource(uri)
                assert caught.value.error.code == -32002, uri  # as a read would say: not found
            assert server.subscriptions.subscribed("bob") == {"astrid://memo/seen/bob": served.source_id("memo")}
            assert server.subscriptions.subscribed("alice") == {}
        async with Client(server.server, mode="2026-07-28") as client:  # subscriptions/listen
            with pytest.raises(MCPError) as caught:
                async with client.listen(resource_subscriptions=["astrid://memo/seen/alice"]):
                    pass
            assert caught.value.error.code == -32602  # 2026-07-28's "resource not found"
            assert server.subscriptions.subscribed("bob") == {}  # the first client's ended with it
