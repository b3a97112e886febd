"""Events put from any thread, taken in batches: on an event loop without a thread per wait, or on a thread.

    stream = EventStream[str](on_close=subscription.close)
    stream.put("alice")                 # any thread (a bus handler, the broker): quick, never blocks
    batch = await stream.next()         # the event loop: at least one event, and every one queued
    batch = stream.wait(timeout_s=5)    # or a thread: the same, [] when the time ran out

The composition root hands these to the MCP server (capsule-set changes,
checked resource updates), so the server waits for events as values, never
on a bus subscription in a polling thread. At most `max_queued` events are
kept (the oldest go first, counted in `dropped`): a consumer that stopped
cannot make a producer hold memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_QUEUED = 4096


class EventStream(Generic[T]):
    def __init__(self, *, on_close: Callable[[], None] | None = None, max_queued: int = MAX_QUEUED) -> None:
        self._items: deque[T] = deque(maxlen=max_queued)
        self._changed = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.on_close = on_close  # what closing it also stops (the subscription or listener feeding it)
        self.closed = False
        self.dropped = 0

    def put(self, item: T) -> None:
        """Queue one event and wake whoever waits (from any thread)."""
        with self._changed:
            if self.closed:
                return
            if len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(item)
            waiters = list(self._waiters)
            self._changed.notify_all()
        _wake(waiters)

    async def next(self) -> list[T]:
        """Every event queued, waiting on the running loop for at least one; [] once closed."""
        ready = asyncio.Event()
        waiter = (asyncio.get_running_loop(), ready)
        with self._changed:
            self._waiters.append(waiter)
        try:
            while True:
                with self._changed:
                    if self._items or self.closed:
                        return self._take()
                    ready.clear()
                await ready.wait()
        finally:
            with self._changed:
                self._waiters.remove(waiter)

    def wait(self, timeout_s: float) -> list[T]:
        """Every event queued, waiting on this thread up to `timeout_s` for at least one; [] if none came."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self._items and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0 or not self._changed.wait(left):
                    break
            return self._take()

    def _take(self) -> list[T]:
        items = list(self._items)
        self._items.clear()
        return items

    def close(self) -> None:
        """No more events; waiters return what was queued, then []."""
        with self._changed:
            if self.closed:
                return
            self.closed = True
            waiters = list(self._waiters)
            self._changed.notify_all()
        _wake(waiters)
        if self.on_close is not None:
            self.on_close()


def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
    for loop, ready in waiters:
        with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits there any more
            loop.call_soon_threadsafe(ready.set)
