"""Which URIs an owner has answered a read of, per principal: the reads the host learned a URI's files from.

A resource read that reached its owner (even one that failed there) recorded
the files it looked at (the kernel's `file_tracking`), so a change to one is
announced. `first_reads` asks this before it reads a subscribed URI on the
subscriber's behalf: no read for a URI whose files are known already.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from astrid.host.bus import Principal
from astrid.host.contract.outcomes import ReadOutcome
from astrid.host.tuning import KERNEL_TUNING

Key = tuple[Principal, str, str]  # (principal, uri, the owner's source-id)


class AnsweredReads:
    """Which (principal, uri, owner) an owner has answered a read of: the host watches their files already.

    Bounded as the kernel's record of what reads touched is (`KERNEL_TUNING.tracked_reads_per_sandbox`
    per (owner, principal), `tracked_reads` in all), the least recently read first: what is kept here is
    then still kept there, and a URI forgotten here is read once more on its next subscription."""

    def __init__(
        self,
        *,
        per_sandbox: int = KERNEL_TUNING.tracked_reads_per_sandbox,
        max_entries: int = KERNEL_TUNING.tracked_reads,
    ) -> None:
        self.per_sandbox = per_sandbox
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._seen: OrderedDict[Key, None] = OrderedDict()  # least recently read first
        self._sandboxes: dict[tuple[Principal, str], OrderedDict[Key, None]] = {}

    def note(self, principal: Principal, uri: str, outcome: ReadOutcome) -> None:
        """A read ended: when its owner answered (even with a failure), it looked at what it depends on."""
        if outcome.source_id is None:
            return
        key = (principal, uri, outcome.source_id)
        with self._lock:
            self._seen[key] = None
            self._seen.move_to_end(key)
            sandbox = self._sandboxes.setdefault((principal, outcome.source_id), OrderedDict())
            sandbox[key] = None
            sandbox.move_to_end(key)
            while len(sandbox) > self.per_sandbox:
                self._drop(next(iter(sandbox)))
            while len(self._seen) > self.max_entries:
                self._drop(next(iter(self._seen)))

    def __contains__(self, key: Key) -> bool:
        with self._lock:
            return key in self._seen

    def _drop(self, key: Key) -> None:
        """The caller holds the lock."""
        del self._seen[key]
        sandbox_key = (key[0], key[2])
        sandbox = self._sandboxes[sandbox_key]
        del sandbox[key]
        if not sandbox:
            del self._sandboxes[sandbox_key]
