"""A principal's resources and resource templates: describe and templates rounds, kept as snapshots.

Both are the same fan-out (`kinds.py` says what differs): publish `{}` as the
principal, drain the replies for the describe window, merge them by the
shared rules (`merge.merge`: one reply per source-id, limits, the URI
authority, the lexicographically first source-id on a collision), together
with the static replies of the capsules of the kernel beside the broker
(`contract.local_replies`, no bus message each), and keep the result per
principal (`cache`):

- a fresh snapshot is served as it is; one round of a kind at a time per
  principal, and whoever waited on another's round takes its snapshot;
- a round that reached capsules but got no acceptable reply is a lost race,
  not "nothing listed": the previous snapshot is kept (stale);
- the freshness an entry declares in its `meta` (`{"astrid": {"max_age_s"}}`)
  is taken out of what is handed out and kept beside the snapshot;
- a capsule-set change marks both snapshots of the principal (or everyone's)
  stale, and a forced describe marks the templates stale too.
"""

from __future__ import annotations

import logging
import time
from typing import Any, TypeVar

from astrid.host.broker.cache import Snapshot, TemplateSnapshot
from astrid.host.broker.kinds import DESCRIBE, TEMPLATES
from astrid.host.broker.merge import NO_LOCAL, FanOut, LocalEntries, RoundOf, accept_local
from astrid.host.broker.read_cache import split_freshness
from astrid.host.broker.shared import Shared
from astrid.host.bus import Message, Principal
from astrid.host.contract.local_replies import NO_LOCAL_REPLIES, LocalReplies
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.contract.topics import DESCRIBE_REPLIES, DESCRIBE_TOPIC, TEMPLATES_REPLIES, TEMPLATES_TOPIC
from astrid.host.telemetry import metrics, tracing
from astrid.host.tuning import BROKER_TUNING

log = logging.getLogger("astrid.host.broker")

_Item = TypeVar("_Item", ResourceDefinition, ResourceTemplate)


# Where each kind is asked and answered, by its round.
_TOPICS = {"describe": (DESCRIBE_TOPIC, DESCRIBE_REPLIES), "templates": (TEMPLATES_TOPIC, TEMPLATES_REPLIES)}


