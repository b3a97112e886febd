"""`astrid mcp serve --http` under load: many users at once on loopback, no leak between them.

10 principals (one static token each), 5 MCP sessions per principal, 50 in
all, each looping for `DURATION_S`: read `astrid://whoami` (the body must
name the session's own principal) and now and then `resources/list`. Every
request must be answered, none refused as busy (each principal has at most 5
requests in flight, under the per-principal cap), none answered for another
principal, and the server's RSS must stay bounded: a leak check, not a speed
check, so there is no latency assertion. The totals are printed (requests,
requests/s, p50/p99 latency, RSS); docs/performance.md ("Many users over
HTTP") keeps a run's numbers.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import ClientSession, MCPError

from astrid.host.mcp.server import MAX_REQUESTS_PER_PRINCIPAL, SERVER_BUSY
from tests.support.http import http_server, http_session, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PRINCIPALS = 10
SESSIONS_PER_PRINCIPAL = 5
DURATION_S = 20.0
LIST_EVERY = 10  # one request in LIST_EVERY is a resources/list, the others read whoami
WARMUP_READS = 3
REQUEST_TIMEOUT_S = 15.0  # one request unanswered this long counts as a timeout
TEST_TIMEOUT_S = 60.0  # sessions opened, warmed, loaded, closed
RSS_SAMPLE_S = 0.25
MIB = 1 << 20
RSS_CAP = 1536 * MIB  # the server's RSS, at any sample
# Growth from after warm-up to the end of the load: +3 to +5 MiB over ~5,000
# requests on 2 cores (+6 MiB over 60 s), see docs/performance.md. Ten times
# that catches a leak of ~10 KiB per request and leaves room for allocator noise.
RSS_GROWTH_CAP = 48 * MIB
WHOAMI = "astrid://whoami"


@dataclass
class Tally:
    latencies_s: list[float] = field(default_factory=list)
    reads: int = 0
    lists: int = 0
    busy: int = 0
    leaks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # exceptions and timeouts: unanswered requests
    rss: list[int] = field(default_factory=list)


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _request(session: ClientSession, principal: str, label: str, index: int, tally: Tally) -> bool:
    """One request, timed and checked; False when the session should stop (its request went unanswered)."""
    listing = index % LIST_EVERY == LIST_EVERY - 1
    started = time.perf_counter()
    try:
        with anyio.fail_after(REQUEST_TIMEOUT_S):
            if listing:
                listed = await session.list_resources()
            else:
                read = await session.read_resource(WHOAMI)
    except MCPError as exc:
        if exc.code == SERVER_BUSY:
            tally.busy += 1
            return True
        tally.failures.append(f"{label} request {index} ({'list' if listing else 'read'}): MCPError {exc.error!r}")
        return False
    except Exception as exc:  # a timeout, a dropped connection: unanswered
        tally.failures.append(f"{label} request {index} ({'list' if listing else 'read'}): {exc!r}")
        return False
    tally.latencies_s.append(time.perf_counter() - started)
    if listing:
        tally.lists += 1
        if WHOAMI not in [str(r.uri) for r in listed.resources]:
            tally.failures.append(f"{label} request {index}: resources/list without {WHOAMI}")
    else:
        tally.reads += 1
        seen = json.loads(text_of(read))["principal"]
        if seen != principal:
            tally.leaks.append(f"{label} request {index}: read {WHOAMI} as {principal!r}, body names {seen!r}")
    return True


async def test_fifty_sessions_of_ten_principals_for_twenty_seconds(
    bundled: list[Path], capsule_home: Path, tmp_path: Path, capsys, record_property
):
    assert SESSIONS_PER_PRINCIPAL < MAX_REQUESTS_PER_PRINCIPAL  # one request in flight per session: never busy
    tally = Tally()
    with http_server(*bundled, capsule_home=capsule_home, token_dir=tmp_path) as served:
        tokens = {f"user{n:02d}": served.add_token(f"user{n:02d}") for n in range(PRINCIPALS)}
        server = psutil.Process(served.process.pid)
        rss_idle = server.memory_info().rss
        sessions = PRINCIPALS * SESSIONS_PER_PRINCIPAL
        warmed = finished = 0
        all_warm, all_done = anyio.Event(), anyio.Event()
        go = anyio.Event()
        clock: dict[str, float] = {}

        async def user(principal: str, label: str) -> None:
            nonlocal warmed, finished
            async with http_session(served.url, tokens[principal]) as session:
                # Warm-up (not counted): a list and a few reads create this principal's sandboxes.
                await session.list_resources()
                for _ in range(WARMUP_READS):
                    assert json.loads(text_of(await session.read_resource(WHOAMI)))["principal"] == principal
                warmed += 1
                if warmed == sessions:
                    all_warm.set()
                await go.wait()
                index = 0
                while time.monotonic() < clock["deadline"]:
                    if not await _request(session, principal, label, index, tally):
                        break
                    index += 1
                finished += 1
                if finished == sessions:
                    clock["end"] = time.monotonic()
                    all_done.set()

        async def sample_rss() -> None:
            while True:
                tally.rss.append(server.memory_info().rss)
                await anyio.sleep(RSS_SAMPLE_S)

        with anyio.fail_after(TEST_TIMEOUT_S):
            async with anyio.create_task_group() as users:
                for principal in tokens:
                    for n in range(SESSIONS_PER_PRINCIPAL):
                        users.start_soon(user, principal, f"{principal}/session{n}")
                await all_warm.wait()
                rss_warm = server.memory_info().rss
                cpu_before = _cpu_s(server), _cpu_s(psutil.Process())
                clock["start"] = time.monotonic()
                clock["deadline"] = clock["start"] + DURATION_S
                async with anyio.create_task_group() as sampler:
                    sampler.start_soon(sample_rss)
                    go.set()
                    await all_done.wait()  # every loop has stopped at the deadline (or on a failure)
                    sampler.cancel_scope.cancel()
                rss_end = server.memory_info().rss
                server_cpu_s, client_cpu_s = (
                    _cpu_s(p) - before for p, before in zip((server, psutil.Process()), cpu_before, strict=True)
                )
        elapsed = clock["end"] - clock["start"]
        alive = served.process.poll() is None
        log = served.log()

    answered = len(tally.latencies_s)
    p50 = _percentile(tally.latencies_s, 0.50) * 1000 if answered else float("nan")
    p99 = _percentile(tally.latencies_s, 0.99) * 1000 if answered else float("nan")
    mean = statistics.fmean(tally.latencies_s) * 1000 if answered else float("nan")
    rss_peak = max([*tally.rss, rss_end])
    summary = (
        f"http load: {PRINCIPALS} principals x {SESSIONS_PER_PRINCIPAL} sessions for {DURATION_S:.0f} s: "
        f"{answered} requests ({tally.reads} reads, {tally.lists} lists) in {elapsed:.1f} s = "
        f"{answered / elapsed:.0f} req/s; latency p50 {p50:.1f} ms, p99 {p99:.1f} ms "
        f"(mean {mean:.1f} ms); "
        f"CPU over the load: server {server_cpu_s / elapsed:.0%}, this test's clients {client_cpu_s / elapsed:.0%}; "
        f"busy {tally.busy}, unanswered {len(tally.failures)}, leaks {len(tally.leaks)}; "
        f"server RSS idle {rss_idle / MIB:.0f} MiB, after warm-up {rss_warm / MIB:.0f} MiB, "
        f"end {rss_end / MIB:.0f} MiB, peak {rss_peak / MIB:.0f} MiB (growth {(rss_end - rss_warm) / MIB:+.0f} MiB)"
    )
    with capsys.disabled():  # shown with or without -s
        print(f"\n{summary}")
    record_property("http_load", summary)

    assert not tally.leaks, f"{len(tally.leaks)} cross-principal leaks, e.g. {tally.leaks[:5]}"
    assert not tally.failures, f"{len(tally.failures)} requests unanswered, e.g. {tally.failures[:5]}\n{log[-4000:]}"
    assert tally.busy == 0, f"{tally.busy} requests refused as busy at {SESSIONS_PER_PRINCIPAL} per principal"
    assert answered > sessions, "the loops made no progress"
    assert alive, f"the server exited under load:\n{log[-4000:]}"
    assert "Traceback" not in log, f"the server logged a traceback under load:\n{log[-4000:]}"
    assert rss_peak < RSS_CAP, f"server RSS peaked at {rss_peak / MIB:.0f} MiB"
    assert rss_end - rss_warm < RSS_GROWTH_CAP, f"server RSS grew {(rss_end - rss_warm) / MIB:.0f} MiB under load"
