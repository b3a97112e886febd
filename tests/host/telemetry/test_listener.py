"""The metrics listener on real loopback sockets: prometheus-client's bytes, a fixed pool of threads, the
connection cap and the head deadline."""

from __future__ import annotations

import gzip
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app, start_http_server

from astrid.host.telemetry import metrics
from astrid.host.telemetry.listener import BoundedListener, connection_cap

PARTIAL_HEAD = b"GET /metrics HTTP/1.1\r\n"


@pytest.fixture(scope="module")
def registry() -> CollectorRegistry:
    """Values that do not change between two scrapes (no process collector)."""
    registry = CollectorRegistry()
    Counter("demo_requests", "Requests", ("method",), registry=registry).labels("get").inc(3)
    Gauge("demo_open", "Open things", registry=registry).set(7)
    Histogram("demo_seconds", "Time", buckets=(0.1, 1.0), registry=registry).observe(0.5)
    return registry


@pytest.fixture(scope="module")
def both(registry: CollectorRegistry) -> Iterator[tuple[int, int]]:
    """The ports of prometheus-client's own server and of ours, on the same registry."""
    theirs, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        with listening(registry) as ours:
            yield theirs.server_port, ours.port
    finally:
        theirs.shutdown()
        theirs.server_close()


@contextmanager
def listening(registry: CollectorRegistry, app=None, **tuning) -> Iterator[BoundedListener]:
    limits = replace(metrics.limits(), **tuning)
    listener = BoundedListener("127.0.0.1", 0, app or make_wsgi_app(registry), limits=limits, name="metrics")
    try:
        yield listener
    finally:
        listener.close()


def fetch(port: int, method: str = "GET", path: str = "/metrics", headers: dict[str, str] | None = None):
    """(status, {header: value} in lower case, body) of one request."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def partial_heads(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(PARTIAL_HEAD)
        sockets.append(sock)
    return sockets


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Wait (bounded) for the server to close `sock`: True when it did."""
    sock.settimeout(within_s)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except OSError:  # reset: closed too
        return True


REQUESTS = [
    ("GET", "/metrics", {}),
    ("GET", "/anything/else", {}),
    ("GET", "/metrics?name[]=demo_open", {}),
    ("GET", "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"}),
    ("GET", "/metrics", {"Accept": "text/plain; version=1.0.0; escaping=allow-utf-8"}),
    ("GET", "/metrics", {"Accept-Encoding": "gzip"}),
    ("GET", "/favicon.ico", {}),
    ("OPTIONS", "/metrics", {}),
    ("DELETE", "/metrics", {}),
]


@pytest.mark.parametrize(("method", "path", "headers"), REQUESTS)
def test_it_answers_what_prometheus_clients_own_server_answers(both, method, path, headers) -> None:
    theirs, ours = both
    expected = fetch(theirs, method, path, headers)
    got = fetch(ours, method, path, headers)
    assert got[0] == expected[0]
    for header in ("content-type", "content-encoding", "allow"):
        assert got[1].get(header) == expected[1].get(header), header
    if got[1].get("content-encoding") == "gzip":  # gzip stamps the time it compressed at
        assert gzip.decompress(got[2]) == gzip.decompress(expected[2])
    else:
        assert got[2] == expected[2]
    assert got[1]["connection"] == "close"  # one request per connection: no idle keep-alive is ever held


def test_an_idle_flood_holds_at_most_the_cap_on_a_fixed_pool_of_threads(registry) -> None:
    before = set(threading.enumerate())
    with listening(registry, connections=8, header_timeout_s=60) as listener:
        pool = set(threading.enumerate()) - before
        assert len(pool) == 1 + listener.limits.threads  # the reading thread and the answering ones
        flood = partial_heads(listener.port, 60)
        try:
            assert fetch(listener.port)[0] == 200  # the scrape's connection made room for itself
            assert len(listener.guard) <= 8
            assert set(threading.enumerate()) - before <= pool  # no thread per connection
            # the oldest ones made room: the server closed them, it did not leave them to the deadline
            assert closed_by_server(flood[0], within_s=10)
        finally:
            for sock in flood:
                sock.close()
    assert not [thread.name for thread in pool if thread.is_alive()]  # close() ended them


def test_a_head_that_never_ends_is_closed_at_the_head_deadline(registry) -> None:
    with listening(registry, header_timeout_s=0.5, sweep_every_s=0.05) as listener:
        started = time.monotonic()
        (idle,) = partial_heads(listener.port, 1)
        (trickling,) = partial_heads(listener.port, 1)
        stop = threading.Event()

        def trickle() -> None:  # a byte at a time keeps no connection open past the deadline
            while not stop.wait(0.1):
                try:
                    trickling.send(b"X")
                except OSError:
                    return

        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        try:
            assert closed_by_server(idle, within_s=10)
            assert closed_by_server(trickling, within_s=10)
            assert time.monotonic() - started >= 0.5
        finally:
            stop.set()
            sender.join(5)
            idle.close()
            trickling.close()
        assert fetch(listener.port)[0] == 200


def test_a_head_too_long_or_not_http_is_refused_with_a_status(registry) -> None:
    with listening(registry) as listener:
        for sent, status in ((PARTIAL_HEAD + b"X-Long: " + b"a" * 9000, b"431"), (b"hello\r\n\r\n", b"400")):
            with socket.create_connection(("127.0.0.1", listener.port), timeout=10) as sock:
                sock.sendall(sent)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 " + status), answer


def test_an_app_that_fails_is_answered_500_and_the_listener_goes_on(registry, caplog) -> None:
    def broken(environ, start_response):
        raise RuntimeError("collector broke")

    with listening(registry, app=broken) as listener:
        assert fetch(listener.port)[0] == 500
        assert fetch(listener.port)[0] == 500
    assert any("answering failed: collector broke" in r.getMessage() for r in caplog.records)


def test_the_cap_stays_a_small_share_of_the_open_file_limit() -> None:
    assert connection_cap(32, 1024) == 32
    assert connection_cap(32, 400) == 25
    assert connection_cap(32, 20) == 4


def test_close_frees_the_port_and_the_connections(registry) -> None:
    with listening(registry) as listener:
        port = listener.port
        (idle,) = partial_heads(port, 1)
    try:
        assert closed_by_server(idle, within_s=10)
    finally:
        idle.close()
    with socket.socket() as again:  # nothing listens there any more
        again.settimeout(5)
        assert again.connect_ex(("127.0.0.1", port)) != 0
