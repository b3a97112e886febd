"""A capsule stuck on a slow server must not starve the other capsules of workers (issue 18, item 3).

On the capsule pool of the finding's 2-core machine (8 workers, pinned
whatever this machine has), ten principals each keep four reads in flight of
`stuck`, a capsule whose every read waits on a granted loopback HTTP server
that answers after 1.5 s: calls that hold a worker and no CPU at all.
Meanwhile another principal reads `quick`, another capsule, and every one of
those reads must be answered within the read window. Before capsule workers
were shared fairly, each flooding lane kept its worker while it had calls
queued, the stuck capsule held the whole pool, and every such read failed
with "no capsule answered within 2.5 s".

Real components (the hostile capsule, built once and cached), the real
kernel, broker and bus; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from astrid.host.capabilities.grants import GrantStore

pytestmark = pytest.mark.slow

DELAY_S = 1.5  # how long the server makes each fetch wait: under a call's 2 s wall time, so no call times out
IN_FLIGHT = 4  # reads each flooding principal keeps in flight
FLOOD_S = 3.0  # how long the victim keeps reading once the flood is at full strength
STUCK_READ = "astrid://stuck/attacks"  # the hostile `capabilities` mode: one granted fetch of /hello per read
QUICK_READ = "astrid://quick/ok"


@dataclass
class SlowServer:
    """A loopback HTTP server whose GET /hello answers after DELAY_S (at once after `release`)."""

    port: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    waiting: int = 0  # fetches of /hello it holds now
    most: int = 0  # ... and at most
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def hold(self) -> None:
        with self._cond:
            self.waiting += 1
            self.most = max(self.most, self.waiting)
            self._cond.notify_all()
        self.release.wait(DELAY_S)  # the slowness under test, not a synchronisation
        with self._cond:
            self.waiting -= 1

    def wait_holding(self, n: int, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.waiting >= n, timeout_s)


@contextmanager
def slow_server() -> Iterator[SlowServer]:
    slow = SlowServer()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/hello":
                slow.hold()
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    slow.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield slow
    finally:
        slow.release.set()
        server.shutdown()
        server.server_close()


def test_a_capsule_stuck_on_a_slow_server_never_starves_another_capsules_reads(tmp_path: Path, hostile_dir, serve):
    with slow_server() as slow:
        grants = GrantStore(tmp_path / "config" / "grants.json")
        grants.grant("stuck", f"http:http://127.0.0.1:{slow.port}")
        stuck = hostile_dir("stuck", "capabilities", capabilities='http = ["http://127.0.0.1"]', port=slow.port)
        quick = hostile_dir("quick", "honest")
        with pytest.MonkeyPatch.context() as pinned:
            pinned.setattr(os, "cpu_count", lambda: 2)  # the kernel's default pool on 2 cores: max(8, 4 x 2)
            served = serve(stuck, quick, grants_file=grants.path, kv_file=tmp_path / "kv.sqlite3")
        workers = served.kernel.dispatcher.workers
        flooders = [f"flooder{n}" for n in range(10)]
        assert workers == 8 < len(flooders)  # more flooding lanes than workers
        # Every principal lists (and learns the templates) first, so the flood is reads only.
        for name in [*flooders, "victim"]:
            client = served.as_(name)
            client.list_resources()
            client.list_templates()

        stop = threading.Event()

        def flood(name: str) -> None:
            client = served.as_(name)
            while not stop.is_set():
                with contextlib.suppress(Exception):  # the flood goes on whatever one read got
                    client.read(STUCK_READ).result()

        threads = [
            threading.Thread(target=flood, args=(name,), daemon=True) for name in flooders for _ in range(IN_FLIGHT)
        ]
        victim = served.as_("victim")
        window = served.runtime.limits.read_window_s
        reads: list[tuple[float, str | None, str]] = []  # seconds, error, text
        try:
            for thread in threads:
                thread.start()
            # Full strength: the stuck capsule holds half the workers (its share; all of them before the fix).
            assert slow.wait_holding(workers // 2, timeout_s=20), f"the flood never got going ({slow.waiting})"
            until = time.monotonic() + FLOOD_S
            while time.monotonic() < until:
                started = time.monotonic()
                reply = victim.read(QUICK_READ).result()
                text = "".join(getattr(c, "text", "") for c in reply.contents)
                reads.append((time.monotonic() - started, reply.error.message if reply.error else None, text))
                stop.wait(0.2)  # pacing: a few reads spread over the flood
            held_at_end = slow.waiting
        finally:
            stop.set()
            slow.release.set()  # the stuck capsule answers at once now: the flood winds down
            for thread in threads:
                thread.join(timeout=20)
        assert not [thread for thread in threads if thread.is_alive()]

    failed = [(round(seconds, 2), error) for seconds, error, _ in reads if error is not None or seconds >= window]
    assert not failed, f"{len(failed)}/{len(reads)} reads of another capsule failed or came late: {failed[:3]}"
    assert len(reads) >= 3  # spread over the flood
    assert {text for _, _, text in reads} == {"hostile ok for victim"}
    # The flood was real to the end, and the stuck capsule never held more than its share.
    assert held_at_end >= 1 and slow.most <= served.kernel.dispatcher.share
