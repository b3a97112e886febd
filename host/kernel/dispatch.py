"""Runs bound handlers on worker threads and reports when a message is done.

Capsule calls and host handlers use separate pools: a host handler (the
broker draining a fan-out) blocks while capsules answer, so it must never
hold a thread the capsules need.

Capsule calls run in lanes, one per (capsule, principal): a Store runs one
call at a time anyway, so a lane runs its calls one after another on one
worker, and calls waiting for a busy lane wait in its queue, not on a worker.
One principal's flood of calls to one capsule therefore holds one worker,
never the whole pool: every other principal's calls still find workers.
A call that waited longer than `stale_after_s` is dropped unrun (whoever
sent it has stopped waiting), and so is one past `LANE_DEPTH` waiting calls.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from astrid.host.bus import Binding, Dispatcher, InMemoryDelivery, Message, Principal

log = logging.getLogger(__name__)

LANE_DEPTH = 64
STALE_AFTER_S = 5.0

Lane = tuple[str, Principal]
Call = tuple[Binding, Message, InMemoryDelivery, float]


class PoolDispatcher(Dispatcher):
    def __init__(
        self, capsule_workers: int | None = None, host_workers: int = 32, stale_after_s: float = STALE_AFTER_S
    ) -> None:
        workers = capsule_workers or max(8, 4 * (os.cpu_count() or 2))
        self._capsules = ThreadPoolExecutor(workers, thread_name_prefix="astrid-capsule")
        self._host = ThreadPoolExecutor(host_workers, thread_name_prefix="astrid-host")
        self.stale_after_s = stale_after_s
        self._lanes: dict[Lane, deque[Call]] = {}  # a lane is here while a worker runs it
        self._lanes_lock = threading.Lock()
        self.dropped = 0

    def dispatch(self, runs: list[tuple[Binding, Message]], delivery: InMemoryDelivery) -> None:
        for binding, message in runs:
            if binding.inline:
                self._run(binding, message, delivery)
            elif binding.is_capsule:
                self._enqueue(
                    (binding.owner.source_id, message.principal), (binding, message, delivery, time.monotonic())
                )
            else:
                try:
                    self._host.submit(self._run, binding, message, delivery)
                except RuntimeError:  # shutting down
                    delivery.handler_finished()

    def background(self, task, *args) -> None:
        """Run `task(*args)` on the capsule pool (start-up work such as prewarming)."""
        try:
            self._capsules.submit(task, *args)
        except RuntimeError:  # shutting down
            pass

    def _enqueue(self, lane: Lane, call: Call) -> None:
        with self._lanes_lock:
            queue = self._lanes.get(lane)
            if queue is not None:  # a worker runs this lane: it takes the call when it gets there
                if len(queue) >= LANE_DEPTH:
                    self._drop(call, "its lane is full")
                else:
                    queue.append(call)
                return
            self._lanes[lane] = deque([call])
        try:
            self._capsules.submit(self._run_lane, lane)
        except RuntimeError:  # shutting down: nothing of this lane will run
            with self._lanes_lock:
                stranded = self._lanes.pop(lane, deque())
            for _, _, delivery, _ in stranded:
                delivery.handler_finished()

    def _run_lane(self, lane: Lane) -> None:
        """Run the lane's calls in order until it is empty, then give the worker back."""
        while True:
            with self._lanes_lock:
                queue = self._lanes[lane]
                if not queue:
                    del self._lanes[lane]
                    return
                binding, message, delivery, queued_at = queue.popleft()
            if time.monotonic() - queued_at > self.stale_after_s:
                self._drop((binding, message, delivery, queued_at), "it waited too long for its lane")
                continue
            self._run(binding, message, delivery)

    def _drop(self, call: Call, why: str) -> None:
        binding, message, delivery, _ = call
        self.dropped += 1
        log.warning("call of %s for %s on %s dropped: %s", binding.owner.name, message.principal, message.topic, why)
        delivery.handler_finished()

    @staticmethod
    def _run(binding: Binding, message: Message, delivery: InMemoryDelivery) -> None:
        try:
            binding.handler(message)
        except Exception:
            log.exception("handler of %s for %s failed", binding.owner.name, message.topic)
        finally:
            delivery.handler_finished()

    def close(self) -> None:
        self._capsules.shutdown(wait=False, cancel_futures=True)
        self._host.shutdown(wait=False, cancel_futures=True)
