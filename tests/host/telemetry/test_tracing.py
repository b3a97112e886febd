"""Traces: one read is one span tree in the client's trace, across the layers and across a NATS hop.

A real runtime (kernel, broker, wasmtime sandboxes, real capsules), the MCP
SDK's own in-memory client against `AstridMcpServer`, and the OpenTelemetry
SDK's in-memory exporter in place of OTLP (`setup.configure(exporter=...)`).
The client's W3C `traceparent` travels in the request's `_meta` (SEP-414);
with `client_trace="link"` (HTTP's default) it is a link of a new trace
instead, with "ignore" nothing (tests/security/test_trace_sampling.py runs
the sampling attack against a real server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import RequestParamsMeta, TextResourceContents
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import GrantStore
from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig, make_kernel
from astrid.host.telemetry import setup, tracing
from astrid.host.telemetry.setup import TelemetryConfigError
from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.nats import nats_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
META = cast(RequestParamsMeta, {"traceparent": TRACEPARENT})  # SEP-414: the client's context in `_meta`


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("traced")
    return {
        "docs": build_clean(CAPSULES_DIR / "docs", root / "docs").folder,
        "counter": build_clean(TEST_CAPSULES / "counter", root / "counter").folder,
    }


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory, for one test; off again after it."""
    found = InMemorySpanExporter()
    provider = setup.configure({}, exporter=found)
    assert provider is not None and tracing.on
    try:
        yield found
    finally:
        setup.shutdown()
    assert not tracing.on


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    tracing_provider_flush()
    return list(exporter.get_finished_spans())


def read_calls(spans: list[ReadableSpan]) -> int:
    return len([s for s in spans if s.name == "capsule.call" and (s.attributes or {}).get("astrid.handler") == "read"])


async def settled(exporter: InMemorySpanExporter, done: Callable[[list[ReadableSpan]], bool]) -> list[ReadableSpan]:
    """The spans, once `done` says all are there: a capsule call's span ends just after its reply
    went out (and a NATS hop's once the other host reported), so the client may have its answer first."""
    with anyio.fail_after(10):
        while True:
            spans = finished(exporter)
            if done(spans):
                return spans
            await anyio.sleep(0.02)


def tracing_provider_flush() -> None:
    # spans leave in batches on the processor's thread: flush before looking
    provider = setup._provider
    assert provider is not None
    assert provider.force_flush(10_000)


def tree_under(spans: list[ReadableSpan], root: ReadableSpan) -> dict[str, list[ReadableSpan]]:
    """Every span below `root` (at any depth), by name."""
    children: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    found: dict[str, list[ReadableSpan]] = {}
    stack = [root]
    while stack:
        for child in children.get(stack.pop().context.span_id, []):
            found.setdefault(child.name, []).append(child)
            stack.append(child)
    return found


