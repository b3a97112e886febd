"""Tracing on or off, from the standard OpenTelemetry variables (or `--otel`).

    provider = configure(os.environ, forced=args.otel, service_name="astrid")
    ...                                     # spans go to the OTLP endpoint
    shutdown()                              # flush what is queued, at exit

On when:

- `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, or `console`: spans as
  JSON on stderr, never stdout, which carries JSON-RPC on stdio); or
- it is unset and an OTLP endpoint is (`OTEL_EXPORTER_OTLP_ENDPOINT` or
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); or
- `--otel` (`forced`): OTLP, to the endpoint the variables name, else the
  exporter's default (http://localhost:4318, or localhost:4317 for grpc).

Off when none of these holds (astrid does not default to `otlp` as the
specification does: a host with nothing listening would otherwise try to
export on every run), when `OTEL_TRACES_EXPORTER=none`, or when
`OTEL_SDK_DISABLED=true`.

The rest is the SDK's and its exporters', read from the same variables:
`OTEL_EXPORTER_OTLP_PROTOCOL` / `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`
(`http/protobuf`, the default, or `grpc`), the endpoint, headers, timeout,
compression and certificates, `OTEL_SERVICE_NAME` and
`OTEL_RESOURCE_ATTRIBUTES`, the sampler (`OTEL_TRACES_SAMPLER`, default
parent-based always-on; its parent is an MCP client's span only with
`--client-trace parent`: `tracing.from_client`) and the batch processor
(`OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE`,
`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, `OTEL_BSP_EXPORT_TIMEOUT`). Spans are exported in batches on the
processor's own thread, never on a request's path.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from astrid.host.telemetry import tracing

log = logging.getLogger(__name__)

PROTOCOLS = ("http/protobuf", "grpc")
EXPORTERS = ("otlp", "console", "none")

_provider: Any = None


class TelemetryConfigError(ValueError):
    """An `OTEL_*` value (or another tracing setting) astrid cannot honour (the message names it and the fix)."""


def wanted_exporters(env: Mapping[str, str], *, forced: bool = False) -> list[str]:
    """The span exporters the variables (and `--otel`) ask for; [] means tracing stays off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [part.strip().lower() for part in env.get("OTEL_TRACES_EXPORTER", "").split(",") if part.strip()]
    for name in named:
        if name not in EXPORTERS:
            raise TelemetryConfigError(
                f"OTEL_TRACES_EXPORTER={env['OTEL_TRACES_EXPORTER']!r}: astrid exports spans with "
                f"{', '.join(EXPORTERS[:-1])} or none; set one of {', '.join(EXPORTERS)}"
            )
    if named:
        if named == ["none"]:
            return ["otlp"] if forced else []
        return [name for name in named if name != "none"]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return ["otlp"] if endpoint or forced else []


def protocol(env: Mapping[str, str]) -> str:
    """The OTLP protocol the variables name (default http/protobuf)."""
    name = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    if not env.get(name):
        name = "OTEL_EXPORTER_OTLP_PROTOCOL"
    value = (env.get(name) or "http/protobuf").strip().lower()
    if value not in PROTOCOLS:
        raise TelemetryConfigError(
            f"{name}={value!r}: astrid's OTLP exporter speaks {' or '.join(PROTOCOLS)}; set one of them"
        )
    return value


def configure(
    env: Mapping[str, str],
    *,
    forced: bool = False,
    service_name: str = "astrid",
    service_version: str | None = None,
    exporter: Any = None,
) -> Any:
    """Switch tracing on when the variables (or `forced`) say so; the SDK's `TracerProvider`, or None.

    `env` decides on or off and which exporter; the OTLP exporters and the SDK read their own
    settings (endpoint, headers, OTEL_BSP_*, OTEL_SERVICE_NAME) from `os.environ`, so `env` is
    `os.environ` outside tests. `exporter` replaces the one the variables name (a test's in-memory exporter).
    Raises `TelemetryConfigError` for a value it cannot honour.
    """
    global _provider
    names = ["given"] if exporter is not None else wanted_exporters(env, forced=forced)
    if not names:
        return None
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = [exporter] if exporter is not None else [_exporter(name, env) for name in names]
    resource = Resource.create({SERVICE_VERSION: service_version} if service_version else {})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER, else parent-based on
    for made in exporters:
        provider.add_span_processor(BatchSpanProcessor(made))  # OTEL_BSP_* apply
    shutdown()
    _provider = provider
    tracing.enable(provider)
    return provider


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout carries JSON-RPC on stdio
    if protocol(env) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()  # endpoint, headers, TLS, timeout, compression: OTEL_EXPORTER_OTLP_*
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


def describe(provider: Any, env: Mapping[str, str]) -> str:
    """One line for the banner: where spans go."""
    if provider is None:
        return "tracing: off (set OTEL_EXPORTER_OTLP_ENDPOINT, or --otel)"
    names = wanted_exporters(env, forced=True)
    if names == ["console"]:
        return "tracing: on, spans as JSON on stderr (OTEL_TRACES_EXPORTER=console)"
    kind = protocol(env)
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    default = "http://localhost:4317" if kind == "grpc" else "http://localhost:4318"
    service = provider.resource.attributes.get("service.name")
    return f"tracing: on, OTLP {kind} to {endpoint or default} as service {service!r}"


def shutdown() -> None:
    """Stop tracing and flush the spans still queued (bounded by the exporter's timeout)."""
    global _provider
    provider, _provider = _provider, None
    tracing.disable()
    if provider is not None:
        try:
            provider.shutdown()
        except Exception:  # exporting at exit must never turn a clean stop into a failure
            log.warning("the last spans were not exported at stop", exc_info=log.isEnabledFor(logging.DEBUG))
