"""Hostile capsules against the real kernel + broker (`Runtime`), next to the bundled ones.

Each test shows that one attack fails *and* that nothing else is harmed: the
bundled docs and introspect keep answering, for the right principal, and other
principals are unaffected.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from astrid.host.bus import Principal, host_participant
from astrid.host.limits import Limits
from astrid.host.mcp.reshape import to_resource
from tests.security.hostile import HOSTILE, hostile_source_id, make_hostile, name_sorting
from tests.security.servers import assert_bundled_serve
from tests.support.capsules import BUNDLED_URIS

pytestmark = pytest.mark.slow

ALICE = Principal.verified("alice")
BOB = Principal.verified("bob")
# Tight windows for the runaway tests, so they cost well under a second each.
FAST = Limits(call_wall_time_s=0.5, read_window_s=1.0, describe_window_s=1.0)


def report(served, base: str, principal: str | None = None) -> dict:
    return json.loads(served.text(f"astrid://{base}/report", principal))


def error_of(served, uri: str, principal: str | None = None):
    reply = served.read(uri, principal)
    assert reply.error is not None and not reply.contents, reply
    return reply.error


# -- who is asking ---------------------------------------------------------------------------


def test_the_principal_rides_the_envelope_never_the_body(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("body", "body-principal"))
    # describe: the body is exactly `{}`
    [entry] = [r for r in served.runtime.client.list_resources() if r.uri == "astrid://body/body"]
    assert json.loads(entry.description) == {}
    # read: the body is exactly {uri, correlation_id}; the caller comes from get-caller
    seen = json.loads(served.text("astrid://body/body"))
    assert set(seen["body"]) == {"uri", "correlation_id"} and seen["caller"] == "alice"
    assert json.loads(served.text("astrid://body/body", "bob"))["caller"] == "bob"

    # A request that smuggles a principal in its body has nowhere to go: the broker is asked by calls
    # only (a client bound to one verified principal), never by a bus message anyone could shape.
    bus = served.kernel.bus
    smuggler = host_participant("smuggler", "smuggler-src", publish=["astrid.v1.request.*"], subscribe=[])
    smuggled = json.dumps({"req_id": uuid.uuid4().hex, "uri": "astrid://body/body", "principal": "bob", "as": "bob"})
    delivery = bus.publish(smuggler, "astrid.v1.request.mcp.resource.read", smuggled, ALICE)
    assert delivery.wait(10) and delivery.receivers == 0
    assert_bundled_serve(served)


def test_each_principal_gets_its_own_instance_so_state_never_crosses(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("memory", "memory"))
    for name in ("alice", "bob", "alice", "carol", "bob"):
        uris = [u for u in served.uris(name) if u.startswith("astrid://memory/seen/")]
        assert uris == [f"astrid://memory/seen/{name}"], (name, uris)
        assert json.loads(served.text(f"astrid://memory/seen/{name}", name)) == [name]
    sid = served.source_id("memory")
    assert served.kernel.sandboxes.live_instances(sid) == 3  # alice, bob, carol
    assert_bundled_serve(served, "alice")
    assert_bundled_serve(served, "bob")


def test_everything_a_capsule_publishes_is_attributed_to_the_principal_it_serves(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("twice", "twice"), hostile_dir("flood", "flood"))
    kernel = served.kernel
    spy = kernel.attach_host("spy", subscribe=["resource.v1.*"])
    hostile = {served.source_id("twice"), served.source_id("flood")}
    with kernel.bus.subscribe(spy, "resource.v1.*") as everything:
        served.uris("bob")
        served.text("astrid://twice/first", "bob")
        messages = everything.poll(10_000)
    from_hostile = [m for m in messages if m.source_id in hostile]
    assert len(from_hostile) > 256
    assert {m.principal for m in from_hostile} == {BOB}


def test_a_capsule_sees_only_its_callers_messages(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("snoop", "snoop", ms=1200))
    served.uris("alice"), served.uris("bob")  # warm both snapshots
    result: dict = {}

    def snoop() -> None:
        result["seen"] = json.loads(served.text("astrid://snoop/snoop", "alice"))

    def listening() -> bool:
        return any(
            s.owner.name == "snoop" and s.pattern == "resource.v1.*" for s in list(served.kernel.bus._subscriptions)
        )

    thread = threading.Thread(target=snoop)
    thread.start()
    deadline = time.monotonic() + 10
    while not listening() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.002)  # bounded wait for the snooper's subscription
    alice_reads = 0
    while thread.is_alive() and time.monotonic() < deadline:
        # bob's traffic never reaches alice's instance of the snooper ...
        assert served.text("astrid://docs/index", "bob").startswith("# ")
        if alice_reads < 3:  # ... while alice's own traffic does (kept small: it queues on her busy instance)
            assert served.text("astrid://docs/resources", "alice")
            alice_reads += 1
    thread.join(10)
    assert not thread.is_alive()
    seen = result["seen"]
    assert seen, "the snooper saw nothing at all; the test proves nothing"
    assert {(kind, name) for _, kind, name, _ in seen} == {("verified", "alice")}
    assert not any("bob" in payload for *_, payload in seen)


# -- the bus: reserved topics, other capsules' topics, floods, junk ------------------------------


def test_the_host_reserved_topics_hold_whatever_the_manifest_grants(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("reserved", "reserved", target="astrid://docs/index"))
    kernel = served.kernel
    spy = kernel.attach_host("spy", subscribe=["astrid.*"])
    with kernel.bus.subscribe(spy, "astrid.*") as host_topics:
        served.uris()
        attempts = report(served, "reserved")
        leaked = [m for m in host_topics.poll(10_000) if m.source_id == served.source_id("reserved")]
    for phase in ("describe", "read"):
        assert set(attempts[phase].values()) == {"CapabilityDenied"}, attempts[phase]
        assert len(attempts[phase]) == 7
    assert leaked == []
    assert_bundled_serve(served)


def test_a_capsule_cannot_watch_the_front_door_requests(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("watcher", "watcher"))
    served.uris()  # the watcher subscribes while it handles describe
    assert served.text("astrid://docs/index").startswith("# ")
    watched = json.loads(served.text("astrid://watcher/watched"))
    assert not any("astrid://docs/index" in payload for payload in watched["seen"]), watched


def test_a_reply_on_another_capsules_describe_topic_is_still_attributed_to_its_sender(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("spoof", "spoof-suffix", target="docs"))
    uris = served.uris()
    assert "astrid://spoof/spoofed" in uris
    snapshot = served.broker.shared.cache.get(ALICE)
    assert snapshot.owner_of("astrid://spoof/spoofed") == served.source_id("spoof")
    # docs' own reply on the same topic still counts, and is still docs'
    assert snapshot.owner_of("astrid://docs/index") == served.source_id("docs")
    assert_bundled_serve(served)


def test_a_second_reply_per_round_is_dropped(serve, bundled, hostile_dir, caplog):
    served = serve(*bundled, hostile_dir("twice", "twice"))
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        uris = served.uris()
        text = served.text("astrid://twice/first")
    assert "astrid://twice/first" in uris and "astrid://twice/second" not in uris
    assert text == "one"
    assert report(served, "twice") == {"second": "ok", "second-read": "ok"}  # the bus let both through ...
    logged = caplog.text
    assert "second describe reply" in logged  # ... the broker did not (a second read reply comes after the read ended)
    assert_bundled_serve(served)


def test_a_publish_flood_is_cut_at_the_per_call_budget(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("flood", "flood"))
    started = time.perf_counter()
    uris = served.uris()
    elapsed = time.perf_counter() - started
    assert {"astrid://flood/ok", "astrid://flood/report"} <= set(uris)
    assert not [u for u in uris if u.startswith("astrid://flood/flood/")]  # the 255 extra replies were dropped
    from astrid.host.kernel.abi import PUBLISHES_PER_CALL

    assert report(served, "flood") == {"describe": {"ok": PUBLISHES_PER_CALL, "RateLimited": 5000 - PUBLISHES_PER_CALL}}
    assert elapsed < served.runtime.limits.describe_window_s + 1.0
    assert_bundled_serve(served)
    assert_bundled_serve(served, "bob")


def test_the_bytes_a_capsule_publishes_per_call_are_bounded(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("bigflood", "bigflood"))
    kernel = served.kernel
    spy = kernel.attach_host("spy", subscribe=["resource.v1.*"])
    with kernel.bus.subscribe(spy, "resource.v1.response.*") as replies:
        served.uris()
        flooded = sum(len(m.payload) for m in replies.poll(10_000) if m.source_id == served.source_id("bigflood"))
    assert_bundled_serve(served)
    assert flooded <= 16 << 20, f"one call published {flooded >> 20} MiB"


def test_oversized_non_json_and_too_deep_payloads_are_refused_by_the_bus(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("garbage", "garbage"), hostile_dir("deep", "deep"))
    uris = served.uris()
    assert {"astrid://garbage/ok", "astrid://garbage/big"} <= set(uris)
    assert report(served, "garbage")["describe"] == {
        "oversized": "InvalidInput",
        "nonjson": "InvalidInput",
        "deep": "InvalidInput",
        "title5m": "InvalidInput",
    }
    # a read reply over the 1 MiB bus cap never leaves the capsule: the read fails, it is not truncated
    error = error_of(served, "astrid://garbage/big")
    assert error.code == "capsule_error"
    assert report(served, "garbage")["big"] == "InvalidInput"
    # a reply nested 900 deep is parsed and dropped as malformed, nothing else
    assert not [u for u in uris if u.startswith("astrid://deep/")]
    assert served.text("astrid://deep/ok") == "hostile ok for alice"
    assert_bundled_serve(served)


def test_malformed_definitions_are_dropped_one_by_one(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("bad", "malformed"))
    listed = {r.uri: r for r in served.runtime.client.list_resources()}
    bad = {u for u in listed if u.startswith("astrid://bad/")}
    assert bad == {
        "astrid://bad/" + key
        for key in ("ok", "meta-list", "meta-nonjson", "icons", "priority", "badtype", "badb64", "badmeta",
                    "wronguri", "errcontents", "toomany", "toobig")
    }  # fmt: skip  # dropped: a 64 KiB title, a 3 KB uri, name 5, size -1, audience "robot", "not an object"
    assert listed["astrid://bad/meta-list"].meta is None and listed["astrid://bad/meta-nonjson"].meta is None
    assert len(listed["astrid://bad/icons"].icons) == 8  # of 10,000
    mcp = to_resource(listed["astrid://bad/priority"], served.runtime.limits)
    assert mcp.annotations.priority == 1.0 and mcp.annotations.last_modified is None
    assert_bundled_serve(served)


@pytest.mark.parametrize(
    ("key", "code", "cause"),
    [
        ("badtype", "capsule_error", "video"),
        ("badb64", "capsule_error", "base64"),
        ("wronguri", "capsule_error", "another uri"),
        ("errcontents", "capsule_error", "contents must be empty"),
        ("toomany", "over_limit", "65 chunks"),
        ("toobig", "over_limit", "bytes per read"),
    ],
)
def test_malformed_read_replies_fail_closed(serve, bundled, hostile_dir, key, code, cause):
    served = serve(*bundled, hostile_dir("bad", "malformed"))
    served.uris()
    error = error_of(served, f"astrid://bad/{key}")
    assert error.code == code and cause in error.message
    # a read-level meta that is not an object is dropped; the contents are served
    assert served.text("astrid://bad/badmeta") == "x"
    assert served.text("astrid://bad/ok") == "hostile ok for alice"
    assert_bundled_serve(served)


# -- squatting and forged replies -------------------------------------------------------------------


@pytest.mark.parametrize("order", ["squatter-first", "owner-first"])
def test_a_squatted_uri_goes_to_the_first_source_id_with_an_audit_line(
    serve, bundled, hostile_wasm, tmp_path, caplog, order
):
    docs_sid = serve(*bundled).source_id("docs")
    if order == "squatter-first":
        name = name_sorting(hostile_wasm, "squat", before=docs_sid)
    else:
        name = name_sorting(hostile_wasm, "squat", after=docs_sid)
    squatter = make_hostile(tmp_path / "caps", name, "squat", hostile_wasm, target="astrid://docs/index")
    served = serve(*bundled, squatter)
    squat_sid = hostile_source_id(name, hostile_wasm)
    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        listed = {r.uri: r for r in served.runtime.client.list_resources()}
    winner = min(docs_sid, squat_sid)
    assert served.broker.shared.cache.get(ALICE).owner_of("astrid://docs/index") == winner
    audit = [r.getMessage() for r in caplog.records if r.name == "astrid.host.broker.audit"]
    assert len(audit) == 1
    line = audit[0]
    assert "astrid://docs/index" in line and "alice" in line
    named = {docs_sid: "docs", squat_sid: name}  # by name; the source-ids only with -v
    assert f"winner={named[winner]} loser={named[max(docs_sid, squat_sid)]} " in line
    assert docs_sid not in line and squat_sid not in line
    text = served.text("astrid://docs/index")
    if order == "squatter-first":
        # Operator trust: an installed capsule that sorts first owns the URI (documented).
        assert listed["astrid://docs/index"].title.startswith("SQUATTED") and text == "SQUATTED content"
    else:
        assert listed["astrid://docs/index"].title != "SQUATTED" and text.startswith("# ")
    # the rest of docs is untouched either way
    assert served.text("astrid://docs/resources").startswith("# ")
    assert json.loads(served.text("astrid://whoami"))["principal"] == "alice"


def test_a_forged_read_reply_loses_to_the_listed_owner(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("forger", "forge"), hostile_dir("victim", "slow", ms=300))
    served.uris()  # the snapshot knows who owns what
    assert served.text("astrid://victim/slow") == "slow but here"  # forged reply came 300 ms earlier
    for uri in ("astrid://docs/index", "astrid://docs/tour", "astrid://whoami"):
        assert "FORGED" not in served.text(uri)
    assert_bundled_serve(served)


def test_a_forged_read_reply_loses_even_on_a_principals_first_read(serve, bundled, hostile_dir):
    served = serve(*bundled, hostile_dir("forger", "forge"), hostile_dir("victim", "slow", ms=300))
    # each of these principals reads before it ever listed
    texts = {name: served.text("astrid://victim/slow", name) for name in ("carol", "dave")}
    assert texts == {"carol": "slow but here", "dave": "slow but here"}


def test_a_forged_read_reply_is_not_served_when_the_owner_misses_the_window(serve, bundled, hostile_dir):
    served = serve(
        *bundled,
        hostile_dir("forger", "forge"),
        hostile_dir("victim", "slow", ms=900),
        limits=Limits(read_window_s=0.5),
    )
    served.uris()
    reply = served.read("astrid://victim/slow")
    assert reply.error is not None and reply.error.code == "timeout", reply


def test_a_forged_read_reply_is_not_served_when_the_owner_finishes_without_answering(serve, bundled, hostile_dir):
    """The owner is stopped at its time limit while the forger answered at once: the broker takes the
    capsule set for moved on and re-describes once (a rebuild heard of late), and still never serves
    the forgery: the same owner is asked again, and its failure is the read's."""
    served = serve(*bundled, hostile_dir("forger", "forge"), hostile_dir("victim", "spin"), limits=FAST)
    served.uris()
    reply = served.read("astrid://victim/spin")
    assert reply.error is not None and reply.error.code == "capsule_error" and not reply.contents, reply
    assert "FORGED" not in str(reply)


