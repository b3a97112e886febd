"""`astrid mcp serve` on stdio at a terminal: the banner says what it waits for, and one Ctrl-C ends it.

The server runs with a real pseudo-terminal as its controlling terminal,
stdin and stderr (stdout stays a pipe: only JSON-RPC goes there). Ctrl-C is
typed as a person types it: the byte ^C into the terminal, whose line
discipline sends SIGINT to the foreground process group.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.jsonrpc import initialize_request
from tests.support.processes import LineReader, astrid_exe, serve_args, server_env
from tests.support.terminal import CTRL_C, served_at_a_terminal

pytestmark = pytest.mark.slow

STOP_WITHIN_S = 5.0
INITIALIZE = initialize_request("tty")


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
