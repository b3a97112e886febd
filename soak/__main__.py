"""`make soak`: concurrent MCP clients as two principals against real capsules.

Each client is a stdio session with its own `astrid mcp serve` (one principal
per server, as Claude Desktop runs it). Every client loops over mixed list and
read requests for a bounded time and checks each answer for the other
principal's marker. Prints one line of figures:

    soak: clients=4 seconds=30 requests=... answered=... errors={...} crashes=0 leaks=0 peak_rss_mib=...

Usage: python -m soak [--clients N] [--seconds S] [--capsules PATH]... [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client

PRINCIPALS = ("soak-alice", "soak-bob")
WARM_REQUESTS = 5
UNKNOWN_URIS = ("astrid://nope", "astrid://docs/../etc/passwd", "astrid://docs/" + "x" * 3000)


@dataclass
class Figures:
    requests: int = 0
    answered: int = 0
    errors: Counter = field(default_factory=Counter)
    crashes: int = 0
    leaks: list[str] = field(default_factory=list)
    unanswered: int = 0
    peak_rss: int = 0
    rss_start: int = 0
    rss_end: int = 0
    warm_clients: int = 0  # clients past their first few answers (servers loaded, sandboxes made)

    def line(self, clients: int, seconds: float) -> str:
        return (
            f"soak: clients={clients} seconds={seconds:.0f} requests={self.requests} answered={self.answered} "
            f"errors={dict(sorted(self.errors.items()))} unanswered={self.unanswered} crashes={self.crashes} "
            f"leaks={len(self.leaks)} peak_rss_mib={self.peak_rss / 2**20:.1f} "
            f"rss_growth_mib={(self.rss_end - self.rss_start) / 2**20:.1f}"
        )


def server_rss() -> int:
    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            if "mcp" in " ".join(child.cmdline()):
                total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


def other_marker(principal: str) -> str:
    return next(p for p in PRINCIPALS if p != principal)


def text_of(result) -> str:
    return "\n".join(getattr(chunk, "text", "") or "" for chunk in result.contents)


async def client(principal: str, capsules: list[str], deadline: float, figures: Figures, seed: int) -> None:
    rng = random.Random(seed)
    astrid = str(Path(sys.executable).parent / "astrid")
    args = ["mcp", "serve", "--principal", principal]
    for path in capsules:
        args += ["--capsules", path]
    params = StdioServerParameters(command=astrid, args=args, env=dict(os.environ))
    try:
        with open(os.devnull, "w") as devnull:
            async with stdio_client(params, errlog=devnull) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    uris: list[str] = []
                    mine = 0
                    while time.monotonic() < deadline:
                        mine += 1
                        if mine == WARM_REQUESTS + 1:
                            figures.warm_clients += 1
                        figures.requests += 1
                        try:
                            with anyio.fail_after(15):
                                if not uris or rng.random() < 0.2:
                                    listed = await session.list_resources()
                                    uris = [r.uri for r in listed.resources]
                                    if any(other_marker(principal) in r.model_dump_json() for r in listed.resources):
                                        figures.leaks.append(f"{principal}: list")
                                else:
                                    uri = rng.choice(uris + list(UNKNOWN_URIS))
                                    result = await session.read_resource(uri)
                                    if other_marker(principal) in text_of(result):
                                        figures.leaks.append(f"{principal}: {uri}")
                            figures.answered += 1
                        except MCPError as exc:
                            figures.answered += 1
                            figures.errors[exc.code] += 1
                        except TimeoutError:
                            figures.unanswered += 1
    except Exception as exc:  # the server died or the transport broke
        figures.crashes += 1
        print(f"soak: client {principal} lost its server: {exc!r}", file=sys.stderr)


async def soak(clients: int, seconds: float, capsules: list[str]) -> Figures:
    figures = Figures()
    deadline = time.monotonic() + seconds

    async def sample_rss() -> None:
        # The baseline is taken once every server has loaded and answered a
        # few requests: growth is what serving costs, not what start-up does
        # (which takes longer than usual on a loaded machine).
        while figures.warm_clients < clients and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        figures.rss_start = server_rss()
        while time.monotonic() < deadline:
            figures.peak_rss = max(figures.peak_rss, server_rss())
            await anyio.sleep(0.5)
        figures.rss_end = server_rss()

    async with anyio.create_task_group() as group:
        for n in range(clients):
            group.start_soon(client, PRINCIPALS[n % 2], capsules, deadline, figures, n)
        group.start_soon(sample_rss)
    return figures


def main(argv: list[str] | None = None) -> Figures:
    parser = argparse.ArgumentParser(prog="python -m soak")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--capsules", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    capsules = options.capsules or [str(Path(__file__).resolve().parent.parent / "capsules")]
    figures = anyio.run(soak, options.clients, options.seconds, capsules)
    print(figures.line(options.clients, options.seconds))
    if options.json:
        print(json.dumps({**figures.__dict__, "errors": dict(figures.errors)}))
    return figures


if __name__ == "__main__":
    main()