# -- runaway guests ---------------------------------------------------------------------------------


def test_spin_alloc_and_trap_are_stopped_and_the_rest_keeps_serving(serve, bundled, hostile_dir):
    served = serve(
        *bundled, hostile_dir("spin", "spin"), hostile_dir("alloc", "alloc"), hostile_dir("trap", "trap"), limits=FAST
    )
    process = psutil.Process()
    uris = set(served.uris())
    assert {"astrid://spin/spin", "astrid://alloc/alloc"} <= uris and uris >= BUNDLED_URIS
    assert not [u for u in uris if u.startswith("astrid://trap/")]  # it trapped in describe
    rss_before = process.memory_info().rss
    for _ in range(3):
        for uri in ("astrid://spin/spin", "astrid://alloc/alloc"):
            started = time.perf_counter()
            error = error_of(served, uri)
            elapsed = time.perf_counter() - started
            assert error.code in ("timeout", "capsule_error"), error
            assert elapsed < 2 * FAST.read_window_s + FAST.describe_window_s + 1.0, (uri, elapsed)
        assert_bundled_serve(served)
        assert_bundled_serve(served, "bob")
    sandboxes = served.kernel.sandboxes
    assert sandboxes.health("spin").timeouts >= 1
    assert sandboxes.health("alloc").failures >= 1 and "unreachable" in (sandboxes.health("alloc").last_error or "")
    assert sandboxes.health("trap").quarantined_until > time.monotonic()  # trapping on every call: benched
    # a trapped instance is replaced: the same capsules still serve their honest URIs
    assert served.text("astrid://alloc/ok") == "hostile ok for alice"
    # the 64 MiB store limit holds: three rounds of unbounded allocation cost far less than unbounded
    growth = process.memory_info().rss - rss_before
    assert growth < 256 << 20, f"RSS grew {growth >> 20} MiB"


