"""What observability costs per request: tracing and metrics off, tracing on, metrics on (docs/operations.md).

Run: python -m bench.telemetry CAPSULE_DIR ROUNDS -> one JSON object.

In one process, one runtime and one `AstridMcpServer`, driven by the MCP
SDK's in-memory client (no stdio, no second process: what is left is the
server's own path). The variants take turns in short blocks, so a busy
machine's drift hits each alike:

- `off`, `off_again`: the default. Two samples of the same thing: their
  ratio is the noise floor the others are read against;
- `tracing`: every request traced, spans exported over OTLP http/protobuf
  (the batch processor's thread) to a loopback endpoint that discards them;
- `metrics`: recorded as with `--metrics` (never scraped here).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
from mcp import Client

from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from astrid.host.telemetry import metrics, setup, tracing

BLOCK = 25  # reads per turn
VARIANTS = ("off", "tracing", "metrics", "off_again")


@contextmanager
def sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint on loopback that answers 200 and keeps nothing."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def switch(variant: str, provider: object) -> None:
    tracing.disable()
    metrics.disable()
    if variant == "tracing":
        tracing.enable(provider)
    elif variant == "metrics":
        metrics.enable()


async def measure(runtime: Runtime, rounds: int, provider: object) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    async with Client(AstridMcpServer(runtime, limits=runtime.limits).server) as client:
        session = client.session
        uris = [r.uri for r in (await session.list_resources()).resources]
        texts = [u for u in uris if "-text-" in u] or uris
        for n in range(20):  # warm: sandboxes made, snapshots cached, both paths run once
            switch(VARIANTS[n % len(VARIANTS)], provider)
            await session.read_resource(texts[n % len(texts)])
        done = 0
        while done < rounds:
            for name in VARIANTS:
                switch(name, provider)
                for n in range(BLOCK):
                    started = time.perf_counter()
                    await session.read_resource(texts[n % len(texts)])
                    samples[name].append(time.perf_counter() - started)
            done += BLOCK
    switch("off", provider)
    return samples


def main() -> None:
    folder, rounds = Path(sys.argv[1]), int(sys.argv[2])
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        del os.environ[name]
    runtime = Runtime(RuntimeConfig(capsule_paths=sorted(p for p in folder.iterdir() if p.is_dir()), principal="bench"))
    runtime.start(background=False)
    try:
        with sink() as endpoint:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint  # the exporter reads the environment itself
            provider = setup.configure(os.environ)
            try:
                samples = anyio.run(measure, runtime, rounds, provider)
            finally:
                setup.shutdown()
    finally:
        runtime.close()
    result: dict = {"rounds": rounds, "block": BLOCK, "read_text": {}, "ratios": {}}
    for name, values in samples.items():
        ordered = sorted(values)
        result["read_text"][name] = {
            "median_us": statistics.median(ordered) * 1e6,
            "p90_us": ordered[int(0.9 * (len(ordered) - 1))] * 1e6,
            "n": len(ordered),
        }
    off = result["read_text"]["off"]["median_us"]
    for name in ("off_again", "tracing", "metrics"):
        measured = result["read_text"][name]["median_us"]
        result["ratios"][name] = measured / off
        result["read_text"][name]["added_us"] = measured - off
    print(json.dumps(result))


if __name__ == "__main__":
    main()
