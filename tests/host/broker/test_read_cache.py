"""Declared freshness (docs/contract/resources.md §5.7): the broker keeps reads a capsule declared fresh.

Nothing here measures time: expiry is driven by a fake clock.
"""

from __future__ import annotations

import json

import anyio
import mcp.types as types
import pytest

from astrid.host.broker.read_cache import ReadCache, split_freshness
from astrid.host.bus import Principal, host_participant
from astrid.host.contract.outcomes import FailureCode, ReadOutcome
from astrid.host.contract.resource import ResourceDefinition, TextChunk
from astrid.host.contract.topics import CAPSULES_LOADED_TOPIC
from tests.host.broker.asker import Asker
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, resource, template, text
from tests.host.mcp.test_server import serving

FRESH = "astrid://notes/fresh"
PLAIN = "astrid://notes/plain"
BROKEN = "astrid://notes/broken"


def fresh_meta(max_age_s: float = 60, **user: object) -> str:
    return json.dumps({**user, "astrid": {"max_age_s": max_age_s}})


def notes(bus, **extra) -> FakeCapsule:
    listed = [
        resource(FRESH, meta=fresh_meta(60, **{"com.example/rev": 3})),
        resource(PLAIN),
        resource(BROKEN, meta=fresh_meta(60)),
    ]
    return FakeCapsule(
        bus,
        "notes",
        resources={"alice": list(listed), "bob": list(listed)},
        contents={
            "alice": {FRESH: [text(FRESH, "alice v1")], PLAIN: [text(PLAIN, "plain")], BROKEN: "the disk is on fire"},
            "bob": {FRESH: [text(FRESH, "bob v1")]},
        },
        **extra,
    )


def body(outcome: ReadOutcome) -> str:
    assert outcome.error is None, outcome.error
    [chunk] = outcome.contents
    assert isinstance(chunk, TextChunk)
    return chunk.text


# -- the broker's read path ------------------------------------------------------------------


def test_a_declared_fresh_read_is_served_from_the_cache(bus, make_broker):
    capsule = notes(bus)
    broker, _ = make_broker(bus)
    first = Asker(broker, ALICE).read_resource(FRESH)
    capsule.contents["alice"][FRESH] = [text(FRESH, "alice v2")]
    second = Asker(broker, ALICE).read_resource(FRESH)
    assert body(first) == body(second) == "alice v1"
    assert capsule.read_uris == [FRESH]  # the capsule was asked once
    assert first.max_age_s == 60
    assert second.source_id == capsule.source_id and 0 < (second.max_age_s or 0) <= 60


def test_a_kept_read_is_settled_at_once_and_only_for_its_principal(bus, make_broker):
    # A read the cache can answer is settled when it starts, on the MCP server's event loop:
    # no capsule is asked, and it is exactly what the read waited for would serve.
    capsule = notes(bus)
    broker, _ = make_broker(bus)

    def kept(principal: Principal) -> ReadOutcome | None:
        read = broker.reads.start(principal, FRESH, failed=lambda exc: None, done=lambda outcome: None)
        outcome = read.settled() if read.wait_s() is None else None
        read.close()
        return outcome

    assert kept(ALICE) is None  # nothing kept yet (and no snapshot: the round is left to a thread)
    assert capsule.read_uris == []
    Asker(broker, ALICE).read_resource(FRESH)
    Asker(broker, ALICE).read_resource(PLAIN)
    hit = kept(ALICE)
    assert hit is not None and body(hit) == "alice v1" and hit.source_id == capsule.source_id
    assert kept(BOB) is None  # alice's copy is never bob's
    denied = kept(Principal.claimed("alice"))
    assert denied is not None and denied.error is not None and denied.error.code is FailureCode.DENIED
    assert capsule.read_uris == [FRESH, PLAIN]
    kernel = host_participant("kernel", "kernel-1", publish=[CAPSULES_LOADED_TOPIC])
    bus.publish(kernel, CAPSULES_LOADED_TOPIC, json.dumps({"status": "ready", "capsules": []}), ALICE).wait(5)
    assert body(Asker(broker, ALICE).read_resource(FRESH)) == "alice v1"
    assert capsule.read_uris == [FRESH, PLAIN, FRESH]  # the capsule set moved: the capsule is asked again


def test_an_undeclared_read_is_never_cached(bus, make_broker):
    capsule = notes(bus)
    broker, _ = make_broker(bus)
    assert body(Asker(broker, ALICE).read_resource(PLAIN)) == "plain"
    capsule.contents["alice"][PLAIN] = [text(PLAIN, "plain v2")]
    second = Asker(broker, ALICE).read_resource(PLAIN)
    assert body(second) == "plain v2"
    assert capsule.read_uris == [PLAIN, PLAIN]
    assert second.max_age_s is None
    assert len(broker.shared.reads) == 0


