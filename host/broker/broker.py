"""The broker: a host-native bus participant that gathers and routes resources.

It knows the resource contract and nothing about MCP or wasm:

- a principal's resources come from a describe fan-out (scatter-gather),
  merged by `describe.merge_round` and cached per principal (`cache`);
- a read is a broadcast with self-filter (`read_round`), served by the URI's
  listed owner only; a snapshot that did not know the URI, is stale or names
  an owner that is gone is re-described once.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from astrid.host.broker.cache import Snapshot, SnapshotCache
from astrid.host.broker.describe import RoundResult, merge_round
from astrid.host.broker.frontdoor import FrontDoors
from astrid.host.broker.read_reply import ReadOutcome
from astrid.host.broker.read_round import DRAIN_BATCH, ReadStatus, drain, owner_silent, resolve
from astrid.host.bus import Binding, Bus, Message, Participant, Principal
from astrid.host.contract._base import utf8_len
from astrid.host.contract.frontdoor import FailureCode
from astrid.host.contract.resource import ReadRequest, ResourceDefinition
from astrid.host.contract.topics import (
    BROKER,
    CAPSULES_LOADED_TOPIC,
    DESCRIBE_REPLIES,
    DESCRIBE_TOPIC,
    READ_REPLY_PREFIX,
    READ_REQUEST_TOPIC,
)
from astrid.host.limits import DEFAULT_LIMITS, Limits

log = logging.getLogger("astrid.host.broker")

MessageHandler = Callable[[Message], None]


@dataclass
class BrokerStats:
    describe_rounds: int = 0
    reads: int = 0
    last_round_s: float = 0.0
    last_read_s: float = 0.0
    round_seconds: list[float] = field(default_factory=list)
    read_seconds: list[float] = field(default_factory=list)

    def _keep(self, values: list[float], value: float) -> None:
        values.append(value)
        del values[:-1000]


class Broker:
    def __init__(
        self,
        bus: Bus,
        *,
        participant: Participant | None = None,
        limits: Limits = DEFAULT_LIMITS,
        trusted_ingress: Iterable[str] = (),
    ) -> None:
        self.bus = bus
        self.participant = participant or BROKER.participant()
        self.limits = limits
        self.cache = SnapshotCache()
        self.front_doors = FrontDoors(self, trusted_ingress)
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
        self.bus.bind_all([*self.front_doors.bindings(self._guard), invalidation])
        self._started = True
        return self

    def close(self) -> None:
        if self._started:
            self.bus.unbind_owner(self.participant.source_id)
            self._started = False

    def trust_ingress(self, source_id: str) -> None:
        """Serve reads that arrive from `source_id` (e.g. the MCP server)."""
        self.front_doors.trust(source_id)

    def _guard(self, handler: MessageHandler) -> MessageHandler:
        def run(message: Message) -> None:
            try:
                handler(message)
            except Exception:  # never let one request take the dispatcher thread down
                log.exception("broker failed on %s", message.topic)

        return run

    # -- describe --------------------------------------------------------------------

    def list_resources(self, principal: Principal, *, refresh: bool = False) -> list[ResourceDefinition]:
        """The principal's resources: one page, sorted by uri."""
        return list(self.listed(principal, refresh=refresh))

    def listed(self, principal: Principal, *, refresh: bool = False) -> tuple[ResourceDefinition, ...]:
        """The principal's resources as the snapshot holds them (empty for anyone not verified)."""
        if not principal.is_verified:
            log.info("list for %s answered empty: only a verified principal has resources", principal)
            return ()
        return self.snapshot(principal, refresh=refresh).resources

    def snapshot(self, principal: Principal, *, refresh: bool = False) -> Snapshot:
        if not refresh:
            hit = self.cache.fresh(principal)
            if hit is not None:
                return hit
        with self.cache.round_lock(principal):
            if not refresh:
                hit = self.cache.fresh(principal)  # another caller's round just finished
                if hit is not None:
                    return hit
            return self._describe(principal)

    def _describe(self, principal: Principal) -> Snapshot:
        generation = self.cache.generation(principal)
        result, receivers = self._describe_round(principal)
        previous = self.cache.get(principal)
        if result.empty_round and receivers > 0:
            # Capsules got the request but none answered in time: a lost race,
            # not "no resources". Keep what we had; try again next time.
            if previous is not None:
                log.info(
                    "describe round for %s got no reply from %d receivers; "
                    "keeping the previous snapshot (%d resources)",
                    principal,
                    receivers,
                    len(previous.resources),
                )
                self.cache.mark_stale(principal)
                return previous
            snapshot = Snapshot((), {}, stale=True, generation=generation)
            self.cache.store(principal, snapshot)
            return snapshot
        snapshot = Snapshot(tuple(result.resources), dict(result.owners), stale=False, generation=generation)
        self.cache.store(principal, snapshot)
        return snapshot

    def _describe_round(self, principal: Principal) -> tuple[RoundResult, int]:
        window = self.limits.describe_window_s
        started = time.perf_counter()
        # Subscribe before publishing: the bus is not durable.
        with self.bus.subscribe(self.participant, DESCRIBE_REPLIES, principal_scope=principal) as replies:
            delivery = self.bus.publish(self.participant, DESCRIBE_TOPIC, "{}", principal)
            finished = delivery.wait(window)
            messages: list[Message] = []
            while batch := replies.poll(DRAIN_BATCH):
                messages.extend(batch)
        result = merge_round(principal, messages, self.limits)
        elapsed = time.perf_counter() - started
        self.stats.describe_rounds += 1
        self.stats.last_round_s = elapsed
        self.stats._keep(self.stats.round_seconds, elapsed)
        log.info(
            "describe for %s: %d resources from %d/%d capsules in %.1f ms%s",
            principal,
            len(result.resources),
            len(result.replied),
            delivery.receivers,
            elapsed * 1000,
            "" if finished else f" (window of {window:g} s ended first)",
        )
        return result, delivery.receivers

    def invalidate(self, principal: Principal | None = None) -> None:
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

    # -- read ------------------------------------------------------------------------

    def read_resource(self, principal: Principal, uri: str) -> ReadOutcome:
        started = time.perf_counter()
        try:
            return self._read(principal, uri)
        finally:
            elapsed = time.perf_counter() - started
            self.stats.reads += 1
            self.stats.last_read_s = elapsed
            self.stats._keep(self.stats.read_seconds, elapsed)

    def _read(self, principal: Principal, uri: str) -> ReadOutcome:
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

        snapshot = self.cache.get(principal)
        if snapshot is None:
            # The principal's first read: learn who lists what first, so a
            # listed URI is served by its listed owner and nobody else.
            snapshot = self.snapshot(principal)
        preferred = snapshot.owner_of(uri)
        outcome, status = self._read_once(principal, uri, preferred)
        if status in (ReadStatus.ANSWERED, ReadStatus.TIMED_OUT, ReadStatus.REFUSED):
            return outcome
        if status is ReadStatus.NO_REPLY and preferred is not None and not snapshot.stale:
            return owner_silent(uri, preferred)

        # The snapshot did not know the uri, is stale, or names an owner that
        # is no longer loaded (a capsule rebuilt under a read): the capsule set
        # moved on. Re-describe once and retry with whoever lists it now.
        snapshot = self.snapshot(principal, refresh=True)
        owner = snapshot.owner_of(uri)
        if owner is None:
            return ReadOutcome.fail(FailureCode.NOT_FOUND, f"no capsule serves {uri}")
        outcome, status = self._read_once(principal, uri, owner)
        return owner_silent(uri, owner) if status is ReadStatus.NO_REPLY else outcome

    def _read_once(self, principal: Principal, uri: str, preferred: str | None) -> tuple[ReadOutcome, ReadStatus]:
        """One read broadcast; `preferred` is the listed owner, if any."""
        correlation = uuid.uuid4().hex
        request = ReadRequest(uri=uri, correlation_id=correlation).to_json()
        window = self.limits.read_window_s
        with self.bus.subscribe(self.participant, READ_REPLY_PREFIX + correlation, principal_scope=principal) as sub:
            delivery = self.bus.publish(self.participant, READ_REQUEST_TOPIC, request, principal)
            if preferred is not None and preferred not in delivery.reached:
                gone = ReadOutcome.fail(FailureCode.NOT_FOUND, f"the capsule that listed {uri} is no longer loaded")
                return gone, ReadStatus.OWNER_GONE
            drained = drain(sub, delivery, principal=principal, uri=uri, preferred=preferred, window_s=window)
        return resolve(drained, principal=principal, uri=uri, preferred=preferred, window_s=window, limits=self.limits)
