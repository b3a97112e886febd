"""The in-memory bus finds a topic's subscriptions without matching every pattern: exact patterns
by their text, the ones ending in `*` by a scan; what each subscription hears does not change."""

from __future__ import annotations

import dataclasses

import pytest

from astrid.host.bus import BusError, InMemoryBus, Participant, Principal
from astrid.host.bus import memory as memory_bus

ALICE = Principal.verified("alice")
SENDER = Participant("sender", "sender", publish_acl=("app.*",))


def listener(name: str) -> Participant:
    return Participant(name, name, subscribe_acl=("app.*",))


def heard(subscription) -> list[str]:
    return [message.topic for message in subscription.poll()]


def test_exact_and_wildcard_patterns_hear_what_they_match_and_nothing_else():
    bus = InMemoryBus()
    exact, wide = bus.subscribe(listener("a"), "app.x.y"), bus.subscribe(listener("b"), "app.x.*")
    other = bus.subscribe(listener("c"), "app.z")
    for topic in ("app.x.y", "app.x.y.z", "app.x", "app.z", "app.x.yy"):
        bus.publish(SENDER, topic, "{}", ALICE)
    assert heard(exact) == ["app.x.y"]
    assert heard(wide) == ["app.x.y", "app.x.y.z", "app.x.yy"]
    assert heard(other) == ["app.z"]


def test_a_closed_subscription_hears_nothing_more_and_frees_its_place():
    bus = InMemoryBus()
    owner = listener("a")
    first, twin = bus.subscribe(owner, "app.one"), bus.subscribe(owner, "app.one")  # one pattern, twice
    first.close()
    first.close()  # closing twice is harmless
    bus.publish(SENDER, "app.one", "{}", ALICE)
    assert heard(first) == [] and heard(twin) == ["app.one"]
    twin.close()
    assert bus._subscriptions == []


def test_the_per_participant_cap_counts_live_subscriptions_only(monkeypatch):
    monkeypatch.setattr(
        memory_bus, "BUS_TUNING", dataclasses.replace(memory_bus.BUS_TUNING, subscriptions_per_source=2)
    )
    bus = InMemoryBus()
    owner = listener("a")
    kept = [bus.subscribe(owner, "app.one"), bus.subscribe(owner, "app.*")]
    with pytest.raises(BusError):
        bus.subscribe(owner, "app.two")
    bus.subscribe(listener("b"), "app.two")  # another participant's count is its own
    kept[0].close()
    bus.subscribe(owner, "app.two")  # a place freed


def test_unbinding_a_participant_closes_all_its_subscriptions():
    bus = InMemoryBus()
    owner, other = listener("a"), listener("b")
    mine = [bus.subscribe(owner, "app.one"), bus.subscribe(owner, "app.*")]
    theirs = bus.subscribe(other, "app.one")
    bus.unbind_owner(owner.source_id)
    assert all(s.closed for s in mine) and not theirs.closed
    assert bus._subscriptions == [theirs]
