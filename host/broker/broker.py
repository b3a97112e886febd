"""The broker: a host-native bus participant serving the resource front doors.

It knows the resource contract and nothing about MCP or wasm. It answers

- `astrid.v1.request.mcp.resources.list` `{req_id}` with the requesting
  principal's snapshot, gathered by a describe fan-out (scatter-gather);
- `astrid.v1.request.mcp.resource.read` `{req_id, uri}` by a read broadcast
  with self-filter, behind a confused-deputy gate;

each on `astrid.v1.response.<req_id>`, attributed to the requester's
principal. Its handlers run on a dispatcher thread and block while they drain:
the kernel runs host handlers on their own pool, apart from capsule calls.

Ending a drain early relies on the bus's `Delivery`: `wait()` returns once
every handler the message reached has finished, and a capsule publishes its
reply while it handles the request, so by then every reply is queued.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from astrid.host.broker.cache import Snapshot, SnapshotCache
from astrid.host.broker.describe import RoundResult, audit, merge_round
from astrid.host.broker.read import ReadOutcome, check_read_reply
from astrid.host.contract._base import utf8_len
from astrid.host.contract.events import CAPSULES_LOADED_TOPIC
from astrid.host.contract.frontdoor import (
    LIST_TOPIC,
    READ_TOPIC,
    ListResourcesReply,
    ListResourcesRequest,
    ReadResourceReply,
    ReadResourceRequest,
    reply_topic,
)
from astrid.host.contract.resource import ReadRequest, ResourceDefinition
from astrid.host.kernel.bus import Binding, Bus, BusError, Message, Participant, Principal, host_participant
from astrid.host.limits import DEFAULT_LIMITS, Limits
from astrid.host.topics import is_clean_segment

log = logging.getLogger("astrid.host.broker")

DESCRIBE_TOPIC = "resource.v1.request.describe"
DESCRIBE_REPLIES = "resource.v1.response.describe.*"
READ_REQUEST_TOPIC = "resource.v1.request.read"
READ_REPLY_PREFIX = "resource.v1.response.read."

# How often a read drain looks at the delivery between replies; bounds the
# extra latency of a not-found answer.
_READ_SLICE_S = 0.004
_DRAIN_BATCH = 4096
# Stands for the req_id in a cached list reply: as long as the longest req_id
# (128), so a reply trimmed to the bus limit still fits with the real one.
_REQ_ID_SLOT = ("req-id-slot-" + uuid.uuid4().hex).ljust(128, "x")
_LIST_PAYLOADS_KEPT = 256

BROKER_PUBLISH = ("resource.v1.request.*", "astrid.v1.response.*")
BROKER_SUBSCRIBE = ("resource.v1.response.*", "astrid.v1.request.mcp.*", CAPSULES_LOADED_TOPIC)


def broker_participant(source_id: str | None = None) -> Participant:
    return host_participant(
        "broker",
        source_id or f"broker-{uuid.uuid4().hex}",
        publish=BROKER_PUBLISH,
        subscribe=BROKER_SUBSCRIBE,
    )


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
        self.participant = participant or broker_participant()
        self.limits = limits
        self._trusted = set(trusted_ingress)
        self._trusted_lock = threading.Lock()
        self.cache = SnapshotCache()
        self._list_payloads: dict[Principal, tuple[tuple[ResourceDefinition, ...], str]] = {}
        self.stats = BrokerStats()
        self._started = False

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> "Broker":
        if self._started:
            return self
        me = self.participant
        # The front doors run in the requester's thread (it only waits for the
        # answer anyway): two thread switches fewer per request. Capsules can
        # never publish on them, so only host participants lend their threads.
        self.bus.bind(Binding(me, LIST_TOPIC, self._guard(self._on_list), inline=True))
        self.bus.bind(Binding(me, READ_TOPIC, self._guard(self._on_read), inline=True))
        # Invalidation is quick and must land before anyone lists again.
        self.bus.bind(Binding(me, CAPSULES_LOADED_TOPIC, self._guard(self._on_capsules_loaded), inline=True))
        self._started = True
        return self

    def close(self) -> None:
        if self._started:
            self.bus.unbind_owner(self.participant.source_id)
            self._started = False

    def trust_ingress(self, source_id: str) -> None:
        """Serve reads that arrive from `source_id` (e.g. the MCP server)."""
        with self._trusted_lock:
            self._trusted.add(source_id)

    def is_trusted(self, source_id: str) -> bool:
        with self._trusted_lock:
            return source_id in self._trusted

    def _guard(self, handler):
        def run(message: Message) -> None:
            try:
                handler(message)
            except Exception:  # never let one request take the dispatcher thread down
                log.exception("broker failed on %s", message.topic)

        return run

    # -- describe --------------------------------------------------------------------

    def list_resources(self, principal: Principal, *, refresh: bool = False) -> list[ResourceDefinition]:
        """The principal's resources: one page, sorted by uri."""
        return list(self._listed(principal, refresh=refresh))

    def _listed(self, principal: Principal, *, refresh: bool) -> tuple[ResourceDefinition, ...]:
        if principal.kind != "verified" or not principal.name:
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
                    "describe round for %s got no reply from %d receivers; keeping the previous snapshot (%d resources)",
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
            while batch := replies.poll(_DRAIN_BATCH):
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
        if principal.kind != "verified" or not principal.name:
            return ReadOutcome.fail("denied", f"read of {uri} refused: the caller is not a verified principal")
        if not isinstance(uri, str) or not uri:
            return ReadOutcome.fail("invalid_request", "the uri is empty")
        if utf8_len(uri) > self.limits.uri_bytes:
            return ReadOutcome.fail("invalid_request", f"the uri is longer than {self.limits.uri_bytes} bytes")

        snapshot = self.cache.get(principal)
        if snapshot is None:
            # The principal's first read: learn who lists what first, so a
            # listed URI is served by its listed owner and nobody else.
            snapshot = self.snapshot(principal)
        preferred = snapshot.owner_of(uri)
        outcome, status = self._read_once(principal, uri, preferred)
        if status in ("reply", "timeout", "refused"):
            return outcome
        if status == "no_reply" and preferred is not None and not snapshot.stale:
            return self._owner_silent(uri, preferred)

        # The snapshot did not know the uri, is stale, or names an owner that
        # is no longer loaded (a capsule rebuilt under a read): the capsule set
        # moved on. Re-describe once and retry with whoever lists it now.
        snapshot = self.snapshot(principal, refresh=True)
        owner = snapshot.owner_of(uri)
        if owner is None:
            return ReadOutcome.fail("not_found", f"no capsule serves {uri}")
        outcome, status = self._read_once(principal, uri, owner)
        return self._owner_silent(uri, owner) if status == "no_reply" else outcome

    @staticmethod
    def _owner_silent(uri: str, owner: str) -> ReadOutcome:
        return ReadOutcome.fail(
            "capsule_error", f"the capsule that lists {uri} ({owner}) finished without answering the read", owner
        )

    def _read_once(self, principal: Principal, uri: str, preferred: str | None) -> tuple[ReadOutcome, str]:
        """One read broadcast: (outcome, "reply" | "no_reply" | "timeout" | "refused" | "owner_gone").

        "owner_gone": the listed owner was not among the receivers (unloaded
        or replaced since the snapshot); other capsules' replies are refused.
        """
        correlation = uuid.uuid4().hex
        request = ReadRequest(uri=uri, correlation_id=correlation).to_json()
        window = self.limits.read_window_s
        deadline = time.monotonic() + window
        replies: dict[str, Message] = {}

        def take(message: Message) -> bool:
            """Record a reply; True when it ends the read."""
            if message.principal != principal:
                log.warning(
                    "read reply from %s dropped: attributed to %s, not %s", message.source_id, message.principal, principal
                )
                return False
            if message.source_id in replies:
                log.warning("second read reply from %s for %s dropped", message.source_id, uri)
                return False
            replies[message.source_id] = message
            # An unlisted uri waits for every receiver: who serves it must not
            # depend on who answers fastest.
            return message.source_id == preferred

        with self.bus.subscribe(self.participant, READ_REPLY_PREFIX + correlation, principal_scope=principal) as sub:
            delivery = self.bus.publish(self.participant, READ_REQUEST_TOPIC, request, principal)
            if preferred is not None and preferred not in delivery.reached:
                gone = ReadOutcome.fail("not_found", f"the capsule that listed {uri} is no longer loaded")
                return gone, "owner_gone"
            ended = False
            while not ended:
                finished = delivery.finished
                for message in sub.poll(_DRAIN_BATCH):
                    if take(message):
                        ended = True
                        break
                if ended or finished:
                    # every receiver is done and its replies were polled above
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                message = sub.recv(min(remaining, _READ_SLICE_S))
                if message is not None and take(message):
                    ended = True
            finished = delivery.finished

        if preferred is not None and preferred in replies:
            return check_read_reply(replies[preferred].payload, uri, preferred, self.limits), "reply"
        if preferred is not None and replies:
            # A listed URI is served by its listed owner only: another
            # capsule's answer (it saw the broadcast) is never a substitute.
            log.warning(
                "read of %s for %s: the listed owner %s did not answer; replies of %s refused",
                uri,
                principal,
                preferred,
                ", ".join(sorted(replies)),
            )
            if finished:
                failure = ReadOutcome.fail(
                    "capsule_error", f"the capsule that lists {uri} ({preferred}) finished without answering", preferred
                )
            else:
                failure = ReadOutcome.fail(
                    "timeout", f"the capsule that lists {uri} ({preferred}) did not answer within {window:g} s", preferred
                )
            return failure, "refused"
        if replies:
            # An unlisted URI (a family member): as on a describe collision,
            # the lexicographically first source-id wins, whatever the timing.
            source, *others = sorted(replies)
            for other in others:
                audit.warning(
                    "read uri collision: uri=%s principal=%s winner=%s loser=%s "
                    "(an unlisted uri; the lexicographically first source-id wins)",
                    uri,
                    principal,
                    source,
                    other,
                )
            if not finished:
                log.warning("read of %s for %s: the window ended before every capsule finished", uri, principal)
            return check_read_reply(replies[source].payload, uri, source, self.limits), "reply"
        if finished:
            return ReadOutcome.fail("not_found", f"no capsule serves {uri}"), "no_reply"
        return (
            ReadOutcome.fail("timeout", f"no capsule answered the read of {uri} within {window:g} s"),
            "timeout",
        )

    # -- front doors -------------------------------------------------------------------

    def _on_list(self, message: Message) -> None:
        try:
            request = ListResourcesRequest.model_validate(json.loads(message.payload))
        except (ValueError, ValidationError) as exc:
            log.warning("unanswerable list request from %s: %s", message.source_id, _reason(exc))
            return
        started = time.perf_counter()
        try:
            resources = self._listed(message.principal, refresh=request.refresh)
        except Exception:
            log.exception("resources.list for %s failed", message.principal)
            failed = ReadOutcome.fail("internal", "the broker failed to list resources; see its log")
            reply = ListResourcesReply(req_id=request.req_id, error=failed.error).to_json()
            self._publish_reply(request.req_id, reply, message.principal)
            return
        payload = self._list_payload(request.req_id, resources, message.principal)
        self._publish_reply(request.req_id, payload, message.principal)
        log.info(
            "resources.list for %s: %d resources in %.1f ms",
            message.principal,
            len(resources),
            (time.perf_counter() - started) * 1000,
        )

    def _list_payload(self, req_id: str, resources: tuple[ResourceDefinition, ...], principal: Principal) -> str:
        """The list reply. A warm list repeats the snapshot's very tuple, so
        its JSON is made once per snapshot and only the req_id is put in."""
        cached = self._list_payloads.get(principal)
        if cached is None or cached[0] is not resources:
            if len(self._list_payloads) >= _LIST_PAYLOADS_KEPT:
                self._list_payloads.clear()
            cached = self._list_payloads[principal] = (resources, self._list_template(resources))
        return cached[1].replace(_REQ_ID_SLOT, req_id, 1)

    def _list_template(self, resources: tuple[ResourceDefinition, ...]) -> str:
        payload = ListResourcesReply(req_id=_REQ_ID_SLOT, resources=list(resources)).to_json()
        limit = self.bus.max_payload_bytes
        if utf8_len(payload) <= limit:
            return payload
        # One page must fit one bus message: keep the longest uri-ordered prefix that does.
        budget = limit - utf8_len(ListResourcesReply(req_id=_REQ_ID_SLOT, resources=[]).to_json()) - 16
        kept: list[ResourceDefinition] = []
        for resource in resources:
            size = utf8_len(resource.to_json()) + 1
            if size > budget:
                break
            budget -= size
            kept.append(resource)
        log.warning(
            "resources.list: %d of %d resources dropped to fit one %d-byte bus message",
            len(resources) - len(kept),
            len(resources),
            limit,
        )
        return ListResourcesReply(req_id=_REQ_ID_SLOT, resources=kept).to_json()

    def _on_read(self, message: Message) -> None:
        try:
            data = json.loads(message.payload)
        except ValueError:
            data = None
        req_id = data.get("req_id") if isinstance(data, dict) else None
        if not is_clean_segment(req_id) or len(req_id) > 128:
            log.warning("unanswerable read request from %s: no usable req_id", message.source_id)
            return
        raw_uri = data.get("uri") if isinstance(data.get("uri"), str) else ""
        try:
            request = ReadResourceRequest.model_validate(data)
        except ValidationError as exc:
            self._reply_read(req_id, raw_uri, ReadOutcome.fail("invalid_request", _reason(exc)), message.principal)
            return

        principal = message.principal
        started = time.perf_counter()
        # Confused-deputy gate: only a trusted ingress (the MCP server) may ask,
        # and only for a verified principal; anything else fails closed.
        if not self.is_trusted(message.source_id):
            log.warning("read of %s from %s denied: not a trusted ingress", request.uri, message.source_id)
            outcome = ReadOutcome.fail("denied", "reads are served only to a trusted ingress")
        elif principal.kind != "verified" or not principal.name:
            log.warning("read of %s for %s denied: no verified principal", request.uri, principal)
            outcome = ReadOutcome.fail("denied", "reads are served only for a verified principal")
        else:
            try:
                outcome = self.read_resource(principal, request.uri)
            except Exception:
                log.exception("resource.read %s for %s failed", request.uri, principal)
                outcome = ReadOutcome.fail("internal", "the broker failed to read the resource; see its log")
        self._reply_read(req_id, request.uri, outcome, principal)
        log.info(
            "resource.read %s for %s: %s in %.1f ms",
            request.uri,
            principal,
            outcome.error.code if outcome.error else f"{len(outcome.contents)} chunks",
            (time.perf_counter() - started) * 1000,
        )

    def _reply_read(self, req_id: str, uri: str, outcome: ReadOutcome, principal: Principal) -> None:
        reply = ReadResourceReply(req_id=req_id, uri=uri, contents=list(outcome.contents), error=outcome.error)
        try:
            self.bus.publish(self.participant, reply_topic(req_id), reply.to_json(), principal)
        except BusError as exc:
            log.warning("read reply for %s refused by the bus (%s); answering over_limit", uri, exc)
            failed = ReadOutcome.fail("over_limit", f"the contents of {uri} do not fit one bus message")
            self._publish_reply(
                req_id,
                ReadResourceReply(req_id=req_id, uri=uri, error=failed.error).to_json(),
                principal,
            )

    def _publish_reply(self, req_id: str, payload: str, principal: Principal) -> None:
        try:
            self.bus.publish(self.participant, reply_topic(req_id), payload, principal)
        except BusError as exc:
            log.error("cannot publish the reply for %s: %s", req_id, exc)


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False, include_input=False)
        if errors:
            where = ".".join(str(part) for part in errors[0]["loc"])
            return f"{where}: {errors[0]['msg']}" if where else errors[0]["msg"]
    return str(exc)
