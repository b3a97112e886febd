"""`bus:request`: which topics a capsule may ask other capsules on, and hear their replies on, without it.

Which topics ask others is `astrid.host.contract.bus_asks` (tested beside it);
the participant of `astrid.host.kernel.reserved` enforces it: the bus asks the
participant on every publish, subscribe and delivery, so the grant is read per call.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from astrid.host.bus import Binding, InMemoryBus, Message, Principal
from astrid.host.capabilities.grants import GrantStore
from astrid.host.contract.bus_asks import BusAsks, hears_only_replies, may_hear_replies, topic_kind
from astrid.host.errors import BusError
from astrid.host.kernel.kernel import Kernel, KernelConfig
from astrid.host.kernel.reserved import CapsuleParticipant, refusal_line

ALICE = Principal.verified("alice")
WIDE = ("resource.v1.*", "test.*", "astrid.*")


class Switch:
    """The operator's grant, flipped between calls."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self) -> bool:
        return self.on


def capsule(granted: Switch | None = None, publish=WIDE, subscribe=WIDE, source_id: str = "src-cap"):
    return CapsuleParticipant(
        source_id=source_id,
        name="cap",
        publish_acl=tuple(publish),
        subscribe_acl=tuple(subscribe),
        bus_request_granted=granted or Switch(),
    )


def message(topic: str, source_id: str = "src-other") -> Message:
    return Message(topic, "{}", source_id, ALICE, "2026-01-01T00:00:00.000Z", 1)


# -- the shapes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "topic",
    ["resource.v1.request.read", "resource.v1.request.describe", "resource.v1.request.templates", "x.request.y"],
)
def test_publishing_a_request_takes_the_grant(topic: str) -> None:
    granted = Switch()
    participant = capsule(granted, publish=("resource.v1.*", "x.*"))
    assert not participant.may_publish(topic)
    granted.on = True
    assert participant.may_publish(topic)


@pytest.mark.parametrize(
    "topic",
    [
        "resource.v1.response.read.c1",  # its own replies
        "resource.v1.response.describe.cap",
        "resource.v1.response.describe.request",  # a reply whose suffix is `request`
        "test.loop.one",  # its own traffic
        "astrid.v1.request.capsules",  # the kernel's inventory: no capsule is asked
    ],
)
def test_replies_own_traffic_and_the_inventory_request_stay_free(topic: str) -> None:
    assert capsule().may_publish(topic)


@pytest.mark.parametrize(
    "pattern",
    [
        "resource.v1.response.read.*",  # the finding's pattern
        "resource.v1.response.read.c1",  # one exact reply topic
        "resource.v1.response.*",
        "resource.v1.response.describe.*",
        "x.response.*",
    ],
)
def test_a_subscription_that_can_only_hear_replies_takes_the_grant(pattern: str) -> None:
    granted = Switch()
    participant = capsule(granted, subscribe=("resource.v1.*", "x.*"))
    assert hears_only_replies(pattern)
    assert not participant.may_subscribe(pattern)
    granted.on = True
    assert participant.may_subscribe(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        "resource.v1.request.read",  # the requests it serves
        "resource.v1.request.*",
        "resource.v1.*",  # wide: allowed, but other capsules' replies are withheld (below)
        "test.loop.*",
        "astrid.v1.response.capsules.*",  # the kernel's inventory replies
        "astrid.v1.capsules_loaded",
    ],
)
def test_requests_wide_patterns_and_the_inventory_replies_may_be_subscribed_without_it(pattern: str) -> None:
    assert capsule().may_subscribe(pattern)


def test_the_grant_never_widens_the_manifest_nor_opens_the_host_namespace() -> None:
    granted = Switch()
    granted.on = True
    narrow = capsule(granted, publish=("resource.v1.response.read.*",), subscribe=("resource.v1.request.read",))
    assert not narrow.may_publish("resource.v1.request.read")
    assert not narrow.may_subscribe("resource.v1.response.read.*")
    wide = capsule(granted)
    assert not wide.may_publish("astrid.v1.request.mcp.resource.read")
    assert not wide.may_subscribe("astrid.v1.response.*")


def test_another_participants_reply_is_withheld_without_the_grant() -> None:
    granted = Switch()
    participant = capsule(granted)
    assert not participant.may_receive(message("resource.v1.response.read.c1"))
    assert participant.may_receive(message("resource.v1.response.read.c1", source_id="src-cap"))  # its own
    assert participant.may_receive(message("resource.v1.request.read"))
    assert participant.may_receive(message("astrid.v1.response.capsules.c1", source_id="kernel-1"))
    assert participant.may_receive(message("test.loop.one"))
    granted.on = True
    assert participant.may_receive(message("resource.v1.response.read.c1"))


