"""`astrid mcp serve` on stdio at a terminal: the banner says what it waits for, and one Ctrl-C ends it.

The server runs with a real pseudo-terminal as its controlling terminal,
stdin and stderr (stdout stays a pipe: only JSON-RPC goes there). Ctrl-C is
typed as a person types it: the byte ^C into the terminal, whose line
discipline sends SIGINT to the foreground process group.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import subprocess
import termios
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.jsonrpc import initialize_request
from tests.support.processes import LineReader, astrid_exe, serve_args, server_env

pytestmark = pytest.mark.slow

CTRL_C = b"\x03"
STOP_WITHIN_S = 5.0
INITIALIZE = initialize_request("tty")


@dataclass
class Terminal:
    """The terminal side of a pty: what the server wrote to it (stderr and echo), and typing into it."""

    master: int
    slave: int  # kept open here too: its input queue says whether the server has read what was typed
    screen: bytearray = field(default_factory=bytearray)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pump(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # the last holder of the slave closed it
                return
            if not chunk:
                return
            with self.lock:
                self.screen += chunk

    def text(self) -> str:
        with self.lock:
            return self.screen.decode(errors="replace").replace("\r\n", "\n")

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def wait_for(self, needle: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while needle not in self.text():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{needle!r} not on the terminal within {timeout_s} s:\n{self.text()}")
            time.sleep(0.02)

    def wait_read(self, timeout_s: float) -> None:
        """Until the server has read everything the terminal took in (its input queue is empty): wait
        for the echo first, as what is written to the master reaches the queue a moment later."""
        deadline = time.monotonic() + timeout_s
        while _queued(self.slave):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not read its input within {timeout_s} s")
            time.sleep(0.01)


def _queued(fd: int) -> int:
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


def _controlling_terminal() -> None:
    """In the child, after setsid: stdin (the pty) becomes its controlling terminal, as a login shell's is."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@contextmanager
def served_at_a_terminal(*folders: Path, capsule_home: Path) -> Iterator[tuple[subprocess.Popen[bytes], Terminal]]:
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [astrid_exe(), *serve_args(*folders, principal="alice")],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=server_env(capsule_home),
        start_new_session=True,  # its own session, led by it: the pty's foreground process group
        preexec_fn=_controlling_terminal,
    )
    terminal = Terminal(master, slave)
    pump = threading.Thread(target=terminal.pump, daemon=True)
    pump.start()
    try:
        yield process, terminal
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        os.close(slave)
        pump.join(5)
        os.close(master)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture(scope="module")
def capsules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ctrl-c-capsules")
    return {
        "docs": build_clean(CAPSULES_DIR / "docs", root / "docs").folder,
        "probe": build_clean(TEST_CAPSULES / "probe", root / "probe").folder,
    }


def test_one_ctrl_c_stops_the_stdio_server_at_a_terminal(capsules, capsule_home) -> None:
    with served_at_a_terminal(capsules["docs"], capsule_home=capsule_home) as (process, terminal):
        terminal.wait_for("ready in ", 120)
        terminal.type(CTRL_C)
        started = time.monotonic()
        code = process.wait(STOP_WITHIN_S)
        elapsed = time.monotonic() - started
        assert process.stdout is not None
        stdout = process.stdout.read()
    shown = terminal.text()
    print(f"\none Ctrl-C -> exit {code} after {elapsed * 1000:.0f} ms")
    assert code == 130, shown
    assert "astrid: waiting for an MCP client on stdin (Ctrl-C to stop)" in shown
    assert "astrid: Ctrl-C: stopping" in shown and "astrid: stopped" in shown
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown and "Aborted" not in shown
    assert stdout == b""  # no client spoke: nothing on the JSON-RPC channel


def test_ctrl_c_answers_the_requests_already_read_then_stops(capsules, capsule_home) -> None:
    with served_at_a_terminal(capsules["probe"], capsule_home=capsule_home) as (process, terminal):
        assert process.stdout is not None
        replies = LineReader(process.stdout)
        terminal.type(json.dumps(INITIALIZE).encode() + b"\n")
        assert json.loads(replies.next(60) or b"null")["id"] == 1
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        # a read that hangs in its capsule: it is answered (an error) when the read window closes
        hanging = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "astrid://probe/forever"}}
        terminal.type(json.dumps(initialized).encode() + b"\n" + json.dumps(hanging).encode() + b"\n")
        terminal.wait_for("astrid://probe/forever", 30)  # echoed: the terminal took the line in
        terminal.wait_read(30)  # and the server read it (a Ctrl-C discards what is not read yet)
        terminal.type(CTRL_C)
        answer = json.loads(replies.next(30) or b"null")
        assert answer["id"] == 2 and answer["error"]["code"] == -32603, answer
        assert process.wait(STOP_WITHIN_S) == 130
        assert replies.next(5) is None  # and nothing else on stdout
    shown = terminal.text()
    assert "answering the 1 request already read, then stopping" in shown, shown
    assert "astrid: stopped" in shown and "Traceback" not in shown


def test_the_waiting_line_is_for_a_terminal_and_end_of_input_still_exits_0(capsules, capsule_home) -> None:
    with served_at_a_terminal(capsules["docs"], capsule_home=capsule_home) as (process, terminal):
        terminal.wait_for("waiting for an MCP client on stdin", 60)
        terminal.type(b"\x04")  # Ctrl-D at the start of a line: end of input
        assert process.wait(STOP_WITHIN_S + 10) == 0
    assert "Traceback" not in terminal.text() and "stopped" not in terminal.text()
    # a client on a pipe is no person: the banner does not tell it to press Ctrl-C
    done = subprocess.run(
        [astrid_exe(), *serve_args(capsules["docs"], principal="alice")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=server_env(capsule_home),
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == b""
    assert b"serving MCP resources on stdio" in done.stderr
    assert b"waiting for an MCP client" not in done.stderr


def test_a_second_ctrl_c_stops_at_once(capsules, capsule_home) -> None:
    """While the first Ctrl-C waits for a read that hangs in its capsule, a second one does not wait."""
    with served_at_a_terminal(capsules["probe"], capsule_home=capsule_home) as (process, terminal):
        assert process.stdout is not None
        replies = LineReader(process.stdout)
        terminal.type(json.dumps(INITIALIZE).encode() + b"\n")
        assert json.loads(replies.next(60) or b"null")["id"] == 1
        hanging = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "astrid://probe/forever"}}
        terminal.type(json.dumps(hanging).encode() + b"\n")
        terminal.wait_for("astrid://probe/forever", 30)
        terminal.wait_read(30)
        terminal.type(CTRL_C)
        terminal.wait_for("Ctrl-C again to stop at once", 10)
        started = time.monotonic()
        terminal.type(CTRL_C)
        assert process.wait(STOP_WITHIN_S) == 130
        elapsed = time.monotonic() - started
    assert elapsed < 1.5, f"the second Ctrl-C waited {elapsed:.2f} s"  # the read would hold it 2.5 s
    shown = terminal.text()
    assert "astrid: stopped at once" in shown and "Traceback" not in shown
