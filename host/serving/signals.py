"""Ctrl-C and SIGTERM as an orderly stop: the first asks, a second one exits at once.

A second signal means "now": whatever the first one started (answering the
requests already read, stopping workers) is cut short with the exit status of
an interrupted command. The handlers write to the stderr fd itself and wake
waiters through a pipe: a handler that takes a lock (`sys.stderr`'s,
`Event.set`'s) deadlocks when a second signal lands while the first holds it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

# What a shell reports for a command ended by Ctrl-C (128 + SIGINT).
INTERRUPTED_EXIT = 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_at_once(signum: int, frame: object) -> None:
    os.write(2, b"\nastrid: stopped at once\n")
    os._exit(INTERRUPTED_EXIT)


@contextlib.contextmanager
def first_ctrl_c_asks(request_stop: Callable[[], None]) -> Iterator[None]:
    """While inside: the first SIGINT calls `request_stop`; a second one exits at once.

    Left as it is when SIGINT was ignored at start (`nohup`, a background job),
    off the main thread, and on Windows (no select on pipes: the reader of stdin
    cannot be woken, so Ctrl-C interrupts as Python's default does)."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN or threading.current_thread() is not threading.main_thread() or os.name == "nt":
        yield
        return

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, exit_at_once)
        request_stop()

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def sigterm_calls(request_stop: Callable[[], None]) -> None:
    """From now on SIGTERM calls `request_stop` (a supervisor's stop, done in order)."""
    signal.signal(signal.SIGTERM, lambda *_: request_stop())


def sigterm_as_ctrl_c() -> None:
    """From now on SIGTERM stops as Ctrl-C does (uvicorn's shutdown, or the stop `first_ctrl_c_asks` set).
    Only the main thread may set a handler: elsewhere (a server run inside a test) it is left as it is."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))


def stop_signal_pipe(on_first: Callable[[], None] = lambda: None) -> int:
    """Handle SIGINT and SIGTERM from now on; returns the pipe end that gets a byte on the first one,
    which also calls `on_first` (in the handler: it must take no lock). After it, a second one exits
    at once (a stop that hangs can be cut short)."""
    woken, wake = os.pipe()
    if hasattr(os, "set_blocking"):  # POSIX (a Windows pipe holds the one byte anyway)
        os.set_blocking(wake, False)

    def first(signum: int, frame: object) -> None:
        for stopping in STOP_SIGNALS:
            signal.signal(stopping, exit_at_once)
        on_first()
        # a full pipe already holds the byte that wakes the reader
        with contextlib.suppress(OSError):
            os.write(wake, b"x")

    for signum in STOP_SIGNALS:
        signal.signal(signum, first)
    return woken
