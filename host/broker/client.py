"""The client side of the front doors: ask the broker over the bus, wait for the reply.

Whoever asks (the MCP server, `astrid resources`) is an ordinary bus
participant in the `FRONT_DOOR_CLIENT` role with its own source-id. Every
request mints a `req_id`, subscribes to `astrid.v1.response.<req_id>` first,
publishes on the front door as `verified(<principal>)` and waits (bounded)
for exactly that reply. Calls block: the async server runs them in a worker
thread.
"""

from __future__ import annotations

import json
import uuid
from typing import TypeVar

from pydantic import ValidationError

from astrid.host.bus import Bus, BusError, Participant, Principal
from astrid.host.contract._base import WireModel
from astrid.host.contract.frontdoor import (
    CompletionReply,
    CompletionRequest,
    ListResourcesReply,
    ListResourcesRequest,
    ListTemplatesReply,
    ListTemplatesRequest,
    ReadResourceReply,
    ReadResourceRequest,
)
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import Argument, ResourceTemplate
from astrid.host.contract.topics import (
    FRONT_DOOR_COMPLETE,
    FRONT_DOOR_LIST,
    FRONT_DOOR_READ,
    FRONT_DOOR_TEMPLATES,
    reply_topic,
)
from astrid.host.errors import BrokerUnavailable
from astrid.host.limits import DEFAULT_LIMITS, Limits

Reply = TypeVar("Reply", bound=WireModel)


def default_timeout(limits: Limits) -> float:
    # worst case of a read: read, re-describe, read again; plus a round queued ahead
    return 2 * limits.describe_window_s + 2 * limits.read_window_s + 2.0


class FrontDoorClient:
    def __init__(
        self,
        bus: Bus,
        participant: Participant,
        principal: Principal,
        *,
        limits: Limits = DEFAULT_LIMITS,
        timeout_s: float | None = None,
    ) -> None:
        self.bus = bus
        self.participant = participant
        self.principal = principal
        self.limits = limits
        self.timeout_s = timeout_s if timeout_s is not None else default_timeout(limits)
        # The last list reply, raw (without its req_id) and validated: a warm
        # list repeats it, and validating 200 definitions again costs ~1 ms.
        self._last_list: tuple[object, tuple[ResourceDefinition, ...]] | None = None

    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]:
        req_id = uuid.uuid4().hex
        payload = ListResourcesRequest(req_id=req_id, refresh=refresh).to_json()
        data = self._round_trip(FRONT_DOOR_LIST, req_id, payload)
        rest = {key: value for key, value in data.items() if key != "req_id"} if isinstance(data, dict) else None
        last = self._last_list
        if last is not None and rest == last[0]:
            return list(last[1])  # the same reply (but its req_id) validates to the same definitions
        try:
            reply = ListResourcesReply.model_validate(data, context={"limits": self.limits})
        except ValidationError as exc:
            raise BrokerUnavailable(f"the broker's list reply is malformed: {exc.error_count()} errors") from None
        if reply.error is not None:
            raise BrokerUnavailable(reply.error.message)
        self._last_list = (rest, tuple(reply.resources))
        return list(reply.resources)

    def read_resource(self, uri: str) -> ReadResourceReply:
        req_id = uuid.uuid4().hex
        payload = ReadResourceRequest(req_id=req_id, uri=uri).to_json()
        data = self._round_trip(FRONT_DOOR_READ, req_id, payload)
        try:
            return ReadResourceReply.model_validate(data, context={"limits": self.limits})
        except ValidationError as exc:
            raise BrokerUnavailable(f"the broker's read reply is malformed: {exc.error_count()} errors") from None

    def list_templates(self, *, refresh: bool = False) -> list[ResourceTemplate]:
        req_id = uuid.uuid4().hex
        payload = ListTemplatesRequest(req_id=req_id, refresh=refresh).to_json()
        data = self._round_trip(FRONT_DOOR_TEMPLATES, req_id, payload)
        reply = self._validated(ListTemplatesReply, data, "templates")
        if reply.error is not None:
            raise BrokerUnavailable(reply.error.message)
        return list(reply.templates)

    def complete(
        self, uri_template: str, argument_name: str, argument_value: str, context: dict[str, str] | None = None
    ) -> CompletionReply:
        """Values for `argument_name` of `uri_template` that start like `argument_value`."""
        req_id = uuid.uuid4().hex
        payload = CompletionRequest(
            req_id=req_id,
            uri_template=uri_template,
            argument_name=argument_name,
            argument_value=argument_value,
            context_arguments=[Argument(name=name, value=value) for name, value in (context or {}).items()],
        ).to_json()
        return self._validated(CompletionReply, self._round_trip(FRONT_DOOR_COMPLETE, req_id, payload), "completion")

    def _validated(self, model: type[Reply], data: object, what: str) -> Reply:
        try:
            return model.model_validate(data, context={"limits": self.limits})
        except ValidationError as exc:
            raise BrokerUnavailable(f"the broker's {what} reply is malformed: {exc.error_count()} errors") from None

    def _round_trip(self, topic: str, req_id: str, payload: str) -> object:
        with self.bus.subscribe(self.participant, reply_topic(req_id), principal_scope=self.principal) as replies:
            try:
                self.bus.publish(self.participant, topic, payload, self.principal)
            except BusError as exc:
                raise BrokerUnavailable(f"the request could not be sent: {exc}") from None
            message = replies.recv(self.timeout_s)
        if message is None:
            raise BrokerUnavailable(f"the broker did not answer within {self.timeout_s:g} s")
        try:
            return json.loads(message.payload)
        except ValueError:
            raise BrokerUnavailable("the broker's reply is not JSON") from None
