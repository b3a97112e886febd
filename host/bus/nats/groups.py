"""Replicas: one NATS queue group per capsule run here, so each request reaches one replica of it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from astrid.host.bus.nats.connection import Connection
from astrid.host.bus.nats.subjects import subject_for


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
            subscriptions = []
            for pattern in self.patterns:

                async def through_group(msg: Any, group: str = group) -> None:
                    await self._on_message(msg, group)

                subscriptions.append(await client.subscribe(subject_for(pattern), queue=group, cb=through_group))
            self._subscriptions[group] = subscriptions
        gone = set(self._subscriptions) - wanted
        # the group set changes before the old subscriptions go: a request in between may reach a
        # capsule twice (the broker keeps one reply), never not at all
        self.grouped = frozenset(wanted)
        for group in gone:
            for subscription in self._subscriptions.pop(group):
                try:
                    await subscription.unsubscribe()
                except Exception:
                    pass
        await client.flush()
