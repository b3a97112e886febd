"""Host-native participants that stand in for capsules on the real Bus.

A `FakeCapsule` binds handlers for the describe and read broadcasts and
answers by publishing with its own source-id, attributed to the principal of
the message it handles (as the kernel does for a real capsule). Like a real
capsule built with the SDK it fails closed: nothing for a principal that is
not `verified`, and silence on a read for a URI it does not own.

One that declares templates (or sets `bind_templates`) also binds the
templates and completion broadcasts: it lists its templates per principal,
answers completions for its own templates only (from `completion_values`),
and serves reads of URIs its templates match with one text chunk
`"<name>:<variables as JSON>"` (see `template_body`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from astrid.host.bus import (
    Binding,
    Bus,
    Dispatcher,
    InMemoryDelivery,
    Message,
    Participant,
    Principal,
    host_participant,
)
from astrid.host.contract.topics import CAPSULES_LOADED_TOPIC
from astrid.host.contract.uri_template import UriTemplate

ALICE = Principal.verified("alice")
BOB = Principal.verified("bob")


class ThreadDispatcher(Dispatcher):
    """Every handler on its own thread, like the kernel's pools."""

    def dispatch(self, runs: list[tuple[Binding, Message]], delivery: InMemoryDelivery) -> None:
        for binding, message in runs:
            threading.Thread(target=self._run, args=(binding, message, delivery), daemon=True).start()

    @staticmethod
    def _run(binding: Binding, message: Message, delivery: InMemoryDelivery) -> None:
        try:
            binding.handler(message)
        finally:
            delivery.handler_finished()


def text(uri: str, body: str, **extra) -> dict:
    return {"type": "text", "uri": uri, "text": body, **extra}


def blob(uri: str, b64: str, **extra) -> dict:
    return {"type": "blob", "uri": uri, "blob": b64, **extra}


def resource(uri: str, name: str | None = None, **extra) -> dict:
    return {"uri": uri, "name": name or uri.rsplit("/", 1)[-1], **extra}


def template(uri_template: str, name: str | None = None, **extra) -> dict:
    return {"uri_template": uri_template, "name": name or uri_template, **extra}


def capsules_loaded(bus: Bus, principal: Principal) -> None:
    """Announce a capsule-set change of `principal` as the kernel does (system: everyone's)."""
    kernel = host_participant("kernel", "kernel-1", publish=[CAPSULES_LOADED_TOPIC])
    bus.publish(kernel, CAPSULES_LOADED_TOPIC, json.dumps({"status": "ready", "capsules": []}), principal).wait(5)


def template_body(capsule: str, variables: dict[str, str]) -> str:
    """What a FakeCapsule serves for a URI one of its templates matches."""
    return f"{capsule}:{json.dumps(variables, sort_keys=True)}"


