"""The broker: describe and templates fan-outs, read and completion broadcasts, behind the front doors.

It knows the resource contract and nothing about MCP or wasm; it needs only a
bus (`astrid.host.bus.Bus`). `client.FrontDoorClient` is the other side of
the front doors, for whoever asks (the MCP server, `astrid resources`).
"""

from astrid.host.broker.broker import Broker
from astrid.host.broker.cache import Snapshot, SnapshotCache, TemplateSnapshot
from astrid.host.broker.client import FrontDoorClient
from astrid.host.broker.complete import CompletionOutcome, check_complete_reply
from astrid.host.broker.describe import RoundResult, merge_round
from astrid.host.broker.read_reply import ReadOutcome, check_read_reply
from astrid.host.broker.read_round import ReadStatus
from astrid.host.broker.templates import TemplatesResult, merge_templates, pick_template

__all__ = [
    "Broker",
    "CompletionOutcome",
    "FrontDoorClient",
    "ReadOutcome",
    "ReadStatus",
    "RoundResult",
    "Snapshot",
    "SnapshotCache",
    "TemplateSnapshot",
    "TemplatesResult",
    "check_complete_reply",
    "check_read_reply",
    "merge_round",
    "merge_templates",
    "pick_template",
]
