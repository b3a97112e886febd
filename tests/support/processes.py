"""`astrid` as a process: its executable, the arguments and environment of `astrid mcp serve`, its output."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import threading
from pathlib import Path

from astrid.host.toolpaths import tool_path


def stop(process: subprocess.Popen, timeout_s: float = 10) -> None:
    """Terminate a process the tests started; kill it when it does not exit in time."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def astrid_exe() -> str:
    """The `astrid` console script of the environment under test."""
    return tool_path("astrid")


def run_astrid(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`astrid ARGS...` run in `cwd` as a user runs it, output captured as text."""
    return subprocess.run([astrid_exe(), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def serve_args(*folders: Path, principal: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The arguments of `astrid mcp serve --principal P [EXTRA...] --capsules F...`."""
    args = ["mcp", "serve", "--principal", principal, *extra]
    for folder in folders:
        args += ["--capsules", str(folder)]
    return args


def server_env(capsule_home: Path, **extra: str) -> dict[str, str]:
    """The environment of an `astrid mcp serve` a test starts (unbuffered stderr).

    The developer's own OTEL_* variables are left out: they would switch tracing on in every server."""
    inherited = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    return {**inherited, "ASTRID_CAPSULE_HOME": str(capsule_home), "PYTHONUNBUFFERED": "1", **extra}


class LineReader:
    """Reads a binary pipe on a thread so every wait for a line is bounded."""

    def __init__(self, stream) -> None:
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        for line in iter(stream.readline, b""):
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout_s: float) -> bytes | None:
        """The next line, or None at end of stream; TimeoutError when none comes in time."""
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no line within {timeout_s} s") from None
