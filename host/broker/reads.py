"""Reads: who serves a URI, the read broadcast, and the reads kept by declared freshness.

Who serves a read (docs/contract/templates.md §9.3), decided before the
broadcast and in this order, the same for every principal and every arrival
order:

1. a listed URI: its listed owner (the describe snapshot's `uri -> source-id`),
   always; templates are not even fetched;
2. else the owner of the matching template with the longest literal prefix
   (ties: the lexicographically first source-id), and that owner only: as
   for a listed owner, another capsule's answer is refused. A template
   claiming a whole scheme (`astrid://{+all}`) therefore never takes a URI
   another capsule lists, nor one a more specific template covers;
3. else the 1.0 rule: every capsule hears the read and the lexicographically
   first source-id among those that answer wins.

A principal's first read learns who lists what first (a describe round), so
a listed URI is served by its listed owner and nobody else. A snapshot that
did not know the URI, is stale or names an owner that is gone is re-described
once, and the read tried again with whoever serves it then.

Declared freshness (docs/contract/resources.md §5.7): a listed resource or a
template whose `meta` declares `{"astrid": {"max_age_s": N}}` has its
successful reads kept for N seconds per (principal, uri, owner source-id) in
`read_cache`. A capsule-set change and a refresh drop a principal's kept reads.

`start` is the one way in: it never waits (`read.Read`). When the snapshots
kept say who serves the URI, it answers a kept copy at once or publishes the
read request; otherwise the whole read is left to a thread. The read's span
(`broker.read`) and each round's (`broker.read.round`) and metric are made on
every path.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from astrid.host.broker.cache import TemplateSnapshot
from astrid.host.broker.listings import Listings, round_attributes
from astrid.host.broker.read import Read
from astrid.host.broker.read_round import Drain, ReadStatus, owner_silent, resolve, wait_for
from astrid.host.broker.shared import Shared
from astrid.host.bus import Principal, Subscription
from astrid.host.contract._base import utf8_len
from astrid.host.contract.outcomes import FailureCode, ReadOutcome
from astrid.host.contract.resource import read_request
from astrid.host.contract.topics import READ_REPLY_PREFIX, READ_REQUEST_TOPIC
from astrid.host.telemetry import metrics, tracing

log = logging.getLogger("astrid.host.broker")

Failed = Callable[[Exception], ReadOutcome]  # a failure of the broker itself, as the read's outcome
Done = Callable[[ReadOutcome], None]  # hears how a read ended, once


@dataclass(frozen=True)
class Route:
    """Who serves one read: the listed or template owner, or nobody in particular (broadcast)."""

    owner: str | None
    via_template: bool
    stale: bool  # the snapshot that decided it may be out of date
    max_age_s: float | None = None  # the freshness the owner declared for it (docs/contract/resources.md §5.7)


@dataclass
class _Round:
    """A read request published, its replies being heard (in its span, `broker.read.round`)."""

    route: Route
    replies: Subscription
    receivers: int
    drain: Drain | None  # None: the route's owner was not among the receivers (gone)
    span: Any  # its span (`tracing.NO_SPAN` while off)
    epoch: int  # the principal's kept-reads epoch when it started (a read that overlaps a drop is not kept)


class Reads:
    def __init__(self, shared: Shared, listings: Listings) -> None:
        self.shared = shared
        self.listings = listings

    def start(self, principal: Principal, uri: str, *, failed: Failed, done: Done) -> Read:
        """The read of `uri` for `principal`, started without waiting. `failed(exc)` turns a failure of the
        broker into an outcome, `done(outcome)` hears the end of every read (once)."""
        started = time.perf_counter()
        span = tracing.NO_SPAN
        if tracing.on:
            span = tracing.start(
                "broker.read", {"astrid.principal": principal.name or str(principal), "mcp.resource.uri": uri}
            )

        def ended(outcome: ReadOutcome) -> None:
            self.shared.stats.read(time.perf_counter() - started)
            self.shared.answered.note(principal, uri, outcome)  # its owner looked at what it depends on
            if span:
                if outcome.source_id is not None:
                    span.set_attribute("astrid.capsule", self.shared.names.label(outcome.source_id))
                if outcome.error is not None:
                    tracing.fail(span, str(outcome.error.code), outcome.error.message)
                span.end()
            done(outcome)

        refused = self._refused(principal, uri)
        if refused is not None:
            return Read(outcome=refused, failed=failed, done=ended)
        context = tracing.context_of(span)
        try:
            with tracing.attached(context):
                route = self._route_now(principal, uri)
                if route is not None:
                    return self._by_route(principal, uri, route, failed, ended, context)
        except Exception as exc:
            return Read(outcome=failed(exc), failed=failed, done=ended)

        def whole_read() -> ReadOutcome:
            with tracing.attached(context):
                route = self._route(principal, uri)  # a principal's first read describes first
                return self._by_route(principal, uri, route, failed, _unreported, context).result()

        return Read(rest=whole_read, failed=failed, done=ended)

    # -- one read, once its route is known -----------------------------------------------

    def _by_route(
        self, principal: Principal, uri: str, route: Route, failed: Failed, done: Done, context: object
    ) -> Read:
        """A kept copy, else a round to the route's owner (and, when the capsule set moved, one more)."""
        kept = self._kept(principal, uri, route)
        if kept is not None:
            return Read(outcome=kept, failed=failed, done=done)
        opened = self._open_round(principal, uri, route)

        def settle() -> ReadOutcome | None:
            outcome, status = self._close_round(principal, uri, opened)
            return self._after_first_round(principal, uri, route, outcome, status, opened.epoch)

        def again() -> ReadOutcome:
            with tracing.attached(context):
                return self._read_again(principal, uri)

        return Read(replies=opened.replies, drain=opened.drain, settle=settle, rest=again, failed=failed, done=done)

    def _after_first_round(
        self, principal: Principal, uri: str, route: Route, outcome: ReadOutcome, status: ReadStatus, epoch: int
    ) -> ReadOutcome | None:
        """The read's outcome after its first round, or None when `_read_again` decides."""
        if status in (ReadStatus.ANSWERED, ReadStatus.TIMED_OUT, ReadStatus.REFUSED):
            return self._keep(principal, uri, route, outcome, epoch)
        if status is ReadStatus.NO_REPLY and route.owner is not None and not route.stale:
            return owner_silent(uri, route.owner, via_template=route.via_template, names=self.shared.names)
        return None  # no snapshot knew it, a stale one, the owner gone or MOVED: re-describe once

    def _read_again(self, principal: Principal, uri: str) -> ReadOutcome:
        """The snapshot did not know the uri, is stale, or names an owner that
        is no longer loaded (a capsule rebuilt under a read): the capsule set
        moved on. Re-describe once (which refreshes the templates too) and
        retry with whoever lists it, or whose template covers it, now."""
        self.listings.snapshot(principal, refresh=True)
        route = self._route(principal, uri)
        if route.owner is None:
            return ReadOutcome.fail(FailureCode.NOT_FOUND, f"no capsule serves {uri}")
        opened = self._open_round(principal, uri, route)
        if opened.drain is not None:
            wait_for(opened.drain)
        outcome, status = self._close_round(principal, uri, opened)
        if status is ReadStatus.NO_REPLY:
            return owner_silent(uri, route.owner, via_template=route.via_template, names=self.shared.names)
        return self._keep(principal, uri, route, outcome, opened.epoch)

    # -- routes -----------------------------------------------------------------------

    def _refused(self, principal: Principal, uri: str) -> ReadOutcome | None:
        """Why a read is refused before any round, or None."""
        if not principal.is_verified:
            return ReadOutcome.fail(
                FailureCode.DENIED, f"read of {uri} refused: the caller is not a verified principal"
            )
        if not isinstance(uri, str) or not uri:
            return ReadOutcome.fail(FailureCode.INVALID_REQUEST, "the uri is empty")
        limit = self.shared.limits.uri_bytes
        if utf8_len(uri) > limit:
            return ReadOutcome.fail(FailureCode.INVALID_REQUEST, f"the uri is longer than {limit} bytes")
        return None

    def _route_now(self, principal: Principal, uri: str) -> Route | None:
        """Who serves `uri`, from the snapshots kept, without a round; None when a round must say."""
        cache = self.shared.cache
        snapshot = cache.resources.get(principal)
        if snapshot is None:
            return None
        listed = snapshot.owner_of(uri)
        if listed is not None:
            return Route(listed, via_template=False, stale=snapshot.stale, max_age_s=snapshot.max_age.get(uri))
        templates = cache.templates.fresh(principal)
        if templates is None:
            return None
        return self._template_route(principal, uri, snapshot.stale, templates)

    def _route(self, principal: Principal, uri: str) -> Route:
        """Who serves `uri` (the precedence in the module docstring); may take a round."""
        snapshot = self.shared.cache.resources.get(principal) or self.listings.snapshot(principal)
        listed = snapshot.owner_of(uri)
        if listed is not None:
            return Route(listed, via_template=False, stale=snapshot.stale, max_age_s=snapshot.max_age.get(uri))
        return self._template_route(principal, uri, snapshot.stale, self.listings.template_snapshot(principal))

    def _template_route(self, principal: Principal, uri: str, stale: bool, templates: TemplateSnapshot) -> Route:
        match = templates.route(uri)
        if match is None:
            return Route(None, via_template=False, stale=stale or templates.stale)
        if log.isEnabledFor(logging.DEBUG):
            owner = self.shared.names.label(match.owner, with_id=True)
            log.debug("read of %s for %s routed to %s by template %s", uri, principal, owner, match.template.text)
        return Route(
            match.owner,
            via_template=True,
            stale=stale or templates.stale,
            max_age_s=templates.max_age.get(match.template.text),
        )

    # -- kept reads ----------------------------------------------------------------------

    def _kept(self, principal: Principal, uri: str, route: Route) -> ReadOutcome | None:
        """A kept read of `uri` from the owner that serves it now, if it declared freshness."""
        if route.owner is None or route.max_age_s is None or route.stale:
            return None
        hit = self.shared.reads.get(principal, uri, route.owner)
        metrics.cache("fresh", hit is not None)
        if hit is not None:
            tracing.current().set_attribute("astrid.cache", "fresh")
            log.debug("read of %s for %s served from the read cache (%.1f s left)", uri, principal, hit.max_age_s)
        return hit

    def _keep(self, principal: Principal, uri: str, route: Route, outcome: ReadOutcome, epoch: int) -> ReadOutcome:
        """Keep a successful read whose owner declared freshness, and say how long it stays fresh."""
        if outcome.error is not None or route.max_age_s is None or route.owner is None or route.stale:
            return outcome  # a stale route may name an owner that no longer serves the uri: promise nothing
        if outcome.source_id != route.owner or not outcome.contents:
            return outcome
        reads = self.shared.reads
        reads.store(principal, uri, route.owner, outcome, route.max_age_s, epoch)
        if reads.epoch(principal) != epoch:
            return outcome  # the capsule set changed under the read: promise nothing
        return ReadOutcome(contents=outcome.contents, source_id=outcome.source_id, max_age_s=route.max_age_s)

    # -- one broadcast ---------------------------------------------------------------------

    def _open_round(self, principal: Principal, uri: str, route: Route) -> _Round:
        """Publish the read request, its replies' subscription open (closing the round closes it)."""
        shared = self.shared
        epoch = shared.reads.epoch(principal)
        span = tracing.start("broker.read.round", parent=tracing.capture())
        correlation = uuid.uuid4().hex
        request, value = read_request(uri, correlation)
        replies = shared.bus.subscribe(shared.participant, READ_REPLY_PREFIX + correlation, principal_scope=principal)
        try:
            with tracing.attached(tracing.context_of(span)):
                delivery = shared.bus.publish(shared.participant, READ_REQUEST_TOPIC, request, principal, parsed=value)
        except BaseException:
            replies.close()
            span.end()
            raise
        if route.owner is not None and route.owner not in delivery.reached:
            return _Round(
                route, replies, delivery.receivers, None, span, epoch
            )  # the owner is gone: nothing to wait for
        drain = Drain(
            replies,
            delivery,
            principal=principal,
            uri=uri,
            preferred=route.owner,
            window_s=shared.limits.read_window_s,
            may_answer=lambda source: shared.authority.may_serve(source, uri),
            names=shared.names,
        )
        return _Round(route, replies, delivery.receivers, drain, span, epoch)

    def _close_round(self, principal: Principal, uri: str, opened: _Round) -> tuple[ReadOutcome, ReadStatus]:
        """The outcome of a read round that is over; its span and metric done."""
        opened.replies.close()
        outcome, status, answered, finished = self._resolved(principal, uri, opened)
        metrics.broker_round("read", finished)
        span = opened.span
        if span:
            route = opened.route
            round_attributes(span, principal, opened.receivers, answered, finished)
            span.set_attributes(
                {
                    "astrid.read.status": status.value,
                    "astrid.read.route": "template" if route.via_template else "listed" if route.owner else "any",
                }
            )
            if route.owner is not None:
                span.set_attribute("astrid.read.owner", self.shared.names.label(route.owner))
            if outcome.error is not None:
                tracing.fail(span, str(outcome.error.code), outcome.error.message)
            span.end()
        return outcome, status

    def _resolved(self, principal: Principal, uri: str, opened: _Round) -> tuple[ReadOutcome, ReadStatus, int, bool]:
        """(outcome, status, how many answered, whether every capsule finished) of a round that is over."""
        route = opened.route
        if opened.drain is None:
            what = "whose template covers" if route.via_template else "that listed"
            gone = ReadOutcome.fail(FailureCode.NOT_FOUND, f"the capsule {what} {uri} is no longer loaded")
            return gone, ReadStatus.OWNER_GONE, 0, True
        drained = opened.drain.result()
        outcome, status = resolve(
            drained,
            principal=principal,
            uri=uri,
            preferred=route.owner,
            window_s=self.shared.limits.read_window_s,
            limits=self.shared.limits,
            via_template=route.via_template,
            names=self.shared.names,
        )
        # an answer from the listed owner ends the drain before the others finish: not the window's doing
        finished = drained.finished or (route.owner is not None and route.owner in drained.replies)
        return outcome, status, len(drained.replies), finished


def _unreported(outcome: ReadOutcome) -> None:
    """The inner read of a read that reports itself."""
