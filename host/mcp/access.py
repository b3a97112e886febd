"""What an HTTP server says about its requests: the access log, and failed logins.

`AccessLog` wraps the whole ASGI app (so it sees the 401s the auth layer
answers before the MCP transport) and writes, when a response has ended, one
line per request on the `astrid.access` logger:

    access 2026-05-01T09:30:12.345Z 127.0.0.1 alice POST resources/read astrid://docs/index 200 3.1ms

(start time in UTC, client address, principal, HTTP method, JSON-RPC method,
the URI or name the request is about, HTTP status, milliseconds until the
response ended; `-` for what there is not). A streamed response (a GET
stream, a POST answered as SSE) is logged when its stream ends.

Nothing is parsed for it on the request path: the MCP server's middleware
notes the JSON-RPC method and its URI or name in the ASGI scope
(`note_request`) as it dispatches; only a message it never dispatches before
the response (a notification, acknowledged 202 first; a body the SDK
refuses) is looked at, when its line is written, by a bounded search of the
first body bytes for its `"method"`.

A refused credential is logged on `astrid.events` with the client address
and why (no credential, not a bearer one, or what the verifier said through
`note_refusal`), never the credential itself: five lines per ten seconds at
most, the rest counted in one line when the next window opens.
"""

from __future__ import annotations

import contextvars
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from astrid.host.telemetry import metrics
from astrid.host.tuning import MCP_TUNING

access_log = logging.getLogger("astrid.access")
events = logging.getLogger("astrid.events")

ACCESS_NOTE = "astrid.access"  # the ASGI scope key of a request's `AccessNote`
MAX_FIELD_CHARS = 200
_METHOD_IN_BODY = re.compile(rb'"method"\s*:\s*"([A-Za-z0-9_/.\-]{1,100})"')
_METHOD_SCAN_BYTES = 2048
# A field is one token of the line: whitespace, controls, `%` and non-ASCII are %-escaped.
_UNSAFE = re.compile(r"[^\x21-\x24\x26-\x7e]")


@dataclass
class AccessNote:
    """What one HTTP request was about, filled in as it is handled."""

    method: str | None = None  # the JSON-RPC method
    target: str | None = None  # the URI, tool or prompt name it names
    refusal: str | None = None  # why its credential was refused


_current: contextvars.ContextVar[AccessNote | None] = contextvars.ContextVar("astrid_access_note", default=None)


