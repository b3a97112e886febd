"""`astrid` as a process: its executable, the arguments and environment of `astrid mcp serve`, its output."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import threading
import time
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


def wait_for_text(log: Path, text: str, process: subprocess.Popen, timeout_s: float = 120, poll_s: float = 0.1) -> None:
    """Until `text` is in the file `log` (what `process` writes); fails when it exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(poll_s)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by a parent still running) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def all_gone(pids: list[int], within_s: float = 15) -> list[int]:
    """The pids still running after `within_s` (none, when nothing was left behind)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every process below `pid` (Linux: read from /proc)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        parents[int(entry.name)] = int(stat.rsplit(") ", 1)[1].split()[1])
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found[child] = commands.get(child, "")
                frontier.append(child)
    return found
