"""Registry transfers that end: one deadline and a minimum rate over each pull and push (`oci.py`).

requests' timeouts bound each wait on the socket, not a transfer: a registry
that sends a byte every few seconds (in its headers or in its body), or one
that accepts the connection and then says nothing, never trips them. So each
pull or push runs as one `Transfer`, with:

- a deadline for the whole operation: `deadline_s` (`$ASTRID_OCI_DEADLINE`,
  else `IDENTITY_TUNING.oci_deadline_s`), plus the time the artifact's
  declared size takes at the minimum rate (the manifest's layer size on pull,
  the file's size on push), so a large artifact on a slow link still arrives;
- a minimum rate while a body arrives: at least `min_rate` bytes a second
  (`$ASTRID_OCI_MIN_RATE`, else `oci_min_rate_bytes_per_s`; 0 turns it off)
  averaged over `oci_rate_window_s`, so a stall shorter than that passes;
  this is what stops a trickle behind a huge declared size;
- a watchdog thread that, once either limit is broken, shuts down every
  socket the transfer opened. Whatever is blocked on one (a TLS handshake,
  the headers, a body, an upload) returns at once, and `broken` is the one
  line saying what was slow, the limit and how to change it.

A connect is not cut (its socket is known only once connected): its timeout
is capped at the time left instead. The sockets are found through urllib3's
connection classes (`WatchedAdapter`): a connection opened while a transfer
is active hands it a duplicate of its socket. A shutdown through any
descriptor stops the connection, and the duplicate stays usable after TLS
takes the original over.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from requests.adapters import HTTPAdapter

from astrid.host.tuning import IDENTITY_TUNING

DEADLINE_ENV = "ASTRID_OCI_DEADLINE"
MIN_RATE_ENV = "ASTRID_OCI_MIN_RATE"
# A read timeout capped at the time left fires as the deadline passes, give or take the clock's tick.
DEADLINE_SLACK_S = 0.05


class TooSlow(Exception):
    """The transfer broke its deadline or its minimum rate; the message says which, and how to change it."""


@dataclass(frozen=True)
class TransferLimits:
    deadline_s: float  # the whole pull or push, before the artifact's allowance
    min_rate: float  # bytes a second a body must average over the window; 0: not checked
    rate_window_s: float

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TransferLimits:
        """The tuning's limits, overridden by `$ASTRID_OCI_DEADLINE` and `$ASTRID_OCI_MIN_RATE` when set.

        `ValueError` (one line naming the variable) for a value that is not a number in range."""
        env = os.environ if environ is None else environ
        return cls(
            deadline_s=_setting(env, DEADLINE_ENV, IDENTITY_TUNING.oci_deadline_s, "seconds above 0", zero_ok=False),
            min_rate=_setting(
                env,
                MIN_RATE_ENV,
                IDENTITY_TUNING.oci_min_rate_bytes_per_s,
                "bytes a second (0 turns the check off)",
                zero_ok=True,
            ),
            rate_window_s=IDENTITY_TUNING.oci_rate_window_s,
        )

    def allowance_s(self, size: int) -> float:
        """The time `size` bytes take at the minimum rate (none without a minimum)."""
        return size / self.min_rate if self.min_rate > 0 else 0.0


def _setting(environ: Mapping[str, str], name: str, default: float, unit: str, *, zero_ok: bool) -> float:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{name}={text!r} is not a number of {unit}: fix it or unset it (default {default:g})")
    return value


# The transfer the current thread is running: how a connection urllib3 opens finds whom to hand its socket.
_ACTIVE: contextvars.ContextVar[Transfer | None] = contextvars.ContextVar("astrid_oci_transfer", default=None)


class Transfer:
    """One pull or push under `limits`: what it waits for now, the bytes it received, the sockets to cut.

    Use it as a context manager around the whole operation (it runs the watchdog)."""

    def __init__(self, limits: TransferLimits, verb: str) -> None:
        self.limits = limits
        self.verb = verb  # "pull" or "push", for the message
        self.broken: str | None = None  # why the transfer was cut, once it was
        self.request = "GET /v2/"  # the request in flight, as messages name it
        self._started = time.monotonic()
        self._allowed_bytes = 0
        self._doing = "connecting"
        self._received = 0
        self._samples: deque[tuple[float, int]] | None = None  # (time, bytes received) while a body arrives
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name=f"astrid-oci-{verb}-watchdog", daemon=True)
        self._token: contextvars.Token[Transfer | None] | None = None

    def __enter__(self) -> Transfer:
        self._token = _ACTIVE.set(self)
        self._watchdog.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._watchdog.join()
        if self._token is not None:
            _ACTIVE.reset(self._token)
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()  # our duplicates only: the connections themselves are requests'

    # -- what the operation tells it ----------------------------------------------------------

    def allow(self, size: int) -> None:
        """Extend the deadline by the time `size` bytes take at the minimum rate (the artifact's declared size)."""
        with self._lock:
            self._allowed_bytes += size

    def timeouts(self, connect_s: float, read_s: float) -> tuple[float, float]:
        """A request's (connect, read) timeouts, capped at the time left; `TooSlow` when no time is left."""
        self.check()
        left = self._left_s(time.monotonic())
        if left <= 0:
            self._cut(self._overdue_line())
            self.check()
        return min(connect_s, left), min(read_s, left)

    def requesting(self, method: str, url: str) -> None:
        """What is waited for from now: the answer to `method url`."""
        self.request = f"{method} {_where(url)}"
        self._doing = f"waiting for the answer to {self.request}"

    @contextmanager
    def receiving(self) -> Iterator[None]:
        """While a body arrives: what `received` counts must keep the minimum rate, over a window started now."""
        with self._lock:
            self._doing = f"receiving the body of {self.request}"
            self._samples = deque([(time.monotonic(), self._received)])
        try:
            yield
        finally:
            with self._lock:
                self._samples = None
                self._doing = f"after the answer to {self.request}"

    def received(self, count: int) -> None:
        """`count` more body bytes arrived; `TooSlow` if the transfer was cut meanwhile."""
        with self._lock:
            self._received += count
        self.check()

    def check(self) -> None:
        """`TooSlow` once the transfer was cut."""
        if self.broken is not None:
            raise TooSlow(self.broken)

    def failed(self) -> str | None:
        """Why the transfer was cut, after a request failed; None when the limits were not the cause.

        A request's read timeout is capped at the time left (`timeouts`), so a
        silent registry times it out as the deadline passes, often before the
        watchdog wakes: a failure at or after the deadline is the deadline's."""
        if self.broken is None and self._left_s(time.monotonic()) <= DEADLINE_SLACK_S:
            self._cut(self._overdue_line())
        return self.broken

    def watch(self, sock: socket.socket) -> None:
        """Keep a duplicate of a socket the transfer opened, to cut it (at once when the transfer already was)."""
        try:
            duplicate = sock.dup()
        except OSError:
            return
        with self._lock:
            self._sockets.append(duplicate)
            cut = self.broken is not None
        if cut:
            _shut(duplicate)

    # -- the watchdog ---------------------------------------------------------------------------

    def _watch(self) -> None:
        look_every_s = min(1.0, max(self.limits.rate_window_s / 10, 0.01))
        while True:
            now = time.monotonic()
            why = self._overdue(now) or self._too_slow(now)
            if why:
                self._cut(why)
                return
            if self._done.wait(min(look_every_s, max(self._left_s(now), 0.01))):
                return

    def _left_s(self, now: float) -> float:
        deadline_s = self.limits.deadline_s + self.limits.allowance_s(self._allowed_bytes)
        return self._started + deadline_s - now

    def _overdue(self, now: float) -> str | None:
        return self._overdue_line() if self._left_s(now) <= 0 else None

    def _overdue_line(self) -> str:
        limits = self.limits
        allowed = f"{limits.deadline_s:g} s"
        if self._allowed_bytes and limits.min_rate:
            extra = limits.allowance_s(self._allowed_bytes)
            allowed += f" + {extra:.1f} s for {self._allowed_bytes} bytes at {limits.min_rate:g} bytes/s"
        return (
            f"the {self.verb} did not finish within its deadline of {allowed} ({self._doing}); "
            f"for a slow registry or link, allow more with {DEADLINE_ENV}=SECONDS"
        )

    def _too_slow(self, now: float) -> str | None:
        """The line when the bytes of the body arriving now averaged under the minimum over the last window."""
        rate, window = self.limits.min_rate, self.limits.rate_window_s
        with self._lock:
            samples = self._samples
            if samples is None or rate <= 0:
                return None
            samples.append((now, self._received))
            while len(samples) > 1 and now - samples[1][0] >= window:
                samples.popleft()  # the oldest sample kept is the newest one at least a window old
            since, then = samples[0]
            span, got, doing = now - since, self._received - then, self._doing
        if span < window or got >= rate * span:
            return None
        return (
            f"the registry sent {got} bytes in {span:.0f} s ({doing}), under the minimum rate of "
            f"{rate:g} bytes/s; for a slow link, lower it with {MIN_RATE_ENV}=BYTES_PER_SECOND (0 turns it off)"
        )

    def _cut(self, why: str) -> None:
        """Record why, and shut down every socket of the transfer: what blocks on one returns at once."""
        with self._lock:
            if self.broken is None:
                self.broken = why
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the other end closed it already: nothing left to cut
        sock.shutdown(socket.SHUT_RDWR)


def _where(url: str) -> str:
    """A request's path for a message (a token realm's host too); never its query, which may hold upload state."""
    parts = urlsplit(url)
    where = parts.path or "/"
    if not where.startswith("/v2/"):
        where = parts.netloc + where
    return where if len(where) <= 160 else where[:160] + "..."


# -- finding the sockets: urllib3's connection classes, watched ---------------------------------------


class _WatchedConnection:
    """Mixed into a urllib3 connection class: each socket it opens goes to the active transfer."""

    def _new_conn(self) -> socket.socket:
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        transfer = _ACTIVE.get()
        if transfer is not None:
            transfer.watch(sock)
        return sock


@functools.cache
def _watched_pool(pool_class: type) -> type:
    """`pool_class` (a urllib3 connection pool) whose connections are watched."""
    connection_class = pool_class.ConnectionCls  # type: ignore[attr-defined]
    if issubclass(connection_class, _WatchedConnection):
        return pool_class
    watched = type(f"Watched{connection_class.__name__}", (_WatchedConnection, connection_class), {})
    return type(f"Watched{pool_class.__name__}", (pool_class,), {"ConnectionCls": watched})


def _watch_pools(manager: Any) -> None:
    manager.pool_classes_by_scheme = {
        scheme: _watched_pool(pool_class) for scheme, pool_class in manager.pool_classes_by_scheme.items()
    }


class WatchedAdapter(HTTPAdapter):
    """requests' adapter whose connections, direct or through a proxy, are watched by the active `Transfer`."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _watch_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        _watch_pools(manager)
        return manager