def parent_of(spans: list[ReadableSpan], span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    (parent,) = [s for s in spans if s.context.span_id == span.parent.span_id]
    return parent


def request_span(spans: list[ReadableSpan], method: str) -> ReadableSpan:
    (found,) = [s for s in spans if s.name == method and s.kind is SpanKind.SERVER]
    return found


def counter_runtime(built: dict[str, Path], tmp_path: Path) -> Runtime:
    grants = tmp_path / "grants.json"
    GrantStore(grants).grant("counter", "kv")
    config = RuntimeConfig(
        capsule_paths=[built["counter"]], principal="alice", grants_file=grants, kv_file=tmp_path / "kv.sqlite"
    )
    runtime = Runtime(config)
    runtime.start(background=False)
    return runtime


async def test_one_read_is_one_span_tree_in_the_clients_trace(built, exporter, tmp_path) -> None:
    runtime = counter_runtime(built, tmp_path)
    try:
        async with Client(AstridMcpServer(runtime, limits=runtime.limits).server) as client:
            read = await client.session.read_resource("astrid://counter/visits", meta=META)
            spans = await settled(exporter, lambda spans: read_calls(spans) == 1)
    finally:
        runtime.close()
    assert isinstance(read.contents[0], TextResourceContents) and read.contents[0].text == "1"

    root = request_span(spans, "resources/read")
    assert f"{root.context.trace_id:032x}" == TRACE_ID
    assert root.parent is not None and f"{root.parent.span_id:016x}" == CLIENT_SPAN and root.parent.is_remote
    assert root.attributes is not None
    assert root.attributes["astrid.principal"] == "alice"
    assert root.attributes["mcp.resource.uri"] == "astrid://counter/visits"
    assert root.status.status_code is not StatusCode.ERROR

    below = tree_under(spans, root)
    assert {s.context.trace_id for group in below.values() for s in group} == {root.context.trace_id}
    (broker_read,) = below["broker.read"]
    assert parent_of(spans, broker_read) is root
    assert broker_read.attributes is not None and broker_read.attributes["astrid.capsule"] == "counter"
    (round_,) = below["broker.read.round"]
    assert parent_of(spans, round_) is broker_read
    assert round_.attributes is not None
    assert (round_.attributes["astrid.round.asked"], round_.attributes["astrid.round.answered"]) == (1, 1)
    assert round_.attributes["astrid.read.status"] == "answered"
    # the capsule's call ran on a lane thread: the context went with the message
    calls = [c for c in below["capsule.call"] if c.attributes and c.attributes["astrid.handler"] == "read"]
    (call,) = calls
    assert parent_of(spans, call) is round_
    assert call.attributes is not None
    assert (call.attributes["astrid.capsule"], call.attributes["astrid.call.status"]) == ("counter", "ok")
    (run,) = [s for s in below["capsule.run"] if parent_of(spans, s) is call]
    # the capability calls the guest made, inside its run: kind, operation, outcome; never the key or value
    (get,), (set_,) = below["capability.kv.get"], below["capability.kv.set"]
    assert parent_of(spans, get) is run and parent_of(spans, set_) is run
    for span, op, outcome in ((get, "get", "not-found"), (set_, "set", "ok")):  # the first visit: no count yet
        assert span.attributes is not None
        assert dict(span.attributes) == {
            "astrid.capability.kind": "kv",
            "astrid.capability.op": op,
            "astrid.capsule": "counter",
            "astrid.capability.outcome": outcome,
        }
        assert span.status.status_code is not StatusCode.ERROR  # an absent key is an answer, not a failure


async def test_a_refused_capability_and_a_failed_read_are_error_spans(built, exporter, tmp_path) -> None:
    runtime = counter_runtime(built, tmp_path)  # kv granted, fs not
    try:
        server = AstridMcpServer(runtime, limits=runtime.limits, resource_tools=True)
        async with Client(server.server) as client:
            await client.session.read_resource("astrid://counter/note")
            with pytest.raises(MCPError) as missing:
                await client.session.read_resource("astrid://counter/none")
            tool = await client.session.call_tool("read_resource", {"uri": "astrid://counter/none"})
            assert tool.is_error
            spans = await settled(exporter, lambda spans: read_calls(spans) >= 1)
    finally:
        runtime.close()
    (denied,) = [s for s in spans if s.name == "capability.fs.read"]
    assert denied.status.status_code is StatusCode.ERROR
    assert denied.attributes is not None and denied.attributes["astrid.capability.outcome"] != "ok"
    assert "notes/note.txt" not in str(dict(denied.attributes))  # never a path
    reads = [s for s in spans if s.name == "resources/read"]
    assert len(reads) == 2
    (failed,) = [s for s in reads if s.status.status_code is StatusCode.ERROR]
    assert failed.attributes is not None and failed.attributes["rpc.response.status_code"] == str(
        missing.value.error.code
    )
    # a tool call that failed answers a result, not an error: its span says it failed all the same
    (called,) = [s for s in spans if s.name == "tools/call"]
    assert called.status.status_code is StatusCode.ERROR
    assert called.attributes is not None and called.attributes["error.type"] == "tool_error"
    assert called.attributes["gen_ai.tool.name"] == "read_resource"
    assert called.attributes["mcp.resource.uri"] == "astrid://counter/none"
    # without a traceparent each request starts a trace of its own
    assert all(s.parent is None for s in reads) and len({s.context.trace_id for s in reads}) == 2


async def test_nothing_is_recorded_while_tracing_is_off(built, exporter, tmp_path) -> None:
    runtime = counter_runtime(built, tmp_path)
    try:
        async with Client(AstridMcpServer(runtime, limits=runtime.limits).server) as client:
            await client.session.read_resource("astrid://counter/visits", meta=META)
            # on: spans (the capsule's call ends just after its reply went out: wait for it)
            await settled(exporter, lambda spans: read_calls(spans) == 1)
            exporter.clear()
            tracing.disable()  # the provider and its exporter stay: only astrid's flag is off
            assert tracing.capture() is None and tracing.extract({"traceparent": TRACEPARENT}) is None
            await client.session.read_resource("astrid://counter/visits", meta=META)
            await client.session.list_resources()
    finally:
        runtime.close()
    assert [s.name for s in finished(exporter)] == []


@pytest.mark.parametrize("client_trace", ["parent", "link"])
async def test_the_trace_crosses_a_nats_hop(built, exporter, tmp_path, capsule_home, client_trace) -> None:
    """An MCP server and a capsule host joined by a real nats-server (both in this process, each with
    its own NATS connection): the capsule host's spans join the request's trace through the headers,
    the client's own (parent) or the server's new one (link): astrid's own hops always parent."""
    with nats_server(tmp_path) as server:
        host = make_kernel(
            RuntimeConfig(capsule_paths=[built["docs"]], principal=None, bus_url=server.url()), role="capsules"
        )
        try:
            assert [r.ok for r in host.start()] == [True]
            runtime = Runtime(RuntimeConfig(capsule_paths=[], principal="alice", bus_url=server.url()))
            runtime.start(background=False)
            try:
                mcp_server = AstridMcpServer(runtime, limits=runtime.limits, client_trace=client_trace)
                async with Client(mcp_server.server) as client:
                    read = await client.session.read_resource("astrid://docs/index", meta=META)
                    # both hops' receive spans end once the other side's handlers have
                    spans = await settled(
                        exporter,
                        lambda spans: (
                            read_calls(spans) == 1
                            and sum(1 for s in spans if s.name == "nats receive" and ".read" in str(s.attributes)) >= 2
                        ),
                    )
            finally:
                runtime.close()
        finally:
            host.close()
    assert read.contents
    root = request_span(spans, "resources/read")
    assert (f"{root.context.trace_id:032x}" == TRACE_ID) is (client_trace == "parent")
    below = tree_under(spans, root)
    assert {s.context.trace_id for group in below.values() for s in group} == {root.context.trace_id}
    (round_,) = below["broker.read.round"]
    sent = [s for s in below["nats publish"] if parent_of(spans, s) is round_]
    assert len(sent) == 1 and sent[0].kind is SpanKind.PRODUCER
    assert sent[0].attributes is not None and str(sent[0].attributes["messaging.destination.name"]).endswith(".read")
    (received,) = [s for s in below["nats receive"] if parent_of(spans, s) is sent[0]]
    assert received.kind is SpanKind.CONSUMER
    # the capsule ran on the other host, a child of the hop
    (call,) = [s for s in below["capsule.call"] if parent_of(spans, s) is received]
    assert call.attributes is not None and call.attributes["astrid.capsule"] == "docs"
    # and its reply came back over NATS, in the same trace
    replies = [s for s in below["nats publish"] if s is not sent[0]]
    assert any(
        s.attributes is not None and ".response.read." in str(s.attributes["messaging.destination.name"])
        for s in replies
    )


# -- what a client's context becomes: `client_trace` ---------------------------------------------


def linked_spans(span: ReadableSpan) -> list[tuple[str, str]]:
    return [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in span.links]


@pytest.mark.parametrize("client_trace", ["link", "ignore"])
async def test_link_and_ignore_start_a_trace_of_the_servers_own(built, exporter, tmp_path, client_trace) -> None:
    runtime = counter_runtime(built, tmp_path)
    try:
        server = AstridMcpServer(runtime, limits=runtime.limits, client_trace=client_trace)
        async with Client(server.server) as client:
            await client.session.read_resource("astrid://counter/visits", meta=META)
            spans = await settled(exporter, lambda spans: read_calls(spans) == 1)
    finally:
        runtime.close()
    root = request_span(spans, "resources/read")
    assert root.parent is None and f"{root.context.trace_id:032x}" != TRACE_ID
    assert linked_spans(root) == ([(TRACE_ID, CLIENT_SPAN)] if client_trace == "link" else [])
    assert all(f"{s.context.trace_id:032x}" != TRACE_ID for s in spans)
    # below the request span the tree is as with a parent: only the root's origin changed
    below = tree_under(spans, root)
    assert {"broker.read", "broker.read.round", "capsule.call", "capsule.run"} <= set(below)
    assert {s.context.trace_id for group in below.values() for s in group} == {root.context.trace_id}


async def test_a_link_leaves_sampling_to_the_operators_sampler(built, tmp_path, monkeypatch) -> None:
    """The operator samples nothing; the client's context says "sampled". As a parent it would be
    obeyed (the parent-based sampler follows its parent); as a link it is not."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    found = InMemorySpanExporter()
    assert setup.configure({}, exporter=found) is not None  # the SDK reads the sampler from the environment
    runtime = counter_runtime(built, tmp_path)
    try:
        for client_trace in ("link", "parent"):
            async with Client(AstridMcpServer(runtime, limits=runtime.limits, client_trace=client_trace).server) as c:
                await c.session.read_resource("astrid://counter/visits", meta=META)
            if client_trace == "link":
                assert finished(found) == []  # flushed: nothing was sampled
        # the same read with the client's span as the parent: the client decided (the read's call ends
        # just after its reply went out: wait for it)
        spans = await settled(found, lambda spans: read_calls(spans) == 1)
    finally:
        runtime.close()
        setup.shutdown()
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE_ID}


def test_an_unknown_client_trace_is_refused() -> None:
    with pytest.raises(TelemetryConfigError, match=r"client_trace 'trust': choose one of parent, link, ignore"):
        AstridMcpServer(cast(Runtime, None), client_trace="trust")


def test_the_command_lines_choices_are_the_hosts() -> None:
    from astrid.cli.observe import CLIENT_TRACE, client_trace_for

    assert CLIENT_TRACE == tracing.CLIENT_TRACE
    # a server facing others links; stdio's one client is the user who started it; the flag wins
    assert (client_trace_for(None, http=True), client_trace_for(None, http=False)) == ("link", "parent")
    assert client_trace_for("parent", http=True) == "parent" and client_trace_for("ignore", http=False) == "ignore"
