"""A server at a real pseudo-terminal: its controlling terminal, stdin and stderr (stdout stays a pipe).

Ctrl-C is typed as a person types it: the byte ^C into the terminal, whose
line discipline sends SIGINT to the foreground process group.
"""

from __future__ import annotations

import fcntl
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

from tests.support.processes import astrid_exe, serve_args, server_env

CTRL_C = b"\x03"


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
def served_at_a_terminal(
    *folders: Path, capsule_home: Path, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], Terminal]]:
    """`astrid mcp serve --capsules FOLDER...` for alice at a terminal of its own (`env`: more environment)."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [astrid_exe(), *serve_args(*folders, principal="alice")],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=server_env(capsule_home, **env),
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
