"""The broker on the real Bus, with host participants standing in for capsules."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time

import pytest

from astrid.host.bus import Principal, host_participant
from astrid.host.contract.frontdoor import CompletionReply, FailureCode, ReadResourceReply, ReadResourceRequest
from astrid.host.contract.topics import FRONT_DOOR_CLIENT, FRONT_DOOR_COMPLETE, FRONT_DOOR_READ, reply_topic
from astrid.host.limits import Limits
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, blob, capsules_loaded, resource, template, text


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
    assert reply.contents == []


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
    assert result.contents == []


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


# -- the confused-deputy gate ---------------------------------------------------------------


def _ask(bus, sender, principal, topic, request: dict) -> dict:
    """One raw front-door request from `sender`, and its reply."""
    with bus.subscribe(sender, reply_topic(request["req_id"]), principal_scope=principal) as sub:
        bus.publish(sender, topic, json.dumps(request), principal)
        message = sub.recv(5)
    assert message is not None
    return json.loads(message.payload)


def _raw_read(bus, sender, principal):
    return _ask(bus, sender, principal, FRONT_DOOR_READ, ReadResourceRequest(req_id="r1", uri="astrid://c/x").to_wire())


@pytest.mark.parametrize(
    ("topic", "payload", "served", "calls"),
    [
        (FRONT_DOOR_READ, {"req_id": "r1", "uri": "astrid://c/x"}, "contents", "reads"),
        (
            FRONT_DOOR_COMPLETE,
            {"req_id": "r1", "uri_template": "astrid://c/{x}", "argument_name": "x", "argument_value": ""},
            "values",
            "completes",
        ),
    ],
    ids=["read", "complete"],
)
def test_a_request_from_an_untrusted_participant_is_denied(bus, make_broker, topic, payload, served, calls):
    capsule = FakeCapsule(
        bus,
        "c",
        contents={"alice": {"astrid://c/x": [text("astrid://c/x", "secret-ish")]}},
        templates={"alice": [template("astrid://c/{x}")]},
        completion_values={"x": ["secret-ish"]},
    )
    make_broker(bus)
    stranger = FRONT_DOOR_CLIENT.participant()  # right ACLs, but not the trusted ingress

    reply = _ask(bus, stranger, ALICE, topic, payload)

    assert reply["error"]["code"] == "denied"
    assert reply.get(served, []) == []
    assert getattr(capsule, calls) == 0


@pytest.mark.parametrize("principal", [Principal.claimed("alice"), Principal.system()])
def test_read_without_a_verified_principal_is_denied(bus, make_broker, principal):
    capsule = FakeCapsule(bus, "c", contents={"alice": {"astrid://c/x": [text("astrid://c/x", "x")]}})
    broker, _ = make_broker(bus)
    trusted = FRONT_DOOR_CLIENT.participant()
    broker.front_doors.trust(trusted.source_id)

    reply = _raw_read(bus, trusted, principal)

    assert reply["error"]["code"] == "denied"
    assert capsule.reads == 0


def test_trusted_ingress_with_verified_principal_is_served(bus, make_broker):
    FakeCapsule(bus, "c", contents={"alice": {"astrid://c/x": [text("astrid://c/x", "x")]}})
    broker, _ = make_broker(bus)
    trusted = FRONT_DOOR_CLIENT.participant()
    broker.front_doors.trust(trusted.source_id)
    reply = _raw_read(bus, trusted, ALICE)
    assert reply["contents"][0]["text"] == "x"
    assert reply["kind"] == "resource.read" and reply["req_id"] == "r1"


@pytest.mark.parametrize(
    ("topic", "payload", "reply_model"),
    [
        (FRONT_DOOR_READ, {"req_id": "r2", "uri": 7}, ReadResourceReply),
        (FRONT_DOOR_COMPLETE, {"req_id": "r2", "argument_name": 3}, CompletionReply),
    ],
    ids=["read", "complete"],
)
def test_a_malformed_front_door_request_is_answered_invalid(bus, make_broker, topic, payload, reply_model):
    broker, _ = make_broker(bus)
    trusted = FRONT_DOOR_CLIENT.participant()
    broker.front_doors.trust(trusted.source_id)
    reply = reply_model.model_validate(_ask(bus, trusted, ALICE, topic, payload))
    assert reply.error is not None and reply.error.code is FailureCode.INVALID_REQUEST


def test_over_long_uri_is_an_invalid_request(bus, make_broker):
    _, client = make_broker(bus, Limits(uri_bytes=64))
    assert client(ALICE).read_resource("astrid://" + "x" * 100).error.code == "invalid_request"


def test_a_broker_failure_is_answered_at_once_not_left_to_time_out(bus, make_broker, monkeypatch):
    from astrid.host.errors import BrokerUnavailable

    broker, client = make_broker(bus, timeout_s=5)

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(broker, "snapshot", boom)
    monkeypatch.setattr(broker, "_read", boom)
    started = time.perf_counter()
    with pytest.raises(BrokerUnavailable, match="failed to list"):
        client(ALICE).list_resources()
    assert client(ALICE).read_resource("astrid://x").error.code == "internal"
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


def test_warm_lists_answer_each_request_with_its_own_req_id_and_follow_changes(bus, make_broker):
    """The list reply is cached per snapshot (JSON made once, req_id put in) and
    the front-door client reuses its last validation: neither may go stale."""
    capsule = FakeCapsule(bus, "notes", resources={"alice": [resource("astrid://notes/a")]})
    _, client = make_broker(bus)
    alice = client(ALICE)  # one client, as the MCP server holds one
    asker = host_participant(
        "asker", "asker-1", publish=["astrid.v1.request.mcp.*"], subscribe=["astrid.v1.response.*"]
    )

    def raw_list(req_id: str) -> dict:
        with bus.subscribe(asker, f"astrid.v1.response.{req_id}", principal_scope=ALICE) as replies:
            bus.publish(asker, "astrid.v1.request.mcp.resources.list", json.dumps({"req_id": req_id}), ALICE)
            return json.loads(replies.recv(5).payload)

    first, second = raw_list("first"), raw_list("second")
    assert (first["req_id"], second["req_id"]) == ("first", "second")
    assert first["resources"] == second["resources"] and capsule.describes == 1

    assert uris(alice.list_resources()) == ["astrid://notes/a"]
    assert uris(alice.list_resources()) == ["astrid://notes/a"]
    capsule.resources["alice"].append(resource("astrid://notes/a2"))
    capsules_loaded(bus, ALICE)
    assert uris(alice.list_resources()) == ["astrid://notes/a", "astrid://notes/a2"]
    assert raw_list("third")["req_id"] == "third"
    assert len(raw_list("fourth")["resources"]) == 2


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
