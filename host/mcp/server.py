"""The MCP server: mcp 2.3.0's low-level `Server` in front of the broker.

It knows MCP and nothing about wasm; it reaches the broker only over the bus
through a backend (`FrontDoorClient` plus readiness). One server serves one
principal (stdio: one client, one user).

- capabilities: `resources` with `listChanged: true` and no `subscribe`
  (`resources/subscribe` is "method not found"); both protocol revisions,
  2025-11-25 (initialize) and 2026-07-28 (server/discover);
- `resources/list`: one page, no cursor; `resources/read`; an empty
  `resources/templates/list`;
- results carry 2026-07-28 cache hints (`private`, principal-scoped; the SDK
  strips them on the 2025-11-25 wire);
- `notifications/resources/list_changed` when this principal's URI set
  changed after a capsule-set change: on the session (2025-11-25) and on open
  `subscriptions/listen` streams (2026-07-28);
- every failure is an `MCPError`, never another exception type.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from astrid.host.bus import Subscription
from astrid.host.contract.frontdoor import ReadResourceReply
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.errors import BackendNotReady, BrokerUnavailable
from astrid.host.limits import DEFAULT_LIMITS, Limits
from astrid.host.mcp.reshape import read_error, to_contents, to_resource
from astrid.host.mcp.stdio import screened_stdio_server
from astrid.host.version import astrid_version

log = logging.getLogger("astrid.host.mcp")

T = TypeVar("T")

# Principal-scoped results: a shared cache must never serve them to someone else.
LIST_TTL_MS = 0
READ_TTL_MS = 0


class Backend(Protocol):
    """What the server needs: the front doors for one principal, plus readiness."""

    principal: str

    def wait_ready(self, timeout_s: float) -> None: ...
    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]: ...
    def read_resource(self, uri: str) -> ReadResourceReply: ...
    def changes(self) -> Subscription: ...


class AstridMcpServer:
    def __init__(
        self,
        backend: Backend,
        *,
        limits: Limits = DEFAULT_LIMITS,
        name: str = "astrid",
        ready_timeout_s: float = 600.0,
    ) -> None:
        self.backend = backend
        self.limits = limits
        self.ready_timeout_s = ready_timeout_s
        self.listen_bus = InMemorySubscriptionBus()
        self.listen_handler = ListenHandler(self.listen_bus)
        self.list_changed_sent = 0
        self.changes_handled = 0  # capsule-set events re-listed (tests wait on it)
        self._legacy_session: Any = None
        self._baseline: frozenset[str] | None = None
        self._last_reshape: tuple[list[ResourceDefinition], list[types.Resource]] = ([], [])
        self.watching: anyio.Event | None = None  # set once the list_changed baseline exists
        self.server: Server[dict[str, Any]] = Server(
            name,
            version=astrid_version(),
            title="astrid capsule resources",
            instructions=(
                f"Read-only resources served by sandboxed astrid capsules for the user {backend.principal!r}. "
                "List them with resources/list and read them with resources/read."
            ),
            lifespan=self._lifespan,
            on_list_resources=self._on_list,
            on_read_resource=self._on_read,
            on_list_resource_templates=self._on_templates,
            on_subscriptions_listen=self.listen_handler,
        )
        # 2026-07-28: the SDK would derive `subscribe: true` from the listen
        # handler; advertise what we offer instead.
        self.server.add_request_handler("server/discover", types.RequestParams, self._on_discover)
        self.server.middleware.append(self._capture_session)
        # Pin the options: transports that build them themselves (in-memory,
        # streamable HTTP) would otherwise report listChanged false.
        options = self.server.create_initialization_options(NotificationOptions(resources_changed=True))
        self._init_options = options.model_copy(update={"capabilities": self.capabilities()})
        self.server.create_initialization_options = lambda *a, **k: self._init_options  # type: ignore[method-assign]

    # -- wiring ------------------------------------------------------------------------

    @staticmethod
    def capabilities() -> types.ServerCapabilities:
        return types.ServerCapabilities(resources=types.ResourcesCapability(list_changed=True))

    def initialization_options(self) -> InitializationOptions:
        return self._init_options

    async def run(self, read_stream, write_stream) -> None:
        await self.server.run(read_stream, write_stream, self.initialization_options())

    async def run_stdio(self) -> None:
        async with screened_stdio_server() as (read_stream, write_stream):
            await self.run(read_stream, write_stream)

    @asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        self.watching = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_changes)
            try:
                yield {}
            finally:
                self.listen_handler.close()
                tg.cancel_scope.cancel()

    async def _capture_session(self, ctx: ServerRequestContext[Any, Any], call_next: Callable) -> Any:
        result = await call_next(ctx)
        # A handshake-era connection has one standalone channel for
        # notifications; remember a session that reaches it once initialized.
        if ctx.method != "initialize" and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            if ctx.method == "notifications/initialized" or ctx.request_id is not None:
                self._legacy_session = ctx.session
        return result

    # -- calling the broker ------------------------------------------------------------

    async def _ready(self) -> None:
        try:
            await anyio.to_thread.run_sync(self.backend.wait_ready, self.ready_timeout_s)
        except BackendNotReady as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=f"capsules are not available: {exc}") from None

    async def _call(self, fn: Callable[..., T], *args: Any, uri: str | None = None, **kwargs: Any) -> T:
        data = {"uri": uri} if uri is not None else None

        def when_ready() -> T:
            # One thread hop per request: waiting for the capsules to load
            # returns at once after start-up.
            self.backend.wait_ready(self.ready_timeout_s)
            return fn(*args, **kwargs)

        try:
            return await anyio.to_thread.run_sync(when_ready)
        except BackendNotReady as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=f"capsules are not available: {exc}") from None
        except BrokerUnavailable as exc:
            log.warning("broker unavailable: %s", exc)
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc), data=data) from None
        except MCPError:
            raise
        except Exception:
            log.exception("unexpected failure talking to the broker")
            raise MCPError(code=types.INTERNAL_ERROR, message="internal error", data=data) from None

    # -- handlers ----------------------------------------------------------------------

    async def _on_discover(self, ctx: ServerRequestContext, params: types.RequestParams | None) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=self.capabilities(),
            instructions=self.server.instructions,
        )

    async def _on_list(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        if params is not None and params.cursor is not None:
            # one page, never a cursor: any cursor is one we did not issue
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor", data={"cursor": params.cursor})
        definitions = await self._call(self.backend.list_resources)
        # What the client has now seen: list_changed compares against it.
        self._baseline = frozenset(d.uri for d in definitions)
        return types.ListResourcesResult(
            resources=self._reshaped(definitions), ttl_ms=LIST_TTL_MS, cache_scope="private"
        )

    def _reshaped(self, definitions: list[ResourceDefinition]) -> list[types.Resource]:
        """The MCP resources for `definitions`; a warm list hands back the very
        same definition objects, so the last reshape is reused."""
        last_definitions, last_resources = self._last_reshape
        if len(definitions) == len(last_definitions) and all(
            a is b for a, b in zip(definitions, last_definitions, strict=True)
        ):
            return list(last_resources)
        resources = [r for r in (to_resource(d, self.limits) for d in definitions) if r is not None]
        self._last_reshape = (list(definitions), resources)
        return list(resources)

    async def _on_read(
        self, ctx: ServerRequestContext, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = params.uri
        reply = await self._call(self.backend.read_resource, uri, uri=uri)
        if reply.error is not None:
            raise read_error(reply.error, uri, ctx.protocol_version)
        try:
            contents = [to_contents(chunk, self.limits) for chunk in reply.contents]
        except ValueError:
            log.exception("read of %s could not be reshaped", uri)
            raise MCPError(
                code=types.INTERNAL_ERROR, message="the contents could not be expressed in MCP", data={"uri": uri}
            ) from None
        if not contents:
            raise MCPError(code=types.INTERNAL_ERROR, message="the capsule returned no contents", data={"uri": uri})
        return types.ReadResourceResult(contents=contents, ttl_ms=READ_TTL_MS, cache_scope="private")

    async def _on_templates(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        # Templates are deferred (docs/contract.md §8); the same for everyone.
        return types.ListResourceTemplatesResult(resource_templates=[], ttl_ms=0, cache_scope="public")

    # -- list_changed ------------------------------------------------------------------

    async def _watch_changes(self) -> None:
        try:
            await self._ready()
        except MCPError as exc:
            log.error("%s; no list_changed notifications", exc.message)
            return
        changes = await anyio.to_thread.run_sync(self.backend.changes)
        try:
            # A change that landed before the subscription is caught here: the
            # set now is compared with what the client last listed, if it did.
            current = await self._uri_set(refresh=False)
            if self._baseline is None:
                self._baseline = current
            elif current is not None and current != self._baseline:
                self._baseline = current
                await self.notify_list_changed()
            if self.watching is not None:
                self.watching.set()
            while True:
                event = await anyio.to_thread.run_sync(changes.recv, 0.5, abandon_on_cancel=True)
                if event is None:
                    continue
                await anyio.to_thread.run_sync(_drain, changes)  # one re-list per burst
                current = await self._uri_set(refresh=True)
                self.changes_handled += 1
                if current is None:
                    continue
                if current != self._baseline:
                    log.info(
                        "resource set of %s changed (%d -> %d uris): list_changed",
                        self.backend.principal,
                        len(self._baseline or ()),
                        len(current),
                    )
                    self._baseline = current
                    await self.notify_list_changed()
        finally:
            changes.close()

    async def _uri_set(self, *, refresh: bool) -> frozenset[str] | None:
        try:
            definitions = await anyio.to_thread.run_sync(
                functools.partial(self.backend.list_resources, refresh=refresh)
            )
        except Exception as exc:  # keep watching; the next event tries again
            log.warning("cannot re-list resources after a capsule-set change: %s", exc)
            return None
        return frozenset(d.uri for d in definitions)

    async def notify_list_changed(self) -> None:
        self.list_changed_sent += 1
        await self.listen_bus.publish(ResourcesListChanged())
        session = self._legacy_session
        if session is not None:
            try:
                await session.send_resource_list_changed()
            except Exception as exc:  # the client may be gone
                log.warning("list_changed not delivered: %s", exc)


def _drain(subscription: Subscription) -> None:
    while subscription.poll():
        pass
