"""The static replies of the capsules bound here, read by a broker beside the kernel (`contract.local_replies`).

`Kernel._bind_handlers` puts a capsule's static describe (templates) reply
here when its host handler could publish it (the manifest allows the reply
topic), and takes it out when the capsule is unloaded or rebuilt. A broker
that `attach`es reads them with no bus message per capsule; the host's bus
handlers then leave that broker's requests alone (`answers_on_bus`), so a
round never hears a capsule twice.

Each kind's replies are one immutable tuple, sorted by source-id and built
again only when the set changes: a round takes it without a lock, and the
broker keeps what it derived from it for as long as it is the same tuple.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import get_args

from astrid.host.bus import Message
from astrid.host.contract.local_replies import LocalKind, LocalReply

KINDS: tuple[LocalKind, ...] = get_args(LocalKind)


class StaticDirectory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_source: dict[str, Mapping[LocalKind, LocalReply]] = {}
        self._replies: dict[LocalKind, tuple[LocalReply, ...]] = dict.fromkeys(KINDS, ())
        self._consumers: frozenset[str] = frozenset()  # replaced whole: read without the lock

    def replies(self, kind: LocalKind) -> tuple[LocalReply, ...]:
        return self._replies[kind]

    def attach(self, consumer: str) -> None:
        with self._lock:
            self._consumers = self._consumers | {consumer}

    def detach(self, consumer: str) -> None:
        with self._lock:
            self._consumers = self._consumers - {consumer}

    def answers_on_bus(self, message: Message) -> bool:
        """Does a host handler answer this request on the bus (it is not from a broker reading here)?"""
        return message.source_id not in self._consumers

    def put(self, source_id: str, replies: Mapping[LocalKind, LocalReply], replacing: str | None = None) -> None:
        """The capsule `source_id` now has these static replies (none: it answers every round itself);
        a rebuild's replace its old build's (`replacing`) in the same step."""
        with self._lock:
            if replacing is not None:
                self._by_source.pop(replacing, None)
            if replies:
                self._by_source[source_id] = dict(replies)
            else:
                self._by_source.pop(source_id, None)
            self._rebuild()

    def drop(self, source_id: str) -> None:
        with self._lock:
            if self._by_source.pop(source_id, None) is not None:
                self._rebuild()

    def _rebuild(self) -> None:
        for kind in KINDS:
            self._replies[kind] = tuple(
                replies[kind] for _, replies in sorted(self._by_source.items()) if kind in replies
            )
