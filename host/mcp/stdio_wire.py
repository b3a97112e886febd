"""The stdio wire's bytes: lines in, lines out, with as few thread hand-offs as the fds allow.

Reading: where the event loop can watch the input fd (a pipe, a socket, a
terminal on POSIX), lines are read on the loop itself (`loop.add_reader`,
then one `os.read` of what is there): no worker thread per line. A regular
file, the null device and Windows pipes cannot be watched; they are read on
a worker thread, through `select` on the wire and the stop's pipe.

Writing: a line of at most `PIPE_BUF` bytes to a pipe or a socket that
`poll` says is writable is written on the loop: such a write is whole and
never blocks (POSIX: a pipe takes it atomically once a buffer slot is free).
On Linux a longer line (a 64 KiB blob's 87 KB) to a pipe is written on the
loop too when the pipe is empty and its capacity holds the whole line: every
buffer slot is then free, so the write cannot block. The wire asks for a
1 MiB pipe once (`F_SETPIPE_SZ`; the kernel allocates pages only as they
fill). Anything else (a longer line, a pipe the client has not drained, a
terminal, a file) is written on a worker thread, so a client that stops
reading never stalls the loop.

Lines end at "\\n" (a "\\r" before it is left to the JSON parser, which
takes it as whitespace); the bytes are UTF-8, an invalid byte becomes U+FFFD
as before. Each hand-off these avoid cost 0.1-0.16 ms per request on 2 cores
(docs/performance.md, "The stdio wire").

An `InputStop` ends the input as end of input does, from a signal handler or
any thread: a reader waiting on a quiet wire wakes at once.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import io
import os
import select
import stat
from collections.abc import AsyncIterator, Callable

import anyio

READ_CHUNK = 64 * 1024
# Writes up to this size to a writable pipe are atomic and do not block (POSIX).
INLINE_WRITE_BYTES = getattr(select, "PIPE_BUF", 512)
# The pipe capacity the wire asks for (Linux; the default 64 KiB is less than a 64 KiB blob's line)
PIPE_CAPACITY_BYTES = 1 << 20


class InputStop:
    """Ends the wire's input as if the client had closed it: from a signal handler or any thread.

    `request()` only sets a flag and writes one byte to a pipe, so it is safe
    in a signal handler; the reader, watching the wire and that pipe, then
    sees end of input. `on_stop(pending)` is called once, on the event loop,
    with how many requests already read are still to be answered."""

    def __init__(self, on_stop: Callable[[int], None] | None = None) -> None:
        self._read_fd, self._write_fd = os.pipe()
        if hasattr(os, "set_blocking"):  # POSIX (Windows pipes on 3.11 have none; one byte fits anyway)
            os.set_blocking(self._write_fd, False)
        self.requested = False
        self.on_stop = on_stop

    def request(self) -> None:
        self.requested = True
        with contextlib.suppress(OSError):  # the pipe is full or closed: a stop was requested already
            os.write(self._write_fd, b"x")

    def fileno(self) -> int:
        return self._read_fd

    def close(self) -> None:
        _close_quietly(self._read_fd)
        _close_quietly(self._write_fd)


# -- reading ------------------------------------------------------------------------


class WireLines:
    """The wire's lines (str, each with its "\\n"), read on the loop when the fd can be watched."""

    def __init__(self, fd: int, stop: InputStop | None = None) -> None:
        self._fd = fd
        self._stop = stop
        self.on_loop: bool | None = None  # which way it reads, once it started

    def __aiter__(self) -> AsyncIterator[str]:
        if os.name != "nt" and _watchable(self._fd):
            self.on_loop = True
            return self._loop_lines()
        self.on_loop = False
        return self._thread_lines()

    async def _loop_lines(self) -> AsyncIterator[str]:
        pending = bytearray()
        searched = 0  # bytes of `pending` known to hold no newline: a long line is scanned once
        while True:
            end = pending.find(b"\n", searched)
            if end >= 0:
                line = bytes(pending[: end + 1])
                del pending[: end + 1]
                searched = 0
                yield line.decode("utf-8", errors="replace")
                continue
            searched = len(pending)
            chunk = await self._next_chunk()
            if not chunk:
                if pending:  # a last line without its newline
                    yield pending.decode("utf-8", errors="replace")
                return
            pending += chunk

    async def _next_chunk(self) -> bytes:
        """What the wire has once it has something; b"" at end of input or on a stop."""
        loop = asyncio.get_running_loop()
        stop = self._stop
        while True:
            if stop is not None and stop.requested:
                return b""
            ready = loop.create_future()

            def wake(future: asyncio.Future[None] = ready) -> None:
                if not future.done():
                    future.set_result(None)

            watched = [self._fd] if stop is None else [self._fd, stop.fileno()]
            for fd in watched:
                loop.add_reader(fd, wake)
            try:
                await ready
            finally:
                for fd in watched:
                    loop.remove_reader(fd)
            if stop is not None and stop.requested:
                return b""
            try:
                return os.read(self._fd, READ_CHUNK)
            except BlockingIOError:  # woken for nothing (another reader took it): wait again
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # a terminal that hung up: end of input
                    return b""
                raise

    async def _thread_lines(self) -> AsyncIterator[str]:
        file = _threaded_reader(self._fd, self._stop)
        async for line in anyio.wrap_file(file):
            yield line

    def close(self) -> None:
        _close_quietly(self._fd)


