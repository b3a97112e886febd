"""Announcements that a resource changed (`resource.v1.event.updated`), before the broker trusts one.

A capsule announces `updated {uri}` for the principal of the message it
handles (the host's file watch announces as the capsule whose read touched
the file). The broker hands an announcement on only when (docs/contract/subscriptions.md
§11):

- its principal is verified;
- the announcing capsule is under its rate: `SubscriptionLimits`
  `announcements_burst` at once, refilled at `announcements_per_s`, per
  (capsule, principal); the rest are dropped, said once a minute per capsule
  and principal (`AnnouncementGate.allow`);
- the payload is an `updated` record with a usable URI;
- the capsule owns the URI for that principal: it lists it, or its template
  is the one that serves it (checked by the broker, `Broker.announced`).

A refusal for a URI the capsule does not own is logged once per capsule
(`AnnouncementGate.refused`): a hostile capsule cannot fill the log either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from astrid.host.bus import Principal
from astrid.host.limits import DEFAULT_SUBSCRIPTION_LIMITS, SubscriptionLimits
from astrid.host.log_throttle import LogThrottle
from astrid.host.tuning import BROKER_TUNING

log = logging.getLogger("astrid.host.broker")


class _Bucket:
    __slots__ = ("tokens", "at", "flood_lines")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at
        self.flood_lines: LogThrottle | None = None  # made at the first drop: most pairs never drop one


class AnnouncementGate:
    """The rate of each capsule's announcements per principal, and the log lines about them."""

    def __init__(
        self, limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: OrderedDict[tuple[str, Principal], _Bucket] = OrderedDict()
        self._refused: OrderedDict[str, None] = OrderedDict()
        self.limited = 0  # announcements dropped for the rate (tests read it)

    def allow(self, source_id: str, principal: Principal, label: str) -> bool:
        """One announcement of `source_id` (named `label` in the log) for `principal`: within its rate?"""
        now = self._clock()
        burst, rate = self.limits.announcements_burst, self.limits.announcements_per_s
        with self._lock:
            key = (source_id, principal)
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(float(burst), now)
                while len(self._buckets) > BROKER_TUNING.announcement_buckets:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
                bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate)
                bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return True
            self.limited += 1
            if bucket.flood_lines is None:
                bucket.flood_lines = LogThrottle(BROKER_TUNING.flood_line_every_s, clock=self._clock)
            skipped = bucket.flood_lines.ready()
            if skipped is None:
                return False
        log.warning(
            "capsule %s announces resource updates for %s faster than %g a second (bursts of %d): "
            "%d dropped (said at most once a minute)",
            label,
            principal,
            rate,
            burst,
            skipped + 1,  # this one too
        )
        return False

    def refused(self, source_id: str) -> bool:
        """Say a refusal of `source_id`'s announcement? True the first time only."""
        with self._lock:
            if source_id in self._refused:
                return False
            self._refused[source_id] = None
            while len(self._refused) > BROKER_TUNING.refused_capsules_named:
                self._refused.popitem(last=False)
            return True
