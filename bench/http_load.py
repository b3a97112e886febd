"""Concurrency over HTTP: throughput and latency with 1, 8 and 32 concurrent clients.

Run: python -m bench.http_load CAPSULE_DIR K [SECONDS] -> one JSON object.
Starts `astrid mcp serve --http` (no auth, loopback, one principal) on the
K bench capsules in CAPSULE_DIR, and the two baselines over HTTP on the same
K (the low-level server and FastMCP), then for each client count drives the
three in turn: every client is its own
MCP session (its own HTTP connection pool) reading the same text resource in
a loop for SECONDS. The clients run in this process, so both systems share
the same client-side cost on the same two cores.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

CLIENT_COUNTS = (1, 8, 32)
URI = "astrid://bench/00-text-0"
_URL = re.compile(r"(https?://\S+/mcp)")


@contextmanager
def started(command: list[str], ready: str):
    """Run a server; yield its URL once its stderr has said `ready`."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = None
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 120
        for raw in process.stderr:
            line = raw.decode(errors="replace")
            found = _URL.search(line)
            url = url or (found.group(1) if found else None)
            if ready in line and url:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} did not get ready")
        if url is None:
            raise RuntimeError(f"{' '.join(command)} exited before serving")
        # keep reading: a server whose stderr pipe fills up blocks on its next log line
        threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()  # type: ignore[union-attr]
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


async def _client(
    url: str, seconds: float, latencies: list[float], errors: list[str], gate: anyio.Event, uri: str
) -> None:
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.read_resource(uri)  # warm: this session's first read is not timed
        await gate.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started_at = time.perf_counter()
            try:
                await session.read_resource(uri)
            except Exception as exc:
                errors.append(type(exc).__name__)
                continue
            latencies.append(time.perf_counter() - started_at)


async def load(url: str, clients: int, seconds: float, uri: str = URI) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    gate = anyio.Event()
    started_at = 0.0
    async with anyio.create_task_group() as tasks:
        for _ in range(clients):
            tasks.start_soon(_client, url, seconds, latencies, errors, gate, uri)
        await anyio.sleep(0.5 + 0.05 * clients)  # let every session initialize and warm up
        started_at = time.perf_counter()
        gate.set()
    elapsed = time.perf_counter() - started_at
    ordered = sorted(latencies)
    return {
        "clients": clients,
        "elapsed_s": elapsed,
        "requests": len(ordered),
        "errors": len(errors),
        "throughput_rps": len(ordered) / elapsed,
        "p50_ms": statistics.median(ordered) * 1000 if ordered else 0.0,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else 0.0,
    }


def main() -> None:
    folder, count = Path(sys.argv[1]), int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 and not sys.argv[3].startswith("-") else 5.0
    astrid = str(Path(sys.executable).parent / "astrid")
    astrid_cmd = [astrid, "mcp", "serve", "--http", "127.0.0.1:0", "--no-auth", "--principal", "bench"]
    astrid_cmd += ["--no-watch", "--no-access-log", "--capsules", str(folder)]
    # one principal, 32 sessions and requests: above the default caps of 16 per user (limits, not the load measured)
    astrid_cmd += ["--http-limit", "sessions-per-principal=64", "--http-limit", "requests-per-principal=64"]
    baseline_cmd = [sys.executable, "-m", "bench.baseline_server", str(count), "--http", "127.0.0.1:0"]
    fastmcp_cmd = [sys.executable, "-m", "bench.fastmcp_server", str(count), "--http", "127.0.0.1:0"]
    results: dict[str, Any] = {
        "seconds": seconds,
        "astrid": {},
        "baseline": {},
        "fastmcp": {},
        "throughput_ratio": {},  # astrid / the low-level server
        "throughput_ratio_fastmcp": {},
    }
    with (
        started(astrid_cmd, "ready in") as astrid_url,
        started(baseline_cmd, "baseline serving") as baseline_url,
        started(fastmcp_cmd, "fastmcp serving") as fastmcp_url,
    ):
        urls = {"baseline": baseline_url, "fastmcp": fastmcp_url, "astrid": astrid_url}
        for clients in CLIENT_COUNTS:
            for system, url in urls.items():
                print(f"http load: {system}, {clients} clients, {seconds:g} s ...", file=sys.stderr, flush=True)
                results[system][clients] = anyio.run(load, url, clients, seconds)
            a = results["astrid"][clients]["throughput_rps"]
            results["throughput_ratio"][clients] = a / results["baseline"][clients]["throughput_rps"]
            results["throughput_ratio_fastmcp"][clients] = a / results["fastmcp"][clients]["throughput_rps"]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
