"""Every mcp SDK internal the MCP layer leans on, in one place, pinned to mcp 2.3.0.

The rest of `astrid.host.mcp` uses the SDK's public API, and this module for
what that API does not offer: each function or class here names the SDK
internal (a private attribute or method, or the shape of its output) it
relies on, and why no public hook serves. `tests/host/mcp/test_sdk_internals.py`
pins each assumption, and fails naming it (and the pinned version) on an SDK
that broke it; `check_version()` refuses another mcp outright, as
`kernel.wasmtime_patches.check_version` refuses another wasmtime.

Where mcp 2.3.0 offers a public hook it is used instead, outside this module:
`Server.add_request_handler("server/discover", ...)` (documented as
replaceable), `Server.middleware` (public, though marked provisional),
`Connection.exit_stack` for per-connection cleanup, the session manager's
`asgi_app` entry for per-request context, and `stdio_server(stdin=, stdout=)`
for the screened wire.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

from mcp.server import Server
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext, BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.connection import Connection
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from astrid.host.errors import McpVersionError

EXPECTED_VERSION = "2.3.0"

LifespanT = TypeVar("LifespanT")


def installed_version() -> str:
    try:
        return version("mcp")
    except PackageNotFoundError:
        return "unknown"


def check_version() -> None:
    """Raise `McpVersionError` unless the installed mcp is `EXPECTED_VERSION`."""
    found = installed_version()
    if found != EXPECTED_VERSION:
        raise McpVersionError(
            f"astrid needs mcp=={EXPECTED_VERSION}, but mcp {found} is installed "
            f"(astrid relies on SDK internals written for that version: host/mcp/sdk_internals.py); "
            f"reinstall with `pip install mcp=={EXPECTED_VERSION}`"
        )


# -- the server's initialization options --------------------------------------------


class PinnedOptionsServer(Server[LifespanT]):
    """The SDK's `Server`, answering `initialize` with the options given to `pin_options`.

    Relies on: the SDK's streamable-HTTP sessions (`serve_loop`, whose
    `ServerRunner` gets no options) and its in-memory client build the
    `initialize` result from `server.create_initialization_options()` with no
    `NotificationOptions`, so `listChanged` would read false there. No public
    setting carries the options (the SDK's TODO(L53) says as much), so this
    overrides that public method rather than replacing it on the instance."""

    _pinned_options: InitializationOptions | None = None

    def pin_options(self, options: InitializationOptions) -> None:
        self._pinned_options = options

    def create_initialization_options(
        self,
        notification_options: Any = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        if self._pinned_options is not None:
            return self._pinned_options
        return super().create_initialization_options(notification_options, experimental_capabilities, extensions)


# -- the connection behind a request --------------------------------------------------


def connection_of(session: ServerSession) -> Connection:
    """The connection behind a handler's session proxy: what lives as long as the client.

    Relies on: `ServerSession._connection`, the `Connection` it was built
    with. The low-level `ServerRequestContext` hands out a new session proxy
    per request and no public accessor for its connection (only the
    high-level `Context.connection` has one), yet subscriptions and
    list_changed baselines must be keyed by, and end with, the connection."""
    return session._connection


# -- streamable HTTP sessions ---------------------------------------------------------


class SessionManagerHooks(StreamableHTTPSessionManager):
    """The SDK's session manager with public hooks on admitting and discarding a session.

    Relies on: the stateful path admits a new session through
    `self._admit_session(requestor)` (a transport, or None at the global cap)
    and forgets one through `self._discard_session(session_id, transport)`
    (client DELETE, idle timeout, crash, failed opening request); the
    manager keeps its sessions in `_server_instances` (by id) and runs their
    tasks in `_task_group` while `run()` is entered. The SDK offers no hook
    for admission or discard (its cap is one number for the whole server).
    Subclasses override `around_request`, `admitting`, `admitted` and
    `discarding` only.

    `around_request` wraps the manager's public `asgi_app` entry, which the
    SDK's `StreamableHTTPASGIApp` calls for every request (the SDK types that
    attribute as its own body-limit middleware, hence the ignore)."""

    def __init__(self, *args: Any, id_prefix: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.id_prefix = id_prefix  # every session id starts with it (`--workers`: names the owning process)
        inner = self.asgi_app

        async def entry(scope: Scope, receive: Receive, send: Send) -> None:
            with self.around_request(scope):
                await inner(scope, receive, send)

        self.asgi_app = entry  # type: ignore[assignment]

    def around_request(self, scope: Scope) -> AbstractContextManager[None]:
        """Entered around each request the manager serves (in the request's task)."""
        return nullcontext()

    def admitting(self, requestor: AuthorizationContext | None) -> None:
        """Before the SDK admits a session for `requestor` (under its session-creation lock)."""

    def admitted(self, requestor: AuthorizationContext | None, transport: StreamableHTTPServerTransport) -> None:
        """The SDK admitted a session (`transport.mcp_session_id` set) for `requestor`."""

    def discarding(self, session_id: str) -> None:
        """The SDK is forgetting the session `session_id` (before its transport is terminated)."""

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        self.admitting(requestor)
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            if self.id_prefix:
                self._rename(transport, self.id_prefix + transport.mcp_session_id)
            self.admitted(requestor, transport)
        return transport

    def _rename(self, transport: StreamableHTTPServerTransport, session_id: str) -> None:
        """Give a just-admitted session another id (before its first response names it), where the SDK
        keeps it: `_server_instances` and `_session_owners` (by id), and the transport's `mcp_session_id`."""
        old = transport.mcp_session_id
        assert old is not None
        transport.mcp_session_id = session_id
        self._server_instances[session_id] = self._server_instances.pop(old)
        if old in self._session_owners:
            self._session_owners[session_id] = self._session_owners.pop(old)

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self.discarding(session_id)
        await super()._discard_session(session_id, transport)

    def unroute(self, session_id: str) -> None:
        """Requests naming `session_id` answer 404 from now on (synchronously, before `discard` runs)."""
        self._server_instances.pop(session_id, None)

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start a task in the manager's task group (only while `run()` is entered)."""
        assert self._task_group is not None
        self._task_group.start_soon(func, *args)

    async def discard(self, transport: StreamableHTTPServerTransport) -> None:
        """End a session as the SDK does (`discarding` runs, then its transport is terminated)."""
        if transport.mcp_session_id is not None:
            await self._discard_session(transport.mcp_session_id, transport)


def requests_in_flight(transport: StreamableHTTPServerTransport) -> int:
    """Requests in flight on a session, an open GET stream included (0 if the SDK does not count).

    Relies on: `StreamableHTTPServerTransport._requests_in_flight`, the count
    its idle timeout suspends on; nothing public says whether a session is idle."""
    return int(getattr(transport, "_requests_in_flight", 0))


def streamable_http_app(
    sessions: StreamableHTTPSessionManager,
    *,
    path: str,
    verifier: TokenVerifier | None,
    resource_url: str,
    issuer: str | None,
) -> Starlette:
    """The SDK's streamable-HTTP app, composed as `Server.streamable_http_app` does, around `sessions`.

    Relies on: how that method composes its (public) parts: the bearer
    `AuthenticationMiddleware` and `AuthContextMiddleware`, the endpoint
    behind `RequireAuthMiddleware`, the protected-resource metadata routes,
    and the manager's `run()` as the lifespan. The method builds its own
    `StreamableHTTPSessionManager` and takes none, so astrid's per-principal
    manager cannot be handed to it. Static tokens (no `issuer`) name no
    authorization server: no resource metadata."""
    endpoint: ASGIApp = StreamableHTTPASGIApp(sessions)
    routes: list[Route] = []
    middleware: list[Middleware] = []
    if verifier is not None:
        metadata_url = build_resource_metadata_url(resource_url) if issuer else None  # type: ignore[arg-type]
        middleware = [
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
            Middleware(AuthContextMiddleware),
        ]
        endpoint = RequireAuthMiddleware(endpoint, [], metadata_url)
        if issuer:
            routes += create_protected_resource_routes(
                resource_url=resource_url,  # type: ignore[arg-type]
                authorization_servers=[issuer],  # type: ignore[list-item]
            )
    routes.insert(0, Route(path, endpoint=endpoint))
    return Starlette(routes=routes, middleware=middleware, lifespan=lambda _app: sessions.run())


# -- stdio ----------------------------------------------------------------------------

# The SDK writes a response as {"jsonrpc":"2.0","id":<id>,"result"|"error":...};
# the id is read from that prefix, never by parsing a whole (maybe 8 MiB) line.
RESPONSE_PREFIX = re.compile(r'\{"jsonrpc":"2\.0","id":(-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)"')


def answered_id(line: str) -> str | int | None:
    """The id a line the SDK wrote answers (a response or an error), else None.

    Relies on: the SDK's stdio writer serializes each message with
    `model_dump_json(by_alias=True, exclude_unset=True)`, so a response
    starts with `jsonrpc`, then `id`, then `result` or `error`, compactly."""
    match = RESPONSE_PREFIX.match(line)
    return json.loads(match.group(1)) if match else None


@asynccontextmanager
async def stdio_streams(stdin: Any, stdout: Any) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport over astrid's own line source and writer.

    Relies on: `stdio_server` reads `stdin` with `async for line in stdin`,
    writes each message with one `await stdout.write(json + "\\n")` followed by
    `await stdout.flush()`, and, given explicit streams, leaves fd 0 and 1
    alone (its own claim of the standard streams is skipped), so the caller
    owns that takeover. The SDK types them as `anyio.AsyncFile[str]`; only
    those calls are made."""
    async with stdio_server(stdin=stdin, stdout=stdout) as streams:
        yield streams
