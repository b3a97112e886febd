"""Each mcp SDK internal `host/mcp/sdk_internals.py` leans on, pinned.

On another mcp every failure names the assumption that broke and the version
it was written for; `check_version` refuses that mcp outright, as
`kernel.wasmtime_patches.check_version` refuses another wasmtime.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.server import NotificationOptions, Server
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.message import SessionMessage
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route

from astrid.host.errors import AstridError, McpVersionError
from astrid.host.mcp import sdk_internals
from astrid.host.mcp.sdk_internals import (
    EXPECTED_VERSION,
    PinnedOptionsServer,
    SessionManagerHooks,
    answered_id,
    connection_of,
    requests_in_flight,
    stdio_streams,
    streamable_http_app,
)
from astrid.host.mcp.server import AstridMcpServer
from tests.support.jsonrpc import initialize_request

pytestmark = pytest.mark.anyio

INITIALIZE = initialize_request("pin")
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def broken(assumption: str) -> str:
    """The failure message of a pin: which assumption, on which mcp, written for which."""
    return (
        f"mcp {sdk_internals.installed_version()} breaks an assumption astrid pinned at mcp=={EXPECTED_VERSION} "
        f"(host/mcp/sdk_internals.py): {assumption}"
    )


# -- the version ------------------------------------------------------------------------


def test_the_installed_mcp_is_the_pinned_one() -> None:
    found = sdk_internals.installed_version()
    assert found == EXPECTED_VERSION, (
        f"mcp {found} is installed, but host/mcp/sdk_internals.py was written for mcp=={EXPECTED_VERSION}: "
        "check every pin in this file against the new SDK, then move EXPECTED_VERSION and the pyproject pin together"
    )
    sdk_internals.check_version()


def test_another_mcp_is_refused_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_internals, "installed_version", lambda: "2.4.0")
    with pytest.raises(McpVersionError) as refused:
        sdk_internals.check_version()
    message = str(refused.value)
    assert "astrid needs mcp==2.3.0" in message and "2.4.0" in message
    assert "pip install mcp==2.3.0" in message
    assert isinstance(refused.value, AstridError) and isinstance(refused.value, RuntimeError)
    # where the SDK's server is built, too: before anything else is looked at
    with pytest.raises(McpVersionError):
        AstridMcpServer(backend=None)  # type: ignore[arg-type]


# -- the server's initialization options --------------------------------------------------


def test_create_initialization_options_is_the_public_method_the_pin_overrides() -> None:
    params = list(inspect.signature(Server.create_initialization_options).parameters)
    assert params == ["self", "notification_options", "experimental_capabilities", "extensions"], broken(
        f"Server.create_initialization_options(notification_options, experimental_capabilities, extensions); "
        f"found {params}"
    )


async def test_a_transport_without_options_answers_initialize_with_the_pinned_ones() -> None:
    # The in-memory client (legacy) and the streamable-HTTP sessions (below) build the
    # initialize result from `server.create_initialization_options()` with no arguments.
    server: PinnedOptionsServer[Any] = PinnedOptionsServer("pin", on_list_resources=_no_resources)
    assert server.create_initialization_options().capabilities.resources.list_changed is False  # type: ignore[union-attr]
    options = server.create_initialization_options(NotificationOptions(resources_changed=True))
    server.pin_options(options)
    async with Client(server, mode="legacy") as client:
        resources = client.server_capabilities.resources
    assert resources is not None and resources.list_changed is True, broken(
        "a transport given no initialization options answers initialize with server.create_initialization_options()"
    )


async def _no_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[])


def test_the_sdks_default_middleware_is_only_its_telemetry() -> None:
    # AstridMcpServer replaces `Server.middleware` (public, marked provisional) with its own.
    defaults = Server("pin").middleware
    assert isinstance(defaults, list) and [type(m).__name__ for m in defaults] == ["OpenTelemetryMiddleware"], broken(
        f"Server.middleware is a list holding only the SDK's OpenTelemetryMiddleware; found {defaults!r}"
    )


# -- the connection behind a request -------------------------------------------------------


async def test_a_session_proxy_keeps_its_connection_as_connection() -> None:
    assert "connection" in inspect.signature(ServerSession.__init__).parameters, broken(
        "ServerSession(request_outbound, connection, ...) is built with its Connection"
    )
    seen: list[Any] = []

    async def record(ctx: Any, params: Any) -> types.ListResourcesResult:
        seen.append(connection_of(ctx.session))
        return types.ListResourcesResult(resources=[])

    async with Client(Server("pin", on_list_resources=record), mode="legacy") as client:
        await client.list_resources()
        await client.list_resources()
    assert len(seen) == 2 and all(isinstance(c, Connection) for c in seen), broken(
        f"ServerSession._connection is the request's Connection; found {seen!r}"
    )
    assert seen[0] is seen[1], broken("every request of one client shares one Connection (ServerSession._connection)")
    assert hasattr(seen[0], "exit_stack"), broken("Connection.exit_stack runs per-connection cleanup")


# -- streamable HTTP sessions -----------------------------------------------------------------


class Recording(SessionManagerHooks):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, Any]] = []

    def around_request(self, scope: Any) -> Any:
        self.calls.append(("request", scope["method"]))
        return super().around_request(scope)

    def admitting(self, requestor: Any) -> None:
        self.calls.append(("admitting", requestor))

    def admitted(self, requestor: Any, transport: StreamableHTTPServerTransport) -> None:
        self.calls.append(("admitted", transport.mcp_session_id))

    def discarding(self, session_id: str) -> None:
        self.calls.append(("discarding", session_id))


def test_the_session_manager_internals_have_the_pinned_shape() -> None:
    manager = StreamableHTTPSessionManager(app=Server("pin"))
    for name, params in (
        ("_admit_session", ["self", "requestor"]),
        ("_discard_session", ["self", "session_id", "transport"]),
    ):
        method = getattr(StreamableHTTPSessionManager, name, None)
        assert method is not None, broken(f"StreamableHTTPSessionManager.{name} exists")
        found = list(inspect.signature(method).parameters)
        assert found == params, broken(f"StreamableHTTPSessionManager.{name}{tuple(params[1:])}; found {found}")
    assert inspect.iscoroutinefunction(StreamableHTTPSessionManager._discard_session), broken(
        "StreamableHTTPSessionManager._discard_session is a coroutine"
    )
    assert isinstance(getattr(manager, "_server_instances", None), dict), broken(
        "StreamableHTTPSessionManager._server_instances is a dict of the open sessions by id"
    )
    assert hasattr(manager, "_task_group") and manager._task_group is None, broken(
        "StreamableHTTPSessionManager._task_group is None until run() is entered"
    )
    transport = StreamableHTTPServerTransport(mcp_session_id="s", idle_timeout=60.0)
    assert isinstance(getattr(transport, "_requests_in_flight", None), int), broken(
        "StreamableHTTPServerTransport._requests_in_flight counts the requests in flight"
    )
    assert requests_in_flight(transport) == 0


async def test_the_sdk_admits_and_discards_sessions_through_the_hooks() -> None:
    server: PinnedOptionsServer[Any] = PinnedOptionsServer("pin", on_list_resources=_no_resources)
    server.pin_options(server.create_initialization_options(NotificationOptions(resources_changed=True)))
    manager = Recording(app=server, session_idle_timeout=60.0)
    app = streamable_http_app(manager, path="/mcp", verifier=None, resource_url="http://pin/mcp", issuer=None)
    transport = httpx2.ASGITransport(app=app)
    async with manager.run(), httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        with anyio.fail_after(10):
            opened = await http.post("/mcp", json=INITIALIZE, headers=HEADERS)
        assert opened.status_code == 200, opened.text
        sid = opened.headers["mcp-session-id"]
        result = _sse_result(opened.text)
        assert result["capabilities"]["resources"]["listChanged"] is True, broken(
            "streamable-HTTP sessions answer initialize with server.create_initialization_options()"
        )
        assert ("request", "POST") in manager.calls, broken("StreamableHTTPASGIApp enters through manager.asgi_app")
        assert ("admitting", None) in manager.calls and ("admitted", sid) in manager.calls, broken(
            f"a new session is admitted through _admit_session(requestor); calls: {manager.calls}"
        )
        assert sid in manager._server_instances
        with anyio.fail_after(10):
            ended = await http.delete("/mcp", headers={**HEADERS, "mcp-session-id": sid})
        assert ended.status_code < 400, ended.text
        assert ("discarding", sid) in manager.calls, broken(
            f"a session the client ended is forgotten through _discard_session(session_id, transport); "
            f"calls: {manager.calls}"
        )
        # unroute: a session no longer in _server_instances answers 404
        with anyio.fail_after(10):
            again = await http.post("/mcp", json=INITIALIZE, headers=HEADERS)
        second = again.headers["mcp-session-id"]
        manager.unroute(second)
        with anyio.fail_after(10):
            gone = await http.post("/mcp", json=INITIALIZE, headers={**HEADERS, "mcp-session-id": second})
        assert gone.status_code == 404, broken("a session id missing from _server_instances answers 404")


def _sse_result(body: str) -> dict[str, Any]:
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return json.loads(line[5:])["result"]
    raise AssertionError(f"no JSON-RPC result in {body!r}")


def _shape(app: Any) -> dict[str, Any]:
    """What a streamable-HTTP app is made of: middleware classes, routes, the endpoint's layers."""
    routes = app.routes
    endpoint = routes[0].endpoint
    layers = []
    while True:
        layers.append(type(endpoint).__name__)
        if isinstance(endpoint, RequireAuthMiddleware):
            endpoint = endpoint.app
        else:
            break
    return {
        "middleware": [m.cls for m in app.user_middleware],
        "paths": [r.path for r in routes if isinstance(r, Route)],
        "endpoint": layers,
    }


