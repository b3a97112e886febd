"""A stop during a first start's compile: the server is gone at once, its compile too, nothing half-written.

Each server here has an empty compile cache of its own, so it compiles the
docs capsule (a Python capsule: 5-20 s with Cranelift, in a child process).
The signal comes once the server says it is compiling and that child runs.
Without the stop killing the compile, the server waits for it and the
compiled entry lands in the cache: so the cache is checked too, not only the
time it took (printed, and bounded generously), and then a next start, which
compiles again and serves.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from astrid.host.kernel.compile_cache import MEMO_FILE
from tests.support.capsules import Built
from tests.support.http import URL_LINE
from tests.support.jsonrpc import initialize_request
from tests.support.nats import capsule_host, nats_server
from tests.support.processes import alive, all_gone, astrid_exe, descendants, serve_args, server_env, wait_for_text
from tests.support.terminal import CTRL_C, served_at_a_terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the compile process in /proc"),
]

COMPILING = "compiling docs.wasm (once per build: cached afterwards)..."
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
GONE_WITHIN_S = 10.0  # generous: the stop takes well under a second, the compile alone longer


@pytest.fixture
def docs(built_docs: Built) -> Path:
    return built_docs.folder


@pytest.fixture
def cold_cache(tmp_path: Path) -> Path:
    """An empty compile cache for one server (ASTRID_CACHE_DIR)."""
    return tmp_path / "components"


def compile_process(server_pid: int, timeout_s: float = 30) -> int:
    """The compile worker running below the server (a child, or a worker's child)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [pid for pid, command in descendants(server_pid).items() if "compile_worker" in command]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no compile process below {server_pid} within {timeout_s} s")


def stopped_in(process: subprocess.Popen, started: float, what: str) -> int:
    """The exit status, once `process` exited (within GONE_WITHIN_S of `started`); says how long it took."""
    code = process.wait(max(0.0, started + GONE_WITHIN_S - time.monotonic()))
    print(f"\n{what} during a cold compile -> exit {code} after {(time.monotonic() - started) * 1000:.0f} ms")
    return code


def assert_left_nothing(cache: Path, compiler: int) -> None:
    assert all_gone([compiler], within_s=5) == [], "the compile process outlived the stop"
    left = sorted(path.name for path in cache.iterdir()) if cache.exists() else []
    # no entry (the compile was not waited for), no part of one, no copy of the component
    assert [name for name in left if name != MEMO_FILE] == [], left


def assert_starts_again(docs: Path, capsule_home: Path, cache: Path) -> None:
    """The next start compiles the component afresh, serves it, and leaves it in the cache."""
    with served_at_a_terminal(docs, capsule_home=capsule_home, ASTRID_CACHE_DIR=str(cache)) as (process, terminal):
        terminal.wait_for("ready in ", 300)
        terminal.type(CTRL_C)
        assert process.wait(30) == 130, terminal.text()
    shown = terminal.text()
    assert COMPILING in shown and "not loaded" not in shown and "Traceback" not in shown, shown
    assert [path.name for path in cache.glob("*.cwasm")] != [], sorted(path.name for path in cache.iterdir())


@contextmanager
def serving(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with log.open("w") as errors:
        process = subprocess.Popen(
            [astrid_exe(), *args], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        assert process.stdin is not None
        process.stdin.close()


def test_ctrl_c_at_a_terminal_stops_a_cold_compile(docs, capsule_home, cold_cache) -> None:
    with served_at_a_terminal(docs, capsule_home=capsule_home, ASTRID_CACHE_DIR=str(cold_cache)) as (
        process,
        terminal,
    ):
        terminal.wait_for(COMPILING, 120)
        compiler = compile_process(process.pid)
        terminal.type(CTRL_C)  # to the terminal's process group: the server (the compile has its own group)
        code = stopped_in(process, time.monotonic(), "Ctrl-C")
        assert process.stdout is not None
        assert process.stdout.read() == b""
    shown = terminal.text()
    assert code == 130, shown
    assert "astrid: Ctrl-C: stopping" in shown and "astrid: stopped" in shown, shown
    assert "ready in" not in shown and "not loaded" not in shown and "Traceback" not in shown, shown
    assert_left_nothing(cold_cache, compiler)
    assert_starts_again(docs, capsule_home, cold_cache)


def post(url: str, message: dict, headers: dict[str, str] | None = None) -> tuple[str | None, str]:
    """POST one JSON-RPC message to the MCP endpoint; (the session id it names, the body)."""
    sent = urllib.request.Request(url, data=json.dumps(message).encode(), headers={**ACCEPT, **(headers or {})})
    with urllib.request.urlopen(sent, timeout=60) as answer:
        return answer.headers.get("mcp-session-id"), answer.read().decode()


def list_in_flight(url: str) -> tuple[threading.Thread, list[str]]:
    """A `resources/list` in a session of its own, waiting for the capsules to load; its answer goes in the list."""
    session_id, _ = post(url, initialize_request("in-flight"))
    assert session_id is not None
    session = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    answers: list[str] = []
    listing = {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}
    waiting = threading.Thread(target=lambda: answers.append(post(url, listing, session)[1]), daemon=True)
    waiting.start()
    return waiting, answers


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_http_server_stops_during_a_cold_compile(docs, capsule_home, cold_cache, tmp_path, signum) -> None:
    """With a list waiting for the capsules: the stop does not wait for the compile to end it."""
    log = tmp_path / "serve.log"
    args = serve_args(docs, principal="alice", extra=("--http", "127.0.0.1:0", "--no-auth"))
    with serving(args, server_env(capsule_home, ASTRID_CACHE_DIR=str(cold_cache)), log) as process:
        wait_for_text(log, COMPILING, process)
        compiler = compile_process(process.pid)
        found = URL_LINE.search(log.read_bytes())
        assert found is not None, log.read_text()
        waiting, answers = list_in_flight(found[1].decode())
        time.sleep(1)  # the list reaches the server, which holds it until the capsules load
        assert alive(compiler), "the compile ended before the signal: nothing to stop"
        process.send_signal(signum)
        code = stopped_in(process, time.monotonic(), signum.name)
        waiting.join(10)
    shown = log.read_text()
    assert code == 130, shown
    assert "astrid: stopped" in shown and "Traceback" not in shown, shown
    # its response ended: with the answer (no docs), or cut as the shutdown ends every SSE stream
    assert not waiting.is_alive() and len(answers) == 1, (answers, shown)
    assert_left_nothing(cold_cache, compiler)


def test_serve_with_workers_stops_during_their_cold_compile(docs, capsule_home, cold_cache, tmp_path) -> None:
    """SIGTERM to serve: it stops waiting for its worker, which stops its compile (a grandchild)."""
    log = tmp_path / "serve.log"
    args = serve_args(docs, principal="alice", extra=("--workers", "1", "--no-watch"))
    with serving(args, server_env(capsule_home, ASTRID_CACHE_DIR=str(cold_cache)), log) as process:
        wait_for_text(log, f"worker 1: {COMPILING}", process)
        compiler = compile_process(process.pid)
        helpers = list(descendants(process.pid))  # nats-server, the worker and its compile
        process.send_signal(signal.SIGTERM)
        code = stopped_in(process, time.monotonic(), "SIGTERM with --workers")
    shown = log.read_text()
    assert code == 130, shown
    assert "astrid: stopped" in shown and "worker 1: hosting" not in shown, shown
    assert all_gone(helpers, within_s=5) == [], shown
    assert_left_nothing(cold_cache, compiler)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_capsule_host_stops_during_a_cold_compile(docs, capsule_home, cold_cache, tmp_path, signum) -> None:
    """SIGTERM: `astrid host run` stops in order (status 0, as once it hosts). SIGKILL: nothing of it runs
    any more, yet its compile process sees it gone and removes its files."""
    log = tmp_path / "host.log"
    env = {"ASTRID_CACHE_DIR": str(cold_cache)}
    with nats_server(tmp_path) as server, capsule_host(server.url(), docs, capsule_home, log, env) as host:
        wait_for_text(log, COMPILING, host)
        compiler = compile_process(host.pid)
        host.send_signal(signum)
        code = stopped_in(host, time.monotonic(), signum.name)
    shown = log.read_text()
    if signum == signal.SIGTERM:
        assert code == 0, shown
        assert "astrid: stopped while the capsules loaded" in shown and "astrid: hosting" not in shown, shown
    else:
        assert code == -signal.SIGKILL
    assert "Traceback" not in shown, shown
    assert_left_nothing(cold_cache, compiler)
    if signum == signal.SIGKILL:  # the files were removed by the orphaned compile process alone
        assert_starts_again(docs, capsule_home, cold_cache)
