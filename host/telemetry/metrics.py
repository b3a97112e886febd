"""Prometheus metrics: what a shared server's operator scrapes (`--metrics [HOST:]PORT`).

Off by default: `on` is a module-level flag every recording function checks
first, so a server without `--metrics` pays one check per call site and
never imports prometheus_client. On (`enable()`), the metrics live on a
registry of their own (with the process collector: CPU, memory, open
files, start time), served by `serve()` on a listener of its own, bounded in
connections, threads and time (`listener.py`): a flood of it never takes the
descriptors MCP clients need.

Low cardinality by design: labels are methods of the MCP specification
(anything else is `other`), JSON-RPC status codes the server itself
answers, capsule names (the operator's own capsules, at most
`TELEMETRY_TUNING.capsule_labels`, then `_other`), capability kinds and
outcomes, and, for the session and stream gauges, at most
`TELEMETRY_TUNING.top_principals` principal names (those with the most open,
the rest summed as `_other`). No URI, path, token or payload is ever a label.

Counters and histograms are recorded where things happen (the MCP layer,
the broker, the kernel, the bus); gauges are read when scraped, from the
sources the composition root and the transports register (`watch`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from astrid.host.addresses import is_loopback
from astrid.host.tuning import TELEMETRY_TUNING

if TYPE_CHECKING:
    from astrid.host.telemetry.listener import ListenerLimits

# The flag every call site checks first (read as `metrics.on`).
on: bool = False

OTHER = "_other"

# The request methods of the MCP specification; any other is counted as `other`.
METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "subscriptions/listen",
        "completion/complete",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "logging/setLevel",
        "tasks/get",
        "tasks/list",
        "tasks/cancel",
        "tasks/result",
    }
)
# A stream, not a request: counted, but its duration is no latency.
STREAMS = frozenset({"subscriptions/listen"})

REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
GUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)

# Read when scraped: name -> (help, label names).
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "astrid_capsules_loaded": ("Capsules loaded in this process", ()),
    "astrid_sandboxes_live": ("Live sandboxes (one wasmtime Store per capsule and principal)", ()),
    "astrid_sandboxes_quarantined": ("Sandboxes in quarantine now (per capsule and principal)", ()),
    "astrid_principals": ("Principals this server has served since it started", ()),
    "astrid_sessions": ("Open MCP sessions (2025-11-25, HTTP), by principal (top N, the rest _other)", ("principal",)),
    "astrid_listen_streams": ("Open listen streams (2026-07-28), by principal (top N, rest _other)", ("principal",)),
    "astrid_nats_hosts": ("Other astrid hosts alive on the NATS bus, by role", ("role",)),
}

_lock = threading.Lock()
_registry: Any = None
_m: dict[str, Any] = {}
_capsules: set[str] = set()
_sources: dict[str, list[Callable[[], Iterable[tuple[tuple[str, ...], float]]]]] = {}


def enable() -> Any:
    """Record from now on; the registry (`serve` serves it). Idempotent."""
    global _registry, on
    with _lock:
        if _registry is not None:
            on = True
            return _registry
        from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, disable_created_metrics

        disable_created_metrics()  # no `_created` series beside every counter: half the series, no use to a scraper
        registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=registry)
        _m.update(
            requests=Counter(
                "astrid_requests",
                "MCP requests answered, by method and status (ok or the JSON-RPC error code)",
                ("method", "status"),
                registry=registry,
            ),
            latency=Histogram(
                "astrid_request_duration_seconds",
                "Time to answer an MCP request, by method",
                ("method",),
                buckets=REQUEST_BUCKETS,
                registry=registry,
            ),
            auth_failures=Counter(
                "astrid_http_auth_failures", "HTTP requests refused for their credential (401)", registry=registry
            ),
            guest_calls=Counter(
                "astrid_guest_calls",
                "Capsule calls, by capsule and how they ended (ok, timed out, trapped, failed, quarantined)",
                ("capsule", "status"),
                registry=registry,
            ),
            guest_seconds=Histogram(
                "astrid_guest_call_seconds",
                "Time in one capsule call (instantiation included), by capsule",
                ("capsule",),
                buckets=GUEST_BUCKETS,
                registry=registry,
            ),
            instantiations=Counter(
                "astrid_sandbox_instantiations",
                "Sandboxes instantiated for a call (not prewarmed), by capsule",
                ("capsule",),
                registry=registry,
            ),
            quarantines=Counter(
                "astrid_quarantines",
                "Quarantines started (a sandbox failed 5 times in a row), by capsule",
                ("capsule",),
                registry=registry,
            ),
            cache=Counter(
                "astrid_cache_lookups",
                "Broker cache lookups: snapshot (describe) and fresh (declared-fresh reads), hit or miss",
                ("cache", "result"),
                registry=registry,
            ),
            capabilities=Counter(
                "astrid_capability_calls",
                "Capability calls by capsules, by kind (fs, kv, http) and outcome (ok or the error code)",
                ("kind", "outcome"),
                registry=registry,
            ),
            rounds=Counter(
                "astrid_broker_rounds",
                "Broker rounds (describe, templates, read), by how they ended "
                "(finished: every capsule done; window: the window ended first)",
                ("kind", "end"),
                registry=registry,
            ),
            nats_rounds=Counter(
                "astrid_nats_rounds",
                "Rounds across NATS hosts, by how they ended (reported: every host said "
                "done; host_gone: a host left or went silent; window: the waiter gave up; no_hosts)",
                ("end",),
                registry=registry,
            ),
        )
        registry.register(_Gauges())
        _registry = registry
        on = True
        return registry


def disable() -> None:
    """Stop recording (the registry and its values stay, for a later `enable`)."""
    global on
    on = False


def registry() -> Any:
    return _registry


# -- recording (each a flag check while off) -----------------------------------------------


def request(method: str, status: str, seconds: float) -> None:
    if not on:
        return
    method = method if method in METHODS else "other"
    _m["requests"].labels(method, status).inc()
    if method not in STREAMS:
        _m["latency"].labels(method).observe(seconds)


def auth_failure() -> None:
    if on:
        _m["auth_failures"].inc()


def guest_call(capsule: str, status: str, seconds: float | None) -> None:
    if not on:
        return
    capsule = _capsule(capsule)
    _m["guest_calls"].labels(capsule, status).inc()
    if seconds is not None:
        _m["guest_seconds"].labels(capsule).observe(seconds)


def instantiated(capsule: str) -> None:
    if on:
        _m["instantiations"].labels(_capsule(capsule)).inc()


def quarantined(capsule: str) -> None:
    if on:
        _m["quarantines"].labels(_capsule(capsule)).inc()


def cache(name: str, hit: bool) -> None:
    if on:
        _m["cache"].labels(name, "hit" if hit else "miss").inc()


def capability(kind: str, outcome: str) -> None:
    if on:
        _m["capabilities"].labels(kind, outcome).inc()


def broker_round(kind: str, finished: bool) -> None:
    if on:
        _m["rounds"].labels(kind, "finished" if finished else "window").inc()


def nats_round(end: str) -> None:
    if on:
        _m["nats_rounds"].labels(end).inc()


def _capsule(name: str) -> str:
    """A capsule name as a label: the first `TELEMETRY_TUNING.capsule_labels` names seen, then `_other`."""
    if name in _capsules:
        return name
    with _lock:
        if len(_capsules) < TELEMETRY_TUNING.capsule_labels:
            _capsules.add(name)
            return name
    return OTHER


# -- gauges, read when scraped ------------------------------------------------------------


def watch(name: str, source: Callable[[], Iterable[tuple[tuple[str, ...], float]]]) -> Callable[[], None]:
    """Read gauge `name` (one of GAUGES) from `source` at every scrape: (label values, value) pairs,
    summed over every source of that gauge. Returns the call that stops watching it."""
    if name not in GAUGES:
        raise KeyError(f"unknown gauge {name!r}: declare it in GAUGES")
    with _lock:
        _sources.setdefault(name, []).append(source)

    def forget() -> None:
        with _lock:
            sources = _sources.get(name, [])
            if source in sources:
                sources.remove(source)

    return forget


def one(value: Callable[[], float]) -> Callable[[], Iterable[tuple[tuple[str, ...], float]]]:
    """A source of an unlabelled gauge."""
    return lambda: [((), float(value()))]


def top_principals(
    counts: Mapping[str, int], top: int = TELEMETRY_TUNING.top_principals
) -> list[tuple[tuple[str, ...], float]]:
    """Counts per principal as gauge samples: the `top` largest by name, the rest summed as `_other`."""
    ranked = sorted(((n, p) for p, n in counts.items() if n > 0), key=lambda item: (-item[0], item[1]))
    samples: list[tuple[tuple[str, ...], float]] = [((principal,), float(n)) for n, principal in ranked[:top]]
    rest = sum(n for n, _ in ranked[top:])
    if rest:
        samples.append(((OTHER,), float(rest)))
    return samples


class _Gauges:
    """The registry's view of the watched sources (a prometheus_client custom collector)."""

    def describe(self) -> list[Any]:
        return []  # read only when collected: the families depend on the sources

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        with _lock:
            watched = {name: list(sources) for name, sources in _sources.items() if sources}
        for name, sources in watched.items():
            text, labels = GAUGES[name]
            family = GaugeMetricFamily(name, text, labels=list(labels))
            totals: dict[tuple[str, ...], float] = {}
            for source in sources:
                try:
                    for values, value in source():
                        totals[values] = totals.get(values, 0.0) + value
                except Exception:  # a source that cannot answer now leaves its gauge out of this scrape
                    continue
            for values, value in sorted(totals.items()):
                family.add_metric(list(values), value)
            yield family


