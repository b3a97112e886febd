"""Traces leave a real server over OTLP, to a collector on loopback, when the OTEL_* variables say so.

`astrid mcp serve --http` as a user starts it, the official OTLP exporters
(http/protobuf and grpc) and a minimal collector of our own that decodes what
arrives with the OTLP protobuf definitions (tests/support/otlp.py). With
`--client-trace parent` the client's W3C `traceparent` HTTP header is the
parent of the server's request spans (HTTP's default, a link of a new trace,
is in tests/security/test_trace_sampling.py).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.serving.signals import INTERRUPTED_EXIT
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session
from tests.support.otlp import COLLECTORS, http_collector

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(CAPSULES_DIR / "introspect", tmp_path_factory.mktemp("otlp") / "introspect").folder


async def traffic(url: str, token: str) -> None:
    async with http_session(url, token, headers={"traceparent": TRACEPARENT}) as session:
        with anyio.fail_after(30):
            await session.read_resource("astrid://whoami")


@pytest.mark.parametrize("protocol", sorted(COLLECTORS))
async def test_a_read_reaches_the_collector_in_the_clients_trace(built, capsule_home, tmp_path, protocol) -> None:
    with COLLECTORS[protocol]() as (endpoint, received):
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_SERVICE_NAME": "astrid-e2e",
            "OTEL_BSP_SCHEDULE_DELAY": "50",  # export every 50 ms, not every 5 s
        }
        parent = ("--client-trace", "parent")
        with http_server(built, capsule_home=capsule_home, token_dir=tmp_path, env=env, extra=parent) as served:
            assert (
                f"tracing: on, OTLP {protocol} to {endpoint} as service 'astrid-e2e'; "
                "a client's traceparent is the parent (--client-trace)"
            ) in served.log()
            await traffic(served.url, served.add_token("alice"))
            deadline = time.monotonic() + 20
            while not any(span.name == "capsule.call" for _, _, span in received.spans()):
                assert time.monotonic() < deadline, "no capsule span reached the collector"
                await anyio.sleep(0.05)
    spans = received.spans()
    assert {service for service, _, _ in spans} == {"astrid-e2e"}
    (read,) = [span for _, _, span in spans if span.name == "resources/read"]
    assert read.trace_id.hex() == TRACE_ID and read.parent_span_id.hex() == CLIENT_SPAN
    attributes = {a.key: a.value.string_value for a in read.attributes}
    assert attributes["astrid.principal"] == "alice" and attributes["mcp.resource.uri"] == "astrid://whoami"
    below = {span.name for _, _, span in spans if span.trace_id.hex() == TRACE_ID}
    assert {"broker.read", "broker.read.round", "capsule.call", "capsule.run"} <= below


async def test_nothing_reaches_the_collector_when_tracing_is_off(built, capsule_home, tmp_path) -> None:
    with http_collector() as (endpoint, received):
        # an endpoint alone would switch tracing on; OTEL_TRACES_EXPORTER=none keeps it off
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "none", "OTEL_BSP_SCHEDULE_DELAY": "50"}
        with http_server(built, capsule_home=capsule_home, token_dir=tmp_path, env=env) as served:
            await traffic(served.url, served.add_token("alice"))
            await anyio.sleep(1.0)  # twenty export intervals
            assert "tracing:" not in served.log()
    assert received.requests == []


async def test_sigterm_stops_an_http_server_in_order_and_its_queued_spans_are_flushed(
    built, capsule_home, tmp_path
) -> None:
    """A supervisor's stop (SIGTERM: systemd, docker stop) is Ctrl-C's: uvicorn shuts down, then the
    spans still queued are exported before the process exits (status 130), none lost."""
    with http_collector() as (endpoint, received):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "600000"}  # queued, not sent
        with http_server(built, capsule_home=capsule_home, token_dir=tmp_path, env=env) as served:
            await traffic(served.url, served.add_token("alice"))
            assert received.spans() == []  # still in the queue
            served.process.send_signal(signal.SIGTERM)
            assert served.process.wait(60) == INTERRUPTED_EXIT, served.log()
        names = {span.name for _, _, span in received.spans()}
    assert {"resources/read", "capsule.call"} <= names
    assert "stopped" in served.log()
