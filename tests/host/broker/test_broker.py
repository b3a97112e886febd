"""The broker on the real Bus, with host participants standing in for capsules."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time

import pytest

from astrid.host.broker import BrokerClient
from astrid.host.bus import Principal, host_participant
from astrid.host.contract.outcomes import FailureCode
from astrid.host.limits import Limits
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, blob, capsules_loaded, resource, text


def uris(resources) -> list[str]:
    return [r.uri for r in resources]


# -- describe ---------------------------------------------------------------------------


def test_no_capsule_at_all_is_an_empty_list_not_a_kept_snapshot(bus, make_broker):
    capsule = FakeCapsule(bus, "gone", resources={"alice": [resource("astrid://gone/1")]})
    broker, client = make_broker(bus)
    assert uris(client(ALICE).list_resources()) == ["astrid://gone/1"]

    capsule.unload()
    broker.invalidate(ALICE)
    assert client(ALICE).list_resources() == []


def test_describe_ends_when_every_capsule_finished_not_at_the_window(threaded_bus, make_broker):
    limits = Limits(describe_window_s=2.5)
    for i in range(3):
        FakeCapsule(threaded_bus, f"c{i}", resources={"alice": [resource(f"astrid://c{i}/x")]}, describe_delay=0.05)
    _, client = make_broker(threaded_bus, limits)

    started = time.perf_counter()
    listed = client(ALICE).list_resources()
    elapsed = time.perf_counter() - started

    assert len(listed) == 3
    # bounds are loose (a loaded CI machine); the point is "not the 2.5 s window"
    assert elapsed < 1.5, f"list took {elapsed:.3f} s: it should cost about the slowest capsule (50 ms)"


def test_describe_window_bounds_a_hanging_capsule(threaded_bus, make_broker):
    limits = Limits(describe_window_s=1.0)
    FakeCapsule(threaded_bus, "fast", resources={"alice": [resource("astrid://fast/x")]})
    FakeCapsule(threaded_bus, "slow", resources={"alice": [resource("astrid://slow/x")]}, describe_delay=5.0)
    _, client = make_broker(threaded_bus, limits)

    started = time.perf_counter()
    listed = client(ALICE).list_resources()
    elapsed = time.perf_counter() - started

    assert uris(listed) == ["astrid://fast/x"]  # best effort: slow reappears next time
    assert 0.95 < elapsed < 2.5  # the window, not the slow capsule's 5 s


# -- read ---------------------------------------------------------------------------------


def test_read_text_and_blob(bus, make_broker):
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    FakeCapsule(
        bus,
        "docs",
        contents={
            "alice": {
                "astrid://docs/readme": [text("astrid://docs/readme", "# hi", mime_type="text/markdown")],
                "astrid://docs/logo": [blob("astrid://docs/logo", png, mime_type="image/png")],
                "astrid://docs/book": [text("astrid://docs/book/1", "one"), text("astrid://docs/book/2", "two")],
            }
        },
    )
    _, client = make_broker(bus)

    readme = client(ALICE).read_resource("astrid://docs/readme")
    assert readme.error is None
    assert [c.to_wire() for c in readme.contents] == [
        {"type": "text", "uri": "astrid://docs/readme", "text": "# hi", "mime_type": "text/markdown"}
    ]
    logo = client(ALICE).read_resource("astrid://docs/logo")
    assert logo.contents[0].blob == png
    book = client(ALICE).read_resource("astrid://docs/book")
    assert [c.text for c in book.contents] == ["one", "two"]


def test_read_is_per_principal(bus, make_broker):
    FakeCapsule(
        bus,
        "notes",
        contents={
            "alice": {"astrid://notes/me": [text("astrid://notes/me", "alice's")]},
            "bob": {"astrid://notes/me": [text("astrid://notes/me", "bob's")]},
        },
    )
    _, client = make_broker(bus)
    assert client(ALICE).read_resource("astrid://notes/me").contents[0].text == "alice's"
    assert client(BOB).read_resource("astrid://notes/me").contents[0].text == "bob's"


def test_not_found_ends_when_every_capsule_finished(threaded_bus, make_broker):
    limits = Limits(read_window_s=2.5, describe_window_s=2.5)
    for i in range(3):
        FakeCapsule(threaded_bus, f"c{i}", resources={"alice": [resource(f"astrid://c{i}/x")]})
    broker, client = make_broker(threaded_bus, limits)
    client(ALICE).list_resources()

    started = time.perf_counter()
    reply = client(ALICE).read_resource("astrid://nobody/here")
    elapsed = time.perf_counter() - started

    assert reply.error is not None and reply.error.code == "not_found"
    assert elapsed < 1.5, f"not-found took {elapsed:.3f} s, should be far under the 2.5 s window"


def test_not_found_re_describes_once_for_an_unknown_uri(bus, make_broker):
    capsule = FakeCapsule(bus, "c", resources={"alice": [resource("astrid://c/x")]})
    _, client = make_broker(bus)
    client(ALICE).list_resources()
    assert capsule.describes == 1

    assert client(ALICE).read_resource("astrid://c/missing").error.code == "not_found"
    assert capsule.describes == 2  # one re-describe, then not found
    assert capsule.reads == 1  # the uri was still unknown: no pointless retry


class LateCapsule(FakeCapsule):
    """Serves its new resource only once it has listed it (e.g. just reloaded)."""

    def _on_read(self, message):
        if self.describes >= 2:
            self.contents = {"alice": {"astrid://c/new": [text("astrid://c/new", "fresh")]}}
        super()._on_read(message)


def test_a_miss_on_a_new_uri_retries_after_the_re_describe(bus, make_broker):
    capsule = LateCapsule(bus, "c", resources={"alice": []})
    _, client = make_broker(bus)
    client(ALICE).list_resources()
    capsule.resources["alice"].append(resource("astrid://c/new"))

    reply = client(ALICE).read_resource("astrid://c/new")

    assert reply.error is None and reply.contents[0].text == "fresh"
    assert capsule.describes == 2
    assert capsule.reads == 2


def test_read_timeout_when_a_capsule_hangs(threaded_bus, make_broker):
    limits = Limits(read_window_s=1.0, describe_window_s=1.0)
    release = threading.Event()
    FakeCapsule(threaded_bus, "hang", resources={"alice": [resource("astrid://hang/x")]}, hang=release)
    FakeCapsule(
        threaded_bus,
        "ok",
        resources={"alice": [resource("astrid://ok/x")]},
        contents={"alice": {"astrid://ok/x": [text("astrid://ok/x", "fine")]}},
    )
    _, client = make_broker(threaded_bus, limits)
    try:
        started = time.perf_counter()
        reply = client(ALICE).read_resource("astrid://hang/x")
        elapsed = time.perf_counter() - started
        assert reply.error is not None and reply.error.code == "timeout"
        assert 0.95 < elapsed < 2.5
        # a hanging capsule does not stop the listed owner of another uri from answering
        started = time.perf_counter()
        assert client(ALICE).read_resource("astrid://ok/x").contents[0].text == "fine"
        assert time.perf_counter() - started < 0.8  # not the 1 s window
    finally:
        release.set()


def test_listed_owner_that_finishes_without_answering_is_a_capsule_error(bus, make_broker):
    capsule = FakeCapsule(bus, "c", resources={"alice": [resource("astrid://c/x")]})
    _, client = make_broker(bus)
    client(ALICE).list_resources()
    reply = client(ALICE).read_resource("astrid://c/x")  # listed, but contents has nothing
    assert reply.error.code == "capsule_error"
    assert capsule.describes == 1


def test_read_prefers_the_listed_owner_on_a_collision(threaded_bus, make_broker):
    for name, source, delay in (("capa", "src-a", 0.1), ("capb", "src-b", 0.0)):
        FakeCapsule(
            threaded_bus,
            name,
            source_id=source,
            resources={"alice": [resource("astrid://shared/x")]},
            contents={"alice": {"astrid://shared/x": [text("astrid://shared/x", f"from {source}")]}},
            read_delay=delay,
        )
    _, client = make_broker(threaded_bus)
    client(ALICE).list_resources()
    for _ in range(3):
        assert client(ALICE).read_resource("astrid://shared/x").contents[0].text == "from src-a"


def test_capsule_error_reply(bus, make_broker):
    FakeCapsule(bus, "c", contents={"alice": {"astrid://c/x": "disk on fire"}})
    _, client = make_broker(bus)
    reply = client(ALICE).read_resource("astrid://c/x")
    assert reply.error.code == "capsule_error"
    assert reply.error.message == "disk on fire"
    assert not reply.contents


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (lambda r: json.dumps({"uri": r["uri"], "contents": [text(r["uri"], "x")] * 5}), "over_limit"),
        (lambda r: json.dumps({"uri": r["uri"], "contents": [text(r["uri"], "x" * 600)]}), "over_limit"),
        (
            lambda r: json.dumps(
                {"uri": r["uri"], "contents": [blob(r["uri"], base64.b64encode(b"y" * 600).decode())]}
            ),
            "over_limit",
        ),
        (
            lambda r: json.dumps(
                {
                    "uri": r["uri"],
                    "contents": [text(r["uri"], "x" * 200), blob(r["uri"], base64.b64encode(b"y" * 400).decode())],
                }
            ),
            "over_limit",
        ),
        (lambda r: json.dumps({"uri": r["uri"], "contents": []}), "capsule_error"),
        (lambda r: json.dumps({"uri": "astrid://other", "contents": [text(r["uri"], "x")]}), "capsule_error"),
        (
            lambda r: json.dumps({"uri": r["uri"], "contents": [{"type": "blob", "uri": r["uri"], "blob": "%%%"}]}),
            "capsule_error",
        ),
        (
            lambda r: json.dumps({"uri": r["uri"], "contents": [{"type": "text", "uri": r["uri"], "text": 5}]}),
            "capsule_error",
        ),
        (lambda r: json.dumps("just a string"), "capsule_error"),
    ],
)
def test_read_replies_fail_closed(bus, make_broker, reply, code):
    limits = Limits(chunks_per_read=4, bytes_per_read=512)
    FakeCapsule(bus, "c", raw_read=reply)
    _, client = make_broker(bus, limits)
    result = client(ALICE).read_resource("astrid://c/x")
    assert result.error is not None and result.error.code == code
    assert not result.contents


def test_a_bad_chunk_meta_loses_the_field_not_the_read(bus, make_broker):
    FakeCapsule(
        bus,
        "c",
        raw_read=lambda r: json.dumps(
            {
                "uri": r["uri"],
                "meta": "7",
                "contents": [text(r["uri"], "x", meta="[1]"), text(r["uri"], "y", meta='{"a": 1}')],
            }
        ),
    )
    _, client = make_broker(bus)
    reply = client(ALICE).read_resource("astrid://c/x")
    assert reply.error is None
    assert [(c.text, c.meta) for c in reply.contents] == [("x", None), ("y", '{"a": 1}')]


def test_read_at_the_byte_limit_is_served(bus, make_broker):
    limits = Limits(bytes_per_read=512)
    FakeCapsule(bus, "c", raw_read=lambda r: json.dumps({"uri": r["uri"], "contents": [text(r["uri"], "é" * 256)]}))
    _, client = make_broker(bus, limits)
    assert client(ALICE).read_resource("astrid://c/x").contents[0].text == "é" * 256


# -- the one way in: a client bound to a verified principal ----------------------------------


def test_no_front_door_answers_on_the_bus(bus, make_broker):
    """The bus front doors are gone: a request shaped like one reaches nobody, whoever sends it."""
    capsule = FakeCapsule(bus, "c", contents={"alice": {"astrid://c/x": [text("astrid://c/x", "secret-ish")]}})
    make_broker(bus)
    asker = host_participant("asker", "asker-src", publish=["astrid.v1.request.*"], subscribe=["astrid.v1.response.*"])
    for topic in ("astrid.v1.request.mcp.resource.read", "astrid.v1.request.mcp.resources.list"):
        delivery = bus.publish(asker, topic, json.dumps({"req_id": "r1", "uri": "astrid://c/x"}), ALICE)
        assert delivery.wait(5) and delivery.receivers == 0
    assert capsule.reads == 0


def test_a_client_acts_for_a_verified_principal_only(bus, make_broker):
    broker, _ = make_broker(bus)
    for principal in (Principal.claimed("alice"), Principal.system()):
        with pytest.raises(ValueError, match="verified principal only"):
            BrokerClient(broker, principal)


@pytest.mark.parametrize("principal", [Principal.claimed("alice"), Principal.system()])
def test_read_without_a_verified_principal_is_denied(bus, make_broker, principal):
    capsule = FakeCapsule(bus, "c", contents={"alice": {"astrid://c/x": [text("astrid://c/x", "x")]}})
    _, client = make_broker(bus)
    reply = client(principal).read_resource("astrid://c/x")
    assert reply.error is not None and reply.error.code is FailureCode.DENIED
    assert capsule.reads == 0


def test_over_long_uri_is_an_invalid_request(bus, make_broker):
    _, client = make_broker(bus, Limits(uri_bytes=64))
    assert client(ALICE).read_resource("astrid://" + "x" * 100).error.code == "invalid_request"


def test_a_broker_failure_is_answered_at_once_not_left_to_time_out(bus, make_broker, monkeypatch):
    from astrid.host.errors import BrokerUnavailable

    broker, _ = make_broker(bus)

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(broker.listings, "snapshot", boom)
    client = BrokerClient(broker, ALICE)
    started = time.perf_counter()
    with pytest.raises(BrokerUnavailable, match="failed to list"):
        client.list_resources()
    assert client.read("astrid://x").result().error.code == "internal"
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("old_build", ["unloaded", "silent"])
def test_a_read_after_the_owner_was_rebuilt_is_served_by_the_new_build(bus, make_broker, old_build):
    """A capsule replaced under a read (new source-id, same uri) before the capsule-set change was
    announced: the broker re-describes and reads from the new build, not from whoever answered.
    The old build is either
    - unloaded: not among the receivers; or
    - silent: still among them (over NATS, its host's heartbeat is not in yet) but lists and serves
      nothing, so it finishes without answering while the new build's reply is refused."""
    uri = "astrid://c/x"
    old = FakeCapsule(
        bus,
        "c",
        source_id="src-old",
        resources={"alice": [resource(uri)]},
        contents={"alice": {uri: [text(uri, "old")]}},
    )
    _, client = make_broker(bus)
    client(ALICE).list_resources()
    if old_build == "unloaded":
        old.unload()
    else:
        old.resources, old.contents = {}, {}
    new = FakeCapsule(
        bus,
        "c",
        source_id="src-new",
        resources={"alice": [resource(uri)]},
        contents={"alice": {uri: [text(uri, "new")]}},
    )

    reply = client(ALICE).read_resource(uri)

    assert reply.error is None and reply.contents[0].text == "new"
    assert new.describes == 1 and new.reads == 2  # the refused first answer, then the routed one


def test_a_silent_owner_stays_a_capsule_error_when_an_impostor_answers_and_costs_one_describe(bus, make_broker):
    uri = "astrid://c/x"
    owner = FakeCapsule(bus, "c", source_id="src-b", resources={"alice": [resource(uri)]})  # lists, never serves
    impostor = FakeCapsule(
        bus,
        "imp",
        source_id="src-a",
        raw_read=lambda r: json.dumps({"uri": r["uri"], "contents": [text(r["uri"], "evil")]}),
    )
    _, client = make_broker(bus)
    client(ALICE).list_resources()

    reply = client(ALICE).read_resource(uri)

    assert reply.error.code == "capsule_error" and not reply.contents
    assert owner.describes == 2 and impostor.reads == 2  # one re-describe and one more read, never a loop


def test_a_read_after_the_owner_was_removed_is_not_found(bus, make_broker):
    uri = "astrid://c/x"
    old = FakeCapsule(bus, "c", resources={"alice": [resource(uri)]}, contents={"alice": {uri: [text(uri, "old")]}})
    other = FakeCapsule(bus, "d", resources={"alice": [resource("astrid://d/y")]})
    _, client = make_broker(bus)
    client(ALICE).list_resources()
    old.unload()

    reply = client(ALICE).read_resource(uri)

    assert reply.error.code == "not_found"
    assert other.describes == 2 and old.reads == 0


def test_warm_lists_follow_changes(bus, make_broker):
    """A warm list is the snapshot's; a capsule-set change is seen by the next list."""
    capsule = FakeCapsule(bus, "notes", resources={"alice": [resource("astrid://notes/a")]})
    _, client = make_broker(bus)
    alice = client(ALICE)  # one client, as the MCP server holds one
    assert uris(alice.list_resources()) == ["astrid://notes/a"]
    assert uris(alice.list_resources()) == ["astrid://notes/a"]
    capsule.resources["alice"].append(resource("astrid://notes/a2"))
    capsules_loaded(bus, ALICE)
    assert uris(alice.list_resources()) == ["astrid://notes/a", "astrid://notes/a2"]
    assert capsule.describes == 2


def test_an_unlisted_uri_two_capsules_answer_goes_to_the_first_source_id_not_the_fastest(
    threaded_bus, make_broker, caplog
):
    uri = "astrid://shared/member-7"  # a family member nobody lists
    for source, delay in (("src-a", 0.2), ("src-b", 0.0)):
        FakeCapsule(
            threaded_bus,
            source,
            source_id=source,
            contents={"alice": {uri: [text(uri, f"from {source}")]}},
            read_delay=delay,
        )
    _, client = make_broker(threaded_bus)
    client(ALICE).list_resources()
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        for _ in range(3):
            assert client(ALICE).read_resource(uri).contents[0].text == "from src-a"
    assert "winner=src-a loser=src-b" in caplog.text
