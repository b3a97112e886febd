"""One user's MCP server on stdin/stdout: the runtime, the server, Ctrl-C and SIGTERM, telemetry.

    with StdioServing(config, resource_tools=False, client_trace="parent", on_stopping=say) as serving:
        started = serving.start_telemetry()                 # what to tell the operator
        serving.start(watch=True, on_ready=..., on_failed=...)
        interrupted = serving.run()                         # until end of input, or Ctrl-C

Ctrl-C ends the input as Ctrl-D does: the requests already read are answered,
then `run` returns (a second Ctrl-C exits at once). A first compile under way is
killed rather than waited for, at the Ctrl-C or, once the answers are written, at
the end of input (it is cached only when whole: the next start compiles again).
With `sigterm_stops` (the capsules run in `--workers` processes) SIGTERM stops
the same way, so whoever started the workers stops them in order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from astrid.host.mcp.server import AstridMcpServer
from astrid.host.mcp.stdio_wire import InputStop
from astrid.host.runtime import Runtime, RuntimeConfig
from astrid.host.serving.ready import Ready, when_ready
from astrid.host.serving.signals import first_ctrl_c_asks, sigterm_calls
from astrid.host.serving.telemetry import Telemetry, TelemetryStarted


class StdioServing:
    def __init__(
        self,
        config: RuntimeConfig,
        *,
        resource_tools: bool,
        client_trace: str,
        on_stopping: Callable[[int], None],
        telemetry: Telemetry | None = None,
        sigterm_stops: bool = False,
    ) -> None:
        self.runtime = Runtime(config)

        def stopping(pending: int) -> None:  # on the loop, once a stop ended the input
            self.runtime.stop_loading()  # the requests already read wait on no compile
            on_stopping(pending)

        self.stop = InputStop(on_stop=stopping)
        self.server = AstridMcpServer(
            self.runtime, limits=self.runtime.limits, resource_tools=resource_tools, client_trace=client_trace
        )
        self.telemetry = telemetry
        self.sigterm_stops = sigterm_stops
        self._signals = contextlib.ExitStack()

    def __enter__(self) -> StdioServing:
        self._signals.enter_context(first_ctrl_c_asks(self.stop.request))
        if self.sigterm_stops:
            sigterm_calls(self.stop.request)
        return self

    def start_telemetry(self) -> TelemetryStarted | None:
        return self.telemetry.start() if self.telemetry is not None else None

    def start(self, *, watch: bool, on_ready: Callable[[Ready], None], on_failed: Callable[[str], None]) -> None:
        """Load the capsules in the background (requests wait for them); `on_ready` once loaded."""
        self.runtime.start(background=True)
        when_ready(self.runtime, watch=watch, on_ready=on_ready, on_failed=on_failed)

    def run(self) -> bool:
        """Serve until end of input; True when it was stopped (Ctrl-C, SIGTERM) rather than ended."""
        import anyio

        try:
            anyio.run(self.server.run_stdio, self.stop)
        except KeyboardInterrupt:  # Ctrl-C again, while the last answers were awaited
            return True
        return self.stop.requested

    def __exit__(self, *exc: object) -> None:
        try:
            self.runtime.close()
            self.stop.close()
            if self.telemetry is not None:
                self.telemetry.close()
        finally:
            self._signals.close()
