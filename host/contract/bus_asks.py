"""Which topics ask other capsules: what a manifest declares that needs the operator's `bus:request`.

A manifest's `[publish]` and `[subscribe]` are the capsule author's own claim;
nobody approves them. But a request (a topic whose first `request`/`response`
segment is `request`, such as `resource.v1.request.read`) makes other
capsules act for the principal being served, with *their* grants, and their
replies (first such segment `response`) carry what those grants reached: a
capsule that asks for no capability could read a user's files through the
`files` capsule and hand them on. So, outside the host namespace, these need
the operator's `bus:request` grant on top of the manifest (`astrid capsule
grant NAME bus:request`):

- publishing a request;
- subscribing to a pattern that matches only replies (refused at once);
- being given another participant's reply (the bus withholds it), which
  covers the wide patterns (`resource.v1.*`: a pattern cannot tell a
  capsule's own `test.loop.*` traffic from replies), handler bindings, and a
  subscription made before a revoke.

Events (a topic whose first `request`/`response`/`event` segment is `event`,
such as `resource.v1.event.updated`, astrid-bus:resource-events) count as
replies for hearing: they name what the announcing capsule's grants reached
(the URIs it serves a principal), so being given another participant's event,
or subscribing to a pattern that matches only events, needs the grant too.
Publishing one is not asking anyone anything: a capsule announces its own
changes with no grant (the broker checks that it owns what it announces).

Publishing its own replies and events and hearing the requests it serves stay
free, so a capsule that only serves never needs the grant. The host namespace
is left to the kernel's reserved-topic rules (`kernel/reserved.py`, which
also enforces these rules on every publish, subscribe and delivery).

`bus_asks` names a manifest's declarations that need the grant: the kernel
logs them at load, `astrid capsule list -v` shows them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from astrid.host.contract.topics import EVENT_SEGMENT, HOST_NAMESPACE, REQUEST_SEGMENT, RESPONSE_SEGMENT

_WILD = ".*"
_KINDS = (REQUEST_SEGMENT, RESPONSE_SEGMENT, EVENT_SEGMENT)
# What a capsule hears from others only with `bus:request`: replies, and events.
_HEARD_WITH_GRANT = (RESPONSE_SEGMENT, EVENT_SEGMENT)


def topic_kind(topic: str) -> str | None:
    """`request`, `response` or `event`: the first segment of `topic` that is one of them.

    The first one decides, so a reply whose correlation id or suffix happens
    to be `request` (`resource.v1.response.describe.request`) is still a reply.
    """
    for segment in topic.split("."):
        if segment in _KINDS:
            return segment
    return None


def _fixed_part(pattern: str) -> str:
    """The segments every topic a pattern matches starts with."""
    return pattern[: -len(_WILD)] if pattern.endswith(_WILD) else pattern


def _may_be(pattern: str, kind: str) -> bool:
    """Can `pattern` match a topic of `kind`? Its fixed part decides when it names a
    kind; a wildcard after a part that names none can match either."""
    fixed = topic_kind(_fixed_part(pattern))
    return fixed == kind if fixed is not None else pattern.endswith(_WILD)


def _host_owned(topic_or_pattern: str) -> bool:
    # The reserved-topic rules decide there, not the grant (see the module docstring).
    return topic_or_pattern.startswith(HOST_NAMESPACE)


def asks_others(topic: str) -> bool:
    """Is publishing `topic` asking other capsules (needs `bus:request`)?"""
    return not _host_owned(topic) and topic_kind(topic) == REQUEST_SEGMENT


def carries_reply(topic: str) -> bool:
    """Does `topic` carry a reply or an event (whose delivery from others needs `bus:request`)?"""
    return not _host_owned(topic) and topic_kind(topic) in _HEARD_WITH_GRANT


def hears_only_replies(pattern: str) -> bool:
    """Does every topic `pattern` matches carry a reply (or an event)? Such a
    subscription is refused without `bus:request`: it can be for nothing else."""
    return not _host_owned(pattern) and topic_kind(_fixed_part(pattern)) in _HEARD_WITH_GRANT


def may_hear_replies(pattern: str) -> bool:
    """Can `pattern` match a reply or an event (whose delivery from others needs `bus:request`)?"""
    return not _host_owned(pattern) and any(_may_be(pattern, kind) for kind in _HEARD_WITH_GRANT)


def may_ask(pattern: str) -> bool:
    """Can a `[publish]` pattern cover a request (whose publishing needs `bus:request`)?"""
    return not _host_owned(pattern) and _may_be(pattern, REQUEST_SEGMENT)


@dataclass(frozen=True)
class BusAsks:
    """What a manifest declares that only works with `bus:request`: the `[publish]`
    patterns that can cover a request, the `[subscribe]` ones that can match a reply."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.publish or self.subscribe)

    def describe(self) -> str:
        """`publish X, Y; hear other capsules' replies on Z` (a wide pattern says which part of it)."""
        parts = []
        if self.publish:
            parts.append("publish " + ", ".join(_shown(p, "its requests", REQUEST_SEGMENT) for p in self.publish))
        if self.subscribe:
            shown = ", ".join(_shown(p, "its replies", *_HEARD_WITH_GRANT) for p in self.subscribe)
            parts.append("hear other capsules' replies on " + shown)
        return "; ".join(parts)


def _shown(pattern: str, part: str, *kinds: str) -> str:
    """A declared pattern as the operator reads it: a wide one names the part of it refused."""
    return pattern if topic_kind(_fixed_part(pattern)) in kinds else f"{pattern} ({part})"


def bus_asks(publish: Iterable[str], subscribe: Iterable[str]) -> BusAsks:
    """The declarations of a manifest (`[publish]`, `[subscribe]` keys) that need `bus:request`."""
    return BusAsks(
        publish=tuple(p for p in publish if may_ask(p)),
        subscribe=tuple(p for p in subscribe if may_hear_replies(p)),
    )
