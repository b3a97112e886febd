"""`print()` and `sys.stdout` / `sys.stderr` inside a capsule: lines in the host's log, never a trap.

The host's WASI would take the interpreter's own stdout and stderr too (into
the capsule's log), but without the per-call budget and line handling below,
and a capsule built with `--stub-wasi` would trap. Inside the guest the SDK
replaces `sys.stdout` and `sys.stderr` (and
`sys.__stdout__`, `sys.__stderr__`) with streams that send each line to the
`astrid:sys` `log` import, attributed to the capsule: stdout at `info`
(visible with `astrid -v`), stderr at `warn` (so a `traceback.print_exc()`,
a `warnings` message or the `logging` module's last-resort handler show up
without `-v`).

The SDK is imported when the component is built (componentize-py runs the
module top level once and keeps the heap), so the replacement is part of the
built component. Outside a call, which is only ever the build, the streams
hand the text to the interpreter's own streams (componentize-py's output);
inside a call (`begin` .. `end`, around every `Capsule.dispatch`) they log.

Bounded, per call: at most `MAX_LINES_PER_CALL` lines and
`MAX_BYTES_PER_CALL` bytes are logged; a line is cut at `MAX_LINE_BYTES`
(marked `…`). What is left out is counted and reported once, in one line at
the end of the call. A partial line (no newline yet) is logged at the end of
the call. Stdlib only: this runs inside the wasm guest.
"""

from __future__ import annotations

import io
import sys
from typing import Any

MAX_BYTES_PER_CALL = 64 * 1024
MAX_LINES_PER_CALL = 256
MAX_LINE_BYTES = 4096
STDOUT_LEVEL = "info"
STDERR_LEVEL = "warn"
_CUT_MARK = "…"
_CUT_BYTES = MAX_LINE_BYTES - len(_CUT_MARK.encode("utf-8"))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")  # a lone surrogate becomes `?`: the host takes valid UTF-8 only


class _Call:
    """The call being handled: the host to log to and what is left of the budget."""

    def __init__(self) -> None:
        self.host: Any = None  # what `log(level, message)` goes to, during a call
        self.serving = False  # a call has begun: this is no longer the build
        self.busy = False
        self.streams: list[CapsuleOutput] = []
        self.reset()

    def reset(self) -> None:
        self.lines = 0
        self.bytes = 0
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self.dropped_level = STDOUT_LEVEL

    @property
    def full(self) -> bool:
        return self.lines >= MAX_LINES_PER_CALL or self.bytes >= MAX_BYTES_PER_CALL

    def drop(self, stream: CapsuleOutput, lines: int, size: int) -> None:
        self.dropped_lines += lines
        self.dropped_bytes += size
        if stream.level == STDERR_LEVEL:
            self.dropped_level = STDERR_LEVEL

    def emit(self, stream: CapsuleOutput, line: str, cut: int) -> None:
        """Log one line (or count it, over the budget); `cut` bytes were already left out of it."""
        data = _utf8(line[:-1] if line.endswith("\r") else line)
        if cut or len(data) > MAX_LINE_BYTES:  # cut, with room for the mark
            cut += max(0, len(data) - _CUT_BYTES)
            data = data[:_CUT_BYTES].decode("utf-8", "ignore").encode("utf-8") + _CUT_MARK.encode("utf-8")
        if self.lines >= MAX_LINES_PER_CALL or self.bytes + len(data) > MAX_BYTES_PER_CALL:
            self.drop(stream, 1, len(data) + cut)
            return
        self.lines += 1
        self.bytes += len(data)
        if cut:
            self.drop(stream, 0, cut)
        self.host.log(stream.level, data.decode("utf-8", "ignore"))


_CALL = _Call()


