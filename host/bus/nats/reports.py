"""The receiving side of a tracked message: tell its publisher that this host took it (a claim,
for a queue group) and, once this host's handlers have finished, which participants it reached."""

from __future__ import annotations

import json
from typing import Any

from astrid.host.bus.memory import InMemoryDelivery
from astrid.host.bus.nats.connection import Connection
from astrid.host.bus.nats.envelope import H_HOST
from astrid.host.bus.topics import ClusterTopics
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
        """Report once this host's handlers have finished, or after `NATS_TUNING.report_wait_s` at the latest (call
        on the loop). No thread waits per message: a timer on the loop and a callback on the delivery
        race, and both are dropped once the report went.

        The report is handed to the loop after the last handler returned, so after every reply
        those handlers published: it goes out behind them (docs/nats.md#report-order)."""
        sent = False

        def report() -> None:  # on the loop: the first of the two reports
            nonlocal sent
            if not sent:
                sent = True
                timer.cancel()
                self._report(delivery, origin, message_id, group, received)

        def finished() -> None:  # on the thread that finished the last handler (here, when none ran)
            try:
                loop.call_soon_threadsafe(report)
            except RuntimeError:  # the loop closed meanwhile: only the hop's span is left to end
                report()

        loop = self._connection.loop
        timer = loop.call_later(NATS_TUNING.report_wait_s, report)
        delivery.when_finished(finished)

    def _report(
        self, delivery: InMemoryDelivery, origin: str, message_id: str, group: str | None, received: Any
    ) -> None:
        if received:  # the hop's span ends when this host's handlers have
            received.set_attributes(
                {"astrid.nats.reached": len(delivery.reached), "astrid.nats.finished": delivery.finished}
            )
            received.end()
        if self._connection.closed:
            return  # a handler that outlived the connection: nobody to tell
        report = json.dumps(
            {"message": message_id, "host": self._host_id, "reached": sorted(delivery.reached), "group": group}
        )
        self._connection.loop.create_task(self._send(origin, report))

    async def _send(self, origin: str, report: str) -> None:
        await self._connection.send(self._cluster.done_prefix + origin, report, {H_HOST: self._host_id})
