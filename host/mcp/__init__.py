"""The MCP layer: mcp 2.3.0's low-level Server in front of the broker.

It knows MCP and nothing about wasm or the broker's insides: it asks a
`Backend` (in production `astrid.host.runtime.Runtime`, whose front-door
client reaches the broker over the bus).
"""

from astrid.host.mcp.server import AstridMcpServer, Backend

__all__ = ["AstridMcpServer", "Backend"]
