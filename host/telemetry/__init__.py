"""Observability: traces (OpenTelemetry), metrics (Prometheus) and structured logs.

A layer of its own that imports no other: the MCP layer, the broker, the
kernel and the bus import it to say what they do, and the composition root
and the CLI switch it on.

- `tracing`: spans, and the trace context carried across threads and hosts;
  off by default, and then every call is one check of a module-level flag
  (`tracing.on`): no span object is made, no context is looked up;
- `metrics`: counters, histograms and gauges on a registry of its own,
  served by `metrics.serve` on a listener of its own (`--metrics`); off by
  default, and then every call is one flag check;
- `listener`: that listener, a small HTTP server bounded in connections,
  threads and time (imported only when metrics are served);
- `setup`: the OpenTelemetry SDK and its OTLP exporter, from the standard
  `OTEL_*` variables (imported only when tracing is switched on);
- `logs`: one JSON object per line for log shippers (`--log-format json`).
"""
