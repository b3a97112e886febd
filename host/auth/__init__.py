"""Who a request over HTTP runs as: principal names, and the sources that turn a bearer token into one.

The auth layer knows tokens and principal names, and nothing of MCP, the bus
or wasm: the MCP layer adapts its sources to the MCP SDK
(`astrid.host.mcp.auth.BearerVerifier`), and the CLI manages the token file
(`astrid mcp token`).
"""

from astrid.host.auth.principal import (
    PRINCIPAL_MAX,
    BearerIdentity,
    IdentitySource,
    PrincipalSource,
    principal_problem,
)
from astrid.host.auth.tokens import TokenEntry, TokenStore

__all__ = [
    "PRINCIPAL_MAX",
    "BearerIdentity",
    "IdentitySource",
    "PrincipalSource",
    "TokenEntry",
    "TokenStore",
    "principal_problem",
]
