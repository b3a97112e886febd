"""Raw MCP JSON-RPC messages, for tests that speak the wire themselves rather than through an SDK client."""

from __future__ import annotations


def initialize_request(client: str) -> dict:
    """The `initialize` request a client named `client` opens its session with."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": client, "version": "0"},
        },
    }
