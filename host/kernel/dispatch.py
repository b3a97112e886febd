"""Runs bound handlers on worker threads and reports when a message is done.

Capsule calls and host handlers use separate pools: a host handler (the
broker draining a fan-out) blocks while capsules answer, so it must never
hold a thread the capsules need.

Capsule calls run in lanes, one per (capsule, principal): a Store runs one
call at a time anyway, so a lane runs its calls one after another, in order,
and calls waiting for a busy lane wait in its queue, not on a worker. The
capsule workers are shared fairly:

- lanes take turns: a worker runs one call of a lane, then the lane goes to
  the back of the line of lanes waiting for a worker (and on at once when no
  other lane waits);
- a capsule runs on at most `share` workers (half of them) at once; a lane
  whose capsule is at its share waits for its turn without holding a worker.

So one principal's flood holds at most one worker, a slow capsule (one that
waits on a slow server, say) holds at most half of them however many
principals call it, and the other half keeps serving the other capsules: a
slow capsule slows only its own callers. (Two saturated capsules can fill
the pool between them; a third capsule's lane then waits for its turn in
line, one call of each lane ahead of it, never behind their whole queues.)

A call that waited longer than `stale_after_s` is dropped unrun (whoever
sent it has stopped waiting), and so is one past `KERNEL_TUNING.lane_depth`
waiting calls. Every call ends in exactly one `delivery.handler_finished()`:
run, dropped, or still waiting when the dispatcher closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from astrid.host.bus import Binding, Dispatcher, InMemoryDelivery, Message, Principal
from astrid.host.telemetry import tracing
from astrid.host.tuning import KERNEL_TUNING

log = logging.getLogger(__name__)

Lane = tuple[str, Principal]  # (capsule source-id, principal)
# (binding, message, delivery, when queued, the publisher's trace context: None while tracing is off)
Call = tuple[Binding, Message, InMemoryDelivery, float, object]


class PoolDispatcher(Dispatcher):
    def __init__(
        self,
        capsule_workers: int | None = None,
        host_workers: int = 32,
        stale_after_s: float = KERNEL_TUNING.stale_after_s,
    ) -> None:
        self.workers = capsule_workers or max(8, 4 * (os.cpu_count() or 2))
        # Half: a capsule saturated by slow calls still leaves half the workers
        # to the others, and half of the default 4 x CPUs is 2 x CPUs, so one
        # busy capsule alone can still keep every core busy.
        self.share = max(1, self.workers // 2)
        self._capsules = ThreadPoolExecutor(self.workers, thread_name_prefix="astrid-capsule")
        self._host = ThreadPoolExecutor(host_workers, thread_name_prefix="astrid-host")
        self.stale_after_s = stale_after_s
        self._lock = threading.Lock()
        self._lanes: dict[Lane, deque[Call]] = {}  # lanes with calls waiting or one running
        self._turns: deque[Lane] = deque()  # lanes waiting for a worker, first in line first
        self._busy: dict[str, int] = {}  # workers running each capsule now
        self._started = 0  # worker tasks submitted and not yet returned
        self._closed = False
        self.dropped = 0

    def dispatch(self, runs: list[tuple[Binding, Message]], delivery: InMemoryDelivery) -> None:
        # The publisher's trace context goes with each call to the thread that runs it (None: tracing off).
        trace = tracing.capture()
        for binding, message in runs:
            if binding.inline:
                self._run(binding, message, delivery)
            elif binding.is_capsule:
                self._enqueue(
                    (binding.owner.source_id, message.principal), (binding, message, delivery, time.monotonic(), trace)
                )
            else:
                try:
                    future = self._host.submit(self._run, binding, message, delivery, trace)
                except RuntimeError:  # shutting down
                    delivery.handler_finished()
                    continue
                future.add_done_callback(partial(_finish_if_cancelled, delivery))

    def background(self, task, *args) -> None:
        """Run `task(*args)` on the capsule pool (start-up work such as prewarming)."""
        with contextlib.suppress(RuntimeError):  # shutting down: start-up work is moot
            self._capsules.submit(task, *args)

    def _enqueue(self, lane: Lane, call: Call) -> None:
        with self._lock:
            queue = self._lanes.get(lane)
            if self._closed:
                outcome = "closed"
            elif queue is None:  # a new lane: it joins the line, and may need a worker
                self._lanes[lane] = deque([call])
                self._turns.append(lane)
                outcome = "start" if self._may_start(lane) else "queued"
            elif len(queue) >= KERNEL_TUNING.lane_depth:
                outcome = "full"
            else:  # the lane runs or is in line already: the call waits for the lane's turn
                queue.append(call)
                outcome = "queued"
        if outcome == "closed":
            call[2].handler_finished()  # as close() did for every call waiting then
        elif outcome == "full":
            self._drop(call, "its lane is full")
        elif outcome == "start":
            with contextlib.suppress(RuntimeError):  # closed meanwhile: close() finished the waiting calls
                self._capsules.submit(self._work)

    def _may_start(self, lane: Lane) -> bool:
        """Start one more worker for a lane that may run now, if the pool has room (under the lock).

        A worker started in vain (another one took the lane first) finds nothing and returns."""
        if self._busy.get(lane[0], 0) >= self.share or self._started >= self.workers:
            return False
        self._started += 1
        return True

    def _work(self) -> None:
        """Run one call per turn, each of the next lane in line that may run, until none may."""
        lane: Lane | None = None
        while True:
            with self._lock:
                if lane is not None:
                    self._end_turn(lane)
                picked = self._next_turn()
                if picked is None:
                    self._started -= 1
                    return
                lane, call = picked
            binding, message, delivery, queued_at, trace = call
            if time.monotonic() - queued_at > self.stale_after_s:
                self._drop(call, "it waited too long for its lane")
            else:
                self._run(binding, message, delivery, trace)

    def _next_turn(self) -> tuple[Lane, Call] | None:
        """The first lane in line whose capsule is under its share, and its next call (under the lock)."""
        for index, lane in enumerate(self._turns):
            capsule = lane[0]
            if self._busy.get(capsule, 0) < self.share:
                del self._turns[index]
                self._busy[capsule] = self._busy.get(capsule, 0) + 1
                return lane, self._lanes[lane].popleft()
        return None

    def _end_turn(self, lane: Lane) -> None:
        """Give the worker back: the lane goes to the back of the line if it has calls left (under the lock)."""
        capsule = lane[0]
        self._busy[capsule] -= 1
        if not self._busy[capsule]:
            del self._busy[capsule]
        if self._lanes[lane]:
            self._turns.append(lane)
        else:
            del self._lanes[lane]

    def _drop(self, call: Call, why: str) -> None:
        binding, message, delivery, _, _ = call
        self.dropped += 1
        log.warning("call of %s for %s on %s dropped: %s", binding.owner.name, message.principal, message.topic, why)
        delivery.handler_finished()

    @staticmethod
    def _run(binding: Binding, message: Message, delivery: InMemoryDelivery, trace: object = None) -> None:
        try:
            if trace is None:
                binding.handler(message)
            else:
                with tracing.attached(trace):
                    binding.handler(message)
        except Exception:
            log.exception("handler of %s for %s failed", binding.owner.name, message.topic)
        finally:
            delivery.handler_finished()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stranded = [call for queue in self._lanes.values() for call in queue]
            for lane in self._turns:  # waiting lanes: nothing will run them now
                del self._lanes[lane]
            self._turns.clear()
            for queue in self._lanes.values():  # running lanes: gone when their turn ends
                queue.clear()
        for _, _, delivery, _, _ in stranded:  # never run: finished here, once
            delivery.handler_finished()
        self._capsules.shutdown(wait=False, cancel_futures=True)
        self._host.shutdown(wait=False, cancel_futures=True)


def _finish_if_cancelled(delivery: InMemoryDelivery, future: Future) -> None:
    """A host handler cancelled unrun at shutdown still counts as finished."""
    if future.cancelled():
        delivery.handler_finished()
