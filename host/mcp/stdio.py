"""The stdio transport: the SDK's, behind a screen that answers malformed lines.

The SDK drops a line it cannot parse, so a client that sent a broken request
with an id would wait forever. The screen answers what JSON-RPC 2.0 says to
answer and passes everything else through untouched:

- not JSON                              -> -32700 Parse error, id null
- not an object (batches included)      -> -32600 Invalid Request, id null
- `jsonrpc` not "2.0", `method` not str -> -32600 Invalid Request, with the id
- `params` not an object                -> -32602 Invalid params, with the id

It also owns the process's standard streams while serving: the wire lives on
private duplicates, fd 0 reads the null device and fd 1 points at stderr, so
stray output can never corrupt the JSON-RPC stream. (The SDK's `stdio_server`
does the same only when it opens the streams itself; given the screen's
streams it leaves fd 0 and 1 alone: `sdk_internals.stdio_streams`.)

At end of input the session is held open, bounded, until every request
already read has been answered (or cancelled by the client): the SDK would
cancel them, and `printf '...' | astrid mcp serve` would lose its answers.

An `InputStop` ends the input the same way from outside, e.g. on Ctrl-C: a
reader waiting on a quiet terminal or pipe wakes at once and sees end of
input; what was already read is answered, then the server returns. How the
wire's bytes are read and written (on the event loop where the fds allow it)
is `stdio_wire`'s job.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from astrid.host.mcp.sdk_internals import answered_id, stdio_streams
from astrid.host.mcp.stdio_wire import InputStop, WireLines, WireWriter
from astrid.host.tuning import MCP_TUNING

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def inspect_line(line: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the error response the line deserves, or None; the message when it passes)."""
    text = line.strip()
    if not text:
        return None, None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, "Parse error: the line is not JSON"), None
    if not isinstance(value, dict):
        message = "Invalid Request: expected one JSON-RPC object (batches are not supported)"
        return _error(None, INVALID_REQUEST, message), None
    usable_id = _usable_id(value.get("id"))
    if value.get("jsonrpc") != "2.0":
        return _error(usable_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'), None
    if "method" in value:
        if not isinstance(value["method"], str):
            return _error(usable_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string'), None
        if "params" in value and value["params"] is not None and not isinstance(value["params"], dict):
            return _error(usable_id, INVALID_PARAMS, 'Invalid params: "params" must be an object'), None
    return None, value


def _usable_id(request_id: Any) -> str | int | None:
    return request_id if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


class _Pending:
    """Ids of the requests read but not yet answered."""

    def __init__(self) -> None:
        self.ids: set[str | int] = set()

    def read(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "notifications/cancelled":  # no answer will come
            params = message.get("params") or {}
            self.ids.discard(_usable_id(params.get("requestId")))
        elif isinstance(method, str) and _usable_id(message.get("id")) is not None:
            self.ids.add(message["id"])

    def written(self, line: str) -> None:
        if self.ids:
            answered = answered_id(line)  # read from the line's prefix only (sdk_internals)
            if answered is not None:
                self.ids.discard(answered)

    async def drained(self, timeout_s: float) -> None:
        with anyio.move_on_after(timeout_s):
            while self.ids:
                await anyio.sleep(0.01)


class _AnsweringWriter:
    """The wire's writer, telling `_Pending` which requests each line answered."""

    def __init__(self, wire: WireWriter, pending: _Pending) -> None:
        self._wire = wire
        self._pending = pending

    async def write(self, text: str) -> None:
        await self._wire.write(text)
        self._pending.written(text)

    async def flush(self) -> None:  # every write is on the wire when it returns
        return None


class _ScreenedLines:
    """Lines from the wire; malformed ones are answered here and not passed on."""

    def __init__(
        self, lines: AsyncIterable[str], writer: _AnsweringWriter, pending: _Pending, stop: InputStop | None = None
    ) -> None:
        self._lines = lines
        self._writer = writer
        self._pending = pending
        self._stop = stop

    def __aiter__(self) -> AsyncIterator[str]:
        return self._screened()

    async def _screened(self) -> AsyncIterator[str]:
        async for line in self._lines:
            answer, message = inspect_line(line)
            if answer is None:
                if message is not None:
                    self._pending.read(message)
                yield line
            else:
                await self._writer.write(json.dumps(answer) + "\n")
        stop = self._stop
        if stop is not None and stop.requested and stop.on_stop is not None:
            stop.on_stop(len(self._pending.ids))
        await self._pending.drained(MCP_TUNING.stdio_drain_s)


@asynccontextmanager
async def screened_stdio_server(stop: InputStop | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio streams over the screen; `stop.request()` ends the input as end of input does."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = WireLines(wire_in, stop)
    wire = WireWriter(wire_out)
    pending = _Pending()
    writer = _AnsweringWriter(wire, pending)
    try:
        lines = _ScreenedLines(reader, writer, pending, stop)
        async with stdio_streams(stdin=lines, stdout=writer) as streams:
            yield streams
    finally:
        reader.close()
        wire.close()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