class CapsuleOutput(io.TextIOBase):
    """A text stream whose lines go to the capsule's log (see the module docstring)."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, name: str, level: str, original=None) -> None:
        super().__init__()
        self._name = name
        self.level = level
        self._original = original  # the interpreter's stream: used only at build time
        self._pending: list[str] = []
        self._pending_chars = 0
        self._cut = 0  # bytes left out of the pending line

    # -- what callers look at -------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def buffer(self) -> _BinaryOutput:
        return _BinaryOutput(self)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a capsule's output has no file descriptor (it goes to the host's log)")

    def flush(self) -> None:
        pass  # a partial line is logged at the end of the call

    def close(self) -> None:
        pass  # print() after a close must still not trap

    # -- writing ---------------------------------------------------------------

    def write(self, text) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        call = _CALL
        if call.host is None:
            if not call.serving and self._original is not None:
                try:
                    self._original.write(text)  # the build: componentize-py's own output
                except Exception:
                    pass
            return len(text)
        if call.busy:
            return len(text)
        call.busy = True
        try:
            self._take(call, text)
        except Exception:
            pass  # never a trap, never an exception out of print()
        finally:
            call.busy = False
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def _take(self, call: _Call, text: str) -> None:
        start = 0
        while True:
            newline = text.find("\n", start)
            if newline < 0:
                self._hold(text[start:])
                return
            if call.full:  # over the budget: count every complete line left at once
                last = text.rindex("\n")
                body = text[start : last + 1]
                lines = body.count("\n")
                size = len(_utf8(body)) - lines + len(_utf8("".join(self._pending))) + self._cut
                self._pending, self._pending_chars, self._cut = [], 0, 0
                call.drop(self, lines, size)
                self._hold(text[last + 1 :])
                return
            self._hold(text[start:newline])
            self._line(call)
            start = newline + 1

    def _hold(self, part: str) -> None:
        if not part:
            return
        room = MAX_LINE_BYTES - self._pending_chars  # chars: no line of that many chars is under the cap in bytes
        if len(part) > room:
            self._cut += len(_utf8(part[room:]))
            part = part[:room]
        if part:
            self._pending.append(part)
            self._pending_chars += len(part)

    def _line(self, call: _Call) -> None:
        line, cut = "".join(self._pending), self._cut
        self._pending, self._pending_chars, self._cut = [], 0, 0
        call.emit(self, line, cut)

    def _finish(self, call: _Call) -> None:
        if self._pending or self._cut:
            self._line(call)  # logged, or counted when over the budget


class _BinaryOutput:
    """`sys.stdout.buffer`: bytes, decoded as UTF-8, to the same log."""

    def __init__(self, text: CapsuleOutput) -> None:
        self._text = text

    def write(self, data) -> int:
        self._text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True


def begin(host) -> None:
    """A call starts: output goes to `host.log`, with a fresh budget."""
    _CALL.host = host
    _CALL.serving = True
    _CALL.busy = False
    _CALL.reset()
    for stream in _CALL.streams:
        stream._pending, stream._pending_chars, stream._cut = [], 0, 0


def end() -> None:
    """The call ends: log what is pending and, once, what the budget left out."""
    call = _CALL
    if call.host is None:
        return
    call.busy = True
    try:
        for stream in call.streams:
            stream._finish(call)
        if call.dropped_lines or call.dropped_bytes:
            call.host.log(
                call.dropped_level,
                f"output cut: {call.dropped_bytes} more bytes ({call.dropped_lines} lines) of print/stdout/stderr "
                f"not logged (a call logs at most {MAX_LINES_PER_CALL} lines and {MAX_BYTES_PER_CALL // 1024} KiB "
                f"of output, each line at most {MAX_LINE_BYTES // 1024} KiB)",
            )
    except Exception:
        pass
    finally:
        call.busy = False
        call.host = None


def install() -> None:
    """Replace the interpreter's stdout and stderr with the capsule's log (idempotent)."""
    if _CALL.streams:
        return
    stdout = CapsuleOutput("<stdout>", STDOUT_LEVEL, sys.stdout)
    stderr = CapsuleOutput("<stderr>", STDERR_LEVEL, sys.stderr)
    _CALL.streams = [stdout, stderr]
    sys.stdout, sys.stderr = stdout, stderr
    # the interpreter's own, which some code writes to directly (e.g. as a fallback)
    sys.__stdout__ = stdout  # type: ignore[misc,assignment]
    sys.__stderr__ = stderr  # type: ignore[misc,assignment]
    _no_source_files_when_serving()


def _no_source_files_when_serving() -> None:
    """`traceback.print_exc()` and `warnings.warn()` read source lines through `linecache`,
    which opens and stats files: none exist once the component runs (a trap with `--stub-wasi`). From the first
    call on, linecache finds no file (tracebacks show no source text); the build keeps them."""
    import linecache

    check, update = linecache.checkcache, linecache.updatecache

    def checkcache(filename=None):
        if not _CALL.serving:
            check(filename)

    def updatecache(filename, module_globals=None):
        return [] if _CALL.serving else update(filename, module_globals)

    linecache.checkcache = checkcache
    linecache.updatecache = updatecache


def install_in_guest() -> None:
    """`install()` when running inside the wasm guest (never in a host process importing the SDK)."""
    if sys.platform == "wasi":
        install()
