"""Network addresses as an operator types them: `[HOST:]PORT`, and whether a host is this machine only.

One answer for every listener and URL check (the MCP HTTP front end, the
metrics listener, a JWKS URL): a host that one of them treats as loopback,
all of them do.
"""

from __future__ import annotations

import ipaddress

DEFAULT_HOST = "127.0.0.1"  # what `[HOST:]PORT` binds when HOST is left out: this machine only


def is_loopback(host: str) -> bool:
    """Is `host` (a name or an address, `[v6]` too) this machine only?"""
    bare = host.strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def host_and_port(address: str) -> tuple[str, int] | None:
    """`[HOST:]PORT` (HOST may be `[v6]`) -> (host, port), the host defaulting to DEFAULT_HOST;
    None when it is not that shape or the port is not 0-65535."""
    host, _, port_text = address.rpartition(":")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        return None
    return host.strip("[]") or DEFAULT_HOST, int(port_text)