# -- what the operator is told ----------------------------------------------------------------------


def test_the_refusal_line_names_what_is_refused_and_the_command_that_allows_it() -> None:
    asks = BusAsks(publish=("resource.v1.request.read", "resource.v1.*"), subscribe=("resource.v1.response.read.*",))
    line = refusal_line("launder", asks)
    assert line.startswith("capsule launder: not granted bus:request")
    assert f"refused: {asks.describe()}." in line
    assert line.endswith("To allow it: astrid capsule grant launder bus:request")


# -- on the bus -------------------------------------------------------------------------------------


def test_the_bus_refuses_at_once_and_withholds_at_delivery_per_call() -> None:
    bus = InMemoryBus()
    granted = Switch()
    participant = capsule(granted)
    files = capsule(source_id="src-files", publish=("resource.v1.response.*",))
    with pytest.raises(BusError) as refused:
        bus.publish(participant, "resource.v1.request.read", "{}", ALICE)
    assert refused.value.code == "capability-denied"
    with pytest.raises(BusError):
        bus.subscribe(participant, "resource.v1.response.read.*", principal_scope=ALICE)
    with bus.subscribe(participant, "resource.v1.*", principal_scope=ALICE) as wide:
        bus.publish(files, "resource.v1.response.read.c1", "{}", ALICE)
        assert wide.poll() == []  # withheld
        granted.on = True
        bus.publish(files, "resource.v1.response.read.c2", "{}", ALICE)
        assert [m.topic for m in wide.poll()] == ["resource.v1.response.read.c2"]
        granted.on = False  # revoked while the subscription lives
        bus.publish(files, "resource.v1.response.read.c3", "{}", ALICE)
        assert wide.poll() == []


def test_a_handler_bound_to_replies_is_not_run_for_another_capsules_reply_without_the_grant() -> None:
    bus = InMemoryBus()
    granted = Switch()
    participant = capsule(granted)
    files = capsule(source_id="src-files", publish=("resource.v1.response.*",))
    heard: list[str] = []
    bus.bind(Binding(participant, "resource.v1.*", lambda m: heard.append(m.topic)))
    bus.publish(files, "resource.v1.response.read.c1", "{}", ALICE)
    assert heard == []
    granted.on = True
    delivery = bus.publish(files, "resource.v1.response.read.c2", "{}", ALICE)
    assert heard == ["resource.v1.response.read.c2"] and delivery.reached == {"src-cap"}


# -- in the kernel --------------------------------------------------------------------------------


def test_the_kernel_logs_the_refusal_once_and_reads_the_grant_per_call(
    make_probe, component_cache_dir: Path, tmp_path: Path, caplog
) -> None:
    grants = GrantStore(tmp_path / "config" / "grants.json")
    folder = make_probe("asker", publish=("test.*", "resource.v1.request.read"))
    config = KernelConfig(capsule_paths=[folder], cache_dir=component_cache_dir, grants_file=grants.path)
    kernel = Kernel(config)
    try:
        with caplog.at_level(logging.WARNING, logger="astrid.host.kernel.kernel"):
            kernel.start()
        [line] = [r.getMessage() for r in caplog.records if "bus:request" in r.getMessage()]
        assert "capsule asker" in line and "publish test.* (its requests), resource.v1.request.read" in line
        assert "astrid capsule grant asker bus:request" in line
        [slot] = kernel.capsules.values()
        assert not slot.participant.may_publish("resource.v1.request.read")
        assert slot.participant.may_publish("test.whoami")
        grants.grant("asker", "bus:request")  # no reload, no restart
        assert slot.participant.may_publish("resource.v1.request.read")
        grants.revoke("asker", "bus:request")
        assert not slot.participant.may_publish("resource.v1.request.read")
    finally:
        kernel.close()


# -- resource events (astrid-bus:resource-events, docs/contract/subscriptions.md §11) -----------


def test_announcing_an_event_is_free_but_hearing_another_participants_takes_the_grant() -> None:
    granted = Switch()
    participant = capsule(granted)
    assert topic_kind("resource.v1.event.updated") == "event"
    assert participant.may_publish("resource.v1.event.updated")  # its own announcement: no grant
    # Another capsule's announcement names what that capsule serves a principal: as a reply.
    assert hears_only_replies("resource.v1.event.*") and hears_only_replies("resource.v1.event.updated")
    assert may_hear_replies("resource.v1.*")
    assert not participant.may_subscribe("resource.v1.event.*")
    assert not participant.may_receive(message("resource.v1.event.updated"))
    assert participant.may_receive(message("resource.v1.event.updated", source_id="src-cap"))  # its own
    granted.on = True
    assert participant.may_subscribe("resource.v1.event.*")
    assert participant.may_receive(message("resource.v1.event.updated"))
