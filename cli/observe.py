"""`--otel`, `--metrics [HOST:]PORT`, `--metrics-public` and `--log-format`: what a running server shows
its operator (docs/operations.md). Shared by `astrid mcp serve` and `astrid host run`; `--client-trace`
(what an MCP client's `traceparent` becomes) is `astrid mcp serve`'s alone.

    observing = Observability(otel, metrics_address, metrics_public, log_format, service="astrid")  # JSON lines now
    telemetry = observing.telemetry()     # astrid.host.serving.telemetry: started and closed by the serving
    ...
    for line in observing.lines(started): # the banner's lines for what started
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from astrid.cli import output
from astrid.cli.errors import UserError

if TYPE_CHECKING:
    from astrid.host.serving.telemetry import Telemetry, TelemetryStarted

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
    from astrid.host.addresses import host_and_port

    parsed = host_and_port(address)
    if parsed is None:
        raise UserError(
            f"--metrics {address!r}: give [HOST:]PORT with a port of 0-65535, e.g. --metrics 127.0.0.1:9464"
        )
    return parsed


class Observability:
    """The observability options, checked (an error before anything starts), and what they start."""

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
        self.service = service
        self.client_trace: str | None = None  # `astrid mcp serve`: said on the tracing line
        if log_format == "json":  # first of all: every line after this one as JSON, an error below too
            output.use_json()
        if metrics_public and metrics_address is None:
            raise UserError("--metrics-public goes with --metrics [HOST:]PORT")
        self.metrics_at = parse_metrics_address(metrics_address) if metrics_address is not None else None
        if self.metrics_at is not None:
            from astrid.host.addresses import is_loopback

            if not is_loopback(self.metrics_at[0]) and not metrics_public:
                raise UserError(
                    f"--metrics {metrics_address}: refusing to serve metrics on a non-loopback address "
                    "(they name capsules and users, with no credential asked); bind 127.0.0.1 and scrape "
                    "from this machine, or add --metrics-public"
                )

    def telemetry(self) -> Telemetry:
        from astrid.host.serving.telemetry import Telemetry

        return Telemetry(
            service=self.service,
            forced_tracing=self.otel,
            metrics_at=self.metrics_at,
            metrics_public=self.metrics_public,
        )

    def lines(self, started: TelemetryStarted | None) -> list[str]:
        """The banner's lines for what started: where spans go, where metrics are scraped."""
        lines: list[str] = []
        if started is not None and started.tracing is not None:
            line = started.tracing
            if self.client_trace is not None:
                line += f"; a client's traceparent {CLIENT_TRACE_SAID[self.client_trace]} (--client-trace)"
            lines.append(line)
        if started is not None and started.metrics_url is not None:
            url = started.metrics_url
            lines.append(f"metrics: {url} (Prometheus; `astrid status --metrics {url}`)")
        return lines
