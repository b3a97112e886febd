"""Drive one MCP server over stdio and time what a client sees."""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client


@dataclass
class Timings:
    startup_s: float = 0.0
    list_warm: list[float] = field(default_factory=list)
    read_text: list[float] = field(default_factory=list)
    read_blob: list[float] = field(default_factory=list)
    read_fresh: list[float] = field(default_factory=list)  # resources that declare max_age_s
    resources: int = 0

    def add(self, more: Timings) -> None:
        """Another block of rounds on another server of the same system."""
        self.resources = more.resources
        for samples in ("list_warm", "read_text", "read_blob", "read_fresh"):
            getattr(self, samples).extend(getattr(more, samples))


def summary(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"median_ms": float("nan"), "p99_ms": float("nan"), "n": 0}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"median_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000, "n": len(ordered)}


async def drive(command: list[str], env: dict[str, str], rounds: int, startup_only: bool = False) -> Timings:
    timings = Timings()
    params = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **env})
    started = time.perf_counter()
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_resources()
            timings.startup_s = time.perf_counter() - started
            timings.resources = len(listed.resources)
            if startup_only:
                return timings
            uris = [r.uri for r in listed.resources]
            texts = [u for u in uris if "-text-" in u] or uris
            blobs = [u for u in uris if "-blob-" in u] or uris
            fresh = [u for u in uris if "-fresh-" in u] or texts
            for n in range(rounds):
                t = time.perf_counter()
                await session.list_resources()
                timings.list_warm.append(time.perf_counter() - t)
                t = time.perf_counter()
                await session.read_resource(texts[n % len(texts)])
                timings.read_text.append(time.perf_counter() - t)
                t = time.perf_counter()
                await session.read_resource(blobs[n % len(blobs)])
                timings.read_blob.append(time.perf_counter() - t)
                t = time.perf_counter()
                await session.read_resource(fresh[n % len(fresh)])
                timings.read_fresh.append(time.perf_counter() - t)
    return timings


async def cold_list(command: list[str], env: dict[str, str], settle_s: float = 2.0) -> float:
    """Time of the first list on a fresh server, once its capsules have loaded.

    The describe snapshot is empty (a full fan-out) while loading is done, so
    this measures the fan-out, not the start-up.
    """
    params = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **env})
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.send_ping()
            await anyio.sleep(settle_s)  # bounded: capsules load in well under this
            t = time.perf_counter()
            await session.list_resources()
            return time.perf_counter() - t


def python_command(*args: str) -> list[str]:
    return [sys.executable, *args]
