"""The connection guard's rules: caps, who makes room, deadlines; the loop's quiet error reports; the fd limit."""

from __future__ import annotations

import subprocess
import sys

from astrid.host.connection_guard import REFUSAL, Phase
from astrid.host.limits import HttpLimits
from astrid.host.mcp.connections import ConnectionGuard, RateLimitedLoopErrors, connection_cap


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Transport:
    """What the guard touches of an asyncio transport: write, close, is_closing."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Conn:
    def __init__(self) -> None:
        self.transport = Transport()


def _guard(clock: Clock | None = None, **limits) -> ConnectionGuard:
    return ConnectionGuard(HttpLimits(**limits), clock=clock or Clock())


def test_at_the_per_client_cap_the_clients_own_oldest_waiting_connection_makes_room():
    guard = _guard(connections_per_client=2)
    first, second, third = Conn(), Conn(), Conn()
    other = Conn()
    assert guard.admit(first, "10.0.0.2") and guard.admit(other, "10.0.0.9") and guard.admit(second, "10.0.0.2")
    assert guard.admit(third, "10.0.0.2")
    assert first.transport.closed and not second.transport.closed and not other.transport.closed
    assert guard.per_client("10.0.0.2") == 2 and len(guard) == 3


def test_a_connection_being_answered_is_never_evicted_the_newcomer_is_refused_instead():
    guard = _guard(connections_per_client=1)
    busy, newcomer = Conn(), Conn()
    guard.admit(busy, "10.0.0.2")
    guard.moved(busy, Phase.ANSWERING)
    assert not guard.admit(newcomer, "10.0.0.2")
    assert newcomer.transport.written == REFUSAL and newcomer.transport.closed
    assert not busy.transport.closed


def test_at_the_global_cap_the_heaviest_address_pays():
    guard = _guard(connections=4, connections_per_client=0)
    heavy = [Conn() for _ in range(3)]
    light = Conn()
    guard.admit(light, "10.0.0.1")
    for conn in heavy:
        guard.admit(conn, "10.0.0.2")
    newcomer = Conn()
    assert guard.admit(newcomer, "10.0.0.3")
    assert heavy[0].transport.closed and not light.transport.closed
    assert len(guard) == 4


def test_heads_and_bodies_are_closed_at_their_own_deadlines(caplog):
    clock = Clock()
    guard = _guard(clock, header_timeout_s=10, body_timeout_s=30)
    head, body, answering = Conn(), Conn(), Conn()
    for conn in (head, body, answering):
        guard.admit(conn, "10.0.0.2")
    guard.moved(body, Phase.BODY)
    guard.moved(answering, Phase.ANSWERING)
    clock.now += 11
    guard.sweep()
    assert head.transport.closed and not body.transport.closed
    clock.now += 20
    guard.sweep()
    assert body.transport.closed and not answering.transport.closed
    reports = [r.getMessage() for r in caplog.records]
    assert any("1 at the head deadline" in line for line in reports)
    assert any("1 at the body deadline" in line for line in reports)


def test_a_new_request_on_a_kept_alive_connection_gets_a_fresh_head_deadline():
    clock = Clock()
    guard = _guard(clock, header_timeout_s=10)
    conn = Conn()
    guard.admit(conn, "10.0.0.2")
    guard.moved(conn, Phase.ANSWERING)
    clock.now += 60
    guard.ready_again(conn)
    clock.now += 5
    guard.sweep()
    assert not conn.transport.closed


def test_the_cap_leaves_room_under_the_open_file_limit():
    assert connection_cap(HttpLimits(connections=1024), 1024) == 1024 - 128
    assert connection_cap(HttpLimits(connections=1024), 1_000_000) == 1024
    assert connection_cap(HttpLimits(connections=1024), 100) == 16


def test_loop_errors_of_one_kind_are_logged_once_per_period(caplog):
    clock = Clock()
    errors = RateLimitedLoopErrors(5.0, clock=clock)
    for _ in range(1000):
        errors.handle(None, {"message": "socket.accept() out of system resource", "exception": OSError(24, "EMFILE")})
    clock.now += 6
    errors.handle(None, {"message": "socket.accept() out of system resource"})
    lines = [r.getMessage() for r in caplog.records if "socket.accept()" in r.getMessage()]
    assert len(lines) == 2
    assert "999 more like it not logged" in lines[1]


def test_the_soft_open_file_limit_is_raised_to_the_hard_one():
    script = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from astrid.host.mcp.connections import raise_fd_limit\n"
        "raised = raise_fd_limit()\n"
        "assert raised == resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 256, raised\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
