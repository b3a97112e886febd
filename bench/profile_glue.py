"""Where an MCP request's time goes: the glue between the MCP SDK and the broker.

Run: python -m bench.profile_glue [ROUNDS] [--profile] [--stages] [--capsule DIR]

In-process, on the real kernel and the bench capsule, it times the same
requests at these depths (median and p90 per request, in ms):

- `client`: the broker client a session holds (`BrokerClient.read(uri).result()`,
  `list_resources`), from the calling thread: the broker's own work;
- `mcp`: mcp's in-memory `Client` against `AstridMcpServer` (+ the SDK's
  session, the worker-thread hop, reshaping and the result models);
- `baseline`: the same `Client` against the baseline server
  (bench/baseline_server.py): what the SDK itself costs in-process.

The differences between rows are the glue. `--profile` adds a cProfile of
the `mcp` rounds, with the worker-thread part profiled too (one profile per
thread, merged), sorted by own time. `--stages` splits an MCP read into the
broker call in the worker thread (`door`), the thread hop around it
(`hop` = `_call` - `door`) and the handler's own work (`handler` - `_call`).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from astrid.host.kernel.kernel import Kernel
from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from bench import baseline_server

HERE = Path(__file__).resolve().parent
PRINCIPAL = "bench"
BASELINE_TEXT = "astrid://bench/00-text-0"
BASELINE_BLOB = "astrid://bench/00-blob-0"


def stats(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:7.3f} ({p90 * 1000:6.3f})"


def timed(call: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


async def timed_async(call: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


class Stages:
    """Times `AstridMcpServer._on_read`, its `_call` and the front-door call inside, per read."""

    def __init__(self) -> None:
        self.reads: list[tuple[float, float, float]] = []  # (handler, _call, door) seconds
        self._call = self._door = 0.0

    def install(self) -> None:
        stages, call, on_read = self, AstridMcpServer._call, AstridMcpServer._on_read

        async def timed_call(server: AstridMcpServer, principal: str, door_call: Any, **kwargs: Any) -> Any:
            def in_worker(door: Any) -> Any:
                started = time.perf_counter()
                try:
                    return door_call(door)
                finally:
                    stages._door = time.perf_counter() - started

            started = time.perf_counter()
            try:
                return await call(server, principal, in_worker, **kwargs)
            finally:
                stages._call = time.perf_counter() - started

        async def timed_read(server: AstridMcpServer, ctx: Any, params: Any) -> Any:
            started = time.perf_counter()
            try:
                return await on_read(server, ctx, params)
            finally:
                stages.reads.append((time.perf_counter() - started, stages._call, stages._door))

        AstridMcpServer._call = timed_call  # type: ignore[method-assign,assignment]
        AstridMcpServer._on_read = timed_read  # type: ignore[method-assign,assignment]

    def report(self, rounds: int) -> str:
        # drive_mcp reads text `rounds` times, then blob `rounds` times
        lines = ["MCP read stages, median ms: handler = _call + own work; _call = door + hop"]
        for name, part in (("text", self.reads[-2 * rounds : -rounds]), ("blob", self.reads[-rounds:])):
            handler = statistics.median(h for h, _, _ in part) * 1000
            door = statistics.median(d for _, _, d in part) * 1000
            hop = statistics.median(c - d for _, c, d in part) * 1000
            own = statistics.median(h - c for h, c, _ in part) * 1000
            lines.append(f"{name}: handler {handler:.3f}  door {door:.3f}  hop {hop:.3f}  handler's own {own:.3f}")
        return "\n".join(lines)


class ThreadProfiles:
    """cProfile in every thread that runs a front-door call, plus the caller's."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self._local = threading.local()
        self.on = False

    def wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def profiled(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return call(*args, **kwargs)
            profile = getattr(self._local, "profile", None)
            if profile is None:
                profile = self._local.profile = cProfile.Profile()
                self.profiles.append(profile)
            profile.enable()
            try:
                return call(*args, **kwargs)
            finally:
                profile.disable()

        return profiled

    def report(self, main: cProfile.Profile, top: int = 45) -> str:
        out = io.StringIO()
        merged = pstats.Stats(main, stream=out)
        for profile in self.profiles:
            merged.add(profile)
        merged.sort_stats("tottime").print_stats(top)
        merged.sort_stats("cumulative").print_stats(top)
        return out.getvalue()


async def drive_mcp(
    server: Any, rounds: int, profiles: ThreadProfiles | None, text: str, blob: str
) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    async with Client(server) as outer:
        client = outer.session  # no client-side response cache: every request reaches the server
        await client.list_resources()
        for uri in (text, blob):  # warm every path once
            await client.read_resource(uri)
        main = cProfile.Profile() if profiles is not None else None
        if profiles is not None and main is not None:
            profiles.on = True
            main.enable()
        results["read_text"] = await timed_async(lambda: client.read_resource(text), rounds)
        results["read_blob"] = await timed_async(lambda: client.read_resource(blob), rounds)
        results["list_warm"] = await timed_async(client.list_resources, rounds)
        if profiles is not None and main is not None:
            main.disable()
            profiles.on = False
            print(profiles.report(main))
    return results


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rounds = int(args[0]) if args else 300
    profile = "--profile" in sys.argv
    capsule = Path(sys.argv[sys.argv.index("--capsule") + 1]) if "--capsule" in sys.argv else HERE / "capsule"
    runtime = Runtime(RuntimeConfig(capsule_paths=[capsule], principal=PRINCIPAL))
    runtime.start(background=False)
    runtime.wait_ready(120)
    kernel = runtime.kernel
    assert isinstance(kernel, Kernel)
    deadline = time.monotonic() + 30
    while kernel.sandboxes.live_instances() < len(kernel.loaded()) and time.monotonic() < deadline:
        time.sleep(0.05)  # prewarming runs in the background: wait for it, bounded
    door = runtime.client_for(PRINCIPAL)
    rows: dict[str, dict[str, list[float]]] = {}
    uris = [d.uri for d in door.list_resources()]
    text = next(u for u in uris if "-text-" in u)  # the bench capsule: index "0"; a bench K folder: "00"
    blob = next(u for u in uris if "-blob-" in u)
    for _ in range(20):  # warm-up
        door.read(text).result(), door.read(blob).result(), door.list_resources()
    rows["client"] = {
        "read_text": timed(lambda: door.read(text).result(), rounds),
        "read_blob": timed(lambda: door.read(blob).result(), rounds),
        "list_warm": timed(door.list_resources, rounds),
    }
    profiles = ThreadProfiles() if profile else None
    if profiles is not None:
        cls = type(door)
        cls.read = profiles.wrap(cls.read)  # type: ignore[method-assign]
        cls.list_resources = profiles.wrap(cls.list_resources)  # type: ignore[method-assign]
    stages = Stages() if "--stages" in sys.argv else None
    if stages is not None:
        stages.install()
    server = AstridMcpServer(runtime)
    rows["mcp"] = anyio.run(drive_mcp, server.server, rounds, profiles, text, blob)
    rows["baseline"] = anyio.run(drive_mcp, baseline_server.build(1), rounds, None, BASELINE_TEXT, BASELINE_BLOB)
    print(f"{rounds} rounds each, {len(uris)} resources, median (p90) ms per request")
    print(f"{'depth':<10} {'read_text':>17} {'read_blob':>17} {'list_warm':>17}")
    for depth, row in rows.items():
        print(f"{depth:<10} {stats(row['read_text'])} {stats(row['read_blob'])} {stats(row['list_warm'])}")
    if stages is not None:
        print(stages.report(rounds))
    runtime.close()


if __name__ == "__main__":
    main()
