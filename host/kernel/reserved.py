"""What a capsule may do on the bus beyond its manifest's say: the host's
reserved topics, and the bus rights only the operator grants.

Reserved topics. The front doors, their replies and kernel events are
host-only: a capsule can never publish on `astrid.v1.*` (except the kernel's
inventory request) and can never subscribe under `astrid.v1.*` (front-door
requests and replies are host traffic) except to the capsule-set event and
the inventory replies. This closes the confused-deputy and eavesdropping
paths through the bus even for a manifest that grants `*`-wide ACLs.

Asking other capsules (`bus:request`). Which topics ask other capsules,
and which replies and events only the operator's grant lets a capsule hear,
is a fact about topics and manifests: `contract/bus_asks.py` says it (and
`bus_asks` names a manifest's declarations that need the grant). Here the
participant enforces it on every publish, subscribe and delivery. The grant
is asked on every check (one `stat` of the grants file while it is
unchanged): a grant or a revoke applies to the next publish, subscribe or
delivery, no restart.

The host namespace is left to the reserved-topic rules: there a capsule can
publish only the kernel's inventory request and hear only its replies. That
request is served by the kernel, not by a capsule: no capsule runs and no
grant is used, and the answer is what the requesting principal may see
anyway (the capsule list and the host's versions and limits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from astrid.host.bus import Message, Participant
from astrid.host.capabilities.grants import BUS_REQUEST, grant_command
from astrid.host.contract.bus_asks import BusAsks, asks_others, carries_reply, hears_only_replies
from astrid.host.contract.topics import (
    CAPSULE_MAY_PUBLISH,
    CAPSULE_MAY_SUBSCRIBE,
    CAPSULE_MAY_SUBSCRIBE_UNDER,
    HOST_NAMESPACE,
)

_WILD = ".*"


def _may_reach(pattern: str, prefix: str) -> bool:
    """Can `pattern` match some topic that starts with `prefix`?"""
    if pattern.endswith(_WILD):
        base = pattern[:-1]
        return prefix.startswith(base) or base.startswith(prefix)
    return pattern.startswith(prefix)


# -- requests and replies -----------------------------------------------------------------


def is_others_reply(message: Message, own_source_id: str) -> bool:
    """Is `message` another participant's reply or event (outside the host namespace)?"""
    return message.source_id != own_source_id and carries_reply(message.topic)


def refusal_line(capsule: str, asks: BusAsks) -> str:
    """The load-time log line for a capsule whose bus asks are refused: what, and the command."""
    return (
        f"capsule {capsule}: not granted {BUS_REQUEST}, so it may not ask other capsules over the bus; "
        f"refused: {asks.describe()}. To allow it: {grant_command(capsule, BUS_REQUEST)}"
    )


# -- the participant --------------------------------------------------------------------------


def _not_granted() -> bool:
    return False


@dataclass(frozen=True)
class CapsuleParticipant(Participant):
    """A capsule on the bus: its manifest ACLs minus the host's reserved topics,
    and minus requests to other capsules and their replies unless granted."""

    # Has the operator granted `bus:request` (now)? Asked on every check, so a
    # grant or a revoke applies to the next publish, subscribe or delivery.
    bus_request_granted: Callable[[], bool] = field(default=_not_granted, compare=False, repr=False)

    def may_publish(self, topic: str) -> bool:
        if topic.startswith(HOST_NAMESPACE) and topic not in CAPSULE_MAY_PUBLISH:
            return False
        if not super().may_publish(topic):
            return False
        return not asks_others(topic) or self.bus_request_granted()

    def may_subscribe(self, pattern: str) -> bool:
        if _may_reach(pattern, HOST_NAMESPACE) and not (
            pattern in CAPSULE_MAY_SUBSCRIBE or pattern.startswith(CAPSULE_MAY_SUBSCRIBE_UNDER)
        ):
            return False
        if not super().may_subscribe(pattern):
            return False
        return not hears_only_replies(pattern) or self.bus_request_granted()

    def may_receive(self, message: Message) -> bool:
        return not is_others_reply(message, self.source_id) or self.bus_request_granted()
