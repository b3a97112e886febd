"""Topics the host keeps for itself, whatever a capsule's manifest says.

The front doors, their replies and kernel events are host-only: a capsule can
never publish on `astrid.v1.*` (except the kernel's inventory request) and
can never subscribe under `astrid.v1.*` (front-door requests and replies are
host traffic) except to the capsule-set event and the inventory replies. This
closes the confused-deputy and eavesdropping paths through the bus even for a
manifest that grants `*`-wide ACLs.
"""

from __future__ import annotations

from dataclasses import dataclass

from astrid.host.bus import Participant
from astrid.host.contract.topics import (
    CAPSULE_MAY_PUBLISH,
    CAPSULE_MAY_SUBSCRIBE,
    CAPSULE_MAY_SUBSCRIBE_UNDER,
    HOST_NAMESPACE,
)


def _may_reach(pattern: str, prefix: str) -> bool:
    """Can `pattern` match some topic that starts with `prefix`?"""
    if pattern.endswith(".*"):
        base = pattern[:-1]
        return prefix.startswith(base) or base.startswith(prefix)
    return pattern.startswith(prefix)


@dataclass(frozen=True)
class CapsuleParticipant(Participant):
    """A capsule on the bus: its manifest ACLs minus the host's reserved topics."""

    def may_publish(self, topic: str) -> bool:
        if topic.startswith(HOST_NAMESPACE) and topic not in CAPSULE_MAY_PUBLISH:
            return False
        return super().may_publish(topic)

    def may_subscribe(self, pattern: str) -> bool:
        if _may_reach(pattern, HOST_NAMESPACE) and not (
            pattern in CAPSULE_MAY_SUBSCRIBE or pattern.startswith(CAPSULE_MAY_SUBSCRIBE_UNDER)
        ):
            return False
        return super().may_subscribe(pattern)
