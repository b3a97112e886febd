"""A stand-in kernel: the real Bus, host participants as capsules, real announcements."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from astrid.host.bus import InMemoryBus, Principal, host_participant
from astrid.host.contract.events import CapsuleInfo, CapsulesLoaded
from astrid.host.contract.topics import CAPSULES_LOADED_TOPIC
from tests.host.broker.fakes import FakeCapsule, ThreadDispatcher


class FakeKernel:
    def __init__(self, setup: Callable[[FakeKernel], None] | None = None) -> None:
        self.bus = InMemoryBus(ThreadDispatcher())
        self.participant = host_participant("kernel", f"kernel-{uuid.uuid4().hex}", publish=[CAPSULES_LOADED_TOPIC])
        self.principals: set[Principal] = set()
        self.capsules: dict[str, FakeCapsule] = {}
        self.setup = setup
        self.closed = False

    def attach_host(self, name, publish=(), subscribe=()):
        return host_participant(name, f"{name}-{uuid.uuid4().hex}", publish, subscribe)

    def watch_principal(self, name: str) -> Principal:
        principal = Principal.verified(name)
        self.principals.add(principal)
        return principal

    def provenance_of(self, source_id: str) -> None:
        return None  # every capsule here is local and unsigned

    def add(self, capsule: FakeCapsule) -> FakeCapsule:
        self.capsules[capsule.name] = capsule
        return capsule

    def remove(self, name: str) -> None:
        self.capsules.pop(name).unload()

    def start(self):
        if self.setup is not None:
            self.setup(self)
        return []

    def reload(self):
        self.announce()
        return []

    def announce(self) -> None:
        for principal in sorted(self.principals, key=str):
            event = CapsulesLoaded(
                capsules=[
                    CapsuleInfo(name=c.name, version="0", source_id=c.source_id, principal=principal.name)
                    for c in self.capsules.values()
                ]
            )
            self.bus.publish(self.participant, CAPSULES_LOADED_TOPIC, event.to_json(), principal).wait(5)

    def close(self) -> None:
        self.closed = True
