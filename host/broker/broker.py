"""The broker: a host-native bus participant that gathers and routes resources.

It knows the resource contract and nothing about MCP or wasm:

- a principal's resources come from a describe fan-out (scatter-gather),
  merged by `describe.merge_round` and cached per principal (`cache`); the
  static replies of the capsules of the kernel beside it come from that
  kernel's directory (`contract.local_replies`), with no bus message each,
  and are merged as those capsules' replies;
- a principal's resource templates come from a second fan-out of the same
  shape, merged by `templates.merge_templates` and cached beside the
  describe snapshot (the same events invalidate both, and a forced describe
  marks the templates stale too);
- a read is a broadcast with self-filter (`read_round`); a snapshot that did
  not know the URI, is stale or names an owner that is gone is re-described
  once;
- a completion (`complete`) is a broadcast that only the template's owner
  may answer (`complete.check_complete_reply`).

Who serves a read (docs/contract/templates.md §9.3), decided before the broadcast and
in this order, the same for every principal and every arrival order:

1. a listed URI: its listed owner (the describe snapshot's `uri -> source-id`),
   always; templates are not even fetched;
2. else the owner of the matching template with the longest literal prefix
   (ties: the lexicographically first source-id), and that owner only: as
   for a listed owner, another capsule's answer is refused. A template
   claiming a whole scheme (`astrid://{+all}`) therefore never takes a URI
   another capsule lists, nor one a more specific template covers;
3. else the 1.0 rule: every capsule hears the read and the lexicographically
   first source-id among those that answer wins.

The templates snapshot is fetched only when a URI is not listed (and then
once per capsule-set generation: it is cached).

Declared freshness (docs/contract/resources.md §5.7): a listed resource or a template
whose `meta` declares `{"astrid": {"max_age_s": N}}` has its successful reads
kept for N seconds per (principal, uri, owner source-id) in `read_cache`; the
key is taken out of the definitions handed out. A capsule-set change and a
refresh drop a principal's kept reads.

Resource events (docs/contract/subscriptions.md §11): a capsule announces on
`resource.v1.event.updated` that a URI it owns changed for the principal it
runs for (the kernel does the same for a file a read touched). The broker
checks the announcement (`updates.AnnouncementGate`: the rate; `announced`:
the principal, the payload, and that the announcer owns the URI for that
principal, listed or by its template), drops the principal's kept reads of
the URI first, then hands it to front-door clients on
`astrid.v1.resource_updated`, attributed to that principal. `subscribable`
says whether a principal could read a URI at all (listed for it, or covered
by a template it sees), and who serves it: the MCP server asks it before it
takes a subscription.

What it says names capsules by name (`names.CapsuleNames`, from the
`name_of` the composition root hands it), the source-id only with -v.

Its front doors (`frontdoor.FrontDoors`) answer front-door clients over the
bus. Ending a drain early relies on the bus's `Delivery`: `wait()` returns
once every handler the message reached has finished, and a capsule publishes
its reply while it handles the request, so by then every reply is queued.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from astrid.host.broker.authority import OPEN, UriAuthority
from astrid.host.broker.cache import Slots, Snapshot, SnapshotCache, TemplateSnapshot
from astrid.host.broker.complete import CompletionOutcome, check_complete_reply
from astrid.host.broker.describe import DESCRIBE, merge_round
from astrid.host.broker.frontdoor import FrontDoors
from astrid.host.broker.merge import NO_LOCAL, FanOut, LocalEntries, RoundOf, accept_local
from astrid.host.broker.names import CapsuleNames, NameOf
from astrid.host.broker.read_cache import FreshRead, ReadCache, split_freshness
from astrid.host.broker.read_reply import ReadOutcome
from astrid.host.broker.read_round import Drain, ReadStatus, owner_silent, resolve, wait_for
from astrid.host.broker.started_read import StartedRead
from astrid.host.broker.templates import TEMPLATES, merge_templates
from astrid.host.broker.updates import AnnouncementGate
from astrid.host.bus import Binding, Bus, BusError, Message, Participant, Principal, Subscription
from astrid.host.contract._base import utf8_len
from astrid.host.contract.events import ResourceUpdated
from astrid.host.contract.frontdoor import FailureCode
from astrid.host.contract.local_replies import NO_LOCAL_REPLIES, LocalKind, LocalReplies
from astrid.host.contract.resource import ResourceDefinition, read_request
from astrid.host.contract.template import Argument, CompleteRequest, ResourceTemplate
from astrid.host.contract.topics import (
    BROKER,
    CAPSULES_LOADED_TOPIC,
    COMPLETE_REPLY_PREFIX,
    COMPLETE_TOPIC,
    DESCRIBE_REPLIES,
    DESCRIBE_TOPIC,
    READ_REPLY_PREFIX,
    READ_REQUEST_TOPIC,
    RESOURCE_EVENTS,
    RESOURCE_UPDATED_EVENT,
    RESOURCE_UPDATED_TOPIC,
    TEMPLATES_REPLIES,
    TEMPLATES_TOPIC,
)
from astrid.host.contract.uri_template import UriTemplate
from astrid.host.limits import DEFAULT_LIMITS, DEFAULT_SUBSCRIPTION_LIMITS, Limits, SubscriptionLimits
from astrid.host.telemetry import metrics, tracing
from astrid.host.tuning import BROKER_TUNING

log = logging.getLogger("astrid.host.broker")

MessageHandler = Callable[[Message], None]


@dataclass
class BrokerStats:
    describe_rounds: int = 0
    templates_rounds: int = 0
    reads: int = 0
    completions: int = 0
    updates: int = 0  # announcements handed on to front-door clients
    updates_refused: int = 0  # announcements of a URI the announcer does not own, or malformed
    last_round_s: float = 0.0
    last_read_s: float = 0.0
    round_seconds: list[float] = field(default_factory=list)
    read_seconds: list[float] = field(default_factory=list)

    def _keep(self, values: list[float], value: float) -> None:
        values.append(value)
        del values[:-1000]

    def describe_round(self, seconds: float) -> None:
        self.describe_rounds += 1
        self.last_round_s = seconds
        self._keep(self.round_seconds, seconds)

    def templates_round(self, seconds: float) -> None:
        self.templates_rounds += 1  # its time is not kept: `last_round_s` is a describe round's


_Item = TypeVar("_Item", ResourceDefinition, ResourceTemplate)
_Snap = TypeVar("_Snap", Snapshot, TemplateSnapshot)


@dataclass(frozen=True)
class _Listing(Generic[_Item, _Snap]):
    """What differs between a principal's describe round and templates round: the rest is one code."""

    kind: LocalKind  # "describe": its round lock, span (`broker.describe`), round metric and log lines
    items: str  # "resources": what its log lines and span (`astrid.resources`) count
    topic: str  # the fan-out's request topic
    replies: str  # and the pattern of its replies
    merge: Callable[
        [Principal, Iterable[Message], Limits, UriAuthority, CapsuleNames, LocalEntries[_Item]], RoundOf[_Item]
    ]
    fan_out: FanOut[_Item]  # how its replies are checked (the host's static ones too, once: `accept_local`)
    key: Callable[[_Item], str]  # an entry's key (its declared freshness is kept by it)
    snapshot: Callable[..., _Snap]  # the snapshot type
    slots: Callable[[SnapshotCache], Slots[_Snap]]  # where the cache keeps it
    counted: Callable[[BrokerStats, float], None]  # a round done, in seconds
    hit_metric: str | None  # the cache metric a lookup counts under (None: not counted)

    def hit(self, hit: bool) -> None:
        if self.hit_metric is not None:
            metrics.cache(self.hit_metric, hit)