class _Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        return None


@pytest.mark.parametrize("issuer", [None, "https://issuer.example"])
def test_the_http_app_is_composed_as_the_sdks_own(issuer: str | None) -> None:
    verifier = _Verifier()
    url = "http://127.0.0.1:8000/mcp"
    # static tokens name no authorization server: no resource server URL, so no metadata
    auth = AuthSettings.model_validate(
        {
            "issuer_url": issuer or "https://unused.example",
            "resource_server_url": url if issuer else None,
            "validate_token_resource": False,
        }
    )
    theirs = Server("pin").streamable_http_app(token_verifier=verifier, auth=auth)
    manager = StreamableHTTPSessionManager(app=Server("pin"))
    ours = streamable_http_app(manager, path="/mcp", verifier=verifier, resource_url=url, issuer=issuer)
    assert _shape(ours) == _shape(theirs), broken(
        f"Server.streamable_http_app composes {_shape(theirs)}; sdk_internals.streamable_http_app {_shape(ours)}"
    )
    assert _shape(ours)["middleware"] == [AuthenticationMiddleware, AuthContextMiddleware]
    assert _shape(ours)["endpoint"] == ["RequireAuthMiddleware", StreamableHTTPASGIApp.__name__]


# -- stdio ---------------------------------------------------------------------------------


