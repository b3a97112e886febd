"""The MCP layer: mcp 2.3.0's low-level Server in front of the broker.

It knows MCP and nothing about wasm; it reaches the broker only over the bus
(`frontdoor.FrontDoorClient`). `runtime.Runtime` starts kernel + broker for
one principal and is shared by `astrid mcp serve` and `astrid resources`.
"""

from astrid.host.mcp.frontdoor import BrokerUnavailable, FrontDoorClient, mcp_participant
from astrid.host.mcp.server import AstridMcpServer, Backend, BackendNotReady

__all__ = [
    "AstridMcpServer",
    "Backend",
    "BackendNotReady",
    "BrokerUnavailable",
    "FrontDoorClient",
    "mcp_participant",
]