_RESOURCES = _Listing[ResourceDefinition, Snapshot](
    kind="describe",
    items="resources",
    topic=DESCRIBE_TOPIC,
    replies=DESCRIBE_REPLIES,
    merge=merge_round,
    fan_out=DESCRIBE,
    key=lambda definition: definition.uri,
    snapshot=Snapshot,
    slots=lambda cache: cache.resources,
    counted=BrokerStats.describe_round,
    hit_metric="snapshot",
)
_TEMPLATES = _Listing[ResourceTemplate, TemplateSnapshot](
    kind="templates",
    items="templates",
    topic=TEMPLATES_TOPIC,
    replies=TEMPLATES_REPLIES,
    merge=merge_templates,
    fan_out=TEMPLATES,
    key=lambda template: template.uri_template,
    snapshot=TemplateSnapshot,
    slots=lambda cache: cache.templates,
    counted=BrokerStats.templates_round,
    hit_metric=None,
)


class Broker:
    def __init__(
        self,
        bus: Bus,
        *,
        participant: Participant | None = None,
        limits: Limits = DEFAULT_LIMITS,
        trusted_ingress: Iterable[str] = (),
        authority: UriAuthority = OPEN,
        name_of: NameOf | None = None,
        subscription_limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS,
        local_replies: LocalReplies = NO_LOCAL_REPLIES,
    ) -> None:
        self.bus = bus
        # The static replies of the capsules of the kernel beside it, taken without a bus message each;
        # what the checks that do not depend on the principal made of them, by round kind.
        self.local_replies = local_replies
        self._local: dict[str, LocalEntries] = {}
        self.authority = authority  # who may serve which URIs (namespaces); OPEN: anyone, anything
        # Capsules by name in failures and logs (name_of: source-id -> name; None: source-ids)
        self.names = CapsuleNames(name_of)
        self.participant = participant or BROKER.participant()
        self.limits = limits
        self.cache = SnapshotCache()
        # Declared-fresh reads; every capsule-set change drops the principal's.
        self.reads = ReadCache()
        self.cache.on_invalidate(self.reads.invalidate)
        self.front_doors = FrontDoors(self, trusted_ingress)
        self.announcements = AnnouncementGate(subscription_limits)
        self.stats = BrokerStats()
        self._started = False

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> Broker:
        if self._started:
            return self
        # Invalidation is quick and must land before anyone lists again: inline.
        invalidation = Binding(
            self.participant, CAPSULES_LOADED_TOPIC, self._guard(self._on_capsules_loaded), inline=True
        )
        # Not inline: checking who owns a URI may take a describe round, never in a capsule's thread.
        events = Binding(self.participant, RESOURCE_EVENTS, self._guard(self._on_resource_event))
        self.bus.bind_all([*self.front_doors.bindings(self._guard), invalidation, events])
        self.local_replies.attach(self.participant.source_id)
        self._started = True
        return self

    def close(self) -> None:
        if self._started:
            self.local_replies.detach(self.participant.source_id)
            self.bus.unbind_owner(self.participant.source_id)
            self._started = False

    def _guard(self, handler: MessageHandler) -> MessageHandler:
        def run(message: Message) -> None:
            try:
                handler(message)
            except Exception:  # never let one request take the dispatcher thread down
                log.exception("broker failed on %s", message.topic)

        return run

    # -- describe --------------------------------------------------------------------

    def listed(self, principal: Principal, *, refresh: bool = False) -> tuple[ResourceDefinition, ...]:
        """The principal's resources as the snapshot holds them (empty for anyone not verified)."""
        if not principal.is_verified:
            log.info("list for %s answered empty: only a verified principal has resources", principal)
            return ()
        return self.snapshot(principal, refresh=refresh).resources

    def listed_if_fresh(self, principal: Principal) -> tuple[ResourceDefinition, ...] | None:
        """The principal's resources when a fresh snapshot is kept, found without waiting
        (no round, no lock held across a capsule call); None when a round is due."""
        if not principal.is_verified:
            return None
        hit = self.cache.resources.fresh(principal)
        if hit is None:
            return None
        metrics.cache("snapshot", True)
        return hit.resources

    def snapshot(self, principal: Principal, *, refresh: bool = False) -> Snapshot:
        if refresh:
            # The same refresh for both: whoever forces a new describe round
            # gets new templates too (on their next use), and no kept read.
            self.cache.templates.mark_stale(principal)
            self.reads.invalidate(principal)
        return self._kept_or_round(_RESOURCES, principal, refresh)

    # -- both rounds -------------------------------------------------------------------

    def _kept_or_round(self, listing: _Listing[_Item, _Snap], principal: Principal, refresh: bool) -> _Snap:
        """The principal's fresh snapshot of `listing`, else (and on `refresh`) a new round's.
        One round of a kind at a time per principal: who waited on another's round takes its snapshot."""
        slots = listing.slots(self.cache)
        if not refresh:
            hit = slots.fresh(principal)
            if hit is not None:
                listing.hit(True)
                return hit
        with self.cache.round_lock(principal, listing.kind):
            if not refresh:
                hit = slots.fresh(principal)  # another caller's round just finished
                listing.hit(hit is not None)
                if hit is not None:
                    return hit
            return self._round_snapshot(listing, principal)

    def _round_snapshot(self, listing: _Listing[_Item, _Snap], principal: Principal) -> _Snap:
        """One round of `listing` for `principal`, stored as its snapshot (a lost race keeps the previous one)."""
        slots = listing.slots(self.cache)
        generation = self.cache.generation(principal)
        result, receivers = self._observed_round(listing, principal)
        if result.empty_round and receivers > 0:
            # Capsules got the request but none answered in time: a lost race,
            # not "nothing listed". Keep what we had; try again next time.
            previous = slots.get(principal)
            if previous is not None:
                log.info(
                    "%s round for %s got no reply from %d receivers; keeping the previous snapshot (%d %s)",
                    listing.kind,
                    principal,
                    receivers,
                    len(previous.items),
                    listing.items,
                )
                slots.mark_stale(principal)
                return previous
            snapshot = listing.snapshot((), {}, stale=True, generation=generation)
            slots.store(principal, snapshot)
            return snapshot
        items, ages = split_freshness(result.items, listing.key)
        snapshot = listing.snapshot(items, dict(result.owners), stale=False, generation=generation, max_age=ages)
        slots.store(principal, snapshot)
        return snapshot

    def _fan_out(self, principal: Principal, topic: str, replies_pattern: str) -> tuple[list[Message], int, bool]:
        """Publish `{}` on `topic` as `principal` and drain the replies: (replies, receivers, all finished)."""
        # Subscribe before publishing: the bus is not durable.
        with self.bus.subscribe(self.participant, replies_pattern, principal_scope=principal) as replies:
            delivery = self.bus.publish(self.participant, topic, "{}", principal)
            finished = delivery.wait(self.limits.describe_window_s)
            messages: list[Message] = []
            while batch := replies.poll(BROKER_TUNING.drain_batch_messages):
                messages.extend(batch)
        return messages, delivery.receivers, finished

    def _observed_round(self, listing: _Listing[_Item, _Snap], principal: Principal) -> tuple[RoundOf[_Item], int]:
        """One round of `listing` in its span (`broker.<kind>`, with how many items it found),
        counted by how it finished."""
        with tracing.span(f"broker.{listing.kind}") as span:
            result, receivers, finished = self._merged_round(listing, principal)
            metrics.broker_round(listing.kind, finished)
            if span:
                _round_attributes(span, principal, receivers, len(result.replied), finished)
                span.set_attribute(f"astrid.{listing.items}", len(result.items))
        return result, receivers

    def _merged_round(self, listing: _Listing[_Item, _Snap], principal: Principal) -> tuple[RoundOf[_Item], int, bool]:
        """The fan-out of `listing` and its merge: (result, receivers, all finished)."""
        started = time.perf_counter()
        local = self._local_entries(listing, principal)
        messages, receivers, finished = self._fan_out(principal, listing.topic, listing.replies)
        result = listing.merge(principal, messages, self.limits, self.authority, self.names, local)
        receivers += len(local.replies)
        elapsed = time.perf_counter() - started
        listing.counted(self.stats, elapsed)
        log.info(
            "%s for %s: %d %s from %d/%d capsules in %.1f ms%s",
            listing.kind,
            principal,
            len(result.items),
            listing.items,
            len(result.replied),
            receivers,
            elapsed * 1000,
            "" if finished else f" (window of {self.limits.describe_window_s:g} s ended first)",
        )
        return result, receivers, finished

    def _local_entries(self, listing: _Listing[_Item, _Snap], principal: Principal) -> LocalEntries[_Item]:
        """The host's static replies for this round (a verified principal's only, as the host's
        handlers answer), checked once per set of replies."""
        if not principal.is_verified:
            return NO_LOCAL
        replies = self.local_replies.replies(listing.kind)
        if not replies:
            return NO_LOCAL
        kept = self._local.get(listing.kind)
        if kept is None or kept.replies is not replies:  # checked against this broker's limits, fixed
            kept = self._local[listing.kind] = accept_local(listing.fan_out, replies, self.limits, self.names)
        return kept

    # -- capsule-set changes -----------------------------------------------------------

    def invalidate(self, principal: Principal | None = None) -> None:
        """A capsule-set change: the describe and templates snapshots go stale together."""
        self.cache.invalidate(principal)

    def _on_capsules_loaded(self, message: Message) -> None:
        principal = message.principal
        if principal.kind in ("verified", "claimed") and principal.name:
            self.invalidate(principal)
            return
        # A system-wide announcement: invalidate the principals it names, or all.
        names: set[str] = set()
        try:
            for capsule in json.loads(message.payload).get("capsules", []):
                if isinstance(capsule, dict) and isinstance(capsule.get("principal"), str):
                    names.add(capsule["principal"])
        except (ValueError, AttributeError):
            names = set()
        if not names:
            self.invalidate(None)
        for name in names:
            self.invalidate(Principal.verified(name))

    # -- templates -------------------------------------------------------------------

    def templates(self, principal: Principal, *, refresh: bool = False) -> tuple[ResourceTemplate, ...]:
        """The principal's resource templates, sorted by uri_template (empty for anyone not verified)."""
        if not principal.is_verified:
            log.info("templates for %s answered empty: only a verified principal has templates", principal)
            return ()
        return self.template_snapshot(principal, refresh=refresh).templates

    def template_snapshot(self, principal: Principal, *, refresh: bool = False) -> TemplateSnapshot:
        if not principal.is_verified:
            return TemplateSnapshot(())
        return self._kept_or_round(_TEMPLATES, principal, refresh)

    # -- read ------------------------------------------------------------------------

    def read_resource(self, principal: Principal, uri: str) -> ReadOutcome:
        started = time.perf_counter()
        try:
            if not tracing.on:
                return self._read(principal, uri)
            with tracing.span("broker.read") as span:
                outcome = self._read(principal, uri)
                if span:
                    span.set_attributes({"astrid.principal": principal.name or str(principal), "mcp.resource.uri": uri})
                    if outcome.source_id is not None:
                        span.set_attribute("astrid.capsule", self.names.label(outcome.source_id))
                    if outcome.error is not None:
                        tracing.fail(span, str(outcome.error.code), outcome.error.message)
                return outcome
        finally:
            self._count_read(started)

    def _count_read(self, started: float) -> None:
        elapsed = time.perf_counter() - started
        self.stats.reads += 1
        self.stats.last_read_s = elapsed
        self.stats._keep(self.stats.read_seconds, elapsed)

    def start_read(self, principal: Principal, uri: str) -> StartedRead | None:
        """`read_resource` with its round started and not waited for, so safe on an event loop
        (`started_read.py`): a listed URI of a fresh snapshot, tracing and metrics off (their spans
        and rounds are made on the blocking path); None: `read_resource` does it all."""
        if tracing.on or metrics.on or self._refused_read(principal, uri) is not None:
            return None
        route = self._fresh_listed_route(principal, uri)
        if route is None:
            return None
        started = time.perf_counter()
        kept = self._kept(principal, uri, route)
        if kept is not None:
            read = StartedRead(None, None, lambda: kept, lambda: kept)
        else:
            epoch = self.reads.epoch(principal)
            opened = self._open_read_round(principal, uri, route)

            def settle() -> ReadOutcome | None:
                outcome, status, *_ = self._close_read_round(principal, uri, opened)
                return self._after_first_round(principal, uri, route, outcome, status, epoch)

            read = StartedRead(opened.replies, opened.drain, settle, lambda: self._read_again(principal, uri))
        read.when_done(lambda _: self._count_read(started))
        return read

    def kept_read(self, principal: Principal, uri: str) -> ReadOutcome | None:
        """A declared-fresh read kept for `principal`, found without waiting: a listed URI of a
        fresh snapshot only (no round, no templates, no capsule); None: `read_resource` decides.

        The same lookup `read_resource` starts with, so what it finds is what that would serve."""
        if not principal.is_verified or tracing.on:  # traced reads take the path that makes their spans
            return None
        route = self._fresh_listed_route(principal, uri)
        if route is None:
            return None
        kept = self._kept(principal, uri, route)
        if kept is not None:
            self.stats.reads += 1
        return kept

    def _fresh_listed_route(self, principal: Principal, uri: str) -> _Route | None:
        """The listed owner of `uri` in the principal's snapshot when it is not stale; else None
        (no round, no templates: found without waiting)."""
        snapshot = self.cache.resources.get(principal)
        if snapshot is None or snapshot.stale:
            return None
        owner = snapshot.owner_of(uri)
        if owner is None:
            return None
        return _Route(owner, via_template=False, stale=False, max_age_s=snapshot.max_age.get(uri))

    def _refused_read(self, principal: Principal, uri: str) -> ReadOutcome | None:
        """Why a read is refused before any round, or None."""
        if not principal.is_verified:
            return ReadOutcome.fail(
                FailureCode.DENIED, f"read of {uri} refused: the caller is not a verified principal"
            )
        if not isinstance(uri, str) or not uri:
            return ReadOutcome.fail(FailureCode.INVALID_REQUEST, "the uri is empty")
        if utf8_len(uri) > self.limits.uri_bytes:
            return ReadOutcome.fail(
                FailureCode.INVALID_REQUEST, f"the uri is longer than {self.limits.uri_bytes} bytes"
            )
        return None

    def _read(self, principal: Principal, uri: str) -> ReadOutcome:
        refused = self._refused_read(principal, uri)
        if refused is not None:
            return refused
        snapshot = self.cache.resources.get(principal)
        if snapshot is None:
            # The principal's first read: learn who lists what first, so a
            # listed URI is served by its listed owner and nobody else.
            snapshot = self.snapshot(principal)
        route = self._route(principal, snapshot, uri)
        kept = self._kept(principal, uri, route)
        if kept is not None:
            return kept
        epoch = self.reads.epoch(principal)
        outcome, status = self._read_once(principal, uri, route)
        settled = self._after_first_round(principal, uri, route, outcome, status, epoch)
        return settled if settled is not None else self._read_again(principal, uri)

    def _after_first_round(
        self, principal: Principal, uri: str, route: _Route, outcome: ReadOutcome, status: ReadStatus, epoch: int
    ) -> ReadOutcome | None:
        """The read's outcome after its first round, or None when `_read_again` decides."""
        if status in (ReadStatus.ANSWERED, ReadStatus.TIMED_OUT, ReadStatus.REFUSED):
            return self._keep(principal, uri, route, outcome, epoch)
        if status is ReadStatus.NO_REPLY and route.owner is not None and not route.stale:
            return owner_silent(uri, route.owner, via_template=route.via_template, names=self.names)
        return None  # no snapshot knew it, a stale one, the owner gone or MOVED: re-describe once

    def _read_again(self, principal: Principal, uri: str) -> ReadOutcome:
        """The snapshot did not know the uri, is stale, or names an owner that
        is no longer loaded (a capsule rebuilt under a read): the capsule set
        moved on. Re-describe once (which refreshes the templates too) and
        retry with whoever lists it, or whose template covers it, now."""
        snapshot = self.snapshot(principal, refresh=True)
        route = self._route(principal, snapshot, uri)
        if route.owner is None:
            return ReadOutcome.fail(FailureCode.NOT_FOUND, f"no capsule serves {uri}")
        epoch = self.reads.epoch(principal)
        outcome, status = self._read_once(principal, uri, route)
        if status is ReadStatus.NO_REPLY:
            return owner_silent(uri, route.owner, via_template=route.via_template, names=self.names)
        return self._keep(principal, uri, route, outcome, epoch)

    def _kept(self, principal: Principal, uri: str, route: _Route) -> FreshRead | None:
        """A kept read of `uri` from the owner that serves it now, if it declared freshness."""
        if route.owner is None or route.max_age_s is None or route.stale:
            return None
        hit = self.reads.get(principal, uri, route.owner)
        metrics.cache("fresh", hit is not None)
        if hit is not None:
            tracing.current().set_attribute("astrid.cache", "fresh")
            log.debug("read of %s for %s served from the read cache (%.1f s left)", uri, principal, hit.max_age_s)
        return hit

    def _keep(self, principal: Principal, uri: str, route: _Route, outcome: ReadOutcome, epoch: int) -> ReadOutcome:
        """Keep a successful read whose owner declared freshness, and say how long it stays fresh."""
        if outcome.error is not None or route.max_age_s is None or route.owner is None or route.stale:
            return outcome  # a stale route may name an owner that no longer serves the uri: promise nothing
        if outcome.source_id != route.owner or not outcome.contents:
            return outcome
        self.reads.store(principal, uri, route.owner, outcome, route.max_age_s, epoch)
        if self.reads.epoch(principal) != epoch:
            return outcome  # the capsule set changed under the read: promise nothing
        return FreshRead(contents=outcome.contents, source_id=outcome.source_id, max_age_s=route.max_age_s)

    def _route(self, principal: Principal, snapshot: Snapshot, uri: str) -> _Route:
        """Who serves `uri` (the precedence in the module docstring)."""
        listed = snapshot.owner_of(uri)
        if listed is not None:
            return _Route(listed, via_template=False, stale=snapshot.stale, max_age_s=snapshot.max_age.get(uri))
        templates = self.template_snapshot(principal)
        match = templates.route(uri)
        if match is not None:
            if log.isEnabledFor(logging.DEBUG):
                owner = self.names.label(match.owner, with_id=True)
                log.debug("read of %s for %s routed to %s by template %s", uri, principal, owner, match.template.text)
            return _Route(
                match.owner,
                via_template=True,
                stale=snapshot.stale or templates.stale,
                max_age_s=templates.max_age.get(match.template.text),
            )
        return _Route(None, via_template=False, stale=snapshot.stale or templates.stale)

    def _read_once(self, principal: Principal, uri: str, route: _Route) -> tuple[ReadOutcome, ReadStatus]:
        """One read broadcast (a span and a metric of its own)."""
        if not (tracing.on or metrics.on):
            outcome, status, *_ = self._broadcast_read(principal, uri, route)
            return outcome, status
        with tracing.span("broker.read.round") as span:
            outcome, status, asked, answered, finished = self._broadcast_read(principal, uri, route)
            metrics.broker_round("read", finished)
            if span:
                _round_attributes(span, principal, asked, answered, finished)
                span.set_attributes(
                    {
                        "astrid.read.status": status.value,
                        "astrid.read.route": "template" if route.via_template else "listed" if route.owner else "any",
                    }
                )
                if route.owner is not None:
                    span.set_attribute("astrid.read.owner", self.names.label(route.owner))
                if outcome.error is not None:
                    tracing.fail(span, str(outcome.error.code), outcome.error.message)
        return outcome, status

    def _broadcast_read(
        self, principal: Principal, uri: str, route: _Route
    ) -> tuple[ReadOutcome, ReadStatus, int, int, bool]:
        """One read broadcast; `route.owner` is the listed (or template) owner, if any.
        Also how many capsules it reached, how many answered, and whether every one finished."""
        opened = self._open_read_round(principal, uri, route)
        with opened.replies:
            if opened.drain is not None:
                wait_for(opened.drain)
        return self._close_read_round(principal, uri, opened)

    def _open_read_round(self, principal: Principal, uri: str, route: _Route) -> _ReadRound:
        """Publish the read request, its replies' subscription open (the caller closes it)."""
        correlation = uuid.uuid4().hex
        request, value = read_request(uri, correlation)
        replies = self.bus.subscribe(self.participant, READ_REPLY_PREFIX + correlation, principal_scope=principal)
        try:
            delivery = self.bus.publish(self.participant, READ_REQUEST_TOPIC, request, principal, parsed=value)
        except BaseException:
            replies.close()
            raise
        if route.owner is not None and route.owner not in delivery.reached:
            return _ReadRound(route, replies, delivery.receivers, None)  # the owner is gone: nothing to wait for
        collecting = Drain(
            replies,
            delivery,
            principal=principal,
            uri=uri,
            preferred=route.owner,
            window_s=self.limits.read_window_s,
            may_answer=lambda source: self.authority.may_serve(source, uri),
            names=self.names,
        )
        return _ReadRound(route, replies, delivery.receivers, collecting)

    def _close_read_round(
        self, principal: Principal, uri: str, opened: _ReadRound
    ) -> tuple[ReadOutcome, ReadStatus, int, int, bool]:
        """The outcome of a read round that is over, as `_broadcast_read` returns it."""
        route = opened.route
        if opened.drain is None:
            what = "whose template covers" if route.via_template else "that listed"
            gone = ReadOutcome.fail(FailureCode.NOT_FOUND, f"the capsule {what} {uri} is no longer loaded")
            return gone, ReadStatus.OWNER_GONE, opened.receivers, 0, True
        drained = opened.drain.result()
        outcome, status = resolve(
            drained,
            principal=principal,
            uri=uri,
            preferred=route.owner,
            window_s=self.limits.read_window_s,
            limits=self.limits,
            via_template=route.via_template,
            names=self.names,
        )
        # an answer from the listed owner ends the drain before the others finish: not the window's doing
        finished = drained.finished or (route.owner is not None and route.owner in drained.replies)
        return outcome, status, opened.receivers, len(drained.replies), finished

    # -- resource events (docs/contract/subscriptions.md §11) -------------------------

    def subscribable(self, principal: Principal, uri: str) -> str | None:
        """Who serves `uri` to `principal` (its listed owner, else the owner of the template
        that covers it), or None when the principal could not read it: not subscribable."""
        if not principal.is_verified or not isinstance(uri, str) or not uri or utf8_len(uri) > self.limits.uri_bytes:
            return None
        return self._owner_of(principal, uri, cached_only=False)

    def _owner_of(self, principal: Principal, uri: str, *, cached_only: bool) -> str | None:
        """The owner of `uri` for `principal`; `cached_only`: from the snapshots there are, fresh or not."""
        snapshot = self.cache.resources.get(principal) if cached_only else self.snapshot(principal)
        if snapshot is None:
            return None
        listed = snapshot.owner_of(uri)
        if listed is not None:
            return listed
        templates = self.cache.templates.get(principal) if cached_only else self.template_snapshot(principal)
        route = templates.route(uri) if templates is not None else None
        return route.owner if route is not None else None

    def _on_resource_event(self, message: Message) -> None:
        if message.topic != RESOURCE_UPDATED_TOPIC:
            log.debug(
                "resource event on %s from %s ignored: not one this broker knows", message.topic, message.source_id
            )
            return
        self.announced(message)

    def announced(self, message: Message) -> bool:
        """Check one `updated` announcement and hand it on; True when it was."""
        principal, source = message.principal, message.source_id
        label = self.names.label(source)
        if not principal.is_verified:
            log.debug("update announced by %s for %s dropped: not a verified principal", label, principal)
            return False
        if not self.announcements.allow(source, principal, label):
            return False
        try:
            uri = ResourceUpdated.model_validate(message.parsed(), context={"limits": self.limits}).uri
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            self.stats.updates_refused += 1
            if self.announcements.refused(source):
                log.warning("capsule %s announced an update that is not an `updated` record: %s", label, exc)
            return False
        if self.cache.resources.get(principal) is None:
            # Nobody has listed, read or subscribed as this principal: nobody can be told.
            log.debug("update of %s for %s dropped: the principal has no snapshot", uri, principal)
            return False
        owner = self._owner_of(principal, uri, cached_only=True)
        if owner != source and self._may_be_stale(principal):
            owner = self._owner_of(principal, uri, cached_only=False)  # the capsule set moved: ask again
        if owner != source:
            self.stats.updates_refused += 1
            if self.announcements.refused(source):
                log.warning(
                    "capsule %s announced an update of %s for %s, which it does not serve: refused "
                    "(said once per capsule; later refusals at debug level)",
                    label,
                    uri,
                    principal,
                )
            else:
                log.debug("update of %s for %s by %s refused: not its owner", uri, principal, label)
            return False
        # First: no kept read of the old content may answer the read this update prompts.
        self.reads.invalidate_uri(principal, uri)
        try:
            self.bus.publish(self.participant, RESOURCE_UPDATED_EVENT, ResourceUpdated(uri=uri).to_json(), principal)
        except BusError as exc:
            log.warning("cannot hand on the update of %s for %s: %s", uri, principal, exc)
            return False
        self.stats.updates += 1
        log.debug("update of %s for %s announced by %s", uri, principal, label)
        return True

    def _may_be_stale(self, principal: Principal) -> bool:
        snapshot, templates = self.cache.resources.get(principal), self.cache.templates.get(principal)
        return (
            snapshot is None
            or snapshot.stale
            or self.cache.resources.fresh(principal) is None
            or templates is None
            or self.cache.templates.fresh(principal) is None
        )

    # -- completion ------------------------------------------------------------------

    def complete(
        self,
        principal: Principal,
        uri_template: str,
        argument_name: str,
        argument_value: str,
        context: Mapping[str, str] | None = None,
    ) -> CompletionOutcome:
        """Values for variable `argument_name` of `uri_template`, from the template's owner only."""
        started = time.perf_counter()
        try:
            return self._complete(principal, uri_template, argument_name, argument_value, dict(context or {}))
        finally:
            self.stats.completions += 1
            log.debug(
                "completion of %s for %s in %.1f ms", uri_template, principal, (time.perf_counter() - started) * 1000
            )

    def _complete(
        self, principal: Principal, uri_template: str, name: str, value: str, context: dict[str, str]
    ) -> CompletionOutcome:
        if not principal.is_verified:
            return CompletionOutcome.fail(
                FailureCode.DENIED, f"completion of {uri_template} refused: the caller is not a verified principal"
            )
        limit = self.limits.uri_bytes
        if not uri_template or utf8_len(uri_template) > limit:
            return CompletionOutcome.fail(
                FailureCode.INVALID_REQUEST, f"the uri template is empty or over {limit} bytes"
            )
        if any(utf8_len(text) > limit for text in (name, value, *context.values())):
            return CompletionOutcome.fail(FailureCode.INVALID_REQUEST, f"an argument is longer than {limit} bytes")
        templates = self.template_snapshot(principal)
        owner = templates.owner_of(uri_template)
        if owner is None:
            return CompletionOutcome.fail(FailureCode.NOT_FOUND, f"no capsule declares the template {uri_template}")
        variables = {variable.name for variable in UriTemplate.parse(uri_template).variables}
        if name not in variables:
            return CompletionOutcome.fail(
                FailureCode.INVALID_REQUEST, f"{name!r} is not a variable of the template {uri_template}"
            )
        # Only the template's other variables travel on: the capsule never
        # sees names its template does not have.
        arguments = [Argument(name=k, value=v) for k, v in sorted(context.items()) if k in variables and k != name]
        request = CompleteRequest(
            uri_template=uri_template,
            argument_name=name,
            argument_value=value,
            context_arguments=arguments,
            correlation_id="pending",
        )
        outcome, status = self._complete_once(principal, request, owner)
        if status is not ReadStatus.OWNER_GONE:
            return outcome
        # The owner was rebuilt or removed since the snapshot: ask who owns it now, once.
        owner = self.template_snapshot(principal, refresh=True).owner_of(uri_template)
        if owner is None:
            return CompletionOutcome.fail(FailureCode.NOT_FOUND, f"no capsule declares the template {uri_template}")
        outcome, _ = self._complete_once(principal, request, owner)
        return outcome

    def _complete_once(
        self, principal: Principal, request: CompleteRequest, owner: str
    ) -> tuple[CompletionOutcome, ReadStatus]:
        """One completion broadcast; only `owner`'s reply counts."""
        correlation = uuid.uuid4().hex
        payload = request.model_copy(update={"correlation_id": correlation}).to_json()
        template = request.uri_template
        window = self.limits.read_window_s
        with self.bus.subscribe(
            self.participant, COMPLETE_REPLY_PREFIX + correlation, principal_scope=principal
        ) as sub:
            delivery = self.bus.publish(self.participant, COMPLETE_TOPIC, payload, principal)
            if owner not in delivery.reached:
                gone = CompletionOutcome.fail(
                    FailureCode.NOT_FOUND, f"the capsule that declared {template} is no longer loaded"
                )
                return gone, ReadStatus.OWNER_GONE
            drained = wait_for(
                Drain(
                    sub,
                    delivery,
                    principal=principal,
                    uri=template,
                    preferred=owner,
                    window_s=window,
                    what="completion",
                    names=self.names,
                )
            )
        others = sorted(source for source in drained.replies if source != owner)
        if others:
            log.warning(
                "completion of %s for %s: replies of %s refused (the template's owner is %s)",
                template,
                principal,
                ", ".join(self.names.label(source) for source in others),
                self.names.label(owner),
            )
        if owner in drained.replies:
            outcome = check_complete_reply(drained.replies[owner].payload, template, owner, self.limits, self.names)
            return outcome, ReadStatus.ANSWERED
        declares = f"capsule {self.names.label(owner)}, which declares {template},"
        if drained.finished:
            silent = CompletionOutcome.fail(
                FailureCode.CAPSULE_ERROR, f"{declares} finished without answering the completion", owner
            )
            return silent, ReadStatus.NO_REPLY
        timeout = CompletionOutcome.fail(FailureCode.TIMEOUT, f"{declares} did not answer within {window:g} s", owner)
        return timeout, ReadStatus.TIMED_OUT


def _round_attributes(span: object, principal: Principal, asked: int, answered: int, finished: bool) -> None:
    """A round's span: capsules asked, answered, and late (asked, silent when the window ended)."""
    span.set_attributes(  # type: ignore[attr-defined]
        {
            "astrid.principal": principal.name or str(principal),
            "astrid.round.asked": asked,
            "astrid.round.answered": answered,
            "astrid.round.late": 0 if finished else max(0, asked - answered),
            "astrid.round.window_ended": not finished,
        }
    )


@dataclass(frozen=True)
class _Route:
    """Who serves one read: the listed or template owner, or nobody in particular (broadcast)."""

    owner: str | None
    via_template: bool
    stale: bool  # the snapshot that decided it may be out of date
    max_age_s: float | None = None  # the freshness the owner declared for it (docs/contract/resources.md §5.7)


@dataclass(frozen=True)
class _ReadRound:
    """A read request published, its replies being heard."""

    route: _Route
    replies: Subscription
    receivers: int
    drain: Drain | None  # None: the route's owner was not among the receivers (gone)