@pytest.mark.parametrize("mode", ["spin-describe", "alloc-describe", "trap"])
def test_a_capsule_that_dies_in_describe_only_costs_itself(serve, bundled, hostile_dir, mode):
    served = serve(*bundled, hostile_dir("dies", mode), limits=FAST)
    for name in ("alice", "bob"):
        started = time.perf_counter()
        uris = set(served.uris(name))
        assert time.perf_counter() - started < FAST.describe_window_s + 0.5
        assert uris >= BUNDLED_URIS and not [u for u in uris if u.startswith("astrid://dies/")]
        assert_bundled_serve(served, name)
    assert served.kernel.sandboxes.health("dies").failures >= 2


def test_a_capsule_that_traps_while_loading_is_benched(serve, bundled, trap_on_load_wasm, tmp_path):
    folder = tmp_path / "caps" / "boom"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(
        (HOSTILE / "Capsule.toml").read_text().replace('"hostile"', '"boom"').replace("hostile.wasm", "boom.wasm")
    )
    (folder / "boom.wasm").write_bytes(trap_on_load_wasm.read_bytes())
    served = serve(*bundled, folder)
    for _ in range(3):
        assert_bundled_serve(served)
        assert_bundled_serve(served, "bob")
    health = served.kernel.sandboxes.health("boom")
    assert health.failures >= 5 and "unreachable" in health.last_error
    assert health.quarantined_until > time.monotonic()
    assert served.kernel.sandboxes.live_instances(served.source_id("boom")) == 0


