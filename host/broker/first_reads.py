"""First reads: a subscription to a URI nobody has read yet makes the host read it once, on the
subscriber's behalf, so that the files its read looks at are watched (docs/contract/subscriptions.md §11.2).

The host learns which files a URI depends on only from a read of it (the
kernel's `file_tracking`): a client that subscribes without reading first
would otherwise never hear a change. So when a principal subscribes to a URI
that no read of its owner has answered for that principal yet
(`AnsweredReads`), `FirstReads.start` queues one read of it:

- as the subscribing principal, through the broker's one read path
  (`Reads.start`: its routing, window and limits; a declared-fresh answer is
  kept for that principal like any other);
- its result goes to no one; a failure is only logged (the read recorded
  what it looked at all the same);
- once per (principal, uri, owner) at a time (a second subscription waits for
  the same read), never for one whose owner answered a read already (a
  rebuilt owner is another source-id: it learns again);
- bounded: `BROKER_TUNING.first_read_workers` reads at once over all
  principals, at most `first_reads_queued` waiting, and per principal no more
  than it may hold subscriptions; beyond that a subscription gets no first read
  (said at most once a minute) and hears changes once something reads the URI;
- fair: the principals waiting take turns, one read each, so one that
  subscribed to hundreds of URIs delays another's by one read at most.

`wait(principal, uris, timeout_s)` lets the subscription's answer wait for its
first reads, so a change the client makes after the answer is announced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable

from astrid.host.broker.answered import AnsweredReads, Key
from astrid.host.broker.reads import Reads
from astrid.host.bus import Principal
from astrid.host.contract.outcomes import FailureCode, ReadOutcome
from astrid.host.log_throttle import LogThrottle
from astrid.host.tuning import BROKER_TUNING

log = logging.getLogger("astrid.host.broker")


class FirstReads:
    def __init__(
        self,
        reads: Reads,
        answered: AnsweredReads,
        *,
        per_principal: int,
        workers: int = BROKER_TUNING.first_read_workers,
        queued: int = BROKER_TUNING.first_reads_queued,
    ) -> None:
        self.reads = reads
        self.answered = answered
        self.per_principal = per_principal
        self.workers = workers
        self.queued = queued
        self._lock = threading.Condition()
        self._queues: OrderedDict[Principal, deque[Key]] = OrderedDict()  # whose turn is next first
        self._waiting = 0  # keys in all the queues
        self._pending: dict[Key, threading.Event] = {}  # queued or being read; set when done
        self._by_principal: dict[Principal, int] = {}  # queued or being read, per principal
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._full_lines = LogThrottle(BROKER_TUNING.flood_line_every_s)
        self.done = 0  # first reads finished (tests read it)
        self.dropped = 0  # first reads not made: the queue was full

    def start(self, principal: Principal, uri: str, owner: str) -> None:
        """`principal` subscribed to `uri`, served by `owner`: read it once if no read of that owner is known."""
        key = (principal, uri, owner)
        if key in self.answered:
            return
        with self._lock:
            if self._closed or key in self._pending:
                return
            mine = self._by_principal.get(principal, 0)
            if self._waiting >= self.queued or mine >= self.per_principal:
                self.dropped += 1
                full = True
            else:
                full = False
                self._pending[key] = threading.Event()
                self._by_principal[principal] = mine + 1
                self._queues.setdefault(principal, deque()).append(key)
                self._waiting += 1
                self._lock.notify()
                if len(self._threads) < self.workers:
                    self._spawn()
        if full:
            skipped = self._full_lines.ready()
            if skipped is not None:
                log.warning(
                    "too many subscriptions wait for a first read (%d at most, %d per user): %s for %s gets none, "
                    "so its changes are announced once something reads it (%d more since the last such line)",
                    self.queued,
                    self.per_principal,
                    uri,
                    principal,
                    skipped,
                )

    def wait(self, principal: Principal, uris: Iterable[str], timeout_s: float) -> bool:
        """Wait, at most `timeout_s` in all, for the first reads of `principal`'s `uris` under way; True: none left."""
        wanted = set(uris)
        with self._lock:
            events = [event for (who, uri, _), event in self._pending.items() if who == principal and uri in wanted]
        deadline = time.monotonic() + timeout_s
        return all(event.wait(max(0.0, deadline - time.monotonic())) for event in events)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._queues.clear()
            self._waiting = 0
            self._lock.notify_all()

    def _spawn(self) -> None:
        """The caller holds the lock."""
        thread = threading.Thread(target=self._work, name=f"astrid-first-read-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                key = self._next()
            try:
                self._read(*key)
            except Exception:  # a worker outlives any one read: the others still wait for theirs
                log.exception("the first read of %s for %s failed", key[1], key[0])
            finally:
                with self._lock:
                    event = self._pending.pop(key, None)
                    principal = key[0]
                    left = self._by_principal.pop(principal, 1) - 1
                    if left:
                        self._by_principal[principal] = left
                    self.done += 1
                if event is not None:
                    event.set()

    def _next(self) -> Key:
        """The next read, from the principal whose turn it is (then it goes last). The caller holds the lock."""
        principal, queue = next(iter(self._queues.items()))
        key = queue.popleft()
        self._waiting -= 1
        if queue:
            self._queues.move_to_end(principal)
        else:
            del self._queues[principal]
        return key

    def _read(self, principal: Principal, uri: str, owner: str) -> None:
        if (principal, uri, owner) in self.answered:  # a client read it while this one waited
            return

        outcome = self.reads.start(principal, uri, failed=_broker_failed, done=_nothing).result()
        if outcome.error is not None:
            log.info(
                "the first read of %s for %s (to watch what it depends on) ended %s: %s",
                uri,
                principal,
                outcome.error.code.value,
                outcome.error.message,
            )
        else:
            log.debug("the first read of %s for %s done: what it depends on is watched", uri, principal)


def _nothing(outcome: ReadOutcome) -> None:
    """A first read's result goes to no one."""


def _broker_failed(exc: Exception) -> ReadOutcome:
    return ReadOutcome.fail(FailureCode.INTERNAL, f"the broker failed: {exc}")
