"""Traces leave a real server over OTLP, to a collector on loopback, when the OTEL_* variables say so.

`astrid mcp serve --http` as a user starts it, the official OTLP exporters
(http/protobuf and grpc) and a minimal collector of our own that decodes what
arrives with the OTLP protobuf definitions. The client's W3C `traceparent`
HTTP header is the parent of the server's request spans.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from astrid.capsules import CAPSULES_DIR
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
Request = trace_service_pb2.ExportTraceServiceRequest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(CAPSULES_DIR / "introspect", tmp_path_factory.mktemp("otlp") / "introspect").folder


class Received:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.lock = threading.Lock()

    def add(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)

    def spans(self) -> list[tuple[str, dict[str, str], Any]]:
        """(service name, resource attributes, span) of every span received so far."""
        found: list[tuple[str, dict[str, str], Any]] = []
        with self.lock:
            for request in self.requests:
                for resource_spans in request.resource_spans:
                    attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope in resource_spans.scope_spans:
                        found.extend((attributes.get("service.name", ""), attributes, span) for span in scope.spans)
        return found


@contextmanager
def http_collector() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP collector on loopback: POST /v1/traces, protobuf bodies."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            assert self.path == "/v1/traces"
            received.add(Request.FromString(body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()
            self.wfile.write(trace_service_pb2.ExportTraceServiceResponse().SerializeToString())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def grpc_collector() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC collector on loopback (insecure: the endpoint's scheme is http)."""
    import grpc  # type: ignore[import-untyped,unused-ignore]  # no stubs today; a release may bring them

    received = Received()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            received.add(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(None)


COLLECTORS = {"http/protobuf": http_collector, "grpc": grpc_collector}


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
        with http_server(built, capsule_home=capsule_home, token_dir=tmp_path, env=env) as served:
            assert f"tracing: on, OTLP {protocol} to {endpoint} as service 'astrid-e2e'" in served.log()
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
