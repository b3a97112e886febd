"""The in-memory bus looks a topic's bindings up instead of matching every pattern: the lookup never goes stale."""

from __future__ import annotations

import dataclasses
import re
import time
from datetime import datetime

from astrid.host.bus import Binding, InMemoryBus, Participant, Principal
from astrid.host.bus import memory as memory_bus

ALICE = Principal.verified("alice")
SENDER = Participant("sender", "sender", publish_acl=("app.*",))


class Inline:
    """A dispatcher that runs each handler at once, in the publisher's thread."""

    def dispatch(self, runs, delivery) -> None:
        for binding, message in runs:
            binding.handler(message)
            delivery.handler_finished()


def bound(name: str, pattern: str, heard: list[str]) -> Binding:
    owner = Participant(name, name)
    return Binding(owner, pattern, lambda message: heard.append(f"{name}:{message.topic}"))


def test_a_binding_added_or_removed_later_is_seen_by_the_next_publish():
    bus = InMemoryBus(dispatcher=Inline())
    heard: list[str] = []
    bus.bind(bound("first", "app.news", heard))
    bus.publish(SENDER, "app.news", "{}", ALICE)
    bus.bind(bound("second", "app.*", heard))
    bus.publish(SENDER, "app.news", "{}", ALICE)
    bus.unbind_owner("first")
    bus.publish(SENDER, "app.news", "{}", ALICE)
    assert heard == ["first:app.news", "first:app.news", "second:app.news", "second:app.news"]


def test_the_lookup_stays_bounded_under_topics_of_their_own(monkeypatch):
    monkeypatch.setattr(memory_bus, "BUS_TUNING", dataclasses.replace(memory_bus.BUS_TUNING, topics_remembered=8))
    bus = InMemoryBus(dispatcher=Inline())
    heard: list[str] = []
    bus.bind(bound("all", "app.*", heard))
    for index in range(50):
        bus.publish(SENDER, f"app.t{index}", "{}", ALICE)
    assert len(heard) == 50
    assert len(bus._bindings_for) <= 8


def test_messages_reach_bindings_in_the_order_they_were_bound():
    bus = InMemoryBus(dispatcher=Inline())
    heard: list[str] = []
    for name, pattern in (("b", "app.*"), ("a", "app.x"), ("c", "app.*")):
        bus.bind(bound(name, pattern, heard))
    bus.publish(SENDER, "app.x", "{}", ALICE)
    assert heard == ["b:app.x", "a:app.x", "c:app.x"]


def test_a_message_timestamp_is_the_millisecond_it_was_stamped_in() -> None:
    """The stamp's text is reused within one millisecond, never across two."""
    shape = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
    for _ in range(200):
        before_ms = time.time_ns() // 1_000_000
        stamp = memory_bus.now_iso()
        after_ms = time.time_ns() // 1_000_000
        assert shape.match(stamp), stamp
        stamped_ms = round(datetime.fromisoformat(stamp).timestamp() * 1000)
        assert before_ms <= stamped_ms <= after_ms
    first = memory_bus.now_iso()
    time.sleep(0.002)
    assert memory_bus.now_iso() > first
