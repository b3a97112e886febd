"""The broker's front doors: the requests a front-door client sends, answered.

- `astrid.v1.request.mcp.resources.list` `{req_id, refresh}` gets the
  requesting principal's snapshot;
- `astrid.v1.request.mcp.resource.read` `{req_id, uri}` gets a read, behind a
  confused-deputy gate: only a trusted ingress (the MCP server's source-id)
  may ask, and only for a verified principal; anything else fails closed;
- `astrid.v1.request.mcp.resources.templates` `{req_id, refresh}` gets the
  requesting principal's templates (not gated, like a list);
- `astrid.v1.request.mcp.completion.complete` `{req_id, uri_template,
  argument_name, argument_value, context_arguments}` gets a completion from
  the template's owner, behind the same gate as a read.

Each is answered on `astrid.v1.response.<req_id>`, attributed to the
requester's principal. The handlers run in the requester's thread (it only
waits for the answer anyway): two thread switches fewer per request.
Capsules can never publish on the front doors, so only host participants lend
their threads.

One more door is a call only, with no bus topic: `subscribable`, whether a
principal could read a URI (listed for it, or covered by a template it sees)
and who serves it, behind the read gate. The MCP server asks it before it
takes a subscription (docs/contract/subscriptions.md §11).

Each door is also a plain call (`listed`, `read`, `templates`, `complete`)
with typed values: the bus handlers above parse, call it and serialize,
and `direct.BrokerClient` (what the MCP server holds) calls it with no JSON
and no bus at all. The gate and the log lines are the same either way.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from pydantic import ValidationError

from astrid.host.broker.complete import CompletionOutcome
from astrid.host.broker.read_cache import max_age_of
from astrid.host.broker.read_reply import ReadOutcome
from astrid.host.broker.started_read import StartedRead
from astrid.host.bus import Binding, BusError, Message, Principal
from astrid.host.bus.topics import is_clean_segment
from astrid.host.contract._base import utf8_len
from astrid.host.contract.frontdoor import (
    CompletionReply,
    CompletionRequest,
    FailureCode,
    FrontDoorFailure,
    ListResourcesReply,
    ListResourcesRequest,
    ListTemplatesReply,
    ListTemplatesRequest,
    ReadResourceReply,
    ReadResourceRequest,
)
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.contract.topics import (
    FRONT_DOOR_COMPLETE,
    FRONT_DOOR_LIST,
    FRONT_DOOR_READ,
    FRONT_DOOR_TEMPLATES,
    reply_topic,
)
from astrid.host.tuning import BROKER_TUNING

if TYPE_CHECKING:
    from astrid.host.broker.broker import Broker

log = logging.getLogger("astrid.host.broker")

_Item = TypeVar("_Item", ResourceDefinition, ResourceTemplate)
_Request = TypeVar("_Request", ListResourcesRequest, ListTemplatesRequest)

# Stands for the req_id in a cached list reply: as long as the longest req_id
# (128), so a reply trimmed to the bus limit still fits with the real one.
_REQ_ID_SLOT = ("req-id-slot-" + uuid.uuid4().hex).ljust(128, "x")


class FrontDoors:
    """The list, read, templates and completion front doors of one broker."""

    def __init__(self, broker: Broker, trusted_ingress: Iterable[str] = ()) -> None:
        self.broker = broker
        self._trusted = set(trusted_ingress)
        self._trusted_lock = threading.Lock()
        self._list_payloads: dict[Principal, tuple[tuple[ResourceDefinition, ...], str]] = {}

    def bindings(self, guard: Callable[[Callable[[Message], None]], Callable[[Message], None]]) -> list[Binding]:
        me = self.broker.participant
        return [
            Binding(me, FRONT_DOOR_LIST, guard(self.on_list), inline=True),
            Binding(me, FRONT_DOOR_READ, guard(self.on_read), inline=True),
            Binding(me, FRONT_DOOR_TEMPLATES, guard(self.on_templates), inline=True),
            Binding(me, FRONT_DOOR_COMPLETE, guard(self.on_complete), inline=True),
        ]

    def trust(self, source_id: str) -> None:
        """Serve reads that arrive from `source_id` (e.g. the MCP server)."""
        with self._trusted_lock:
            self._trusted.add(source_id)

    def is_trusted(self, source_id: str) -> bool:
        with self._trusted_lock:
            return source_id in self._trusted

    def _who(self, message: Message) -> str:
        """The sender, for the log: a capsule by name (see `names`), anyone else by source-id."""
        return self.broker.names.label(message.source_id)

    def _request(self, model: type[_Request], message: Message, what: str) -> _Request | None:
        """The request `message` carries; None (and a log line) when it cannot be answered."""
        try:
            return model.model_validate(json.loads(message.payload))
        except (ValueError, ValidationError) as exc:
            log.warning("unanswerable %s request from %s: %s", what, self._who(message), _reason(exc))
            return None

    # -- list ---------------------------------------------------------------------------

    def on_list(self, message: Message) -> None:
        request = self._request(ListResourcesRequest, message, "list")
        if request is None:
            return
        try:
            resources = self.listed(message.principal, refresh=request.refresh)
        except Exception as exc:
            failed = ReadOutcome.fail(FailureCode.INTERNAL, broker_failed("list resources", exc, message.principal))
            reply = ListResourcesReply(req_id=request.req_id, error=failed.error).to_json()
            self._publish_reply(request.req_id, reply, message.principal)
            return
        payload = self._list_payload(request.req_id, resources, message.principal)
        self._publish_reply(request.req_id, payload, message.principal)

    def listed(self, principal: Principal, *, refresh: bool = False) -> tuple[ResourceDefinition, ...]:
        """The list front door as a call: `principal`'s snapshot (raises when the broker fails)."""
        started = time.perf_counter()
        resources = self.broker.listed(principal, refresh=refresh)
        log.info(
            "resources.list for %s: %d resources in %.1f ms",
            principal,
            len(resources),
            (time.perf_counter() - started) * 1000,
        )
        return resources

    def listed_now(self, principal: Principal) -> tuple[ResourceDefinition, ...] | None:
        """`listed` when the snapshot is fresh, without waiting; None when a describe round is due."""
        started = time.perf_counter()
        resources = self.broker.listed_if_fresh(principal)
        if resources is not None:
            elapsed_ms = (time.perf_counter() - started) * 1000
            log.info("resources.list for %s: %d resources in %.1f ms", principal, len(resources), elapsed_ms)
        return resources

    def _list_payload(self, req_id: str, resources: tuple[ResourceDefinition, ...], principal: Principal) -> str:
        """The list reply. A warm list repeats the snapshot's very tuple, so
        its JSON is made once per snapshot and only the req_id is put in."""
        cached = self._list_payloads.get(principal)
        if cached is None or cached[0] is not resources:
            if len(self._list_payloads) >= BROKER_TUNING.list_payloads_kept:
                self._list_payloads.clear()
            cached = self._list_payloads[principal] = (resources, self._list_template(resources))
        return cached[1].replace(_REQ_ID_SLOT, req_id, 1)

    def _list_template(self, resources: tuple[ResourceDefinition, ...]) -> str:
        # One page must fit one bus message: keep the longest uri-ordered prefix that does.
        return self._fitted(
            resources,
            lambda kept: ListResourcesReply(req_id=_REQ_ID_SLOT, resources=list(kept)).to_json(),
            "resources.list",
        )

    # -- read ---------------------------------------------------------------------------

    def on_read(self, message: Message) -> None:
        usable = _with_req_id(message.payload)
        if usable is None:
            log.warning("unanswerable read request from %s: no usable req_id", self._who(message))
            return
        data, req_id = usable
        uri = data.get("uri")
        raw_uri = uri if isinstance(uri, str) else ""
        try:
            request = ReadResourceRequest.model_validate(data)
        except ValidationError as exc:
            invalid = ReadOutcome.fail(FailureCode.INVALID_REQUEST, _reason(exc))
            self._reply_read(req_id, raw_uri, invalid, message.principal)
            return

        trusted = self.is_trusted(message.source_id)
        outcome = self.read(message.principal, request.uri, trusted=trusted, asker=self._who(message))
        self._reply_read(req_id, request.uri, outcome, message.principal)

    def read(self, principal: Principal, uri: str, *, trusted: bool, asker: str = "a caller") -> ReadOutcome:
        """The read front door as a call, behind the confused-deputy gate (`trusted`: a trusted ingress asks;
        `asker` names it in the log)."""
        started = time.perf_counter()
        denied = self._gate(trusted, principal, "read", uri, asker)
        if denied is not None:
            outcome = ReadOutcome(error=denied)
        else:
            try:
                outcome = self.broker.read_resource(principal, uri)
            except Exception as exc:
                outcome = ReadOutcome.fail(FailureCode.INTERNAL, broker_failed("read the resource", exc, principal))
        _log_read(uri, principal, outcome, started)
        return outcome

    def start_read(
        self, principal: Principal, uri: str, *, trusted: bool, asker: str = "a caller"
    ) -> StartedRead | None:
        """`read` started without waiting (behind the same gate), when the broker can; else None."""
        if self._gate(trusted, principal, "read", uri, asker) is not None:
            return None  # `read` refuses it, and says so
        started = time.perf_counter()
        read = self.broker.start_read(principal, uri)
        if read is not None:
            read.when_done(lambda outcome: _log_read(uri, principal, outcome, started))
        return read

    def kept_read(
        self, principal: Principal, uri: str, *, trusted: bool, asker: str = "a caller"
    ) -> ReadOutcome | None:
        """`read` when a declared-fresh copy is kept, without waiting (behind the same gate); else None."""
        if self._gate(trusted, principal, "read", uri, asker) is not None:
            return None  # `read` refuses it, and says so
        started = time.perf_counter()
        outcome = self.broker.kept_read(principal, uri)
        if outcome is not None:
            elapsed_ms = (time.perf_counter() - started) * 1000
            log.info("resource.read %s for %s: %d chunks in %.1f ms", uri, principal, len(outcome.contents), elapsed_ms)
        return outcome

    def _reply_read(self, req_id: str, uri: str, outcome: ReadOutcome, principal: Principal) -> None:
        reply = ReadResourceReply(
            req_id=req_id,
            uri=uri,
            contents=list(outcome.contents),
            error=outcome.error,
            max_age_s=max_age_of(outcome),
        )
        try:
            self.broker.bus.publish(self.broker.participant, reply_topic(req_id), reply.to_json(), principal)
        except BusError as exc:
            log.warning("read reply for %s refused by the bus (%s); answering over_limit", uri, exc)
            failed = ReadOutcome.fail(FailureCode.OVER_LIMIT, f"the contents of {uri} do not fit one bus message")
            too_big = ReadResourceReply(req_id=req_id, uri=uri, error=failed.error).to_json()
            self._publish_reply(req_id, too_big, principal)

    def _gate(
        self, trusted: bool, principal: Principal, what: str, subject: str, asker: str
    ) -> FrontDoorFailure | None:
        """The confused-deputy gate: a trusted ingress and a verified principal, else why not.

        `what` is the kind of request ("read"), `subject` what it names, `asker` who asks (for the log)."""
        if not trusted:
            log.warning("%s of %s from %s denied: not a trusted ingress", what, subject, asker)
            return FrontDoorFailure(code=FailureCode.DENIED, message=f"{what}s are served only to a trusted ingress")
        if not principal.is_verified:
            log.warning("%s of %s for %s denied: no verified principal", what, subject, principal)
            return FrontDoorFailure(
                code=FailureCode.DENIED, message=f"{what}s are served only for a verified principal"
            )
        return None

    # -- subscriptions (a call only) -----------------------------------------------------

    def subscribable(self, principal: Principal, uri: str, *, trusted: bool, asker: str = "a caller") -> str | None:
        """Who serves `uri` to `principal` when it could read it, else None (and None behind the gate).
        Raises when the broker itself fails."""
        started = time.perf_counter()
        if self._gate(trusted, principal, "subscription", uri, asker) is not None:
            return None
        owner = self.broker.subscribable(principal, uri)
        log.info(
            "subscribable %s for %s: %s in %.1f ms",
            uri,
            principal,
            "yes" if owner is not None else "no",
            (time.perf_counter() - started) * 1000,
        )
        return owner

    # -- templates ----------------------------------------------------------------------

    def on_templates(self, message: Message) -> None:
        request = self._request(ListTemplatesRequest, message, "templates")
        if request is None:
            return
        try:
            templates = self.templates(message.principal, refresh=request.refresh)
        except Exception:
            failed = FrontDoorFailure(
                code=FailureCode.INTERNAL, message="the broker failed to list templates; see its log"
            )
            self._publish_reply(
                request.req_id, ListTemplatesReply(req_id=request.req_id, error=failed).to_json(), message.principal
            )
            return
        payload = self._fitted(
            templates,
            lambda kept: ListTemplatesReply(req_id=request.req_id, templates=list(kept)).to_json(),
            "resources.templates",
        )
        self._publish_reply(request.req_id, payload, message.principal)

    def templates(self, principal: Principal, *, refresh: bool = False) -> tuple[ResourceTemplate, ...]:
        """The templates front door as a call (raises, logged, when the broker fails)."""
        started = time.perf_counter()
        try:
            templates = self.broker.templates(principal, refresh=refresh)
        except Exception:
            log.exception("resources.templates for %s failed", principal)
            raise
        log.info(
            "resources.templates for %s: %d templates in %.1f ms",
            principal,
            len(templates),
            (time.perf_counter() - started) * 1000,
        )
        return templates

    # -- completion ---------------------------------------------------------------------

    def on_complete(self, message: Message) -> None:
        usable = _with_req_id(message.payload)
        if usable is None:
            log.warning("unanswerable completion request from %s: no usable req_id", self._who(message))
            return
        data, req_id = usable
        principal = message.principal
        try:
            request = CompletionRequest.model_validate(data)
        except ValidationError as exc:
            invalid = CompletionOutcome.fail(FailureCode.INVALID_REQUEST, _reason(exc))
            self._reply_complete(req_id, invalid, principal)
            return
        context = {argument.name: argument.value for argument in request.context_arguments}
        outcome = self.complete(
            principal,
            request.uri_template,
            request.argument_name,
            request.argument_value,
            context,
            trusted=self.is_trusted(message.source_id),
            asker=self._who(message),
        )
        self._reply_complete(req_id, outcome, principal)

    def complete(
        self,
        principal: Principal,
        uri_template: str,
        argument_name: str,
        argument_value: str,
        context: dict[str, str],
        *,
        trusted: bool,
        asker: str = "a caller",
    ) -> CompletionOutcome:
        """The completion front door as a call, behind the same gate as a read."""
        started = time.perf_counter()
        denied = self._gate(trusted, principal, "completion", uri_template, asker)
        if denied is not None:
            outcome = CompletionOutcome(error=denied)
        else:
            try:
                outcome = self.broker.complete(principal, uri_template, argument_name, argument_value, context)
            except Exception:
                log.exception("completion.complete %s for %s failed", uri_template, principal)
                outcome = CompletionOutcome.fail(FailureCode.INTERNAL, "the broker failed to complete; see its log")
        log.info(
            "completion.complete %s for %s: %s in %.1f ms",
            uri_template,
            principal,
            outcome.error.code.value if outcome.error else f"{len(outcome.values)} values",
            (time.perf_counter() - started) * 1000,
        )
        return outcome

    def _reply_complete(self, req_id: str, outcome: CompletionOutcome, principal: Principal) -> None:
        if outcome.error is not None:
            reply = CompletionReply(req_id=req_id, error=outcome.error)
        else:
            reply = CompletionReply(
                req_id=req_id, values=list(outcome.values), total=outcome.total, has_more=outcome.has_more
            )
        try:
            self.broker.bus.publish(self.broker.participant, reply_topic(req_id), reply.to_json(), principal)
        except BusError as exc:
            log.warning("completion reply for %s refused by the bus (%s); answering over_limit", req_id, exc)
            failed = FrontDoorFailure(
                code=FailureCode.OVER_LIMIT, message="the completion values do not fit one bus message"
            )
            self._publish_reply(req_id, CompletionReply(req_id=req_id, error=failed).to_json(), principal)

    # -- replies ------------------------------------------------------------------------

    def _fitted(self, items: Sequence[_Item], render: Callable[[Sequence[_Item]], str], what: str) -> str:
        """`render(items)`, or of the longest prefix that fits one bus message (logged)."""
        payload = render(items)
        limit = self.broker.bus.max_payload_bytes
        if utf8_len(payload) <= limit:
            return payload
        budget = limit - utf8_len(render([])) - 16
        kept: list[_Item] = []
        for item in items:
            size = utf8_len(item.to_json()) + 1
            if size > budget:
                break
            budget -= size
            kept.append(item)
        log.warning(
            "%s: %d of %d entries dropped to fit one %d-byte bus message",
            what,
            len(items) - len(kept),
            len(items),
            limit,
        )
        return render(kept)

    def _publish_reply(self, req_id: str, payload: str, principal: Principal) -> None:
        try:
            self.broker.bus.publish(self.broker.participant, reply_topic(req_id), payload, principal)
        except BusError as exc:
            log.error("cannot publish the reply for %s: %s", req_id, exc)


