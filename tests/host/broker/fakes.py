"""Host-native participants that stand in for capsules on the real Bus.

A `FakeCapsule` binds handlers for the describe and read broadcasts and
answers by publishing with its own source-id, attributed to the principal of
the message it handles (as the kernel does for a real capsule). Like a real
capsule built with the SDK it fails closed: nothing for a principal that is
not `verified`, and silence on a read for a URI it does not own.
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
    raw_read: Callable[[dict], str] | None = None  # replaces the read reply payload
    hang: threading.Event | None = None  # read handler blocks until set
    describes: int = 0
    reads: int = 0

    def __post_init__(self) -> None:
        self.source_id = self.source_id or f"src-{self.name}"
        self.participant: Participant = host_participant(
            self.name, self.source_id, publish=["resource.v1.response.*"], subscribe=["resource.v1.request.*"]
        )
        self.bus.bind(Binding(self.participant, "resource.v1.request.describe", self._on_describe))
        self.bus.bind(Binding(self.participant, "resource.v1.request.read", self._on_read))

    def unload(self) -> None:
        self.bus.unbind_owner(self.source_id)

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
        self.bus.publish(self.participant, topic, payload, message.principal)
        if self.describe_twice is not None:
            self.bus.publish(self.participant, topic, json.dumps(self.describe_twice), message.principal)

    def _on_read(self, message: Message) -> None:
        self.reads += 1
        request = json.loads(message.payload)
        who = self._principal(message)
        if who is None:
            return
        served = self.contents.get(who, {})
        uri = request["uri"]
        if self.hang is not None:
            self.hang.wait(30)
            return
        if self.raw_read is None and uri not in served:
            return  # not mine: stay silent
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