def test_files_that_are_not_capsule_components_are_refused_at_load(serve, bundled, tmp_path, hostile_wasm):
    caps = tmp_path / "caps"
    junk = make_hostile(caps, "junk", "honest", hostile_wasm)
    (junk / "hostile.wasm").write_bytes(b"\0asm\x01\0\0\0" + b"\xff" * 4096)
    core = make_hostile(caps, "core", "honest", hostile_wasm)
    (core / "hostile.wasm").write_bytes(b"\0asm\x01\0\0\0")  # an empty core module, not a component
    missing = make_hostile(caps, "missing", "honest", hostile_wasm)
    (missing / "hostile.wasm").unlink()
    honest = make_hostile(caps, "honest", "honest", hostile_wasm)
    served = serve(*bundled, junk, core, missing, honest, expect_ok=False)
    failed = {Path(f.folder).name: f.error for f in served.runtime.status.failures}
    assert set(failed) == {"junk", "core", "missing"}
    assert all(name in failed[name] for name in failed)
    assert served.text("astrid://honest/ok") == "hostile ok for alice"
    assert_bundled_serve(served)


@pytest.mark.parametrize(("ms", "served_in_time"), [(400, True), (1600, False)])
def test_a_slow_capsule_just_inside_or_outside_the_read_window(serve, bundled, hostile_dir, ms, served_in_time):
    window = 1.0
    served = serve(*bundled, hostile_dir("slow", "slow", ms=ms), limits=Limits(read_window_s=window))
    served.uris()
    for _ in range(2):  # the second read must not pick up the first one's late reply
        started = time.perf_counter()
        reply = served.read("astrid://slow/slow")
        elapsed = time.perf_counter() - started
        if served_in_time:
            assert reply.error is None and reply.contents[0].text == "slow but here"
            # The capsule waits on the host's whole-millisecond wall clock: it can answer up to 1 ms early
            # by truncation, and a little more if the clock is being slewed.
            assert (ms - 2) / 1000 <= elapsed < window
        else:
            assert reply.error is not None and reply.error.code == "timeout" and not reply.contents
            assert window <= elapsed < window + 1.0
        assert_bundled_serve(served)