# -- the listener ---------------------------------------------------------------------------


class MetricsListener:
    """`/metrics` (any path, in fact) on its own port: prometheus-client's WSGI app, served by a listener
    bounded in connections, threads and time (`listener.py`, `TELEMETRY_TUNING.metrics_*`)."""

    def __init__(self, host: str, port: int, *, public: bool = False) -> None:
        if not is_loopback(host) and not public:
            raise PermissionError(
                f"{host} is not a loopback address: metrics name capsules and principals; "
                "bind 127.0.0.1 (scrape through a local agent or a proxy), or allow it explicitly"
            )
        from prometheus_client import make_wsgi_app

        from astrid.host.telemetry.listener import BoundedListener

        registry = enable()
        self.server = BoundedListener(host.strip("[]"), port, make_wsgi_app(registry), limits=limits(), name="metrics")
        self.host = host
        self.port = self.server.port
        shown = host if ":" not in host.strip("[]") else f"[{host.strip('[]')}]"
        self.url = f"http://{shown}:{self.port}/metrics"

    def close(self) -> None:
        self.server.close()


def limits() -> ListenerLimits:
    """The metrics listener's bounds, from `TELEMETRY_TUNING`."""
    from astrid.host.telemetry.listener import ListenerLimits

    tuning = TELEMETRY_TUNING
    return ListenerLimits(
        connections=tuning.metrics_connections,
        header_timeout_s=tuning.metrics_header_timeout_s,
        head_bytes=tuning.metrics_head_bytes,
        answer_timeout_s=tuning.metrics_answer_timeout_s,
        threads=tuning.metrics_threads,
        sweep_every_s=tuning.metrics_sweep_every_s,
    )


def serve(host: str, port: int, *, public: bool = False) -> MetricsListener:
    """Start recording and serve the registry at http://HOST:PORT/metrics.

    A non-loopback `host` is refused (`PermissionError`) unless `public`.
    """
    return MetricsListener(host, port, public=public)
