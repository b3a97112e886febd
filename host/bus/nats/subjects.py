"""Bus topics as NATS subjects, and the subjects a capsule host may use (its NATS permissions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from astrid.host.bus.topics import ClusterTopics


def subject_for(pattern: str) -> str:
    """The NATS subject of a bus topic or pattern: a trailing `*` (one or more segments) is `>`."""
    return pattern[:-1] + ">" if pattern.endswith("*") else pattern


def host_permissions(publish: Sequence[str], cluster: ClusterTopics, listen: Sequence[str]) -> dict[str, Any]:
    """The NATS permissions of a capsule host: it may publish what its capsules' manifests allow
    on the shared topics, plus the bus's own host topics, and hear the requests (`listen`)."""
    return {
        "publish": sorted({subject_for(pattern) for pattern in publish} | {subject_for(cluster.pattern)}),
        "subscribe": sorted({subject_for(p) for p in listen} | {subject_for(cluster.pattern), "_INBOX.>"}),
    }
