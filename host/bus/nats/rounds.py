"""One published message's round across hosts: what the other hosts still owe, and the delivery
that waits for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from astrid.host.bus.memory import InMemoryDelivery
from astrid.host.telemetry import metrics


@dataclass
class Claim:
    host: str
    at: float


@dataclass
class Round:
    """The remote side of one published message: which hosts still owe a report."""

    waiting: set[str]
    expected: frozenset[str] = frozenset()  # the source-ids the live hosts said they run
    reached: set[str] = field(default_factory=set)  # what the reports said
    done: threading.Event = field(default_factory=threading.Event)
    groups: set[str] = field(default_factory=set)  # the queue groups still owing a report
    claims: dict[str, Claim] = field(default_factory=dict)  # group -> the replica running it
    retried: set[str] = field(default_factory=set)  # groups already published again (once each)
    started: float = field(default_factory=time.monotonic)
    resend: tuple[str, str, dict[str, str]] | None = None  # topic, payload, headers: for a retry
    ended: str | None = None  # how the round ended, once (for `--metrics`)
    when_done: list[Callable[[], None]] = field(default_factory=list)  # called once `done` is set

    def settle(self, how: str) -> bool:
        """Set done when nothing is owed any more (counted as ending `how`); True then."""
        if not self.waiting and not self.groups:
            self.done.set()
            self.end(how)
            callbacks, self.when_done = self.when_done, []
            for callback in callbacks:
                callback()
            return True
        return False

    def on_done(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, when `done` is set (now when it is)."""
        lock, called = threading.Lock(), [False]

        def once() -> None:
            with lock:
                if called[0]:
                    return
                called[0] = True
            callback()

        self.when_done.append(once)
        if self.done.is_set():  # set meanwhile: `settle` may have taken the list before us
            once()

    def end(self, how: str) -> None:
        """Count how the round ended: the first ending counts (reported, host_gone, window, no_hosts)."""
        if self.ended is None:
            self.ended = how
            metrics.nats_round(how)


class ClusterDelivery:
    """A message's deliveries here and on the other hosts it reached."""

    def __init__(self, local: InMemoryDelivery, tracked: Round | None) -> None:
        self.local = local
        self.message = local.message
        self._tracked = tracked

    @property
    def reached(self) -> frozenset[str]:
        """Here: the handlers it was given to. Elsewhere, known at once: the capsules the
        live hosts run (their heartbeats say which), and whatever their reports add."""
        if self._tracked is None:
            return self.local.reached
        return self.local.reached | self._tracked.expected | frozenset(self._tracked.reached)

    @property
    def receivers(self) -> int:
        return self.local.receivers + len(self.reached - self.local.reached)

    @property
    def finished(self) -> bool:
        return self.local.finished and (self._tracked is None or self._tracked.done.is_set())

    def when_finished(self, callback: Callable[[], None]) -> None:
        """As `InMemoryDelivery.when_finished`, once the other hosts reported too."""
        tracked = self._tracked
        if tracked is None:
            self.local.when_finished(callback)
        else:
            self.local.when_finished(lambda: tracked.on_done(callback))

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout_s)
        if not self.local.wait(timeout_s):
            return False
        if self._tracked is None:
            return True
        done = self._tracked.done.wait(max(0.0, deadline - time.monotonic()))
        if not done:
            self._tracked.end("window")
        return done
