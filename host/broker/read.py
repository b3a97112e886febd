"""One read, as the broker hands it out: already settled, its round in flight, or work left for a thread.

`Reads.start` never waits: it answers at once what it can (a refusal, a kept
declared-fresh copy), publishes the read request when it knows who serves
the URI, and else leaves the whole read to `finish`. Whoever holds the `Read`
then either

- drives it without a thread (the MCP server's event loop): `wait_s` until
  the round is over, woken by `notify` (a reply queued, every receiver
  finished) or the window's end; then `settled()` gives the outcome, or
  None when the rest (a describe round, a second read) must run on a
  thread with `finish()`;
- or blocks for it (`result()`: the CLI, a worker thread).

Both ways take the same steps, so they serve the same answer. Every read
ends in `done` exactly once (counting, logging, the read's span), and a
failure of the broker itself becomes an `internal` outcome, never an
exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from astrid.host.broker.read_round import Drain
from astrid.host.bus import Subscription
from astrid.host.contract.outcomes import ReadOutcome
from astrid.host.tuning import BROKER_TUNING

_T = TypeVar("_T")


class Read:
    def __init__(
        self,
        *,
        outcome: ReadOutcome | None = None,
        replies: Subscription | None = None,
        drain: Drain | None = None,
        settle: Callable[[], ReadOutcome | None] | None = None,
        rest: Callable[[], ReadOutcome] | None = None,
        failed: Callable[[Exception], ReadOutcome],
        done: Callable[[ReadOutcome], None],
    ) -> None:
        """`outcome`: settled already. Else `replies`/`drain` the round in flight (`drain` None: nothing
        to wait for), `settle` its outcome once over (None: `rest` decides), `rest` what a thread does
        (the whole read when no round was started). `failed` turns a broker failure into an outcome."""
        self._outcome = outcome
        self._replies = replies
        self._drain = drain
        self._settle = settle
        self._rest = rest
        self._failed = failed
        self._done = done
        self._ended = threading.Lock()  # `done` runs once, whichever path ends the read
        self._reported = False
        if outcome is not None:
            self._report(outcome)

    def wait_s(self) -> float | None:
        """None once the round is over (or there is none); else how long to wait at most before asking
        again, unless `notify` wakes the caller first."""
        drain = self._drain
        if self._outcome is not None or drain is None:
            return None
        try:
            if drain.settled():
                return None
        except Exception as exc:  # the bus failed under the drain: the read's outcome says so
            failure = self._failed(exc)
            self._drain = None
            self._settle = lambda: failure
            return None
        return max(0.0, drain.remaining_s())

    def notify(self, wake: Callable[[], None]) -> None:
        """Call `wake` when a reply arrives and when every receiver has finished (from their threads,
        or now: quick, never raising)."""
        if self._replies is not None:
            self._replies.notify(wake)
        if self._drain is not None:
            self._drain.delivery.when_finished(wake)

    def settled(self) -> ReadOutcome | None:
        """Once `wait_s` said over: the outcome, or None when `finish` (on a thread) goes on."""
        if self._outcome is None and self._settle is not None:
            self.close()
            settle, self._settle = self._settle, None
            self._outcome = self._guarded(settle)
            if self._outcome is not None:
                self._report(self._outcome)
        return self._outcome

    def finish(self) -> ReadOutcome:
        """The rest of a read `settled` left open, or all of one that started no round (blocks)."""
        if self._outcome is None:
            self.close()
            rest = self._rest
            assert rest is not None, "a read is settled, in flight, or has the rest left"
            self._outcome = self._guarded(rest)
            self._report(self._outcome)
        return self._outcome

    def result(self) -> ReadOutcome:
        """The outcome, waiting for it on this thread."""
        drain = self._drain
        if self._outcome is None and drain is not None:
            while self.wait_s() is not None:
                message = drain.replies.recv(min(drain.remaining_s(), BROKER_TUNING.read_slice_s))
                if message is not None:
                    drain.take(message)
        outcome = self.settled()
        return outcome if outcome is not None else self.finish()

    def close(self) -> None:
        """Stop hearing replies (every path ends here; closing twice is harmless)."""
        replies, self._replies = self._replies, None
        if replies is not None:
            replies.close()

    def _guarded(self, step: Callable[[], _T]) -> _T | ReadOutcome:
        try:
            return step()
        except Exception as exc:
            return self._failed(exc)

    def _report(self, outcome: ReadOutcome) -> None:
        with self._ended:
            if self._reported:
                return
            self._reported = True
        self._done(outcome)
