"""`astrid status [--metrics URL]`: a short live summary of a running server, from its `/metrics`.

It scrapes the endpoint twice, `--interval` seconds apart: the rates and the
latency quantiles are over that interval (the quantiles since the server
started when no request came in it), the totals since the server started.
Quantiles come from the histogram's buckets, interpolated within a bucket
(as Prometheus's `histogram_quantile` does), so they are estimates.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

import click

from astrid.cli.config_file import explicit_config_file, load_config
from astrid.cli.errors import UserError
from astrid.cli.main import cli
from astrid.cli.observe import DEFAULT_METRICS_PORT
from astrid.cli.output import counted

MAX_BYTES = 8 << 20


@dataclass
class Scrape:
    """The samples of one scrape: metric sample name -> [(labels, value)]."""

    at: float
    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=lambda: defaultdict(list))

    def total(self, name: str, **match: str) -> float | None:
        found = self.samples.get(name)
        if not found:
            return None
        return sum(value for labels, value in found if all(labels.get(k) == v for k, v in match.items()))

    def by(self, name: str, label: str) -> dict[str, float]:
        counts: dict[str, float] = defaultdict(float)
        for labels, value in self.samples.get(name, ()):
            counts[labels.get(label, "")] += value
        return dict(counts)

    def buckets(self, name: str) -> dict[float, float]:
        """A histogram's cumulative buckets, summed over its other labels: upper bound -> count."""
        counts: dict[float, float] = defaultdict(float)
        for labels, value in self.samples.get(name + "_bucket", ()):
            counts[float(labels["le"])] += value
        return dict(counts)


def scrape(url: str) -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read(MAX_BYTES).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UserError(
            f"cannot read metrics at {url} ({reason}): is `astrid mcp serve --metrics [HOST:]PORT` running? "
            "Pass its URL with --metrics URL"
        ) from None
    result = Scrape(time.time())
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                result.samples[sample.name].append((dict(sample.labels), float(sample.value)))
    except ValueError as exc:
        raise UserError(f"{url} does not serve Prometheus metrics ({exc})") from None
    if not any(name.startswith("astrid_") for name in result.samples):
        raise UserError(f"{url} serves metrics, but none of astrid's: is it astrid's --metrics listener?")
    return result


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The q-quantile of cumulative `buckets` (upper bound -> count), interpolated within its bucket."""
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if count >= rank:
            if upper == float("inf"):
                return lower
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = upper, count
    return lower


def metrics_url(given: str | None) -> str:
    """The endpoint to read: --metrics (a URL, HOST:PORT or PORT), else the config file's, else the default port."""
    if given is None:
        try:
            config = load_config(explicit_config_file())
        except UserError:
            config = None
        given = str(config.values["metrics_address"]) if config and "metrics_address" in config.values else None
    if given is None:
        return f"http://127.0.0.1:{DEFAULT_METRICS_PORT}/metrics"
    if "://" not in given:
        from astrid.cli.observe import parse_metrics_address

        host, port = parse_metrics_address(given)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/metrics"
    return given if given.rstrip("/").endswith("/metrics") else given.rstrip("/") + "/metrics"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _count(value: float | None) -> str:
    return "0" if value is None else f"{value:,.0f}"


def _uptime(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def summary(first: Scrape, second: Scrape, url: str) -> list[str]:
    """The lines `astrid status` prints, from two scrapes."""
    span = max(second.at - first.at, 1e-6)
    lines = [f"astrid at {url}"]
    started = second.total("process_start_time_seconds")
    if started:
        lines[0] += f", up {_uptime(second.at - started)}"

    capsules = second.total("astrid_capsules_loaded")
    live = second.total("astrid_sandboxes_live")
    quarantined = second.total("astrid_sandboxes_quarantined")
    if capsules is not None:
        lines.append(
            f"capsules:   {_count(capsules)} loaded, {counted(live or 0.0, 'sandbox', 'sandboxes')} live, "
            f"{_count(quarantined)} quarantined"
        )
    hosts = second.by("astrid_nats_hosts", "role")
    if hosts:
        roles = ", ".join(f"{role} {count:.0f}" for role, count in sorted(hosts.items()))
        lines.append(f"NATS hosts: {sum(hosts.values()):.0f} others alive ({roles})")

    principals = second.total("astrid_principals")
    sessions = second.total("astrid_sessions")
    streams = second.total("astrid_listen_streams")
    lines.append(
        f"principals: {_count(principals)} served, {counted(sessions or 0.0, 'session')} open, "
        f"{counted(streams or 0.0, 'listen stream')} open"
    )

    total_now = second.total("astrid_requests_total") or 0.0
    total_before = first.total("astrid_requests_total") or 0.0
    rate = (total_now - total_before) / span
    lines.append(f"requests:   {rate:.1f}/s over the last {span:.1f} s ({_count(total_now)} since start)")

    now_buckets = second.buckets("astrid_request_duration_seconds")
    before_buckets = first.buckets("astrid_request_duration_seconds")
    recent = {le: count - before_buckets.get(le, 0.0) for le, count in now_buckets.items()}
    if recent and max(recent.values(), default=0) > 0:
        window = f"last {span:.1f} s"
        buckets = recent
    else:
        window = "since start"
        buckets = now_buckets
    p50, p99 = quantile(0.5, buckets), quantile(0.99, buckets)
    if p50 is not None:
        lines.append(f"latency:    p50 {_ms(p50)}, p99 {_ms(p99)} ({window})")

    errors_now = _errors(second)
    errors_before = _errors(first)
    error_rate = (sum(errors_now.values()) - sum(errors_before.values())) / span
    detail = ", ".join(f"{code}: {count:.0f}" for code, count in sorted(errors_now.items(), key=lambda i: -i[1])[:4])
    lines.append(
        f"errors:     {error_rate:.1f}/s over the last {span:.1f} s; {sum(errors_now.values()):,.0f} since start"
        + (f" ({detail})" if detail else "")
    )

    calls_now = second.total("astrid_guest_calls_total")
    if calls_now is not None:
        calls_rate = (calls_now - (first.total("astrid_guest_calls_total") or 0.0)) / span
        failed = sum(v for status, v in second.by("astrid_guest_calls_total", "status").items() if status != "ok")
        lines.append(f"guest calls: {calls_rate:.1f}/s; {_count(calls_now)} since start, {failed:,.0f} not ok")
    failures = second.total("astrid_http_auth_failures_total")
    if failures:
        lines.append(f"failed logins: {failures:,.0f} since start")
    return lines


def _errors(scrape_: Scrape) -> dict[str, float]:
    """Requests answered with an error, by status (the JSON-RPC code, or internal), since start."""
    return {
        status: count
        for status, count in scrape_.by("astrid_requests_total", "status").items()
        if status not in ("ok", "cancelled") and count
    }


@cli.command("status")
@click.option(
    "--metrics",
    "url",
    metavar="URL",
    default=None,
    help="The server's metrics endpoint: a URL, HOST:PORT or PORT [default: the config file's `metrics`, "
    f"else http://127.0.0.1:{DEFAULT_METRICS_PORT}/metrics].",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1, max=60),
    default=2.0,
    show_default=True,
    help="Seconds between the two scrapes the rates are taken over.",
)
def status(url: str | None, interval: float) -> None:
    """Print a short live summary of a running server: capsules, principals, request rate, p50/p99, errors.

    It reads the endpoint `astrid mcp serve --metrics [HOST:]PORT` serves.
    """
    endpoint = metrics_url(url)
    first = scrape(endpoint)
    time.sleep(interval)
    second = scrape(endpoint)
    for line in summary(first, second, endpoint):
        click.echo(line)
