"""Replicas: one NATS queue group per capsule run here, so each request reaches one replica of it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from astrid.host.bus.nats.connection import Connection
from astrid.host.bus.nats.subjects import subject_for

log = logging.getLogger(__name__)


class QueueGroups:
    """This host's queue-group subscriptions to the requests (`patterns`), one group per capsule."""

    def __init__(
        self,
        connection: Connection,
        patterns: Sequence[str],
        on_message: Callable[[Any, str], Awaitable[None]],
    ) -> None:
        self._connection = connection
        self.patterns = tuple(patterns)
        self._on_message = on_message  # (message, the group it came through)
        self._subscriptions: dict[str, list[Any]] = {}  # group (source-id) -> its NATS subscriptions
        self.grouped: frozenset[str] = frozenset()

    async def sync(self, wanted: set[str]) -> None:
        """One queue group per capsule run here, named by its source-id (name and build digest)."""
        if self._connection.closed:
            wanted = set()  # leaving: out of every group, never back in
        client = self._connection.client
        for group in sorted(wanted - self._subscriptions.keys()):
            self._subscriptions[group] = await self._join(client, group)
        gone = set(self._subscriptions) - wanted
        # the group set changes before the old subscriptions go: a request in between may reach a
        # capsule twice (the broker keeps one reply), never not at all
        self.grouped = frozenset(wanted)
        for group in gone:
            await _leave(self._subscriptions.pop(group))
        await client.flush()

    async def _join(self, client: Any, group: str) -> list[Any]:
        """The group's subscriptions, one per pattern; none left behind when one fails (a
        subscription nobody records would take its share of the group's requests for good)."""
        subscriptions: list[Any] = []

        async def through_group(msg: Any) -> None:
            await self._on_message(msg, group)

        try:
            for pattern in self.patterns:
                subscriptions.append(await client.subscribe(subject_for(pattern), queue=group, cb=through_group))
        except BaseException:
            await _leave(subscriptions)
            raise
        return subscriptions


async def _leave(subscriptions: list[Any]) -> None:
    """Unsubscribe each (one that fails is gone with the connection anyway)."""
    for subscription in subscriptions:
        try:
            await subscription.unsubscribe()
        except Exception:
            log.debug("a queue-group subscription did not unsubscribe (gone with its connection)", exc_info=True)
