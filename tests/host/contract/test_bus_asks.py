"""What a manifest declares that asks other capsules (`bus:request`): the topic kinds and patterns.

The rule lives in `astrid.host.contract.bus_asks`; the kernel enforces it on
every publish, subscribe and delivery (`tests/host/kernel/test_reserved.py`).
"""

from __future__ import annotations

import pytest

from astrid.host.contract.bus_asks import BusAsks, bus_asks, may_hear_replies, topic_kind


@pytest.mark.parametrize(
    ("topic", "kind"),
    [
        ("resource.v1.request.read", "request"),
        ("resource.v1.response.read.c1", "response"),
        ("resource.v1.response.describe.request", "response"),  # the first kind segment decides
        ("request.x", "request"),
        ("test.loop.one", None),
        ("astrid.v1.capsules_loaded", None),
    ],
)
def test_the_first_request_or_response_segment_is_a_topics_kind(topic: str, kind: str | None) -> None:
    assert topic_kind(topic) == kind


def test_patterns_that_may_hear_replies() -> None:
    assert may_hear_replies("resource.v1.*") and may_hear_replies("test.loop.*")
    assert may_hear_replies("resource.v1.response.read.*")
    assert not may_hear_replies("resource.v1.request.*") and not may_hear_replies("test.loop.one")
    assert not may_hear_replies("astrid.v1.response.capsules.*")


def test_bus_asks_name_what_the_manifest_declares_that_needs_the_grant() -> None:
    asks = bus_asks(
        ["resource.v1.response.read.*", "resource.v1.request.read", "resource.v1.*", "astrid.v1.request.capsules"],
        ["resource.v1.request.read", "resource.v1.response.read.*", "astrid.v1.response.capsules.*"],
    )
    assert asks == BusAsks(
        publish=("resource.v1.request.read", "resource.v1.*"), subscribe=("resource.v1.response.read.*",)
    )
    assert asks.describe() == (
        "publish resource.v1.request.read, resource.v1.* (its requests); "
        "hear other capsules' replies on resource.v1.response.read.*"
    )
    # A capsule that only serves (the SDK template, every bundled capsule) asks for nothing.
    serving = bus_asks(
        ["resource.v1.response.describe.*", "resource.v1.response.read.*", "astrid.v1.request.capsules"],
        ["resource.v1.request.describe", "resource.v1.request.read", "astrid.v1.response.capsules.*"],
    )
    assert not serving


def test_hearing_other_capsules_events_is_asked_as_hearing_their_replies() -> None:
    assert bus_asks([], ["resource.v1.event.*"]).describe() == "hear other capsules' replies on resource.v1.event.*"
    assert not bus_asks(["resource.v1.event.updated"], [])  # announcing its own: no grant
