"""A flood of the metrics listener (`--metrics`) must not take the MCP front door's descriptors.

The metrics listener asks no credential, so anyone on the machine can open
connections to it. A real `astrid mcp serve --http --metrics` runs under the
open-file limit of a small machine (400, soft and hard); the attacker opens
395 connections to the metrics port, each sending the first line of a request
head and nothing more, and opens a new one for each the server closes. MCP
clients, the one already connected and a new one, must still get answers;
the server must never hold more than a small share of the flood (counted in
/proc), so a head deadline alone, which the attacker outlasts by reopening,
is not enough; and the metrics endpoint must answer a scrape once the head
deadline has cut the idle connections off.
"""

from __future__ import annotations

import os
import re
import resource
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from astrid.host.tuning import TELEMETRY_TUNING
from tests.security.test_http_floods import _closed_by_peer, _whoami_within
from tests.support.http import HttpServer, http_server, http_session, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FD_LIMIT = 400
FLOOD = 395
PARTIAL_HEAD = b"GET /metrics HTTP/1.1\r\n"
METRICS_LINE = re.compile(r"metrics: (http://\S+/metrics) ")


@pytest.fixture(autouse=True)
def enough_files_for_the_attacker():
    """The attacker (this process) holds the flood's sockets besides its own files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2048 if hard == resource.RLIM_INFINITY else min(hard, 2048)
    assert wanted >= 1024, f"the flood needs an open-file hard limit of 1024 or more here (it is {hard})"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class IdleHeads:
    """Connections to one port from ten loopback addresses, each sending the first line of a request head,
    then nothing; kept up: a thread opens a new one for each the server closes, as an attacker would.

    The same thread counts the server's open descriptors on each round (`most_descriptors`)."""

    def __init__(self, url: str, server_pid: int) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.server_pid = server_pid
        self.sockets: list[socket.socket] = []
        self.failures = 0  # connections that could not be opened (a server out of descriptors accepts none)
        self.most_descriptors = 0
        self.outlived_the_deadline = threading.Event()
        self._stop = threading.Event()
        self._keeper = threading.Thread(target=self._keep_up, daemon=True)

    def open(self, count: int) -> None:
        for index in range(count):
            self.sockets.append(self._connect(index))
        self._keeper.start()

    def _connect(self, index: int) -> socket.socket:
        sock = socket.socket()
        sock.bind((f"127.0.0.{2 + index % 10}", 0))
        sock.settimeout(1)
        try:
            sock.connect(self.target)
            sock.sendall(PARTIAL_HEAD)
        except OSError:
            self.failures += 1
        return sock

    def _keep_up(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(0.25):
            self.most_descriptors = max(self.most_descriptors, open_descriptors(self.server_pid))
            if time.monotonic() - started > TELEMETRY_TUNING.metrics_header_timeout_s + 1:
                self.outlived_the_deadline.set()  # the server had the time to close some, and they came back
            for index, sock in enumerate(self.sockets):
                if self._stop.is_set():
                    return
                if _closed_by_peer(sock):
                    sock.close()
                    self.sockets[index] = self._connect(index)

    def stop_keeping_up(self) -> None:
        self._stop.set()
        if self._keeper.is_alive():
            self._keeper.join(30)

    def still_open(self) -> int:
        """How many of the flood's connections the server has not closed."""
        return sum(1 for sock in self.sockets if not _closed_by_peer(sock))

    def close(self) -> None:
        self.stop_keeping_up()
        for sock in self.sockets:
            sock.close()


@contextmanager
def idle_heads(url: str, count: int, server_pid: int) -> Iterator[IdleHeads]:
    flood = IdleHeads(url, server_pid)
    try:
        flood.open(count)
        yield flood
    finally:
        flood.close()


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def scrape(url: str) -> dict[str, float]:
    """One scrape, parsed by prometheus-client: sample name -> value (unlabelled samples)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


@pytest.fixture
def served(built_introspect, capsule_home, tmp_path) -> Iterator[HttpServer]:
    extra = ("--metrics", "127.0.0.1:0")
    with http_server(
        built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, fd_limit=FD_LIMIT, extra=extra
    ) as s:
        yield s


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts the server's descriptors in /proc")
async def test_an_idle_flood_of_the_metrics_port_leaves_mcp_clients_their_descriptors(served: HttpServer):
    found = METRICS_LINE.search(served.log())
    assert found, served.log()
    metrics_url = found.group(1)
    token = served.add_token("alice")
    assert await _whoami_within(served.url, token, 30) == "alice"  # warm: the capsule is loaded
    async with http_session(served.url, token) as existing:
        with idle_heads(metrics_url, FLOOD, served.process.pid) as flood:
            assert await anyio.to_thread.run_sync(flood.outlived_the_deadline.wait, 60)
            # a new client and the session already open get answers while the flood is kept up
            for _ in range(3):
                assert await _whoami_within(served.url, token, 10) == "alice"
                with anyio.fail_after(10):
                    assert "alice" in text_of(await existing.read_resource("astrid://whoami"))
            # the server never held more than a small share of the flood: far from its open-file limit
            assert 0 < flood.most_descriptors < FD_LIMIT - 100, (flood.most_descriptors, flood.failures)
            # once the attacker stops opening new ones, the head deadline cuts the rest off (plus the sweep)
            flood.stop_keeping_up()
            with anyio.fail_after(TELEMETRY_TUNING.metrics_header_timeout_s + 10):
                while flood.still_open():
                    await anyio.sleep(0.1)
            samples = await anyio.to_thread.run_sync(scrape, metrics_url)
            assert samples["astrid_capsules_loaded"] == 1
    assert served.process.poll() is None
