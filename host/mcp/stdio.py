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
stray output can never corrupt the JSON-RPC stream.

At end of input the session is held open, bounded, until every request
already read has been answered (or cancelled by the client): the SDK would
cancel them, and `printf '...' | astrid mcp serve` would lose its answers.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
# How long, at end of input, answers to requests already read are waited for:
# past the front door's worst case (two describe rounds and two read windows).
DRAIN_S = 15.0
# The SDK writes a response as {"jsonrpc":"2.0","id":<id>,"result"|"error":...};
# the id is read from that prefix, never by parsing a whole (maybe 8 MiB) line.
_RESPONSE_PREFIX = re.compile(r'\{"jsonrpc":"2\.0","id":(-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)"')


def screen(line: str) -> dict[str, Any] | None:
    """The error response a raw line deserves, or None to pass it on."""
    return inspect_line(line)[0]


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
            match = _RESPONSE_PREFIX.match(line)
            if match:
                self.ids.discard(json.loads(match.group(1)))

    async def drained(self, timeout_s: float) -> None:
        with anyio.move_on_after(timeout_s):
            while self.ids:
                await anyio.sleep(0.01)


class _LineWriter:
    """The wire's writer: one whole line per write, flushed, never interleaved.

    Write and flush run in one worker-thread call (one thread hop per line,
    not two as through `anyio.wrap_file`)."""

    def __init__(self, file: io.TextIOWrapper, pending: _Pending) -> None:
        self._file = file
        self._lock = anyio.Lock()
        self._pending = pending

    def _write_line(self, text: str) -> None:
        self._file.write(text)
        self._file.flush()

    async def write(self, text: str) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._write_line, text)
        self._pending.written(text)

    async def flush(self) -> None:  # every write already flushed
        return None


class _ScreenedLines:
    """Lines from the wire; malformed ones are answered here and not passed on."""

    def __init__(self, file: io.TextIOWrapper, writer: _LineWriter, pending: _Pending) -> None:
        self._lines = anyio.wrap_file(file)
        self._writer = writer
        self._pending = pending

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
        await self._pending.drained(DRAIN_S)


@asynccontextmanager
async def screened_stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = io.TextIOWrapper(os.fdopen(wire_in, "rb"), encoding="utf-8", errors="replace")
    pending = _Pending()
    writer = _LineWriter(io.TextIOWrapper(os.fdopen(wire_out, "wb"), encoding="utf-8"), pending)
    try:
        async with stdio_server(stdin=_ScreenedLines(reader, writer, pending), stdout=writer) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
