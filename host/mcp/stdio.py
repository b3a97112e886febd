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
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def screen(line: str) -> dict[str, Any] | None:
    """The error response a raw line deserves, or None to pass it on."""
    text = line.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _error(None, PARSE_ERROR, "Parse error: the line is not JSON")
    if not isinstance(value, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: expected one JSON-RPC object (batches are not supported)")
    request_id = value.get("id")
    usable_id = request_id if isinstance(request_id, (str, int)) and not isinstance(request_id, bool) else None
    if value.get("jsonrpc") != "2.0":
        return _error(usable_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" in value:
        if not isinstance(value["method"], str):
            return _error(usable_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string')
        if "params" in value and value["params"] is not None and not isinstance(value["params"], dict):
            return _error(usable_id, INVALID_PARAMS, 'Invalid params: "params" must be an object')
    return None


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


class _LineWriter:
    """The wire's writer: one whole line per write, flushed, never interleaved."""

    def __init__(self, file: io.TextIOWrapper) -> None:
        self._file = anyio.wrap_file(file)
        self._lock = anyio.Lock()

    async def write(self, text: str) -> None:
        async with self._lock:
            await self._file.write(text)
            await self._file.flush()

    async def flush(self) -> None:  # every write already flushed
        return None


class _ScreenedLines:
    """Lines from the wire; malformed ones are answered here and not passed on."""

    def __init__(self, file: io.TextIOWrapper, writer: _LineWriter) -> None:
        self._lines = anyio.wrap_file(file)
        self._writer = writer

    def __aiter__(self) -> AsyncIterator[str]:
        return self._screened()

    async def _screened(self) -> AsyncIterator[str]:
        async for line in self._lines:
            answer = screen(line)
            if answer is None:
                yield line
            else:
                await self._writer.write(json.dumps(answer) + "\n")


@asynccontextmanager
async def screened_stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = io.TextIOWrapper(os.fdopen(wire_in, "rb"), encoding="utf-8", errors="replace")
    writer = _LineWriter(io.TextIOWrapper(os.fdopen(wire_out, "wb"), encoding="utf-8"))
    try:
        async with stdio_server(stdin=_ScreenedLines(reader, writer), stdout=writer) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