def note_request(request: Any, method: str, params: Mapping[str, Any] | None) -> None:
    """Called by the MCP server's middleware for every message it dispatches: cheap when no log asks."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return
    note = scope.get(ACCESS_NOTE)
    if isinstance(note, AccessNote):
        note.method = method
        note.target = _target(method, params)


def note_refusal(reason: str) -> None:
    """Why the credential of the request being authenticated is refused (called by the verifier)."""
    note = _current.get()
    if note is not None:
        note.refusal = reason


def _target(method: str, params: Mapping[str, Any] | None) -> str | None:
    if not isinstance(params, Mapping):
        return None
    uri = params.get("uri")
    if isinstance(uri, str):
        return uri
    name = params.get("name")
    if isinstance(name, str):  # tools/call, prompts/get
        arguments = params.get("arguments")
        inner = arguments.get("uri") if isinstance(arguments, Mapping) else None
        return f"{name}({inner})" if isinstance(inner, str) else name
    ref = params.get("ref")
    if isinstance(ref, Mapping):  # completion/complete
        named = ref.get("uri") or ref.get("name")
        return named if isinstance(named, str) else None
    return None


def _field(value: object) -> str:
    if value is None or value == "":
        return "-"
    text = str(value)
    if len(text) > MAX_FIELD_CHARS:
        text = text[:MAX_FIELD_CHARS] + "..."
    return _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}Z"


class FailureLog:
    """Refused credentials on `astrid.events`: at most `per_window` lines per `every_s`, the rest counted."""

    def __init__(
        self,
        every_s: float = MCP_TUNING.failed_login_window_s,
        per_window: int = MCP_TUNING.failed_login_lines_per_window,
        *,
        clock=time.monotonic,
    ) -> None:
        self.every_s = every_s
        self.per_window = per_window
        self._clock = clock
        self._opened: float | None = None
        self._logged = 0
        self._unlogged = 0
        self._unlogged_from: set[str] = set()

    def failed(self, client: str, reason: str) -> None:
        now = self._clock()
        if self._opened is None or now - self._opened >= self.every_s:
            if self._unlogged:
                events.warning(
                    "%d more failed authentications in %.0f s, from %d client address%s (not logged one by one)",
                    self._unlogged,
                    now - self._opened if self._opened is not None else 0,
                    len(self._unlogged_from),
                    "" if len(self._unlogged_from) == 1 else "es",
                    extra={
                        "event": "auth_failed_more",
                        "fields": {"count": self._unlogged, "clients": len(self._unlogged_from)},
                    },
                )
            self._opened, self._logged, self._unlogged = now, 0, 0
            self._unlogged_from.clear()
        if self._logged < self.per_window:
            self._logged += 1
            events.warning(
                "authentication failed from %s: %s",
                client,
                reason,
                extra={"event": "auth_failed", "fields": {"client": client, "reason": reason}},
            )
        else:
            self._unlogged += 1
            if len(self._unlogged_from) < 10_000:
                self._unlogged_from.add(client)


class AccessLog:
    """ASGI middleware: one access line per request (`access`), and refused credentials (`failures`)."""

    def __init__(
        self, app: ASGIApp, *, access: bool, principal: str | None = None, failures: FailureLog | None = None
    ) -> None:
        self.app = app
        self.access = access
        self.principal = principal  # whom a request without a credential acts for (--no-auth)
        self.failures = failures

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        note = AccessNote()
        scope[ACCESS_NOTE] = note
        started, clock = time.time(), time.perf_counter()
        status: int | None = None
        first_body: bytes | None = None
        logged = False

        async def receiving() -> Message:
            nonlocal first_body
            message = await receive()
            if first_body is None and message["type"] == "http.request":
                first_body = message.get("body", b"")
            return message

        async def sending(message: Message) -> None:
            nonlocal status, logged
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not logged:
                logged = True
                self._ended(scope, note, status, started, clock, first_body)

        token = _current.set(note)
        try:
            await self.app(scope, receiving, sending)
        finally:
            _current.reset(token)
            if not logged:  # the stream was cut, or the app failed before it answered
                logged = True
                self._ended(scope, note, status if status is not None else 500, started, clock, first_body)

    def _ended(
        self, scope: Scope, note: AccessNote, status: int | None, started: float, clock: float, body: bytes | None
    ) -> None:
        client = scope.get("client")
        address = client[0] if client else None
        if status == 401:
            metrics.auth_failure()
            if self.failures is not None:
                self.failures.failed(_field(address), note.refusal or _missing_credential(scope))
        if not self.access:
            return
        method = note.method
        if method is None and body:
            found = _METHOD_IN_BODY.search(body, 0, _METHOD_SCAN_BYTES)
            method = found.group(1).decode() if found else None
        user = scope.get("user")
        token = getattr(user, "access_token", None)
        principal = token.client_id if token is not None else self.principal
        milliseconds = (time.perf_counter() - clock) * 1000
        fields = {  # the same fields for `--log-format json` (telemetry/logs.py)
            "start": _utc(started),
            "client": address,
            "principal": principal,
            "http_method": scope.get("method"),
            "method": method,
            "target": note.target[:MAX_FIELD_CHARS] if note.target else None,
            "status": status,
            "ms": round(milliseconds, 1),
        }
        access_log.info(
            "access %s %s %s %s %s %s %s %.1fms",
            _utc(started),
            _field(address),
            _field(principal),
            _field(scope.get("method")),
            _field(method),
            _field(note.target),
            status if status is not None else "-",
            milliseconds,
            extra={"event": "access", "fields": fields},
        )


def _missing_credential(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            if value[:7].lower() == b"bearer ":
                return "the bearer token was refused"
            return "not a bearer credential"
    return "no credential (no Authorization header)"
