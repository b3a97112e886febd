"""The MCP server: mcp 2.3.0's low-level `Server` in front of the broker.

It knows MCP and nothing about wasm; it reaches the broker only over the bus
through a backend (a front door per principal, plus readiness). One server
serves every principal of its transport: stdio has one (the backend's
default principal); streamable HTTP takes each request's principal from its
verified credential (`mcp.auth`), and a request without one falls back to the
default principal only where the operator allowed that (loopback, no auth).

- capabilities: `resources` with `listChanged: true` and `subscribe: true`,
  and `completions`; both protocol revisions, 2025-11-25 (initialize) and
  2026-07-28 (server/discover);
- `resources/list`: one page, no cursor; `resources/read`;
  `resources/templates/list`: the principal's templates, one page;
- `completion/complete`: a `ref/resource` completes a template variable
  (answered by the template's owner only); a `ref/prompt` is -32602 (there
  are no prompts);
- results carry 2026-07-28 cache hints (`private`, principal-scoped; the SDK
  strips them on the 2025-11-25 wire);
- `notifications/resources/list_changed` when a principal's URI set changed
  after a capsule-set change, to that principal's clients only: on their
  sessions (2025-11-25) and open `subscriptions/listen` streams (2026-07-28);
- at most `max_requests_per_principal` requests of one principal in flight:
  more are refused at once as busy, so one principal's flood cannot hold the
  worker threads (or the capsule lanes, for reads awaited on the loop)
  another one's requests need;
- resource subscriptions (`updates.py`, docs/contract/subscriptions.md §11):
  `resources/subscribe` / `resources/unsubscribe` (2025-11-25) and a listen
  stream's `resourceSubscriptions` (2026-07-28), only to URIs the principal
  could read (the broker says: listed for it, or covered by a template it
  sees; anything else is "resource not found" in the era's code), at most
  `subscriptions_per_principal` at once; `notifications/resources/updated`
  to the subscribers of the principal an update is for, coalesced per URI;
  a capsule-set change that rebuilt or removed a subscribed URI's owner
  updates it;
- at most `max_streams_per_principal` open listen streams per principal;
  over HTTP each ends when its credential is revoked or expires;
- with `resource_tools` (`--resource-tools`), the `tools` capability and two
  read-only tools mirroring list and read (`tools.py`); without it
  `tools/list` is "method not found";
- every failure is an `MCPError`, never another exception type (a tool's
  failure is a result with `isError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.auth.provider import AccessToken
from mcp.server.models import InitializationOptions
from mcp.types import SubscriptionsListenRequestParams, SubscriptionsListenResult
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from astrid.host.contract.outcomes import CompletionOutcome, Failure, FailureCode, ReadOutcome
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.errors import BackendNotReady, BrokerUnavailable
from astrid.host.limits import DEFAULT_LIMITS, DEFAULT_SUBSCRIPTION_LIMITS, HttpLimits, Limits, SubscriptionLimits
from astrid.host.mcp.access import note_request
from astrid.host.mcp.changes import ListChanged
from astrid.host.mcp.credential_watch import CredentialWatch
from astrid.host.mcp.reshape import (
    completion_error,
    read_error,
    to_completion,
    to_contents,
    to_resource,
    to_template,
)
from astrid.host.mcp.sdk_internals import PinnedOptionsServer, check_version, connection_of
from astrid.host.mcp.skills import CAPABILITY as SKILLS_CAPABILITY
from astrid.host.mcp.skills import EXTENSION as SKILLS_EXTENSION
from astrid.host.mcp.skills import SkillsExtension
from astrid.host.mcp.stdio import screened_stdio_server
from astrid.host.mcp.stdio_wire import InputStop
from astrid.host.mcp.tools import ResourceTools
from astrid.host.mcp.updates import Subscriptions
from astrid.host.telemetry import metrics, tracing
from astrid.host.telemetry.setup import TelemetryConfigError
from astrid.host.version import astrid_version

log = logging.getLogger("astrid.host.mcp")

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
E = TypeVar("E")

# Principal-scoped results: a shared cache must never serve them to someone else.
LIST_TTL_MS = 0
READ_TTL_MS = 0
# The HTTP limits' defaults (HTTP sets its configured ones; stdio serves one principal with these)
MAX_REQUESTS_PER_PRINCIPAL = HttpLimits.requests_per_principal
MAX_STREAMS_PER_PRINCIPAL = HttpLimits.streams_per_principal
SERVER_BUSY = -32000  # JSON-RPC's implementation-defined server error range


class Pending(Protocol[T_co]):
    """A request started without waiting (`FrontDoor.read`): settled already, its round in flight
    (awaited on the event loop, without a thread), or with work left for a worker thread."""

    def wait_s(self) -> float | None:
        """None once the round is over (or there is none); else how long to wait at most before asking again."""
        ...

    def notify(self, wake: Callable[[], None]) -> None:
        """Call `wake` (from another thread) when a reply arrives or the round's capsules finished."""
        ...

    def settled(self) -> T_co | None:
        """Once over: the answer, or None when `finish` (blocking: on a worker thread) gives it."""
        ...

    def finish(self) -> T_co: ...
    def result(self) -> T_co:
        """The answer, waited for on this thread."""
        ...

    def close(self) -> None: ...


