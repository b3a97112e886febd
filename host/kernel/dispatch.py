"""Runs bound handlers on worker threads and reports when a message is done.

Capsule calls and host handlers use separate pools: a host handler (the
broker draining a fan-out) blocks while capsules answer, so it must never
hold a thread the capsules need.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

from astrid.host.bus import Binding, Dispatcher, InMemoryDelivery, Message

log = logging.getLogger(__name__)


class PoolDispatcher(Dispatcher):
    def __init__(self, capsule_workers: int | None = None, host_workers: int = 32) -> None:
        workers = capsule_workers or max(8, 4 * (os.cpu_count() or 2))
        self._capsules = ThreadPoolExecutor(workers, thread_name_prefix="astrid-capsule")
        self._host = ThreadPoolExecutor(host_workers, thread_name_prefix="astrid-host")

    def dispatch(self, runs: list[tuple[Binding, Message]], delivery: InMemoryDelivery) -> None:
        for binding, message in runs:
            if binding.inline:
                self._run(binding, message, delivery)
                continue
            pool = self._capsules if binding.is_capsule else self._host
            try:
                pool.submit(self._run, binding, message, delivery)
            except RuntimeError:  # shutting down
                delivery.handler_finished()

    def background(self, task, *args) -> None:
        """Run `task(*args)` on the capsule pool (start-up work such as prewarming)."""
        try:
            self._capsules.submit(task, *args)
        except RuntimeError:  # shutting down
            pass

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
