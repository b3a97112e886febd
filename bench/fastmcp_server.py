"""The second baseline: FastMCP serving the same resources as bench/baseline_server.py.

What users compare astrid with: the same URIs, bytes and MIME types, as
FastMCP's own static resources (TextResource, BinaryResource), on FastMCP's
own stdio and streamable HTTP transports. FastMCP's resources carry no
`size`, so its listing omits it (the clients measured never read it).
Run: python -m bench.fastmcp_server K (stdio), or
python -m bench.fastmcp_server K --http 127.0.0.1:0 (the URL goes to stderr).
"""

from __future__ import annotations

import os
import sys

# Before fastmcp is imported: no banner, no update check, no telemetry, quiet logs (each would be
# start-up work or output the other servers do not have).
os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
os.environ.setdefault("FASTMCP_CHECK_FOR_UPDATES", "off")
os.environ.setdefault("FASTMCP_TELEMETRY_MODE", "off")
os.environ.setdefault("FASTMCP_LOG_LEVEL", "WARNING")

from fastmcp import FastMCP
from fastmcp.resources import BinaryResource, TextResource
from pydantic import AnyUrl

from bench.capsule.payloads import BLOB, TEXT, fresh_keys_for, keys_for


def build(capsule_count: int) -> FastMCP:
    server = FastMCP("fastmcp-baseline")
    for index in range(capsule_count):
        for key in keys_for(f"{index:02d}"):
            uri = AnyUrl("astrid://bench/" + key)
            if "-text-" in key:
                server.add_resource(TextResource(uri=uri, name=key, mime_type="text/plain", text=TEXT))
            else:
                server.add_resource(BinaryResource(uri=uri, name=key, mime_type="application/octet-stream", data=BLOB))
        for key in fresh_keys_for(f"{index:02d}"):
            uri = AnyUrl("astrid://bench-fresh/" + key)
            server.add_resource(TextResource(uri=uri, name=key, mime_type="text/plain", text=TEXT))
    return server


def serve_http(server: FastMCP, address: str) -> None:
    import socket

    import anyio

    host, _, port = address.rpartition(":")
    listener = socket.create_server((host, int(port)))
    print(f"fastmcp serving at http://{host}:{listener.getsockname()[1]}/mcp", file=sys.stderr, flush=True)
    anyio.run(lambda: server.run_http_async(show_banner=False, host=host, path="/mcp", sockets=[listener]))


def main() -> None:
    server = build(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    if "--http" in sys.argv:
        serve_http(server, sys.argv[sys.argv.index("--http") + 1])
        return
    server.run("stdio", show_banner=False)


if __name__ == "__main__":
    main()
