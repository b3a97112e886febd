"""The NATS connection and the event-loop thread that owns it; `--bus` URL checks.

nats-py is asyncio-only: the connection lives on one loop, in its own thread;
the rest of the host calls in with `submit` or `call`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Future
from typing import Any
from urllib.parse import urlsplit

from astrid.host.bus.base import IpcErrorCode
from astrid.host.bus.nats.subjects import subject_for
from astrid.host.errors import BusError
from astrid.host.tuning import NATS_TUNING

log = logging.getLogger(__package__)  # log lines keep naming astrid.host.bus.nats


def nats_problem(url: str) -> str | None:
    """What is wrong with a `--bus` URL (a phrase naming the fix), or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc}); write nats://HOST:PORT"
    if parts.scheme not in ("nats", "tls") or not parts.hostname:
        return f"{url!r}: write nats://[USER:PASSWORD@]HOST:PORT (or tls://...)"
    return None


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


class Connection:
    """One NATS connection, on an event loop run by a thread of its own."""

    def __init__(self, url: str, credentials: str | None) -> None:
        self.url = url
        self.credentials = credentials
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="astrid-nats", daemon=True)
        self.client: Any = None  # nats-py's client, once connected
        self.closed = False

    def open(self, patterns: Sequence[str], on_message: Callable[[Any], Awaitable[None]], timeout_s: float) -> None:
        """Start the loop, connect and subscribe to `patterns`; BusError naming the cause when the
        server cannot be used (then `close` it)."""
        self._thread.start()
        try:
            self.submit(self._connect(patterns, on_message)).result(timeout_s + 1)
        except Exception as exc:
            raise BusError(
                IpcErrorCode.UNKNOWN,
                f"cannot connect to the NATS server at {shown(self.url)}: {reason(exc)}; "
                "check that it runs and that the credentials are right",
            ) from None

    async def _connect(self, patterns: Sequence[str], on_message: Callable[[Any], Awaitable[None]]) -> None:
        import nats

        options: dict[str, Any] = {
            "connect_timeout": NATS_TUNING.connect_timeout_s,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "allow_reconnect": True,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
        }
        if self.credentials:
            options["user_credentials"] = self.credentials
        self.client = await nats.connect(self.url, **options)
        for pattern in patterns:
            await self.client.subscribe(subject_for(pattern), cb=on_message)
        await self.client.flush()

    def close(self, farewell: Callable[[], Awaitable[None]]) -> None:
        """Run `farewell` while still connected, drain what is queued, and stop the loop."""
        self.closed = True
        if not self.loop.is_running():
            return
        if self.client is not None:
            try:
                self.submit(self._end(farewell)).result(3)
            except Exception:  # closing goes on: the others expire a host that left without its goodbye
                log.debug("the goodbye and drain did not finish", exc_info=True)
        try:
            self.submit(_cancel_tasks()).result(3)
        except Exception:  # the loop stops below either way
            log.debug("the NATS loop's tasks were not all cancelled", exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(3)
        if not self.loop.is_running():
            self.loop.close()

    async def _end(self, farewell: Callable[[], Awaitable[None]]) -> None:
        if self.client.is_connected:
            await farewell()
            await self.client.drain()
        else:
            await self.client.close()

    @property
    def connected(self) -> bool:
        return self.client is not None and self.client.is_connected

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> Future[Any]:
        """Run a coroutine on the loop (from any thread), without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, coroutine: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        """Run a coroutine on the loop and wait for its result (from any other thread)."""
        future = self.submit(coroutine)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    async def send(self, topic: str, payload: str, headers: dict[str, str]) -> None:
        try:
            await self.client.publish(subject_for(topic), payload.encode("utf-8"), headers=headers or None)
        except Exception as exc:
            log.warning("NATS: cannot publish on %s: %s", topic, reason(exc))

    async def _on_error(self, exc: Exception) -> None:
        log.warning("NATS: %s", exc)

    async def _on_disconnected(self) -> None:
        if not self.closed:
            log.warning("NATS: disconnected from %s; reconnecting", shown(self.url))

    async def _on_reconnected(self) -> None:
        log.info("NATS: reconnected to %s", shown(self.url))


async def _cancel_tasks() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