def broker_failed(what: str, exc: Exception, principal: Principal) -> str:
    """The failure text for a request the broker could not carry out. A refused bus
    (e.g. a NATS server that is down) is said as it is, without a traceback."""
    if isinstance(exc, BusError):
        log.warning("cannot %s for %s: %s", what, principal, exc)
        return f"cannot {what} now: {exc}"
    log.exception("%s for %s failed", what, principal)
    return f"the broker failed to {what}; see its log"


def _with_req_id(payload: str) -> tuple[dict[str, object], str] | None:
    """The decoded request and its req_id, when there is somewhere to answer
    (a JSON object whose req_id is one clean segment of at most 128 bytes)."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    req_id = data.get("req_id") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(req_id, str) or not is_clean_segment(req_id) or len(req_id) > 128:
        return None
    return data, req_id


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False, include_input=False)
        if errors:
            where = ".".join(str(part) for part in errors[0]["loc"])
            return f"{where}: {errors[0]['msg']}" if where else errors[0]["msg"]
    return str(exc)


def _log_read(uri: str, principal: Principal, outcome: ReadOutcome, started: float) -> None:
    log.info(
        "resource.read %s for %s: %s in %.1f ms",
        uri,
        principal,
        outcome.error.code.value if outcome.error else f"{len(outcome.contents)} chunks",
        (time.perf_counter() - started) * 1000,
    )