def test_an_error_is_never_cached(bus, make_broker):
    capsule = notes(bus)
    broker, _ = make_broker(bus)
    for _ in range(2):
        failed = Asker(broker, ALICE).read_resource(BROKEN)
        assert failed.error is not None and failed.error.code is FailureCode.CAPSULE_ERROR
        assert failed.max_age_s is None
    assert capsule.read_uris == [BROKEN, BROKEN]
    capsule.contents["alice"][BROKEN] = [text(BROKEN, "fixed")]
    assert body(Asker(broker, ALICE).read_resource(BROKEN)) == "fixed"  # the error left nothing behind


def test_two_principals_never_share_an_entry(bus, make_broker):
    capsule = notes(bus)
    broker, _ = make_broker(bus)
    assert body(Asker(broker, ALICE).read_resource(FRESH)) == "alice v1"
    assert body(Asker(broker, BOB).read_resource(FRESH)) == "bob v1"
    assert body(Asker(broker, ALICE).read_resource(FRESH)) == "alice v1"
    assert body(Asker(broker, BOB).read_resource(FRESH)) == "bob v1"
    assert capsule.read_uris == [FRESH, FRESH]  # one read per principal


def test_a_capsule_set_change_drops_that_principals_entries_only(bus, make_broker):
    capsule = notes(bus)
    broker, _ = make_broker(bus)
    kernel = host_participant("kernel", "kernel-1", publish=[CAPSULES_LOADED_TOPIC])
    Asker(broker, ALICE).read_resource(FRESH)
    Asker(broker, BOB).read_resource(FRESH)
    capsule.contents["alice"][FRESH] = [text(FRESH, "alice v2")]
    capsule.contents["bob"][FRESH] = [text(FRESH, "bob v2")]

    bus.publish(kernel, CAPSULES_LOADED_TOPIC, json.dumps({"status": "ready", "capsules": []}), ALICE).wait(5)

    assert body(Asker(broker, ALICE).read_resource(FRESH)) == "alice v2"
    assert body(Asker(broker, BOB).read_resource(FRESH)) == "bob v1"  # bob's capsule set did not change
    assert capsule.read_uris == [FRESH, FRESH, FRESH]


def test_a_system_wide_change_drops_everyones_entries(bus, make_broker):
    capsule = notes(bus)
    broker, _ = make_broker(bus)
    kernel = host_participant("kernel", "kernel-1", publish=[CAPSULES_LOADED_TOPIC])
    Asker(broker, ALICE).read_resource(FRESH)
    Asker(broker, BOB).read_resource(FRESH)
    bus.publish(kernel, CAPSULES_LOADED_TOPIC, json.dumps({"status": "ready"}), Principal.system()).wait(5)
    assert len(broker.shared.reads) == 0
    Asker(broker, ALICE).read_resource(FRESH)
    Asker(broker, BOB).read_resource(FRESH)
    assert capsule.read_uris == [FRESH] * 4


def test_a_rebuild_drops_the_entry(bus, make_broker):
    old = notes(bus)
    broker, _ = make_broker(bus)
    kernel = host_participant("kernel", "kernel-1", publish=[CAPSULES_LOADED_TOPIC])
    assert body(Asker(broker, ALICE).read_resource(FRESH)) == "alice v1"

    old.unload()
    new = notes(bus, source_id="src-notes-rebuilt")
    new.contents["alice"][FRESH] = [text(FRESH, "rebuilt")]
    bus.publish(kernel, CAPSULES_LOADED_TOPIC, json.dumps({"status": "ready", "capsules": []}), ALICE).wait(5)

    served = Asker(broker, ALICE).read_resource(FRESH)
    assert body(served) == "rebuilt" and served.source_id == new.source_id
    asked = len(new.read_uris)  # the stale snapshot's broadcast reached it too, before the retry
    assert body(Asker(broker, ALICE).read_resource(FRESH)) == "rebuilt"  # now kept for the new build
    assert len(new.read_uris) == asked


def test_an_explicit_refresh_drops_the_principals_entries(bus, make_broker):
    capsule = notes(bus)
    broker, client = make_broker(bus)
    Asker(broker, ALICE).read_resource(FRESH)
    capsule.contents["alice"][FRESH] = [text(FRESH, "alice v2")]
    client(ALICE).list_resources(refresh=True)
    assert body(Asker(broker, ALICE).read_resource(FRESH)) == "alice v2"
    assert capsule.read_uris == [FRESH, FRESH]