class FrontDoor(Protocol):
    """The broker, for one principal."""

    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]: ...
    # The list when a fresh snapshot is kept, found without waiting (safe on the event loop); else None.
    def list_resources_now(self) -> list[ResourceDefinition] | None: ...
    # A read, started without waiting (safe on the event loop).
    def read(self, uri: str) -> Pending[ReadOutcome]: ...
    def list_templates(self, *, refresh: bool = False) -> list[ResourceTemplate]: ...
    def complete(
        self, uri_template: str, argument_name: str, argument_value: str, context: dict[str, str] | None = None
    ) -> CompletionOutcome: ...
    def subscribable(self, uri: str) -> str | None:
        """Who serves `uri` to this principal when it could read it, else None (and, when no read of it is
        known, the host starts one on the principal's behalf: the files it depends on are then watched)."""
        ...

    def learned(self, uris: Collection[str]) -> bool:
        """Wait (bounded) for the reads `subscribable` started for `uris`; True once none is left."""
        ...


class Events(Protocol[E]):
    """Events as they happen, taken in batches on the event loop (`event_stream.EventStream`)."""

    async def next(self) -> list[E]:
        """Every event queued, waiting for at least one; [] once closed."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    """What the server needs: readiness, a front door per principal, capsule-set changes and resource updates."""

    # Whom a request without a credential acts for (stdio: the one user); None: nobody.
    principal: str | None

    def wait_ready(self, timeout_s: float) -> None: ...
    def client_for(self, principal: str) -> FrontDoor: ...
    def client_if_made(self, principal: str) -> FrontDoor | None:
        """The principal's front door when one was made already, without waiting; else None."""
        ...

    def changes(self) -> Events[str]:
        """The principals whose capsule set changed, as it changes (close it when done)."""
        ...

    def updates(self) -> Events[tuple[str, str]]:
        """(principal, uri) of every resource update the broker checked (close it when done)."""
        ...


