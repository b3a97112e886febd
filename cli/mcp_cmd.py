"""`astrid mcp ...` commands."""

from __future__ import annotations

from astrid.cli.main import mcp
from astrid.cli.errors import UserError


@mcp.command("serve")
def mcp_serve() -> None:
    """Serve capsule resources over MCP stdio."""
    raise UserError("`astrid mcp serve` is not yet available")


@mcp.command("config")
def mcp_config() -> None:
    """Print a Claude Desktop config entry."""
    raise UserError("`astrid mcp config` is not yet available")