def test_a_template_member_takes_the_templates_max_age(bus, make_broker):
    capsule = FakeCapsule(
        bus,
        "tmpl",
        templates={
            "alice": [
                template("astrid://tmpl/fresh/{id}", meta=fresh_meta(30)),
                template("astrid://tmpl/plain/{id}"),
            ]
        },
    )
    broker, _ = make_broker(bus)
    for _ in range(2):
        fresh = Asker(broker, ALICE).read_resource("astrid://tmpl/fresh/7")
        plain = Asker(broker, ALICE).read_resource("astrid://tmpl/plain/7")
    assert fresh.error is None and plain.error is None
    assert plain.max_age_s is None and 0 < (fresh.max_age_s or 0) <= 30
    assert capsule.read_uris == ["astrid://tmpl/fresh/7", "astrid://tmpl/plain/7", "astrid://tmpl/plain/7"]
    # the astrid key never reaches whoever lists the templates
    [fresh_template, plain_template] = broker.listings.templates(ALICE)
    assert fresh_template.meta is None and plain_template.meta is None


def test_the_astrid_key_is_taken_out_of_listed_definitions(bus, make_broker):
    notes(bus)
    broker, client = make_broker(bus)
    by_uri = {d.uri: d for d in client(ALICE).list_resources()}
    assert json.loads(by_uri[FRESH].meta or "null") == {"com.example/rev": 3}
    assert by_uri[BROKEN].meta is None and by_uri[PLAIN].meta is None


def test_the_front_door_reply_carries_max_age(bus, make_broker):
    notes(bus)
    _, client = make_broker(bus)
    assert client(ALICE).read_resource(FRESH).max_age_s == 60
    assert 0 < (client(ALICE).read_resource(FRESH).max_age_s or 0) <= 60  # from the cache
    assert client(ALICE).read_resource(PLAIN).max_age_s is None
    failed = client(ALICE).read_resource(BROKEN)
    assert failed.error is not None and failed.max_age_s is None


# -- ReadCache and split_freshness on their own ----------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ok(uri: str, body: str, owner: str = "src-a") -> ReadOutcome:
    return ReadOutcome(contents=(TextChunk(uri=uri, text=body),), source_id=owner)


def test_an_entry_is_keyed_by_principal_uri_and_owner():
    cache = ReadCache()
    assert cache.store(ALICE, "u", "src-a", ok("u", "x"), 60, cache.epoch(ALICE))
    assert cache.get(ALICE, "u", "src-a") is not None
    assert cache.get(BOB, "u", "src-a") is None
    assert cache.get(ALICE, "u", "src-rebuilt") is None  # a new build of the owner
    assert cache.get(ALICE, "v", "src-a") is None


def test_an_entry_expires_after_its_max_age():
    clock = Clock()
    cache = ReadCache(clock=clock)
    cache.store(ALICE, "u", "src-a", ok("u", "x"), 10, cache.epoch(ALICE))
    clock.now += 4
    hit = cache.get(ALICE, "u", "src-a")
    assert hit.max_age_s == pytest.approx(6)
    clock.now += 6
    assert cache.get(ALICE, "u", "src-a") is None
    assert len(cache) == 0


def test_only_a_successful_read_of_the_owner_is_stored():
    cache = ReadCache()
    epoch = cache.epoch(ALICE)
    assert not cache.store(ALICE, "u", "src-a", ReadOutcome.fail(FailureCode.CAPSULE_ERROR, "no"), 60, epoch)
    assert not cache.store(ALICE, "u", "src-a", ReadOutcome(source_id="src-a"), 60, epoch)  # no contents
    assert not cache.store(ALICE, "u", "src-a", ok("u", "x", owner="src-b"), 60, epoch)  # not the owner
    assert not cache.store(ALICE, "u", "src-a", ok("u", "x"), 0, epoch)
    assert len(cache) == 0


def test_a_read_that_overlapped_an_invalidation_is_not_stored():
    cache = ReadCache()
    epoch = cache.epoch(ALICE)
    cache.invalidate(ALICE)
    assert not cache.store(ALICE, "u", "src-a", ok("u", "x"), 60, epoch)
    bob_epoch = cache.epoch(BOB)
    cache.invalidate(None)
    assert not cache.store(BOB, "u", "src-a", ok("u", "x"), 60, bob_epoch)
    assert cache.store(BOB, "u", "src-a", ok("u", "x"), 60, cache.epoch(BOB))


def test_the_cache_is_bounded_by_entries_least_recently_used_first():
    cache = ReadCache(max_entries=2)
    for uri in ("a", "b"):
        cache.store(ALICE, uri, "src-a", ok(uri, uri), 60, cache.epoch(ALICE))
    assert cache.get(ALICE, "a", "src-a") is not None  # a is now the most recently used
    cache.store(ALICE, "c", "src-a", ok("c", "c"), 60, cache.epoch(ALICE))
    assert len(cache) == 2
    assert cache.get(ALICE, "b", "src-a") is None
    assert cache.get(ALICE, "a", "src-a") is not None and cache.get(ALICE, "c", "src-a") is not None