class AstridMcpServer:
    def __init__(
        self,
        backend: Backend,
        *,
        limits: Limits = DEFAULT_LIMITS,
        name: str = "astrid",
        ready_timeout_s: float = 600.0,
        max_requests_per_principal: int = MAX_REQUESTS_PER_PRINCIPAL,
        max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL,
        worker_threads: int | None = None,
        resource_tools: bool = False,
        subscription_limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS,
        client_trace: str = "parent",
    ) -> None:
        check_version()  # the SDK internals we lean on were written for one mcp (sdk_internals.py)
        if client_trace not in tracing.CLIENT_TRACE:
            raise TelemetryConfigError(
                f"client_trace {client_trace!r}: choose one of {', '.join(tracing.CLIENT_TRACE)} (--client-trace)"
            )
        self.backend = backend
        # What a client's `traceparent` becomes: the request span's parent, a link of a new trace, or nothing
        self.client_trace = client_trace
        self.limits = limits
        self.ready_timeout_s = ready_timeout_s
        self.max_requests_per_principal = max_requests_per_principal
        self.max_streams_per_principal = max_streams_per_principal
        # HTTP: ends a listen stream once the credential that opened it stops verifying
        self.credentials: CredentialWatch | None = None
        self._streams: dict[str, int] = {}  # open listen streams per principal
        self.worker_threads = worker_threads
        self.list_changed = ListChanged()
        self.subscriptions = Subscriptions(self.list_changed.publish, subscription_limits)
        self.changes_handled = 0  # capsule-set events re-listed (tests wait on it)
        self.messages_read = 0  # requests and notifications that reached it (stdio: did a client speak?)
        self._in_flight: dict[str, int] = {}
        self._task_group: anyio.abc.TaskGroup | None = None
        self._last_reshape: tuple[list[ResourceDefinition], list[types.Resource]] = ([], [])
        self.watching: anyio.Event | None = None  # set once the list_changed baseline exists
        self.server: PinnedOptionsServer[dict[str, Any]] = PinnedOptionsServer(
            name,
            version=astrid_version(),
            title="astrid capsule resources",
            instructions=(
                "Read-only resources served by sandboxed astrid capsules for the signed-in user. "
                "List them with resources/list and read them with resources/read."
            ),
            lifespan=self._lifespan,
            on_list_resources=self._on_list,
            on_read_resource=self._on_read,
            on_list_resource_templates=self._on_templates,
            on_completion=self._on_complete,
            on_subscribe_resource=self._on_subscribe,
            on_unsubscribe_resource=self._on_unsubscribe,
            on_subscriptions_listen=self._on_listen,
        )
        # 2026-07-28: advertise what we offer (`capabilities()`), the same in both eras.
        self.server.add_request_handler("server/discover", types.RequestParams, self._on_discover)
        # One middleware of ours, in place of the SDK's OpenTelemetryMiddleware: its spans are
        # astrid's own (with the principal, the URI and the HTTP traceparent), and with tracing
        # and metrics off it costs two flag checks (docs/operations.md).
        self.server.middleware[:] = [self._capture_session]
        # --resource-tools: resources/list and resources/read mirrored as two read-only tools
        self.tools = ResourceTools(self) if resource_tools else None
        if self.tools is not None:
            self.tools.register(self.server)
        # The MCP Skills extension: skills/list, skills/get, resources/directory/read (`skills.py`)
        SkillsExtension(self).register(self.server)
        # Pin the options: transports that build them themselves (in-memory,
        # streamable HTTP) would otherwise report listChanged false.
        options = self.server.create_initialization_options(NotificationOptions(resources_changed=True))
        self._init_options = options.model_copy(update={"capabilities": self.capabilities()})
        self.server.pin_options(self._init_options)

    # -- wiring ------------------------------------------------------------------------

    def capabilities(self) -> types.ServerCapabilities:
        return types.ServerCapabilities(
            resources=types.ResourcesCapability(subscribe=True, list_changed=True),
            completions=types.CompletionsCapability(),
            tools=self.tools.capability() if self.tools is not None else None,
            extensions={SKILLS_EXTENSION: dict(SKILLS_CAPABILITY)},
        )

    def initialization_options(self) -> InitializationOptions:
        return self._init_options

    async def run(self, read_stream, write_stream) -> None:
        await self.server.run(read_stream, write_stream, self.initialization_options())

    async def run_stdio(self, stop: InputStop | None = None) -> None:
        """Serve the process's stdin/stdout until end of input (or `stop.request()`, e.g. on Ctrl-C)."""
        async with screened_stdio_server(stop) as (read_stream, write_stream):
            await self.run(read_stream, write_stream)

    @property
    def list_changed_sent(self) -> int:
        return self.list_changed.sent

    @asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        self.watching = anyio.Event()
        # --metrics: open listen streams per principal, read when scraped
        forget = metrics.watch("astrid_listen_streams", lambda: metrics.top_principals(dict(self._streams)))
        if self.worker_threads is not None:  # many principals: more requests may wait on the bus at once
            anyio.to_thread.current_default_thread_limiter().total_tokens = self.worker_threads
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            self.subscriptions.spawn = tg.start_soon
            tg.start_soon(self._watch_changes)
            tg.start_soon(self._watch_updates)
            try:
                yield {}
            finally:
                self.subscriptions.spawn = None
                forget()
                self.list_changed.close()
                tg.cancel_scope.cancel()

    async def _capture_session(self, ctx: ServerRequestContext[Any, Any], call_next: Callable) -> Any:
        self.messages_read += 1
        note_request(ctx.request, ctx.method, ctx.params)  # for the HTTP access log, when there is one
        if (tracing.on or metrics.on) and ctx.request_id is not None:
            result = await self._observed(ctx, call_next)
        else:
            result = await call_next(ctx)
        # A handshake-era connection has one standalone channel for
        # notifications; remember a session that reaches it once initialized.
        if ctx.method != "initialize" and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            if ctx.method == "notifications/initialized" or ctx.request_id is not None:
                connection = connection_of(ctx.session)
                principal = self._principal_or_none(ctx)
                if principal is not None and not self.list_changed.joined(connection):
                    self.list_changed.join(connection, ctx.session, principal)
                    connection.exit_stack.callback(self.list_changed.leave, connection)
        return result

    async def _observed(self, ctx: ServerRequestContext[Any, Any], call_next: Callable) -> Any:
        """One request as a span (in the client's trace, or linked to it: `client_trace`) and as metrics."""
        method = ctx.method
        started = time.perf_counter()
        status = "ok"
        attributes: dict[str, Any] | None = None
        parent: Any = None
        links: list[Any] = []
        if tracing.on:
            attributes = _span_attributes(ctx, self._principal_or_none(ctx))
            # SEP-414: `_meta.traceparent` of the request, else the HTTP request's header
            client = tracing.extract(ctx.meta) or tracing.extract(_trace_headers(ctx))
            parent, links = tracing.from_client(client, self.client_trace)
        with tracing.span(
            method, attributes, kind="server", parent=parent, links=links, record_exception=False
        ) as span:
            try:
                result = await call_next(ctx)
                if method == "tools/call" and _tool_failed(result):  # a failed tool call is a result, not an error
                    status = "tool_error"
                    tracing.fail(span, status)
                return result
            except MCPError as exc:
                status = str(exc.error.code)
                if span:
                    span.set_attribute("rpc.response.status_code", status)
                    tracing.fail(span, status, exc.error.message)
                raise
            except ValidationError:
                status = str(types.INVALID_PARAMS)
                tracing.fail(span, status, "Invalid request parameters")
                raise
            except Exception as exc:
                status = "internal"
                tracing.fail(span, type(exc).__qualname__, str(exc))
                raise
            except BaseException:  # cancelled: the client went away, or the server stops
                status = "cancelled"
                raise
            finally:
                metrics.request(method, status, time.perf_counter() - started)

    # -- who is asking ---------------------------------------------------------------

    def _principal_or_none(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The principal of the request's verified credential, else the default one (or None)."""
        token = _access_token(ctx)
        if token is not None:
            return str(token.client_id)
        return self.backend.principal

    def _principal(self, ctx: ServerRequestContext[Any, Any]) -> str:
        principal = self._principal_or_none(ctx)
        if principal is None:
            raise MCPError(code=types.INVALID_REQUEST, message="this server serves only authenticated requests")
        return principal

    # -- calling the broker ------------------------------------------------------------

    async def _ready(self) -> None:
        try:
            await anyio.to_thread.run_sync(self.backend.wait_ready, self.ready_timeout_s)
        except BackendNotReady as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=f"capsules are not available: {exc}") from None

    async def _call(
        self,
        principal: str,
        call: Callable[[FrontDoor], T],
        *,
        uri: str | None = None,
        kept: Callable[[FrontDoor], T | None] | None = None,
        started: Callable[[FrontDoor], Pending[T]] | None = None,
    ) -> T:
        """`call` on a worker thread (it may wait on capsules); `kept` first, on the loop, when given:
        an answer kept in memory costs no thread hop. `started`, instead, starts the request on the
        loop and its round is awaited there: the capsule's reply wakes the loop, no worker thread
        between (once the principal's front door exists; else `call`)."""
        data = {"uri": uri} if uri is not None else None
        in_flight = self._in_flight.get(principal, 0)
        if in_flight >= self.max_requests_per_principal:
            raise MCPError(
                code=SERVER_BUSY,
                message=f"busy: {in_flight} requests of this user are in flight; retry when one has finished",
                data=data,
            )

        door = self.backend.client_if_made(principal) if kept is not None or started is not None else None
        pending: Pending[T] | None = None
        if door is not None:
            try:
                answer = kept(door) if kept is not None else None
                if answer is not None:
                    return answer
                pending = started(door) if started is not None else None
            except Exception:  # the blocking call decides, and reports
                log.debug("kept answer lookup or start failed", exc_info=True)

        def when_ready() -> T:
            # One thread hop per request: waiting for the capsules to load
            # returns at once after start-up.
            self.backend.wait_ready(self.ready_timeout_s)
            return call(self.backend.client_for(principal))

        self._in_flight[principal] = in_flight + 1
        try:
            if pending is not None:
                return await _awaited(pending)
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
        finally:
            left = self._in_flight.pop(principal, 1) - 1
            if left:
                self._in_flight[principal] = left

    # -- the calls other front ends of this server make (resources as tools: `tools.py`) ---------

    def principal_of(self, ctx: ServerRequestContext[Any, Any]) -> str:
        """Whom a request acts for (its credential's principal, else the default one); MCPError if nobody."""
        return self._principal(ctx)

    async def resources(self, principal: str) -> list[types.Resource]:
        """`principal`'s resources, as resources/list answers them."""
        return self._reshaped(await self._definitions(principal))

    async def read(self, principal: str, uri: str) -> ReadOutcome:
        """A read of `uri` for `principal`, under the same busy cap as resources/read (MCPError: busy,
        not ready, the broker unavailable; a failed read is an outcome)."""
        return await self._call(
            principal, lambda door: door.read(uri).result(), uri=uri, started=lambda door: door.read(uri)
        )

    async def call(self, principal: str, call: Callable[[FrontDoor], T]) -> T:
        """`call` with `principal`'s front door, on a worker thread, under the same busy cap (the skills
        extension, `skills.py`)."""
        return await self._call(principal, call)

    async def _definitions(self, principal: str) -> list[ResourceDefinition]:
        return await self._call(
            principal, lambda door: door.list_resources(), kept=lambda door: door.list_resources_now()
        )

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
        principal = self._principal(ctx)
        definitions = await self._definitions(principal)
        # What the client has now seen: list_changed compares against it.
        self.list_changed.listed(principal, frozenset(d.uri for d in definitions), connection_of(ctx.session))
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
        reply = await self.read(self._principal(ctx), uri)
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
        # The owner's declared freshness (docs/contract/resources.md §5.7), else none.
        ttl_ms = max(1, int(reply.max_age_s * 1000)) if reply.max_age_s else READ_TTL_MS
        return types.ReadResourceResult(contents=contents, ttl_ms=ttl_ms, cache_scope="private")

    async def _on_templates(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        if params is not None and params.cursor is not None:
            # one page, never a cursor: any cursor is one we did not issue
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor", data={"cursor": params.cursor})
        templates = await self._call(self._principal(ctx), lambda door: door.list_templates())
        reshaped = [t for t in (to_template(template, self.limits) for template in templates) if t is not None]
        return types.ListResourceTemplatesResult(resource_templates=reshaped, ttl_ms=LIST_TTL_MS, cache_scope="private")

    async def _on_complete(
        self, ctx: ServerRequestContext, params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        ref = params.ref
        if not isinstance(ref, types.ResourceTemplateReference):
            raise MCPError(
                code=types.INVALID_PARAMS, message="this server has no prompts to complete", data={"ref": ref.type}
            )
        template, argument = ref.uri, params.argument
        context = dict(params.context.arguments or {}) if params.context is not None else {}
        reply = await self._call(
            self._principal(ctx),
            lambda door: door.complete(template, argument.name, argument.value, context),
            uri=template,
        )
        if reply.error is not None:
            raise completion_error(reply.error, template)
        return types.CompleteResult(completion=to_completion(reply.values, reply.total, reply.has_more, self.limits))

    # -- resource subscriptions (docs/contract/subscriptions.md §11) ---------------------

    async def _on_subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        """2025-11-25 `resources/subscribe`: for a URI the principal could read, until unsubscribed or gone."""
        principal = self._principal(ctx)
        uri = params.uri
        connection = connection_of(ctx.session)
        if self.subscriptions.holds(connection, uri):
            return types.EmptyResult()
        self._room_for(principal, 1)
        owner = (await self._call(principal, lambda door: _subscribable(door, [uri]), uri=uri))[uri]
        if owner is None:
            raise _not_readable(uri, ctx.protocol_version)
        self._room_for(principal, 1)  # others may have subscribed while the broker answered
        if not self.subscriptions.joined(connection):
            connection.exit_stack.callback(self.subscriptions.leave, connection)
        self.subscriptions.subscribe(connection, ctx.session, principal, uri, owner)
        return types.EmptyResult()

    async def _on_unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        """2025-11-25 `resources/unsubscribe`: no more updates of the URI on this session (none held: no error)."""
        self._principal(ctx)
        self.subscriptions.unsubscribe(connection_of(ctx.session), params.uri)
        return types.EmptyResult()

    def _room_for(self, principal: str, more: int) -> None:
        if not self.subscriptions.room(principal, more):
            held = self.subscriptions.count(principal)
            cap = self.subscriptions.limits.subscriptions_per_principal
            raise MCPError(
                code=SERVER_BUSY,
                message=f"busy: this user holds {held} resource subscriptions (the cap is {cap}); unsubscribe first",
            )

    async def _stream_subscriptions(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams, principal: str
    ) -> object | None:
        """A listen stream's `resourceSubscriptions`, checked as `resources/subscribe` checks one URI;
        the token of its subscriptions (None when it names no URI). Raises before the stream is acknowledged."""
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        if not uris:
            return None
        self._room_for(principal, len(uris))
        owners = await self._call(principal, lambda door: _subscribable(door, uris))
        unreadable = [uri for uri in uris if owners.get(uri) is None]
        if unreadable:
            raise _not_readable(unreadable[0], ctx.protocol_version, also=unreadable)
        self._room_for(principal, len(uris))
        return self.subscriptions.open_stream(principal, owners)

    async def _watch_updates(self) -> None:
        """Resource updates the broker checked: each to its principal's subscribers (coalesced)."""
        try:
            await self._ready()
        except MCPError as exc:
            log.error("%s; no resource updates", exc.message)
            return
        updates = self.backend.updates()
        try:
            while batch := await updates.next():
                for principal, uri in batch:
                    await self.subscriptions.updated(principal, uri)
        finally:
            updates.close()

    async def _recheck_owners(self, principal: str) -> None:
        """After a capsule-set change: a subscribed URI whose owner was rebuilt or removed is updated."""
        subscribed = self.subscriptions.subscribed(principal)
        if not subscribed:
            return
        try:
            owners = await anyio.to_thread.run_sync(
                lambda: {uri: self.backend.client_for(principal).subscribable(uri) for uri in subscribed}
            )
        except Exception as exc:  # keep watching; the next event tries again
            log.warning(
                "cannot check who serves the subscriptions of %s after a capsule-set change: %s", principal, exc
            )
            return
        await self.subscriptions.owners_changed(principal, owners)

    # -- list_changed ------------------------------------------------------------------

    async def _on_listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """A 2026-07-28 listen stream hears its own principal's changes only; a principal has a few at most."""
        principal = self._principal(ctx)
        open_now = self._streams.get(principal, 0)
        if open_now >= self.max_streams_per_principal:
            raise MCPError(
                code=SERVER_BUSY,
                message=f"busy: {open_now} listen streams of this user are open (the cap); close one first",
            )
        self._streams[principal] = open_now + 1
        try:
            return await self._listen(ctx, params, principal)
        finally:
            left = self._streams.pop(principal, 1) - 1
            if left:
                self._streams[principal] = left

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams, principal: str
    ) -> SubscriptionsListenResult:
        handler = self.list_changed.listen_handler(principal)
        token = await self._stream_subscriptions(ctx, params, principal)
        try:
            access = _access_token(ctx)
            if self.credentials is None or access is None:
                return await handler(ctx, params)
            with anyio.CancelScope() as scope:

                async def end() -> None:
                    scope.cancel()

                watched = self.credentials.watch(access, "stream", end)
                try:
                    return await handler(ctx, params)
                finally:
                    self.credentials.forget(watched)
            raise MCPError(
                code=types.INVALID_REQUEST, message="the credential of this stream was revoked or has expired"
            )
        finally:
            if token is not None:
                self.subscriptions.close_stream(token)

    async def _watch_changes(self) -> None:
        """One watcher for every principal: a capsule-set event of alice re-lists alice's set."""
        try:
            await self._ready()
        except MCPError as exc:
            log.error("%s; no list_changed notifications", exc.message)
            return
        changes = self.backend.changes()
        try:
            # A change that landed before the subscription is caught here: the
            # set now is compared with what each client last listed, if it did.
            for principal in self._connected():
                await self._reconcile(principal, refresh=False)
            if self.watching is not None:
                self.watching.set()
            while batch := await changes.next():
                # one re-list per principal per burst, and only for principals with a client
                for principal in sorted(set(batch) & self._connected()):
                    await self._reconcile(principal, refresh=True)
                    await self._recheck_owners(principal)
                    self.changes_handled += 1
        finally:
            changes.close()

    def _connected(self) -> set[str]:
        connected = self.list_changed.principals()
        if self.backend.principal is not None:
            connected.add(self.backend.principal)
        return connected

    async def _reconcile(self, principal: str, *, refresh: bool) -> None:
        try:
            definitions = await anyio.to_thread.run_sync(
                lambda: self.backend.client_for(principal).list_resources(refresh=refresh)
            )
        except Exception as exc:  # keep watching; the next event tries again
            log.warning("cannot re-list resources of %s after a capsule-set change: %s", principal, exc)
            return
        await self.list_changed.reconcile(principal, frozenset(d.uri for d in definitions))


def _subscribable(door: FrontDoor, uris: list[str]) -> dict[str, str | None]:
    """Who serves each of `uris` (None: the principal could not read it), once the host has learned what
    the readable ones depend on (docs/contract/subscriptions.md §11.2): a change after the answer is heard."""
    owners = {uri: door.subscribable(uri) for uri in uris}
    door.learned([uri for uri, owner in owners.items() if owner is not None])
    return owners


def _not_readable(uri: str, protocol_version: str | None, *, also: list[str] | None = None) -> MCPError:
    """A subscription to a URI the principal could not read: "resource not found", in the era's code."""
    error = read_error(Failure(FailureCode.NOT_FOUND, ""), uri, protocol_version)
    if also is not None and len(also) > 1 and isinstance(error.error.data, dict):
        error.error.data["uris"] = also
    return error


def _access_token(ctx: ServerRequestContext[Any, Any]) -> AccessToken | None:
    """The verified credential of an HTTP request (the SDK's auth middleware put it in the scope)."""
    scope = getattr(ctx.request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    return getattr(user, "access_token", None)


def _span_attributes(ctx: ServerRequestContext[Any, Any], principal: str | None) -> dict[str, Any]:
    """What a request's span says: the method, the principal, the URI (or tool, or template) it names."""
    attributes: dict[str, Any] = {
        "mcp.method.name": ctx.method,
        "mcp.protocol.version": ctx.protocol_version,
        "jsonrpc.request.id": str(ctx.request_id),
    }
    if principal is not None:
        attributes["astrid.principal"] = principal
    params = ctx.params
    if isinstance(params, Mapping):
        uri = params.get("uri")
        name = params.get("name")
        ref = params.get("ref")
        if isinstance(uri, str):
            attributes["mcp.resource.uri"] = uri[:2048]
        elif isinstance(name, str):  # tools/call
            attributes["gen_ai.tool.name"] = name[:256]
            arguments = params.get("arguments")
            inner = arguments.get("uri") if isinstance(arguments, Mapping) else None
            if isinstance(inner, str):
                attributes["mcp.resource.uri"] = inner[:2048]
        elif isinstance(ref, Mapping) and isinstance(ref.get("uri"), str):  # completion/complete
            attributes["astrid.uri_template"] = ref["uri"][:2048]
    return attributes


def _tool_failed(result: Any) -> bool:
    """Did a tools/call result say `isError` (the model, or the dict it may already be)?"""
    if isinstance(result, types.CallToolResult):
        return bool(result.is_error)
    return isinstance(result, Mapping) and result.get("isError") is True


def _trace_headers(ctx: ServerRequestContext[Any, Any]) -> dict[str, str] | None:
    """The W3C trace headers of an HTTP request (`traceparent`, `tracestate`), if any."""
    scope = getattr(ctx.request, "scope", None)
    if not isinstance(scope, dict):
        return None
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        if name in (b"traceparent", b"tracestate"):
            found[name.decode()] = value.decode("latin-1")
    return found or None


async def _awaited(pending: Pending[T]) -> T:
    """Wait on the loop for a started request's round, woken by its replies and its capsules'
    finishing (or the window's end); what is left after it, if anything, on a worker thread."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(woken.set)

    pending.notify(wake)
    try:
        while (wait_s := pending.wait_s()) is not None:
            with contextlib.suppress(TimeoutError):  # the window's time is up: `wait_s` says what is next
                async with asyncio.timeout(wait_s):
                    await woken.wait()
            woken.clear()  # before the next look: a reply queued after it sets the event again
        answer = pending.settled()
        if answer is None:
            answer = await anyio.to_thread.run_sync(pending.finish)
        return answer
    finally:
        pending.close()
