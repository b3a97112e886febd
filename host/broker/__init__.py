"""The broker: describe fan-out and read broadcast behind the front doors.

It knows the resource contract and nothing about MCP or wasm; it needs only a
bus (`astrid.host.bus.Bus`). `client.FrontDoorClient` is the other side of
the front doors, for whoever asks (the MCP server, `astrid resources`).
"""

from astrid.host.broker.broker import Broker
from astrid.host.broker.cache import Snapshot, SnapshotCache
from astrid.host.broker.client import FrontDoorClient
from astrid.host.broker.describe import RoundResult, merge_round
from astrid.host.broker.read_reply import ReadOutcome, check_read_reply
from astrid.host.broker.read_round import ReadStatus

__all__ = [
    "Broker",
    "FrontDoorClient",
    "ReadOutcome",
    "ReadStatus",
    "RoundResult",
    "Snapshot",
    "SnapshotCache",
    "check_read_reply",
    "merge_round",
]
