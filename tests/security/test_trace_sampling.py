"""A client's `traceparent` does not override the operator's sampler (issue 34, item 5).

The attack: an operator samples nothing, or little
(`OTEL_TRACES_SAMPLER=parentbased_traceidratio`, `OTEL_TRACES_SAMPLER_ARG=0`),
and a client sends `_meta.traceparent` (SEP-414) or the HTTP `traceparent`
header with the sampled flag (`-01`). Were the client's span the parent, the
parent-based sampler would obey the client: every span of its requests
exported (the client decides the operator's tracing volume), in a trace whose
id the client chose (it can join any trace it knows).

The defence: `astrid mcp serve --http` makes a client's context a *link* of a
new trace (`--client-trace link`, HTTP's default), so the operator's sampler
decides at the root. stdio (one client: the user who started the server)
keeps the client's span as the parent, and so does `--client-trace parent`.

A real `astrid mcp serve` exports over OTLP to a collector the test runs
(tests/support/otlp.py). What the sampled-nothing servers exported is looked
at once the server has stopped on Ctrl-C: it flushes its queued spans on the way
out, so "nothing" means nothing was sampled, not "not exported yet". The same
run with `--client-trace parent` exports the spans: the two differ only in the flag.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp.types import RequestParamsMeta

from astrid.capsules import CAPSULES_DIR
from astrid.cli.mcp_cmd import INTERRUPTED_EXIT
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session, text_of
from tests.support.otlp import Received, http_collector
from tests.support.processes import server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# A trace the client chose (it could be anyone's it has seen), sampled (`-01`).
TRACE_ID = "5c0ffee15badc0de5c0ffee15badc0de"
CLIENT_SPAN = "a11ce0b0b0b0b0b0"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
META = cast(RequestParamsMeta, {"traceparent": TRACEPARENT})
# The operator's choice: keep no trace at all.
SAMPLE_NOTHING = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}
READS = 3


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(CAPSULES_DIR / "introspect", tmp_path_factory.mktemp("sampling") / "introspect").folder


def otel_env(endpoint: str, **more: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "astrid-sampling",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export every 50 ms, not every 5 s
        **more,
    }


async def sampled_reads(url: str, token: str) -> None:
    """Reads that carry the client's sampled context twice over: the HTTP header and `_meta`."""
    async with http_session(url, token, headers={"traceparent": TRACEPARENT}) as session:
        with anyio.fail_after(60):
            for _ in range(READS):
                assert "alice" in text_of(await session.read_resource("astrid://whoami", meta=META))


async def exported_by_a_server_sampling_nothing(
    built: Path, capsule_home: Path, tmp_path: Path, extra: tuple[str, ...] = ()
) -> tuple[list[Any], str]:
    """Every span an HTTP server sampling nothing exported for `sampled_reads`, looked at once it
    exited cleanly (having flushed its queue); and its log."""
    with http_collector() as (endpoint, received):
        env = otel_env(endpoint, **SAMPLE_NOTHING)
        with http_server(built, capsule_home=capsule_home, token_dir=tmp_path, env=env, extra=extra) as served:
            await sampled_reads(served.url, served.add_token("alice"))
            stop_as_ctrl_c(served.process)
        return [span for _, _, span in received.spans()], served.log()


def stop_as_ctrl_c(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C: uvicorn stops, then the server flushes the spans still queued and exits with 130
    (SIGTERM or a kill would end it before the flush)."""
    process.send_signal(signal.SIGINT)
    assert process.wait(60) == INTERRUPTED_EXIT


def spans_named(spans: list[Any], name: str) -> list[Any]:
    return [span for span in spans if span.name == name]


async def until_exported(received: Received, name: str, count: int = 1) -> list[Any]:
    """The spans received, once `count` spans called `name` are among them (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        spans = [span for _, _, span in received.spans()]
        if len(spans_named(spans, name)) >= count:
            return spans
        assert time.monotonic() < deadline, f"fewer than {count} {name} spans reached the collector"
        await anyio.sleep(0.05)


def assert_in_the_clients_trace(reads: list[Any]) -> None:
    assert len(reads) == READS
    for read in reads:
        assert read.trace_id.hex() == TRACE_ID and read.parent_span_id.hex() == CLIENT_SPAN


async def test_over_http_a_clients_sampled_traceparent_does_not_override_the_operators_sampler(
    built, capsule_home, tmp_path
) -> None:
    spans, log = await exported_by_a_server_sampling_nothing(built, capsule_home, tmp_path)
    assert "a client's traceparent is a link, not the parent (--client-trace)" in log
    assert spans == [], f"the client's -01 made the server export: {sorted({s.name for s in spans})}"


async def test_with_client_trace_parent_the_client_decides_as_before(built, capsule_home, tmp_path) -> None:
    """The other side: what the operator opts into with `--client-trace parent` (and what the attack
    got before the defence): the same run exports every read, in the client's trace."""
    spans, log = await exported_by_a_server_sampling_nothing(
        built, capsule_home, tmp_path, extra=("--client-trace", "parent")
    )
    assert "a client's traceparent is the parent (--client-trace)" in log
    assert_in_the_clients_trace(spans_named(spans, "resources/read"))
    assert spans_named(spans, "capsule.call")


async def test_on_stdio_the_clients_traceparent_stays_the_parent(built, capsule_home, tmp_path) -> None:
    with http_collector() as (endpoint, received):
        env = server_env(capsule_home, **otel_env(endpoint, **SAMPLE_NOTHING))
        async with stdio_session(built, capsule_home=capsule_home, stderr=tmp_path / "stderr.log", env=env) as served:
            with anyio.fail_after(60):
                for _ in range(READS):
                    read = await served.session.read_resource("astrid://whoami", meta=META)
                    assert "alice" in text_of(read)
            spans = await until_exported(received, "resources/read", READS)
            assert "a client's traceparent is the parent (--client-trace)" in served.log()
    assert_in_the_clients_trace(spans_named(spans, "resources/read"))


async def test_a_link_starts_a_trace_of_the_servers_own_that_points_to_the_clients_span(
    built, capsule_home, tmp_path
) -> None:
    """Sampled always (the default sampler): the request span is the root of a new trace, with a
    link to the client's span; nothing of the server's is in the client's trace."""
    with http_collector() as (endpoint, received):
        env = otel_env(endpoint, OTEL_TRACES_SAMPLER="parentbased_always_on")
        with http_server(built, capsule_home=capsule_home, token_dir=tmp_path, env=env) as served:
            await sampled_reads(served.url, served.add_token("alice"))
            await until_exported(received, "resources/read", READS)
            spans = await until_exported(received, "capsule.call")
    reads = spans_named(spans, "resources/read")
    assert len(reads) == READS
    for read in reads:
        assert read.trace_id.hex() != TRACE_ID and read.parent_span_id == b""  # a root
        ((link_trace, link_span),) = [(link.trace_id.hex(), link.span_id.hex()) for link in read.links]
        assert (link_trace, link_span) == (TRACE_ID, CLIENT_SPAN)
    assert len({read.trace_id for read in reads}) == READS  # each request a trace of its own
    assert all(span.trace_id.hex() != TRACE_ID for span in spans)
    # the server's own hops keep parenting: each capsule call is in the trace of the read it served
    assert {call.trace_id for call in spans_named(spans, "capsule.call")} <= {read.trace_id for read in reads}
