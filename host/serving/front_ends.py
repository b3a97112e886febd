"""`astrid mcp serve --http --workers N`: N full front-end processes accepting on one address (docs/nats.md).

    front_ends = FrontEnds(count, host, port)   # binds the address (ServingError if it cannot)
    place = front_ends.fork()                   # in each child: its FrontEnd; here: None
    if place is None:
        status, interrupted = front_ends.supervise()  # until every child ended; Ctrl-C / SIGTERM stop them all

Each child is the whole single-process server (MCP front end, broker, kernel,
its own sandboxes of every capsule) on a listening socket bound here before
the fork: on Linux one `SO_REUSEPORT` socket per child on the same port (the
kernel spreads new connections over them by a hash of each), elsewhere one
socket they all accept on. Nothing between them is on the request path
except a 2025-11-25 session's requests that land on another child than the
one holding the session: forwarded over its unix socket
(mcp/session_owner.py); and the resource updates each broker checked, passed
to the others (mcp/peer_updates.py). What must agree is on disk and read by
each the same way: the capsule home, trust store and signatures, grants, the
token file, kv state (one SQLite file, atomic across processes).

The parent serves nothing: it binds, forks before any thread or runtime
exists (a fork copies one thread and no wasmtime engine), then waits. Each
child runs in a session of its own (a terminal's Ctrl-C reaches the parent
alone, which stops them all with one SIGTERM each) and gets SIGTERM from the
kernel when the parent dies however it dies (Linux), so none outlives it.
One child exiting on its own stops the others: its sessions are gone, and a
server that lost part of itself says so instead of limping on.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from astrid.host.errors import ServingError
from astrid.host.mcp.http import SharedSocket, bind_address
from astrid.host.serving.workers import die_with_parent
from astrid.host.tuning import CLI_TUNING

# Linux spreads the connections to one port over the sockets bound to it with SO_REUSEPORT by a hash
# of each connection: even shares. Elsewhere (or without it) the front ends share one socket, and an
# idle one takes the next connection first: shares follow the scheduler (22/10 of 32 seen here).
SPREAD_BY_KERNEL = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


@dataclass
class FrontEnd:
    """What a child knows of its place: its shared socket, and the pipe that says when all are ready."""

    shared: SharedSocket
    _ready_read: int
    _ready_write: int

    @property
    def number(self) -> int:
        return self.shared.number

    @property
    def speaks(self) -> bool:
        """Front end 1 says the banner for all (the others only their problems)."""
        return self.shared.number == 1

    def ready(self) -> None:
        """This front end loaded its capsules; front end 1 waits for every one before it says ready."""
        if self.speaks:
            self._wait_others(CLI_TUNING.worker_ready_timeout_s)
        else:
            os.write(self._ready_write, b"r")

    def _wait_others(self, timeout_s: float) -> None:
        waiting, deadline = self.shared.count - 1, time.monotonic() + timeout_s
        while waiting > 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._ready_read], [], [], left)[0]:
                return  # a slow one: say ready anyway, its requests wait for its capsules
            got = os.read(self._ready_read, waiting)
            if not got:  # every other front end closed the pipe: exited (the parent stops all)
                return
            waiting -= len(got)


class FrontEnds:
    """The parent: the bound address, `count` forked front ends on it, and their supervision."""

    def __init__(self, count: int, host: str, port: int) -> None:
        self.count = count
        self.sockets: list[socket.socket] = []
        try:
            if SPREAD_BY_KERNEL:  # one socket each on the same port: the kernel spreads connections evenly
                self.sockets.append(bind_address(host, port, reuse_port=True))
                port = int(self.sockets[0].getsockname()[1])  # the one port 0 picked, for all
                self.sockets += [bind_address(host, port, reuse_port=True) for _ in range(count - 1)]
            else:  # one socket for all: whichever is first takes a connection
                self.sockets = [bind_address(host, port)] * count
        except OSError as exc:
            for sock in self.sockets:
                sock.close()
            raise ServingError(f"cannot listen there ({exc.strerror or exc})") from None
        self.port = int(self.sockets[0].getsockname()[1])
        self.folder = Path(tempfile.mkdtemp(prefix="astrid-front-ends-"))  # 0700: the unix sockets
        self.pids: list[int] = []
        self._stopping = False

    def fork(self) -> FrontEnd | None:
        """Start the children: in each, its `FrontEnd` (and serving is its job); here None."""
        if threading.active_count() > 1:  # a fork copies one thread: a lock another one held stays held
            raise ServingError("internal: --workers must fork before any thread starts")
        ready_read, ready_write = os.pipe()
        arm = die_with_parent() or (lambda: None)  # looked up before fork: the child only calls it
        for number in range(1, self.count + 1):
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.setsid()  # the terminal's Ctrl-C goes to the parent only, which stops us in order
                arm()
                # front end 1 reads who is ready, the others write it: each closes the end it does not use,
                # so front end 1 sees the end of the pipe when all the others are gone
                os.close(ready_write if number == 1 else ready_read)
                for other in {id(s): s for s in self.sockets if s is not self.sockets[number - 1]}.values():
                    other.close()  # another front end's: this one must not hold it (nor accept on it)
                shared = SharedSocket(self.sockets[number - 1], number, self.count, self.folder)
                return FrontEnd(shared, ready_read, ready_write)
            self.pids.append(pid)
        os.close(ready_read)
        os.close(ready_write)
        for sock in self.sockets:
            sock.close()  # the children accept on them; the parent never does
        return None

    def supervise(self) -> tuple[int, bool]:
        """Until every child ended: (exit status, whether a Ctrl-C or SIGTERM stopped us).

        The first signal sends each child one SIGTERM (each stops in order, as a single server
        does); a second one kills them. A child that ends by itself stops the others."""
        interrupted = False

        def on_signal(signum: int, _frame: object) -> None:
            nonlocal interrupted
            interrupted = True
            self._stop(kill=self._stopping)

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        status, failed = 0, None
        try:
            living = set(self.pids)
            while living:
                try:
                    pid, raw = os.waitpid(-1, 0)
                except ChildProcessError:
                    break
                if pid not in living:
                    continue
                living.discard(pid)
                code = os.waitstatus_to_exitcode(raw)
                if not self._stopping and failed is None:
                    failed = (self.pids.index(pid) + 1, code)
                    self._stop(kill=False)
                if code not in (0, 130, -signal.SIGTERM) and status == 0:
                    status = 1
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            shutil.rmtree(self.folder, ignore_errors=True)
        if failed is not None and not interrupted:
            number, code = failed
            raise ServingError(f"front end {number} exited (status {code}): stopped the others, see its lines above")
        return status, interrupted

    def _stop(self, *, kill: bool) -> None:
        self._stopping = True
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
            except ProcessLookupError:
                continue  # already ended
