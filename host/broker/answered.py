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
from astrid.host.tuning import BROKER_TUNING

Key = tuple[Principal, str, str]  # (principal, uri, the owner's source-id)


class AnsweredReads:
    """Which (principal, uri, owner) an owner has answered a read of: the host watches their files already.

    Bounded like the kernel's record of what reads touched (`KERNEL_TUNING.tracked_reads`): the least
    recently read go first, and a URI forgotten here is read once more on its next subscription."""

    def __init__(self, max_entries: int = BROKER_TUNING.answered_reads_kept) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._seen: OrderedDict[Key, None] = OrderedDict()

    def note(self, principal: Principal, uri: str, outcome: ReadOutcome) -> None:
        """A read ended: when its owner answered (even with a failure), it looked at what it depends on."""
        if outcome.source_id is None:
            return
        key = (principal, uri, outcome.source_id)
        with self._lock:
            self._seen[key] = None
            self._seen.move_to_end(key)
            while len(self._seen) > self.max_entries:
                self._seen.popitem(last=False)

    def __contains__(self, key: Key) -> bool:
        with self._lock:
            return key in self._seen
