"""The broker: describe fan-out and read broadcast behind the MCP front doors.

It knows the resource contract and nothing about MCP or wasm; it needs only a
bus (`astrid.host.kernel.bus.Bus`).
"""

from astrid.host.broker.broker import (
    DESCRIBE_REPLIES,
    DESCRIBE_TOPIC,
    READ_REPLY_PREFIX,
    READ_REQUEST_TOPIC,
    Broker,
    broker_participant,
)
from astrid.host.broker.cache import Snapshot, SnapshotCache
from astrid.host.broker.describe import RoundResult, merge_round
from astrid.host.broker.read import ReadOutcome, check_read_reply

__all__ = [
    "Broker",
    "DESCRIBE_REPLIES",
    "DESCRIBE_TOPIC",
    "READ_REPLY_PREFIX",
    "READ_REQUEST_TOPIC",
    "ReadOutcome",
    "RoundResult",
    "Snapshot",
    "SnapshotCache",
    "broker_participant",
    "check_read_reply",
    "merge_round",
]
