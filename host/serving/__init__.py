"""Serving: what a long-running astrid process is, assembled in one place.

The composition root for processes: `stdio` and `http` build the runtime,
the MCP server and its transport; `workers` starts a private NATS server and
capsule-host processes for `--workers`; `capsule_host` runs capsules for an
MCP server elsewhere (`astrid host run`); `telemetry` starts tracing and the
metrics listener; `signals` turns Ctrl-C and SIGTERM into an orderly stop;
`ready` waits for the capsules and starts the watchers. Each is built from a
plain config and returns facts; the CLI parses options and prints (cli/).
Nothing else in the host imports this package.
"""
