"""Tracing and the /metrics listener of one serving process: started before it serves, closed after.

Tracing follows the standard OTEL_* variables (or is forced on); the metrics
listener binds where the operator asked, loopback only unless made public
(`astrid.host.telemetry.metrics` refuses the rest too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from astrid.host.errors import ServingError


@dataclass(frozen=True)
class TelemetryStarted:
    tracing: str | None  # where spans go, in a sentence; None: no tracing
    metrics_url: str | None  # the /metrics listener's URL; None: none


class Telemetry:
    def __init__(
        self, *, service: str, forced_tracing: bool, metrics_at: tuple[str, int] | None, metrics_public: bool
    ) -> None:
        self.service = service
        self.forced_tracing = forced_tracing
        self.metrics_at = metrics_at
        self.metrics_public = metrics_public
        self.provider: Any = None
        self.listener: Any = None

    def start(self) -> TelemetryStarted:
        """Tracing, then the metrics listener. ServingError when either cannot start (nothing is left running)."""
        from astrid.host.telemetry import setup
        from astrid.host.version import astrid_version

        try:
            self.provider = setup.configure(
                os.environ, forced=self.forced_tracing, service_name=self.service, service_version=astrid_version()
            )
        except setup.TelemetryConfigError as exc:
            raise ServingError(str(exc)) from None
        tracing = setup.describe(self.provider, os.environ) if self.provider is not None else None
        if self.metrics_at is not None:
            from astrid.host.telemetry import metrics

            try:
                self.listener = metrics.serve(*self.metrics_at, public=self.metrics_public)
            except OSError as exc:
                self.close()
                host, port = self.metrics_at
                raise ServingError(
                    f"metrics on {host}:{port}: cannot listen there ({exc.strerror or exc}); choose another port"
                ) from None
        return TelemetryStarted(tracing, self.listener.url if self.listener is not None else None)

    def close(self) -> None:
        """Flushes the spans still queued; closes the listener. Idempotent."""
        from astrid.host.telemetry import setup

        setup.shutdown()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
