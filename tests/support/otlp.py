"""Minimal OTLP collectors on loopback, for the tests that check what a real server exports.

    with http_collector() as (endpoint, received):
        ...                                  # a server with OTEL_EXPORTER_OTLP_ENDPOINT=endpoint
        received.spans()                     # (service name, resource attributes, span) of each span

They decode what arrives with the OTLP protobuf definitions (the `span`s are
`opentelemetry.proto.trace.v1.trace_pb2.Span` messages): http/protobuf
(`http_collector`) and grpc (`grpc_collector`), as the official exporters send them.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

Request = trace_service_pb2.ExportTraceServiceRequest


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