def _watchable(fd: int) -> bool:
    """True when the running loop can wait for `fd` to be readable (not a regular file or /dev/null)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_reader(fd, lambda: None)
    except (OSError, ValueError, NotImplementedError):  # epoll refuses files (EPERM); no add_reader on Windows
        return False
    loop.remove_reader(fd)
    return True


class _StoppableInput(io.RawIOBase):
    """The wire's raw input on a worker thread: a read waits for data or for the stop, and a stop
    is end of input."""

    def __init__(self, fd: int, stop: InputStop) -> None:
        self._fd = fd
        self._stop = stop

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer) -> int:
        if self._stop.requested:
            return 0
        ready = _wait_readable(self._fd, self._stop.fileno())
        if self._stop.fileno() in ready or self._stop.requested:
            return 0
        try:
            data = os.read(self._fd, len(buffer))
        except OSError as exc:
            if exc.errno == errno.EIO:  # a terminal that hung up: end of input
                return 0
            raise
        buffer[: len(data)] = data
        return len(data)


def _wait_readable(*fds: int) -> list[int]:
    """The fds of `fds` ready to read, once one is (EINTR is retried by Python)."""
    if hasattr(select, "poll") and max(fds) >= 1024:  # past select's FD_SETSIZE
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        return [fd for fd, _ in poller.poll()]
    ready, _, _ = select.select(list(fds), [], [])
    return ready


def _threaded_reader(fd: int, stop: InputStop | None) -> io.TextIOWrapper:
    """A line reader for a worker thread; with a stop (POSIX), one that `stop.request()` ends.
    It does not own `fd` (`WireLines.close` does)."""
    if stop is None or os.name == "nt":  # no select on Windows pipes: Ctrl-D / closing stdin ends it
        raw: io.RawIOBase = io.FileIO(fd, "rb", closefd=False)
    else:
        raw = _StoppableInput(fd, stop)
    return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace", newline="\n")


# -- writing ------------------------------------------------------------------------


class WireWriter:
    """The wire's writer: one whole line per write, in order, never interleaved.

    A short line to a pipe or socket with room is written on the loop; any
    other goes through one worker-thread call."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock()
        mode = os.fstat(fd).st_mode
        self._inline = os.name != "nt" and hasattr(select, "poll") and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode))
        # Linux pipes: how much a write into the empty pipe takes without blocking (0: not known)
        self._capacity = _pipe_capacity(fd) if stat.S_ISFIFO(mode) else 0
        self.inline_writes = 0  # how many lines skipped the worker thread (tests)

    async def write(self, text: str) -> None:
        data = text.encode("utf-8")
        async with self._lock:
            if self._on_loop(len(data)):
                try:
                    written = os.write(self._fd, data)  # whole: at most PIPE_BUF bytes into a slot that is free
                except BlockingIOError:  # a descriptor someone made non-blocking, full after all: the thread waits
                    written = 0
                else:
                    self.inline_writes += 1
                data = data[written:]
            if data:
                await anyio.to_thread.run_sync(self._write_all, data)

    def _on_loop(self, size: int) -> bool:
        """Would a write of `size` bytes be whole without blocking? (Else a worker thread writes it.)"""
        if not self._inline:
            return False
        if size <= INLINE_WRITE_BYTES:
            return _writable(self._fd, timeout_ms=0)
        return size <= self._capacity and _pipe_empty(self._fd)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:  # a descriptor someone made non-blocking: wait until it takes more
                _writable(self._fd, timeout_ms=None)

    async def flush(self) -> None:  # every write is on the wire when it returns
        return None

    def close(self) -> None:
        _close_quietly(self._fd)


def _writable(fd: int, *, timeout_ms: int | None) -> bool:
    """Has `fd` room for a write, within `timeout_ms` (None: wait until it has)? POSIX `poll`."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLOUT for _, events in poller.poll(timeout_ms))


def _pipe_capacity(fd: int) -> int:
    """The capacity of the pipe `fd` writes to, raised to `PIPE_CAPACITY_BYTES` where the kernel
    allows it (Linux; the limit is /proc/sys/fs/pipe-max-size); 0 where it cannot be known."""
    try:
        import fcntl
        import termios

        if not hasattr(fcntl, "F_GETPIPE_SZ") or not hasattr(termios, "FIONREAD"):
            return 0
        with contextlib.suppress(OSError):  # over the user's limit: keep the size it has
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_CAPACITY_BYTES)
        return int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
    except (ImportError, OSError):
        return 0


def _pipe_empty(fd: int) -> bool:
    """Has the reader taken every byte written to the pipe `fd` (Linux `FIONREAD`, on either end)?"""
    import fcntl
    import termios

    pending = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, pending, True)
    except OSError:
        return False
    return pending[0] == 0


def _close_quietly(fd: int) -> None:
    """Close `fd`; one already closed (or never valid) is no error at shutdown."""
    with contextlib.suppress(OSError):
        os.close(fd)
