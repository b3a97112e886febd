"""`--workers 2` against one process over HTTP, 32 clients, on two capsules: does a second front end pay?

Run: python -m bench.workers_load BENCH_DIR BURN_DIR [SECONDS] [ROUNDS] -> one JSON object.
BENCH_DIR holds the bench capsule(s) (a 1 KiB text read: the MCP work
dominates), BURN_DIR the burn capsule (bench/burn_capsule: ~2 ms of guest CPU
per read). For each, `astrid mcp serve --http` runs with `--workers 1` and
`--workers 2` at the same time (the idle one costs nothing), and the same
load (http_load's: 32 MCP sessions, each its own connection pool, in this
process) drives them in turn, ROUNDS times interleaved, so both see the same
moments of a machine other work shares. The ratio is per round (2 over 1),
and its median is the result. The load generator runs on the same two cores.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import psutil
from mcp import Client

from bench.http_load import load, started

CLIENTS = 32
WORKERS = (1, 2)
BENCH_URI, BURN_URI = "astrid://bench/00-text-0", "astrid://burn/work"


def serve_command(folder: Path, workers: int) -> list[str]:
    astrid = str(Path(sys.executable).parent / "astrid")
    command = [astrid, "mcp", "serve", "--http", "127.0.0.1:0", "--no-auth", "--principal", "bench"]
    command += ["--no-watch", "--no-access-log", "--capsules", str(folder), "--workers", str(workers)]
    # one principal, 32 sessions and requests: above the default caps of 16 per user (limits, not the load measured)
    return command + ["--http-limit", "sessions-per-principal=64", "--http-limit", "requests-per-principal=64"]


def in_process_read(folder: Path, uri: str, reads: int = 200) -> dict[str, float]:
    """One read in process (no HTTP): its median wall time and its mean CPU time (ms), what the
    capsule and the MCP layer cost without the network; CPU time is the steadier on a shared machine."""
    from astrid.host.mcp.server import AstridMcpServer
    from astrid.host.runtime import Runtime, RuntimeConfig

    runtime = Runtime(RuntimeConfig(capsule_paths=sorted(p for p in folder.iterdir() if p.is_dir()), principal="bench"))
    runtime.start(background=False)

    async def measure() -> dict[str, float]:
        samples = []
        async with Client(AstridMcpServer(runtime, limits=runtime.limits).server) as client:
            for _ in range(20):
                await client.read_resource(uri)
            cpu = time.process_time()
            for _ in range(reads):
                began = time.perf_counter()
                await client.read_resource(uri)
                samples.append(time.perf_counter() - began)
            cpu = time.process_time() - cpu
        return {"median_ms": statistics.median(samples) * 1000, "cpu_ms": cpu / reads * 1000}

    try:
        return anyio.run(measure)
    finally:
        runtime.close()


def compare(folder: Path, uri: str, seconds: float, rounds: int) -> dict[str, Any]:
    """Rounds of (one process, two workers) under the same load; the median of their ratios."""
    runs: dict[int, list[dict[str, Any]]] = {workers: [] for workers in WORKERS}
    with ExitStack() as stack:
        urls = {w: stack.enter_context(started(serve_command(folder, w), "ready in")) for w in WORKERS}
        for workers in WORKERS:  # warm: every front end's sandboxes made, its caches filled
            anyio.run(load, urls[workers], CLIENTS, 1.0, uri)
        servers = {w: _server_of(w) for w in WORKERS}
        for round_number in range(rounds):
            order = WORKERS if round_number % 2 == 0 else WORKERS[::-1]  # neither always goes first
            for workers in order:
                print(f"workers load: {uri}, --workers {workers}, round {round_number + 1}", file=sys.stderr)
                client, server, began = _cpu(psutil.Process()), _cpu(servers[workers]), time.perf_counter()
                run = anyio.run(load, urls[workers], CLIENTS, seconds, uri)
                # the cores each side used over the run (sessions opened and warmed included): is the
                # load generator the limit?
                wall = time.perf_counter() - began
                run["client_cores"] = (_cpu(psutil.Process()) - client) / wall
                run["server_cores"] = (_cpu(servers[workers]) - server) / wall
                runs[workers].append(run)
    ratios = [two["throughput_rps"] / one["throughput_rps"] for one, two in zip(runs[1], runs[2], strict=True)]
    return {
        "uri": uri,
        "clients": CLIENTS,
        "runs": {str(w): runs[w] for w in WORKERS},
        "ratios": ratios,
        "ratio_median": statistics.median(ratios),
        "rps_median": {str(w): statistics.median(r["throughput_rps"] for r in runs[w]) for w in WORKERS},
    }


def _server_of(workers: int) -> psutil.Process:
    """The `astrid mcp serve ... --workers N` this process started."""
    for child in psutil.Process().children():
        command = child.cmdline()
        if "serve" in command and command[-1 - command[::-1].index("--workers") + 1] == str(workers):
            return child
    raise RuntimeError(f"no astrid serve --workers {workers} among this process's children")


def _cpu(process: psutil.Process) -> float:
    """CPU seconds of `process` and its children so far."""
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def main() -> None:
    bench_dir, burn_dir = Path(sys.argv[1]), Path(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    results: dict[str, Any] = {"seconds": seconds, "rounds": rounds}
    for name, folder, uri in (("bench", bench_dir, BENCH_URI), ("burn", burn_dir, BURN_URI)):
        results[name] = compare(folder, uri, seconds, rounds)
        results[name]["in_process_read"] = in_process_read(folder, uri)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
