"""The rules a describe round and a templates round share (host/broker/merge.py),
each test run once per kind (tests/host/broker/kinds.py) on the real Bus."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from astrid.host.bus import Principal
from astrid.host.limits import Limits
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, capsules_loaded, resource, template
from tests.host.broker.kinds import KINDS

# -- one round --------------------------------------------------------------------------------


def test_a_list_merges_every_capsule_sorted_by_key(bus, make_broker, kind):
    kind.capsule(bus, "docs", {"alice": [kind.entry("astrid://docs/b"), kind.entry("astrid://docs/a")]})
    kind.capsule(bus, "intro", {"alice": [kind.entry("astrid://intro/capsules", title="Capsules")]})
    FakeCapsule(bus, "plain")  # lists nothing, and knows nothing of templates
    _, client = make_broker(bus)

    listed = kind.items(client(ALICE))

    assert kind.keys_of(listed) == kind.keys("astrid://docs/a", "astrid://docs/b", "astrid://intro/capsules")
    assert listed[2].title == "Capsules"


def test_a_list_keeps_every_field(bus, make_broker, kind):
    full = kind.entry(
        "astrid://docs/full",
        "full",
        title="Full",
        description="every field",
        mime_type="text/markdown",
        annotations={"audience": ["user", "assistant"], "priority": 0.5, "last_modified": "2025-01-12T15:00:58Z"},
        icons=[{"src": "data:image/png;base64,AAAA", "mime_type": "image/png", "sizes": ["48x48"], "theme": "dark"}],
        meta=json.dumps({"com.example/origin": "test"}),
        **kind.only_fields,
    )
    kind.capsule(bus, "docs", {"alice": [full]})
    _, client = make_broker(bus)

    [listed] = kind.items(client(ALICE))

    assert listed.to_wire() == full


@pytest.mark.parametrize("slow", ["src-a", "src-b"])
def test_a_shared_key_goes_to_the_first_source_id_whatever_the_arrival_order(
    threaded_bus, make_broker, caplog, kind, slow
):
    for name, source in (("capa", "src-a"), ("capb", "src-b")):
        kind.capsule(
            threaded_bus,
            name,
            {"alice": [kind.entry("astrid://shared/x", f"from-{source}")]},
            source_id=source,
            delay=0.05 if source == slow else 0.0,
        )
    broker, client = make_broker(threaded_bus)

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker.audit"):
        [listed] = kind.items(client(ALICE))

    assert listed.name == "from-src-a"
    [line] = [r.getMessage() for r in caplog.records if r.name == "astrid.host.broker.audit"]
    for needle in (kind.key("astrid://shared/x"), "src-a", "src-b", "verified(alice)"):
        assert needle in line
    assert kind.snapshot(broker, ALICE).owner_of(kind.key("astrid://shared/x")) == "src-a"


def test_each_principal_gets_only_its_own_list(bus, make_broker, kind):
    kind.capsule(
        bus, "notes", {"alice": [kind.entry("astrid://notes/alice")], "bob": [kind.entry("astrid://notes/bob")]}
    )
    _, client = make_broker(bus)

    assert kind.listed(client(ALICE)) == kind.keys("astrid://notes/alice")
    assert kind.listed(client(BOB)) == kind.keys("astrid://notes/bob")


@pytest.mark.parametrize("principal", [Principal.claimed("alice"), Principal.system()])
def test_an_unverified_principal_lists_nothing_and_no_capsule_is_asked(bus, make_broker, kind, principal):
    capsule = kind.capsule(bus, "c", {"alice": [kind.entry("astrid://c/x")]})
    _, client = make_broker(bus)

    assert kind.items(client(principal)) == []
    assert kind.calls(capsule) == 0


def test_a_reply_attributed_to_another_principal_is_dropped(bus, make_broker, kind):
    """A forger answers alice's round as bob: never in alice's list."""
    kind.capsule(bus, "honest", {"alice": [kind.entry("astrid://honest/x")]})
    kind.capsule(bus, "forger", {"alice": [kind.entry("astrid://forged/x")]}, reply_as=BOB)
    _, client = make_broker(bus)

    assert kind.listed(client(ALICE)) == kind.keys("astrid://honest/x")


def test_a_second_reply_from_one_source_is_dropped_and_logged(bus, make_broker, caplog, kind):
    kind.capsule(
        bus,
        "twice",
        {"alice": [kind.entry("astrid://twice/first")]},
        twice={kind.array: [kind.entry("astrid://twice/second")]},
    )
    _, client = make_broker(bus)

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        assert kind.listed(client(ALICE)) == kind.keys("astrid://twice/first")
    assert any(f"second {kind.round} reply from src-twice" in r.getMessage() for r in caplog.records)


# What each kind's validation drops, entry by entry, and what it keeps.
BAD_ENTRIES = {
    "resources": (
        [
            resource("astrid://ok/1"),
            {"uri": "astrid://bad/no-name"},
            resource("astrid://bad/size", size="12"),  # wrong type
            resource("astrid://bad/long-title", title="x" * 5000),
            resource("astrid://bad/meta-type", meta={"not": "a string"}),  # wrong type: the entry goes
            resource("astrid://ok/2"),
            resource("astrid://ok/meta-array", meta="[1, 2]"),  # not an object: only the field goes
            resource("astrid://ok/meta-big", meta=json.dumps({"k": "v" * 5000})),  # over the cap: only the field goes
        ],
        ["astrid://ok/1", "astrid://ok/2", "astrid://ok/meta-array", "astrid://ok/meta-big"],
    ),
    "templates": (
        [
            template("astrid://ok/{a}"),
            {"uri_template": "astrid://bad/no-name/{a}"},
            template("astrid://bad/{a}{b}"),  # two variables with nothing between them
            template("astrid://bad/{#frag}"),  # another RFC 6570 operator
            template("astrid://bad/plain"),  # no variable: a resource, not a template
            template("astrid://bad/{a}/{a}"),  # a name used twice
            template("astrid://bad/title/{a}", title="x" * 5000),
            template("astrid://ok/{a}"),  # declared twice: the first entry is kept
            template("astrid://ok/meta/{a}", meta="[1]"),  # not an object: only the field goes
        ],
        ["astrid://ok/meta/{a}", "astrid://ok/{a}"],
    ),
}


def test_a_bad_entry_is_dropped_not_the_whole_reply(bus, make_broker, kind):
    entries, kept = BAD_ENTRIES[kind.array]
    kind.capsule(bus, "mixed", {"alice": entries})
    _, client = make_broker(bus)

    listed = kind.items(client(ALICE))

    assert kind.keys_of(listed) == kept
    assert all(item.meta is None for item in listed)


def test_an_over_size_reply_is_dropped_whole_and_logged(bus, make_broker, caplog, kind):
    kind.capsule(bus, "big", {"alice": [kind.entry(f"astrid://big/{i}") for i in range(4)]})
    kind.capsule(bus, "small", {"alice": [kind.entry("astrid://small/1")]})
    _, client = make_broker(bus, kind.limits(per_reply=3))

    with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
        assert kind.listed(client(ALICE)) == kind.keys("astrid://small/1")
    needle = f"src-big dropped: 4 {kind.array}, more than the limit of 3"
    assert any(needle in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("raw", ['"a string"', "[]", '{"ARRAY": 3}', '{"ARRAY": {"uri": "x"}}', '{"OTHER": []}'])
def test_garbage_replies_are_ignored(bus, make_broker, kind, raw):
    other = next(k for k in KINDS if k is not kind)  # the other round's reply, on this round's topic
    kind.capsule(bus, "junk", raw=raw.replace("ARRAY", kind.array).replace("OTHER", other.array))
    kind.capsule(bus, "fine", {"alice": [kind.entry("astrid://fine/1")]})
    _, client = make_broker(bus)

    assert kind.listed(client(ALICE)) == kind.keys("astrid://fine/1")


def test_a_list_is_capped_per_principal(bus, make_broker, kind):
    kind.capsule(bus, "many", {"alice": [kind.entry(f"astrid://many/{i}") for i in range(5)]})
    broker, client = make_broker(bus, kind.limits(per_principal=3))

    first_three = kind.keys(*(f"astrid://many/{i}" for i in range(3)))
    assert kind.listed(client(ALICE)) == first_three
    assert set(kind.snapshot(broker, ALICE).owners) == set(first_three)


# -- the cache --------------------------------------------------------------------------------


def test_a_list_is_cached_per_principal_and_never_crosses(bus, make_broker, kind):
    capsule = kind.capsule(
        bus, "notes", {"alice": [kind.entry("astrid://notes/a")], "bob": [kind.entry("astrid://notes/b")]}
    )
    _, client = make_broker(bus)

    assert kind.listed(client(ALICE)) == kind.keys("astrid://notes/a")
    assert kind.listed(client(ALICE)) == kind.keys("astrid://notes/a")
    assert kind.calls(capsule) == 1  # the second list was a cache hit
    # bob's list is a miss for bob, whatever alice has cached
    assert kind.listed(client(BOB)) == kind.keys("astrid://notes/b")
    assert kind.calls(capsule) == 2
    assert kind.listed(client(ALICE)) == kind.keys("astrid://notes/a")
    assert kind.calls(capsule) == 2


def test_a_capsule_set_change_invalidates_that_principals_list_only(bus, make_broker, kind):
    capsule = kind.capsule(
        bus, "notes", {"alice": [kind.entry("astrid://notes/a")], "bob": [kind.entry("astrid://notes/b")]}
    )
    _, client = make_broker(bus)
    kind.items(client(ALICE))
    kind.items(client(BOB))
    assert kind.calls(capsule) == 2

    kind.entries(capsule)["alice"].append(kind.entry("astrid://notes/a2"))
    kind.entries(capsule)["bob"].append(kind.entry("astrid://notes/b2"))
    capsules_loaded(bus, ALICE)

    assert kind.listed(client(ALICE)) == kind.keys("astrid://notes/a", "astrid://notes/a2")
    assert kind.listed(client(BOB)) == kind.keys("astrid://notes/b")  # still cached for bob
    assert kind.calls(capsule) == 3


def test_a_system_wide_change_invalidates_every_principals_list(bus, make_broker, kind):
    capsule = kind.capsule(
        bus, "files", {"alice": [kind.entry("astrid://files/a")], "bob": [kind.entry("astrid://files/a")]}
    )
    _, client = make_broker(bus)
    kind.items(client(ALICE)), kind.items(client(BOB))

    capsules_loaded(bus, Principal.system())
    kind.items(client(ALICE)), kind.items(client(BOB))

    assert kind.calls(capsule) == 4


def test_an_empty_round_keeps_the_previous_snapshot(bus, make_broker, kind):
    capsule = kind.capsule(bus, "flaky", {"alice": [kind.entry("astrid://flaky/1")]})
    _, client = make_broker(bus, Limits(describe_window_s=0.3))
    assert kind.listed(client(ALICE)) == kind.keys("astrid://flaky/1")

    kind.silence(capsule, True)  # received, but no reply this round
    capsules_loaded(bus, ALICE)
    assert kind.listed(client(ALICE)) == kind.keys("astrid://flaky/1")  # a lost race, not "nothing listed"
    assert kind.calls(capsule) == 2

    kind.silence(capsule, False)  # the kept snapshot is stale: the next list asks again
    kind.entries(capsule)["alice"].append(kind.entry("astrid://flaky/2"))
    assert kind.listed(client(ALICE)) == kind.keys("astrid://flaky/1", "astrid://flaky/2")
    assert kind.calls(capsule) == 3


def test_concurrent_lists_share_one_round(threaded_bus, make_broker, kind):
    capsule = kind.capsule(threaded_bus, "c", {"alice": [kind.entry("astrid://c/x")]}, delay=0.1)
    _, client = make_broker(threaded_bus)
    results: list[list[str]] = []

    threads = [threading.Thread(target=lambda: results.append(kind.listed(client(ALICE)))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert results == [kind.keys("astrid://c/x")] * 6
    assert kind.calls(capsule) == 1
