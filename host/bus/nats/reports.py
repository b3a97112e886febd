"""The receiving side of a tracked message: tell its publisher that this host took it (a claim,
for a queue group) and, once this host's handlers have finished, which participants it reached."""

from __future__ import annotations

import json
import threading
from typing import Any

from astrid.host.bus.memory import InMemoryDelivery
from astrid.host.bus.nats.connection import Connection
from astrid.host.bus.nats.envelope import H_HOST
from astrid.host.bus.topics import ClusterTopics
from astrid.host.telemetry import tracing
from astrid.host.tuning import NATS_TUNING


class Reports:
    """Claims and done reports, sent on the done topic of the host that published the message."""

    def __init__(self, connection: Connection, cluster: ClusterTopics, host_id: str) -> None:
        self._connection = connection
        self._cluster = cluster
        self._host_id = host_id

    async def claim(self, origin: str, message_id: str, group: str) -> None:
        """Claim it first: the asker retries it if we die mid-way."""
        claim = json.dumps({"message": message_id, "host": self._host_id, "group": group, "claim": True})
        await self._send(origin, claim)

    def when_done(
        self, delivery: InMemoryDelivery, origin: str, message_id: str, group: str | None, received: Any
    ) -> None:
        # One thread per message, waiting for this host's handlers. Reporting straight from the last
        # handler's finish was tried: the asker then once took the done report before the owner's
        # reply and called the owner silent (a CI run). Open: order the report after the reply.
        threading.Thread(
            target=self._report,
            args=(delivery, origin, message_id, group, received),
            name="astrid-nats-report",
            daemon=True,
        ).start()

    def _report(
        self,
        delivery: InMemoryDelivery,
        origin: str,
        message_id: str,
        group: str | None = None,
        received: Any = tracing.NO_SPAN,
    ) -> None:
        finished = delivery.wait(NATS_TUNING.report_wait_s)
        if received:  # the hop's span ends when this host's handlers have
            received.set_attributes({"astrid.nats.reached": len(delivery.reached), "astrid.nats.finished": finished})
            received.end()
        report = json.dumps(
            {"message": message_id, "host": self._host_id, "reached": sorted(delivery.reached), "group": group}
        )
        if self._connection.closed:
            return  # a handler that outlived the connection: nobody to tell
        try:
            self._connection.submit(self._send(origin, report))
        except RuntimeError:  # the loop closed meanwhile
            pass

    async def _send(self, origin: str, report: str) -> None:
        await self._connection.send(self._cluster.done_prefix + origin, report, {H_HOST: self._host_id})
