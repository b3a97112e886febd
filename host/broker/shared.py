"""What the broker's parts share: the bus and who it speaks as, its limits, who may serve what,
capsule names, the per-principal snapshots and kept reads, and the counters.

Each job of the broker (`listings`, `reads`, `events`, `complete`) is a class
of its own that takes this one `Shared`: the state they have in common is
spelled out here, and nothing else passes between them but calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from astrid.host.broker.answered import AnsweredReads
from astrid.host.broker.authority import UriAuthority
from astrid.host.broker.cache import SnapshotCache
from astrid.host.broker.names import CapsuleNames
from astrid.host.broker.read_cache import ReadCache
from astrid.host.bus import Bus, Participant
from astrid.host.limits import Limits

KEPT_TIMES = 1000  # round and read times kept for the stats


@dataclass
class BrokerStats:
    describe_rounds: int = 0
    templates_rounds: int = 0
    reads: int = 0
    completions: int = 0
    updates: int = 0  # announcements handed on to the MCP server
    updates_refused: int = 0  # announcements of a URI the announcer does not own, or malformed
    last_round_s: float = 0.0
    last_read_s: float = 0.0
    round_seconds: list[float] = field(default_factory=list)
    read_seconds: list[float] = field(default_factory=list)

    def round(self, kind: str, seconds: float) -> None:
        """A describe or templates round done; only a describe round's time is kept (`last_round_s`)."""
        if kind == "templates":
            self.templates_rounds += 1
            return
        self.describe_rounds += 1
        self.last_round_s = seconds
        _keep(self.round_seconds, seconds)

    def read(self, seconds: float) -> None:
        self.reads += 1
        self.last_read_s = seconds
        _keep(self.read_seconds, seconds)


def _keep(values: list[float], value: float) -> None:
    values.append(value)
    del values[:-KEPT_TIMES]


@dataclass
class Shared:
    bus: Bus
    participant: Participant  # the broker's own: whom its requests come from, and who hears the replies
    limits: Limits
    authority: UriAuthority  # who may serve which URIs (namespaces)
    names: CapsuleNames  # capsules by name in failures and logs
    cache: SnapshotCache = field(default_factory=SnapshotCache)  # describe and templates snapshots
    reads: ReadCache = field(default_factory=ReadCache)  # declared-fresh reads
    answered: AnsweredReads = field(default_factory=AnsweredReads)  # reads an owner answered (first_reads)
    stats: BrokerStats = field(default_factory=BrokerStats)

    def __post_init__(self) -> None:
        # Every capsule-set change drops the principal's kept reads with its snapshots.
        self.cache.on_invalidate(self.reads.invalidate)
