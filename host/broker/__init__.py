"""The broker: describe and templates fan-outs, read and completion broadcasts, for one principal at a time.

It knows the resource contract and nothing about MCP or wasm; it needs only a
bus (`astrid.host.bus.Bus`). `client.BrokerClient` is the one way in, bound to
one verified principal (the MCP server, `astrid resources`).
"""

from astrid.host.broker.broker import Broker
from astrid.host.broker.cache import Snapshot, SnapshotCache, TemplateSnapshot
from astrid.host.broker.client import BrokerClient
from astrid.host.broker.complete import check_complete_reply
from astrid.host.broker.kinds import DESCRIBE, TEMPLATES
from astrid.host.broker.read import Read
from astrid.host.broker.read_reply import check_read_reply
from astrid.host.broker.read_round import ReadStatus
from astrid.host.broker.templates import pick_template

__all__ = [
    "DESCRIBE",
    "TEMPLATES",
    "Broker",
    "BrokerClient",
    "Read",
    "ReadStatus",
    "Snapshot",
    "SnapshotCache",
    "TemplateSnapshot",
    "check_complete_reply",
    "check_read_reply",
    "pick_template",
]