class Listings:
    def __init__(self, shared: Shared, local_replies: LocalReplies = NO_LOCAL_REPLIES) -> None:
        self.shared = shared
        # The static replies of the capsules of the kernel beside the broker, and what the checks
        # that do not depend on the principal made of them, by round kind.
        self.local_replies = local_replies
        self._local: dict[str, LocalEntries] = {}

    # -- resources -------------------------------------------------------------------

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
        hit = self.shared.cache.resources.fresh(principal)
        if hit is None:
            return None
        metrics.cache("snapshot", True)
        return hit.resources

    def snapshot(self, principal: Principal, *, refresh: bool = False) -> Snapshot:
        if refresh:
            # The same refresh for both: whoever forces a new describe round
            # gets new templates too (on their next use), and no kept read.
            self.shared.cache.templates.mark_stale(principal)
            self.shared.reads.invalidate(principal)
        return self._kept_or_round(DESCRIBE, principal, refresh)

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
        return self._kept_or_round(TEMPLATES, principal, refresh)

    # -- who owns a URI --------------------------------------------------------------

    def owner_of(self, principal: Principal, uri: str, *, cached_only: bool) -> str | None:
        """The owner of `uri` for `principal`: its listed owner, else the owner of the template that
        serves it; `cached_only`: from the snapshots there are, fresh or not (no round)."""
        cache = self.shared.cache
        snapshot = cache.resources.get(principal) if cached_only else self.snapshot(principal)
        if snapshot is None:
            return None
        listed = snapshot.owner_of(uri)
        if listed is not None:
            return listed
        templates = cache.templates.get(principal) if cached_only else self.template_snapshot(principal)
        route = templates.route(uri) if templates is not None else None
        return route.owner if route is not None else None

    def may_be_stale(self, principal: Principal) -> bool:
        """The capsule set may have moved since the principal's snapshots were taken."""
        cache = self.shared.cache
        snapshot, templates = cache.resources.get(principal), cache.templates.get(principal)
        return (
            snapshot is None
            or snapshot.stale
            or cache.resources.fresh(principal) is None
            or templates is None
            or cache.templates.fresh(principal) is None
        )

    # -- both rounds -------------------------------------------------------------------

    def _kept_or_round(self, kind: FanOut[_Item], principal: Principal, refresh: bool) -> Any:
        """The principal's fresh snapshot of `kind`, else (and on `refresh`) a new round's.
        One round of a kind at a time per principal: who waited on another's round takes its snapshot."""
        cache = self.shared.cache
        slots = cache.slots(kind.round)
        if not refresh:
            hit = slots.fresh(principal)
            if hit is not None:
                slots.counted(True)
                return hit
        with cache.round_lock(principal, kind.round):
            if not refresh:
                hit = slots.fresh(principal)  # another caller's round just finished
                slots.counted(hit is not None)
                if hit is not None:
                    return hit
            return self._round_snapshot(kind, principal)

    def _round_snapshot(self, kind: FanOut[_Item], principal: Principal) -> Any:
        """One round of `kind` for `principal`, stored as its snapshot (a lost race keeps the previous one)."""
        slots = self.shared.cache.slots(kind.round)
        generation = self.shared.cache.generation(principal)
        result, receivers = self._observed_round(kind, principal)
        if result.empty_round and receivers > 0:
            # Capsules got the request but none answered in time: a lost race,
            # not "nothing listed". Keep what we had; try again next time.
            previous = slots.get(principal)
            if previous is not None:
                log.info(
                    "%s round for %s got no reply from %d receivers; keeping the previous snapshot (%d %s)",
                    kind.round,
                    principal,
                    receivers,
                    len(previous.items),
                    kind.array,
                )
                slots.mark_stale(principal)
                return previous
            snapshot = slots.make((), {}, stale=True, generation=generation)
            slots.store(principal, snapshot)
            return snapshot
        items, ages = split_freshness(result.items, kind.key)
        snapshot = slots.make(items, dict(result.owners), stale=False, generation=generation, max_age=ages)
        slots.store(principal, snapshot)
        return snapshot

    def _fan_out(self, principal: Principal, topic: str, replies_pattern: str) -> tuple[list[Message], int, bool]:
        """Publish `{}` on `topic` as `principal` and drain the replies: (replies, receivers, all finished)."""
        bus, me = self.shared.bus, self.shared.participant
        # Subscribe before publishing: the bus is not durable.
        with bus.subscribe(me, replies_pattern, principal_scope=principal) as replies:
            delivery = bus.publish(me, topic, "{}", principal)
            finished = delivery.wait(self.shared.limits.describe_window_s)
            messages: list[Message] = []
            while batch := replies.poll(BROKER_TUNING.drain_batch_messages):
                messages.extend(batch)
        return messages, delivery.receivers, finished

    def _observed_round(self, kind: FanOut[_Item], principal: Principal) -> tuple[RoundOf[_Item], int]:
        """One round of `kind` in its span (`broker.<round>`, with how many items it found),
        counted by how it finished."""
        with tracing.span(f"broker.{kind.round}") as span:
            result, receivers, finished = self._merged_round(kind, principal)
            metrics.broker_round(kind.round, finished)
            if span:
                round_attributes(span, principal, receivers, len(result.replied), finished)
                span.set_attribute(f"astrid.{kind.array}", len(result.items))
        return result, receivers

    def _merged_round(self, kind: FanOut[_Item], principal: Principal) -> tuple[RoundOf[_Item], int, bool]:
        """The fan-out of `kind` and its merge: (result, receivers, all finished)."""
        shared = self.shared
        started = time.perf_counter()
        local = self._local_entries(kind, principal)
        messages, receivers, finished = self._fan_out(principal, *_TOPICS[kind.round])
        result = kind.merge(principal, messages, shared.limits, shared.authority, shared.names, local)
        receivers += len(local.replies)
        elapsed = time.perf_counter() - started
        shared.stats.round(kind.round, elapsed)
        log.info(
            "%s for %s: %d %s from %d/%d capsules in %.1f ms%s",
            kind.round,
            principal,
            len(result.items),
            kind.array,
            len(result.replied),
            receivers,
            elapsed * 1000,
            "" if finished else f" (window of {shared.limits.describe_window_s:g} s ended first)",
        )
        return result, receivers, finished

    def _local_entries(self, kind: FanOut[_Item], principal: Principal) -> LocalEntries[_Item]:
        """The host's static replies for this round (a verified principal's only, as the host's
        handlers answer), checked once per set of replies."""
        if not principal.is_verified:
            return NO_LOCAL
        replies = self.local_replies.replies(kind.round)
        if not replies:
            return NO_LOCAL
        kept = self._local.get(kind.round)
        if kept is None or kept.replies is not replies:  # checked against this broker's limits, fixed
            kept = self._local[kind.round] = accept_local(kind, replies, self.shared.limits, self.shared.names)
        return kept


def round_attributes(span: object, principal: Principal, asked: int, answered: int, finished: bool) -> None:
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
