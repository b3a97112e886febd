"""`--otel`, `--metrics [HOST:]PORT`, `--metrics-public` and `--log-format`: what a running server shows
its operator (docs/operations.md). Shared by `astrid mcp serve` and `astrid host run`; `--client-trace`
(what an MCP client's `traceparent` becomes) is `astrid mcp serve`'s alone.

    observing = Observability(otel, metrics_address, metrics_public, log_format, service="astrid")  # JSON lines now
    observing.start()        # tracing from OTEL_* (or --otel), the /metrics listener: the banner's lines
    ...
    observing.close()        # flushes the spans still queued, closes the listener
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from astrid.cli import output
from astrid.cli.errors import UserError

DEFAULT_METRICS_PORT = 9464  # the port OpenTelemetry's Prometheus exporter uses by default


def observability_options(function: Callable) -> Callable:
    function = click.option(
        "--log-format",
        type=click.Choice(output.LOG_FORMATS),
        default="text",
        show_default=True,
        help="json: every line on stderr (astrid's, the access log's) as one JSON object, for log shippers.",
    )(function)
    function = click.option(
        "--metrics-public/--no-metrics-public",
        default=False,
        help="Allow --metrics on an address other than loopback (metrics name capsules and users).",
    )(function)
    function = click.option(
        "--metrics",
        "metrics_address",
        metavar="[HOST:]PORT",
        default=None,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics, a listener of its own "
        f"(HOST defaults to 127.0.0.1; loopback only unless --metrics-public; e.g. {DEFAULT_METRICS_PORT}).",
    )(function)
    return click.option(
        "--otel/--no-otel",
        default=False,
        help="Export OpenTelemetry traces over OTLP even when no OTEL_* variable asks for it "
        "(endpoint, protocol, service name: the standard OTEL_* variables).",
    )(function)


# astrid.host.telemetry.tracing.CLIENT_TRACE, spelled out: the CLI's start imports no host module for it
CLIENT_TRACE = ("parent", "link", "ignore")
CLIENT_TRACE_SAID = {"parent": "is the parent", "link": "is a link, not the parent", "ignore": "is ignored"}


def client_trace_option(function: Callable) -> Callable:
    return click.option(
        "--client-trace",
        type=click.Choice(CLIENT_TRACE),
        default=None,
        help="What a client's W3C traceparent becomes: the parent of the request's span (parent), a link "
        "of a new trace that your sampler decides on (link), or nothing (ignore) "
        "[default: parent on stdio, link with --http].",
    )(function)


def client_trace_for(given: str | None, *, http: bool) -> str:
    """`--client-trace`, else the default: a server facing others (HTTP) does not let its clients
    choose the trace or the sampling; the one client of stdio is the user who started it."""
    if given is not None:
        return given
    return "link" if http else "parent"


def parse_metrics_address(address: str) -> tuple[str, int]:
    from astrid.cli.http_serve import parse_address

    try:
        return parse_address(address)
    except UserError:
        raise UserError(
            f"--metrics {address!r}: give [HOST:]PORT with a port of 0-65535, e.g. --metrics 127.0.0.1:9464"
        ) from None


class Observability:
    def __init__(
        self,
        otel: bool,
        metrics_address: str | None,
        metrics_public: bool,
        log_format: str,
        *,
        service: str,
    ) -> None:
        self.otel = otel
        self.metrics_address = metrics_address
        self.metrics_public = metrics_public
        self.log_format = log_format
        self.service = service
        self.provider: Any = None
        self.listener: Any = None
        self.client_trace: str | None = None  # `astrid mcp serve`: said on the tracing line
        if log_format == "json":  # first of all: every line after this one as JSON, an error below too
            output.use_json()
        if metrics_public and metrics_address is None:
            raise UserError("--metrics-public goes with --metrics [HOST:]PORT")
        if metrics_address is not None:
            host, _ = parse_metrics_address(metrics_address)
            from astrid.host.telemetry.metrics import is_loopback

            if not is_loopback(host) and not metrics_public:
                raise UserError(
                    f"--metrics {metrics_address}: refusing to serve metrics on a non-loopback address "
                    "(they name capsules and users, with no credential asked); bind 127.0.0.1 and scrape "
                    "from this machine, or add --metrics-public"
                )

    def start(self) -> list[str]:
        """Tracing and the metrics listener; the banner lines that say so."""
        from astrid.host.telemetry import setup
        from astrid.host.version import astrid_version

        lines: list[str] = []
        try:
            self.provider = setup.configure(
                os.environ, forced=self.otel, service_name=self.service, service_version=astrid_version()
            )
        except setup.TelemetryConfigError as exc:
            raise UserError(str(exc)) from None
        if self.provider is not None:
            line = setup.describe(self.provider, os.environ)
            if self.client_trace is not None:
                line += f"; a client's traceparent {CLIENT_TRACE_SAID[self.client_trace]} (--client-trace)"
            lines.append(line)
        if self.metrics_address is not None:
            from astrid.host.telemetry import metrics

            host, port = parse_metrics_address(self.metrics_address)
            try:
                self.listener = metrics.serve(host, port, public=self.metrics_public)
            except OSError as exc:
                self.close()
                raise UserError(
                    f"--metrics {self.metrics_address}: cannot listen there ({exc.strerror or exc})"
                ) from None
            lines.append(f"metrics: {self.listener.url} (Prometheus; `astrid status --metrics {self.listener.url}`)")
        return lines

    def close(self) -> None:
        from astrid.host.telemetry import setup

        setup.shutdown()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
