"""`astrid mcp serve` over stdio for the security tests: raw JSON-RPC lines, or a real MCP client.

Every wait is bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from tests.support.jsonrpc import initialize_request
from tests.support.processes import LineReader, astrid_exe, serve_args, server_env
from tests.support.stdio import StdioSession, stdio_session

TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


class RawServer:
    """`astrid mcp serve` on pipes, spoken to in raw newline-delimited JSON-RPC.

    stderr goes to a file (a full pipe would block the server). Every wait is
    bounded: `until_id` reads responses until the one with the given id, and
    returns everything that came before it, so "the bad line was ignored" is
    checked by what arrived before a later, valid request's answer.
    """

    def __init__(self, args: list[str], env: dict[str, str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.process = subprocess.Popen(
            [astrid_exe(), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        self.reader = LineReader(self.process.stdout)
        self.stray: list[dict] = []

    def send(self, line: bytes | str | dict) -> None:
        if isinstance(line, dict):
            line = json.dumps(line)
        if isinstance(line, str):
            line = line.encode("utf-8")
        stdin = self.process.stdin
        assert stdin is not None  # started with stdin=PIPE
        stdin.write(line + b"\n")
        stdin.flush()

    def until_id(self, request_id: object, timeout_s: float = 30.0) -> tuple[dict, list[dict]]:
        deadline = time.monotonic() + timeout_s
        before: list[dict] = []
        while True:
            line = self.reader.next(max(0.01, deadline - time.monotonic()))
            if line is None:
                raise EOFError(f"the server closed stdout before answering {request_id!r}; stderr:\n{self.stderr()}")
            message = json.loads(line)
            if message.get("id") == request_id and ("result" in message or "error" in message):
                return message, before
            before.append(message)

    def request(
        self, method: str, params: dict | None = None, request_id: object = None, timeout_s: float = 30.0
    ) -> dict:
        request_id = request_id if request_id is not None else uuid.uuid4().hex
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.until_id(request_id, timeout_s)[0]

    def initialize(self) -> dict:
        reply = self.request("initialize", initialize_request("raw")["params"])
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def close(self, timeout_s: float = 20.0) -> int:
        """Close stdin (the client goes away) and wait, bounded, for the server to exit."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        try:
            return self.process.wait(timeout_s)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            self._stderr.close()


def raw_server(
    *folders: Path,
    home: Path,
    stderr_path: Path,
    principal: str = "alice",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> RawServer:
    return RawServer(serve_args(*folders, principal=principal, extra=extra), env or server_env(home), stderr_path)


def mcp_session(
    *folders: Path,
    home: Path,
    stderr_path: Path,
    principal: str = "alice",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> AbstractAsyncContextManager[StdioSession]:
    """`tests.support.stdio.stdio_session` as the security tests use it: hostile capsules
    load first (a minute for the handshake), and stdout is not checked for stray lines."""
    return stdio_session(
        *folders,
        capsule_home=home,
        stderr=stderr_path,
        principal=principal,
        extra=extra,
        env=env,
        init_timeout_s=60,
        check_stdout=False,
    )