@dataclass
class FakeCapsule:
    bus: Bus
    name: str
    source_id: str = ""
    # principal name -> resource dicts (what describe lists)
    resources: dict[str, list[dict]] = field(default_factory=dict)
    # principal name -> uri -> chunk dicts (what read serves); a str is an error reply
    contents: dict[str, dict[str, list[dict] | str]] = field(default_factory=dict)
    describe_delay: float = 0.0
    read_delay: float = 0.0
    silent_describe: bool = False
    describe_twice: dict | None = None  # a second reply sent after the first
    raw_describe: str | None = None  # replaces the describe reply payload verbatim
    describe_as: Principal | None = None  # attribute the describe reply to this principal (a forgery)
    raw_read: Callable[[dict], str] | None = None  # replaces the read reply payload
    hang: threading.Event | None = None  # read handler blocks until set
    describes: int = 0
    reads: int = 0
    read_uris: list[str] = field(default_factory=list)  # every read request's uri, in order
    # -- templates and completion (bound only when one of these is set) --
    # principal name -> template dicts (what the templates round lists)
    templates: dict[str, list[dict]] = field(default_factory=dict)
    # argument name -> candidates; a completion answers those starting with the typed value
    completion_values: dict[str, list[str]] = field(default_factory=dict)
    bind_templates: bool = False
    templates_delay: float = 0.0
    complete_delay: float = 0.0
    silent_templates: bool = False
    silent_complete: bool = False
    serve_template_reads: bool = True  # answer reads of URIs its templates match
    templates_twice: dict | None = None  # a second templates reply sent after the first
    raw_templates: str | None = None  # replaces the templates reply payload verbatim
    raw_complete: Callable[[dict], str] | None = None  # answers every completion, its template or not
    templates_as: Principal | None = None  # attribute the templates reply to this principal (a forgery)
    template_calls: int = 0
    completes: int = 0
    complete_requests: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.source_id = self.source_id or f"src-{self.name}"
        self.participant: Participant = host_participant(
            self.name,
            self.source_id,
            publish=["resource.v1.response.*", "resource.v1.event.*"],
            subscribe=["resource.v1.request.*"],
        )
        self.bus.bind(Binding(self.participant, "resource.v1.request.describe", self._on_describe))
        self.bus.bind(Binding(self.participant, "resource.v1.request.read", self._on_read))
        if (
            self.bind_templates
            or self.templates
            or self.completion_values
            or self.raw_templates is not None
            or self.raw_complete is not None
        ):
            self.bus.bind(Binding(self.participant, "resource.v1.request.templates", self._on_templates))
            self.bus.bind(Binding(self.participant, "resource.v1.request.complete", self._on_complete))

    def unload(self) -> None:
        self.bus.unbind_owner(self.source_id)

    def announce(self, uri: str, principal: str | Principal, payload: str | None = None) -> None:
        """Publish `updated {uri}` on resource.v1.event.updated as `principal` (docs/contract/subscriptions.md §11)."""
        who = principal if isinstance(principal, Principal) else Principal.verified(principal)
        body = json.dumps({"uri": uri}) if payload is None else payload
        self.bus.publish(self.participant, "resource.v1.event.updated", body, who).wait(5)

    def _principal(self, message: Message) -> str | None:
        p = message.principal
        return p.name if p.kind == "verified" else None

    def _on_describe(self, message: Message) -> None:
        self.describes += 1
        if self.describe_delay:
            time.sleep(self.describe_delay)
        if self.silent_describe:
            return
        who = self._principal(message)
        topic = f"resource.v1.response.describe.{self.name}"
        if self.raw_describe is not None:
            payload = self.raw_describe
        else:
            payload = json.dumps({"resources": self.resources.get(who, []) if who else []})
        principal = self.describe_as or message.principal
        self.bus.publish(self.participant, topic, payload, principal)
        if self.describe_twice is not None:
            self.bus.publish(self.participant, topic, json.dumps(self.describe_twice), principal)

    def _on_read(self, message: Message) -> None:
        self.reads += 1
        request = json.loads(message.payload)
        self.read_uris.append(request["uri"])
        who = self._principal(message)
        if who is None:
            return
        served = self.contents.get(who, {})
        uri = request["uri"]
        if self.hang is not None:
            self.hang.wait(30)
            return
        if self.raw_read is None and uri not in served:
            chunks = self._template_read(who, uri)
            if chunks is None:
                return  # not mine: stay silent
            served = {**served, uri: chunks}
        if self.read_delay:
            time.sleep(self.read_delay)
        if self.raw_read is not None:
            payload = self.raw_read(request)
        else:
            value = served[uri]
            body = {"uri": uri, "error": value} if isinstance(value, str) else {"uri": uri, "contents": value}
            payload = json.dumps(body)
        topic = "resource.v1.response.read." + request["correlation_id"]
        self.bus.publish(self.participant, topic, payload, message.principal)

    # -- templates and completion ------------------------------------------------------

    def _owned_templates(self, who: str | None) -> list[dict]:
        return self.templates.get(who, []) if who else []

    def _template_read(self, who: str, uri: str) -> list[dict] | None:
        if not self.serve_template_reads:
            return None
        for entry in self._owned_templates(who):
            try:
                variables = UriTemplate.parse(entry["uri_template"]).match(uri)
            except ValueError:
                continue  # a template the broker drops anyway
            if variables is not None:
                return [text(uri, template_body(self.name, variables))]
        return None

    def _on_templates(self, message: Message) -> None:
        self.template_calls += 1
        if self.templates_delay:
            time.sleep(self.templates_delay)
        if self.silent_templates:
            return
        who = self._principal(message)
        topic = f"resource.v1.response.templates.{self.name}"
        if self.raw_templates is not None:
            payload = self.raw_templates
        else:
            payload = json.dumps({"templates": self._owned_templates(who)})
        principal = self.templates_as or message.principal
        self.bus.publish(self.participant, topic, payload, principal)
        if self.templates_twice is not None:
            self.bus.publish(self.participant, topic, json.dumps(self.templates_twice), principal)

    def _on_complete(self, message: Message) -> None:
        self.completes += 1
        request = json.loads(message.payload)
        self.complete_requests.append(request)
        who = self._principal(message)
        if who is None:
            return
        topic = "resource.v1.response.complete." + request["correlation_id"]
        if self.raw_complete is not None:
            self.bus.publish(self.participant, topic, self.raw_complete(request), message.principal)
            return
        owned = {entry["uri_template"] for entry in self._owned_templates(who)}
        if request["uri_template"] not in owned or self.silent_complete:
            return  # not mine: stay silent
        if self.complete_delay:
            time.sleep(self.complete_delay)
        candidates = self.completion_values.get(request["argument_name"], [])
        values = [value for value in candidates if value.startswith(request["argument_value"])]
        reply = {"values": values[:100], "total": len(values), "has_more": len(values) > 100}
        self.bus.publish(self.participant, topic, json.dumps(reply), message.principal)
