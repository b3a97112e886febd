"""A read whose round runs while its caller waits without a thread.

`Broker.start_read` publishes the request and hands back a `StartedRead`;
the caller (the MCP server's event loop) asks `wait_s` until the round is
over, sleeping in between until `notify` wakes it (a reply queued, every
receiver finished) or the window ends, then takes `outcome`. Nothing in it waits: the capsule's reply
reaches the loop in one hand-off, not through a worker thread. What it
decides is what `read_resource` decides, through the same steps
(`read_round.Drain`, `resolve`, the read cache), so the two paths serve the
same answer; a read that needs a describe round after its first one goes on
with `finish`, on a thread.
"""

from __future__ import annotations

from collections.abc import Callable

from astrid.host.broker.read_reply import ReadOutcome
from astrid.host.broker.read_round import Drain
from astrid.host.bus import Subscription


class StartedRead:
    def __init__(
        self,
        replies: Subscription | None,
        collecting: Drain | None,
        settle: Callable[[], ReadOutcome | None],
        go_on: Callable[[], ReadOutcome],
    ) -> None:
        """`collecting` the round's drain (None: nothing to wait for), `settle` its outcome once over
        (None: `go_on` decides)."""
        self._replies = replies
        self._collecting = collecting
        self._settle = settle
        self._go_on = go_on
        self._outcome: ReadOutcome | None = None
        self._when_done: list[Callable[[ReadOutcome], None]] = []

    def when_done(self, callback: Callable[[ReadOutcome], None]) -> None:
        """Call `callback` with the final outcome, once it is known (counting, logging)."""
        self._when_done.append(callback)

    def wait_s(self) -> float | None:
        """None once the round is over; else how long to wait at most (the window left) before
        asking again, unless `notify` wakes the caller first."""
        collecting = self._collecting
        if collecting is None or collecting.settled():
            return None
        return max(0.0, collecting.remaining_s())

    def notify(self, wake: Callable[[], None]) -> None:
        """Call `wake` when a reply arrives and when every receiver has finished (from their
        threads, or now: quick, never raising)."""
        if self._replies is not None:
            self._replies.notify(wake)
        if self._collecting is not None:
            self._collecting.delivery.when_finished(wake)

    def outcome(self) -> ReadOutcome | None:
        """Once `wait_s` said over: the outcome, or None when the read goes on with `finish`."""
        if self._outcome is None:
            self.close()
            self._outcome = self._settle()
            if self._outcome is not None:
                self._finished(self._outcome)
        return self._outcome

    def finish(self) -> ReadOutcome:
        """The rest of a read `outcome` left open: a describe round and a second read (blocks)."""
        outcome = self._go_on()
        self._finished(outcome)
        return outcome

    def _finished(self, outcome: ReadOutcome) -> None:
        for callback in self._when_done:
            callback(outcome)

    def close(self) -> None:
        """Stop hearing replies (every path ends here; closing twice is harmless)."""
        if self._replies is not None:
            self._replies.close()
            self._replies = None
