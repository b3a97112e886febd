"""Spans, and the trace context carried across threads and hosts (OpenTelemetry).

Off by default. `on` is a module-level flag that every entry point checks
first: while it is False, `span()` returns one shared do-nothing object (no
span is made, no context is read), `capture()` returns None, `inject()`
writes nothing. A call site that would build attributes guards them with the
span it got (`if span: span.set_attributes(...)`: the do-nothing span is
falsy), so tracing off costs a flag check and a method call per site.

On (`enable(provider)`, done by `setup.configure` from the `OTEL_*`
variables or `--otel`, or by a test with an in-memory exporter):

- `span(name, attributes, kind=...)` is a context manager that makes a span,
  current for the block (a child of whatever span is current);
- `capture()` is the current context, for work handed to another thread
  (the bus's dispatchers carry it to the handler's thread: `attached(ctx)`);
- `inject(headers)` / `extract(headers)`: the W3C `traceparent` (and
  `tracestate`) in a carrier: NATS message headers, an MCP request's
  `_meta`, an HTTP request's headers;
- `from_client(ctx, mode)`: what a request's span starts from when the
  context came from an MCP client, which astrid does not trust as it trusts
  its own hops (`CLIENT_TRACE`: the client's span as the parent, or a new
  trace that links to it, or a new trace that ignores it).

The tracer belongs to the provider handed to `enable`; the global
OpenTelemetry provider is left alone, so nothing else in the process (the
MCP SDK's own middleware, a library) starts exporting because astrid did.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

# The flag every call site checks first (read as `tracing.on`).
on: bool = False
_tracer: Any = None
_kinds: dict[str, Any] = {}

INSTRUMENTATION = "astrid"

# What an MCP client's `traceparent` becomes (`astrid mcp serve --client-trace`, docs/operations.md):
# parent: the client's span is the request span's parent, so the client's trace and its sampled flag;
# link: a new trace, sampled by the operator's sampler, whose root links to the client's span;
# ignore: a new trace, nothing of the client's kept.
CLIENT_TRACE = ("parent", "link", "ignore")


class _NoSpan:
    """What `span()` and `start()` give while tracing is off: falsy, and does nothing."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        pass

    def end(self) -> None:
        pass


NO_SPAN = _NoSpan()


def enable(provider: Any) -> None:
    """Trace from now on, with `provider`'s tracer (an SDK `TracerProvider`)."""
    global _tracer, on
    from opentelemetry.trace import SpanKind

    _kinds.update(
        internal=SpanKind.INTERNAL,
        server=SpanKind.SERVER,
        client=SpanKind.CLIENT,
        producer=SpanKind.PRODUCER,
        consumer=SpanKind.CONSUMER,
    )
    _tracer = provider.get_tracer(INSTRUMENTATION)
    on = True


def disable() -> None:
    """Stop tracing (spans already open end as usual)."""
    global _tracer, on
    on = False
    _tracer = None


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: str = "internal",
    parent: Any = None,
    links: Sequence[Any] = (),
    record_exception: bool = True,
) -> Any:
    """A context manager: a span current for the block (`NO_SPAN` while off).

    `parent` is a context from `extract()`/`capture()`/`from_client()`; None: the current one.
    `links`: span links (from `from_client()`); the SDK's samplers never follow one.
    With `record_exception=False` an exception leaving the block is neither
    recorded nor turned into an error status (the caller says what it means).
    """
    tracer = _tracer
    if not on or tracer is None:
        return NO_SPAN
    return tracer.start_as_current_span(
        name,
        context=parent,
        kind=_kinds[kind],
        attributes=attributes,
        links=links,
        record_exception=record_exception,
        set_status_on_exception=record_exception,
    )


def start(name: str, attributes: Mapping[str, Any] | None = None, *, kind: str = "internal", parent: Any = None) -> Any:
    """A span that is not made current and that the caller ends (`NO_SPAN` while off)."""
    tracer = _tracer
    if not on or tracer is None:
        return NO_SPAN
    return tracer.start_span(name, context=parent, kind=_kinds[kind], attributes=attributes)


def current() -> Any:
    """The span current in this thread (`NO_SPAN` while off), to add what a callee learned."""
    if not on:
        return NO_SPAN
    from opentelemetry import trace

    found = trace.get_current_span()
    return found if found.is_recording() else NO_SPAN


def context_of(started: Any) -> Any:
    """The context with `started` (a span from `start`) as the current span; None while off."""
    if not started:
        return None
    from opentelemetry import trace

    return trace.set_span_in_context(started)


def fail(span: Any, error_type: str, description: str | None = None) -> None:
    """Mark `span` failed: `error.type` and an error status."""
    if not span:
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))


def capture() -> Any:
    """The current context, to hand to another thread (None while off)."""
    if not on:
        return None
    from opentelemetry import context

    return context.get_current()


@contextmanager
def attached(ctx: Any) -> Iterator[None]:
    """Make `ctx` (from `capture`/`extract`/`context_of`) current for the block; None: nothing."""
    if ctx is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


def inject(carrier: dict[str, str]) -> None:
    """Write the current trace context (`traceparent`, `tracestate`) into `carrier`; nothing while off."""
    if not on:
        return
    from opentelemetry import propagate

    propagate.inject(carrier)


def extract(carrier: Mapping[str, Any] | None) -> Any:
    """The context a carrier's `traceparent` names, or None (off, absent, or malformed)."""
    if not on or not carrier or "traceparent" not in carrier:
        return None
    from opentelemetry import propagate, trace

    try:
        ctx = propagate.extract(carrier)
    except (ValueError, TypeError):
        return None
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def from_client(client: Any, mode: str) -> tuple[Any, list[Any]]:
    """(parent, links) for the span of a request whose MCP client sent the context `client`
    (from `extract`; None: it sent none), as `mode` (one of `CLIENT_TRACE`) says.

    Only for a client's context: astrid's own hops (NATS headers) stay parents, as `extract` gives them.
    """
    if mode == "parent" or not on:
        return client, []
    from opentelemetry import context, trace

    # An empty context, not the current one: a trace of its own, so the sampler decides at its root.
    root = context.Context()
    if mode == "link" and client is not None:
        return root, [trace.Link(trace.get_current_span(client).get_span_context())]
    return root, []


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span in hex, for a log line; None while off or outside a span."""
    if not on:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"
