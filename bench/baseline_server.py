"""The baseline: a plain `mcp` low-level server serving the same resources from a dict.

This is the physical floor for this stack (same SDK, same transport, no bus,
no wasm). Run: python -m bench.baseline_server K (stdio), or
python -m bench.baseline_server K --http 127.0.0.1:0 (streamable HTTP on
uvicorn, as `astrid mcp serve --http` serves; the URL goes to stderr).
"""

from __future__ import annotations

import base64
import sys

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

from bench.capsule.payloads import BLOB, TEXT, fresh_keys_for, keys_for


def build(capsule_count: int) -> Server:
    resources: dict[str, types.Resource] = {}
    contents: dict[str, types.TextResourceContents | types.BlobResourceContents] = {}
    blob64 = base64.b64encode(BLOB).decode()
    for index in range(capsule_count):
        for key in keys_for(f"{index:02d}"):
            uri = "astrid://bench/" + key
            is_text = "-text-" in key
            resources[uri] = types.Resource(
                uri=uri,
                name=key,
                mime_type="text/plain" if is_text else "application/octet-stream",
                size=len(TEXT) if is_text else len(BLOB),
            )
            contents[uri] = (
                types.TextResourceContents(uri=uri, mime_type="text/plain", text=TEXT)
                if is_text
                else types.BlobResourceContents(uri=uri, mime_type="application/octet-stream", blob=blob64)
            )
        for key in fresh_keys_for(f"{index:02d}"):
            uri = "astrid://bench-fresh/" + key
            resources[uri] = types.Resource(uri=uri, name=key, mime_type="text/plain", size=len(TEXT))
            contents[uri] = types.TextResourceContents(uri=uri, mime_type="text/plain", text=TEXT)
    listing = sorted(resources.values(), key=lambda r: r.uri)

    async def on_list(ctx, params):
        return types.ListResourcesResult(resources=listing)

    async def on_read(ctx, params):
        found = contents.get(params.uri)
        if found is None:
            raise MCPError(code=-32002, message="Resource not found", data={"uri": params.uri})
        return types.ReadResourceResult(contents=[found])

    return Server("baseline", version="1", on_list_resources=on_list, on_read_resource=on_read)


def serve_http(server: Server, address: str) -> None:
    import socket

    import uvicorn

    host, _, port = address.rpartition(":")
    listener = socket.create_server((host, int(port)))
    print(f"baseline serving at http://{host}:{listener.getsockname()[1]}/mcp", file=sys.stderr, flush=True)
    app = server.streamable_http_app(streamable_http_path="/mcp", host=host)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[listener])


def main() -> None:
    server = build(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    if "--http" in sys.argv:
        serve_http(server, sys.argv[sys.argv.index("--http") + 1])
        return
    options = server.create_initialization_options(NotificationOptions(resources_changed=True))

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, options)

    anyio.run(run)


if __name__ == "__main__":
    main()