class _NoLines:
    """No input until `end` is set, then end of input."""

    def __init__(self) -> None:
        self.end = anyio.Event()

    def __aiter__(self) -> Any:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        await self.end.wait()
        return
        yield ""  # pragma: no cover (an async generator that yields nothing)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    async def write(self, text: str) -> None:
        self.calls.append(("write", text))

    async def flush(self) -> None:
        self.calls.append(("flush", None))


@pytest.mark.parametrize("request_id", [7, -3, 0, "a", 'with "quotes" and \\ and \u00e9'])
async def test_the_sdk_writes_a_response_with_the_prefix_answered_id_reads(request_id: Any) -> None:
    before = [os.fstat(fd) for fd in (0, 1)]
    out = _Recorder()
    lines = _NoLines()
    async with stdio_streams(stdin=lines, stdout=out) as (read_stream, write_stream):
        during = [os.fstat(fd) for fd in (0, 1)]
        await write_stream.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"x": 1})))
        await write_stream.send(
            SessionMessage(
                types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=-32602, message="no"))
            )
        )
        with anyio.fail_after(5):
            while len(out.calls) < 4:
                await anyio.sleep(0.01)
        await write_stream.aclose()
        lines.end.set()
    same = [(s.st_dev, s.st_ino) for s in before] == [(s.st_dev, s.st_ino) for s in during]
    assert same, broken("stdio_server given explicit streams leaves fd 0 and 1 alone (its own claim is skipped)")
    kinds = [kind for kind, _ in out.calls]
    assert kinds == ["write", "flush", "write", "flush"], broken(
        f"stdio_server writes each message with one stdout.write(line) and then flush(); calls: {out.calls}"
    )
    for _, line in out.calls[::2]:
        assert line is not None and line.endswith("\n") and line.count("\n") == 1, broken(
            f"each write is one whole line; found {line!r}"
        )
        assert answered_id(line) == request_id, broken(
            f'stdio_server writes a response as {{"jsonrpc":"2.0","id":<id>,"result"|"error"...}}; found {line[:120]!r}'
        )


async def test_the_sdk_reads_its_input_with_async_for() -> None:
    lines = ['{"jsonrpc":"2.0","id":5,"method":"ping"}\n']

    class Lines:  # only __aiter__, as stdio._ScreenedLines
        def __aiter__(self) -> Any:
            return self._lines()

        async def _lines(self) -> Any:
            for line in lines:
                yield line

    async with stdio_streams(stdin=Lines(), stdout=_Recorder()) as (read_stream, write_stream):
        with anyio.fail_after(5):
            message = await read_stream.receive()
        await write_stream.aclose()
    assert isinstance(message, SessionMessage) and message.message.id == 5, broken(  # type: ignore[union-attr]
        f"stdio_server reads stdin with `async for line in stdin`; got {message!r}"
    )


def test_answered_id_reads_only_responses() -> None:
    assert answered_id('{"jsonrpc":"2.0","id":1,"method":"ping"}') is None
    assert answered_id('{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}') is None
    assert answered_id('{"jsonrpc":"2.0","id":"x","result":{}}') == "x"