def test_the_cache_is_bounded_by_bytes():
    cache = ReadCache(max_bytes=4000)
    big = "x" * 1500
    for uri in ("a", "b", "c"):
        cache.store(ALICE, uri, "src-a", ok(uri, big), 60, cache.epoch(ALICE))
    assert 0 < cache.bytes <= 4000
    assert cache.get(ALICE, "a", "src-a") is None  # the oldest went first
    assert cache.get(ALICE, "c", "src-a") is not None
    # one read larger than the whole budget is never stored
    assert not cache.store(ALICE, "huge", "src-a", ok("huge", "y" * 5000), 60, cache.epoch(ALICE))


def test_invalidating_one_principal_keeps_the_others():
    cache = ReadCache()
    cache.store(ALICE, "u", "src-a", ok("u", "x"), 60, cache.epoch(ALICE))
    cache.store(BOB, "u", "src-a", ok("u", "x"), 60, cache.epoch(BOB))
    cache.invalidate(ALICE)
    assert cache.get(ALICE, "u", "src-a") is None
    assert cache.get(BOB, "u", "src-a") is not None


@pytest.mark.parametrize(
    ("meta", "age", "left"),
    [
        ('{"astrid":{"max_age_s":60}}', 60.0, None),
        ('{"astrid":{"max_age_s":1.5},"k":1}', 1.5, {"k": 1}),
        ('{"astrid":{"max_age_s":0}}', None, None),
        ('{"astrid":{"max_age_s":-5},"k":1}', None, {"k": 1}),
        ('{"astrid":{"max_age_s":"60"}}', None, None),
        ('{"astrid":{"max_age_s":true}}', None, None),
        ('{"astrid":7}', None, None),
        ('{"astrid":{"max_age_s":1e9}}', 86_400.0, None),  # capped
    ],
)
def test_split_freshness_reads_the_declaration_and_strips_the_key(meta, age, left):
    definition = ResourceDefinition(uri="u", name="u", meta=meta)
    [stripped], ages = split_freshness([definition], lambda d: d.uri)
    assert ages.get("u") == age
    assert (json.loads(stripped.meta) if stripped.meta is not None else None) == left


def test_split_freshness_leaves_other_definitions_alone():
    plain = ResourceDefinition(uri="u", name="u", meta='{"com.example/astrid-ish":1}')
    bare = ResourceDefinition(uri="v", name="v")
    kept, ages = split_freshness([plain, bare], lambda d: d.uri)
    assert kept[0] is plain and kept[1] is bare and ages == {}


# -- the MCP server ---------------------------------------------------------------------------


def _mcp_capsule(bus) -> FakeCapsule:
    listed = [resource(FRESH, meta=fresh_meta(60)), resource(PLAIN)]
    return FakeCapsule(
        bus,
        "notes",
        resources={"alice": listed},
        contents={"alice": {FRESH: [text(FRESH, "fresh")], PLAIN: [text(PLAIN, "plain")]}},
    )


@pytest.mark.anyio
async def test_a_2026_07_28_read_result_carries_the_declared_ttl():
    async with serving(lambda k: k.add(_mcp_capsule(k.bus)), mode="2026-07-28") as (client, _, kernel):
        with anyio.fail_after(10):
            fresh = await client.read_resource(FRESH)
            plain = await client.read_resource(PLAIN)
            listed = await client.list_resources()
    assert isinstance(fresh, types.ReadResourceResult)
    assert fresh.ttl_ms == 60_000 and fresh.cache_scope == "private"
    assert plain.ttl_ms == 0 and plain.cache_scope == "private"
    assert all(not (r.meta or {}).get("astrid") for r in listed.resources)  # no `astrid` in `_meta`
    assert kernel.capsules["notes"].read_uris == [FRESH, PLAIN]


@pytest.mark.anyio
async def test_a_kept_read_and_a_warm_list_take_no_thread_hop(monkeypatch):
    hops: list[object] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(*args, **kwargs):
        hops.append(args[0])
        return await run_sync(*args, **kwargs)

    async with serving(lambda k: k.add(_mcp_capsule(k.bus))) as (client, _, kernel):
        with anyio.fail_after(10):
            await client.list_resources()
            await client.read_resource(FRESH)  # asked: kept from now on
            await client.read_resource(PLAIN)
            monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
            kept = await client.read_resource(FRESH)
            listed = await client.list_resources()
            assert hops == []  # answered on the loop, from memory
            await client.read_resource(PLAIN)  # a capsule call: awaited on the loop, the capsule's pool thread answers
            assert hops == []
    assert kept.contents[0].text == "fresh" and {r.uri for r in listed.resources} == {FRESH, PLAIN}
    assert kernel.capsules["notes"].read_uris == [FRESH, PLAIN, PLAIN]
