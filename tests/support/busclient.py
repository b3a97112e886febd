"""A host participant that asks capsules over a real kernel's bus, as the broker does."""

from __future__ import annotations

import json

from astrid.host.bus import Message, Principal
from astrid.host.bus.topics import is_clean_segment
from astrid.host.kernel.kernel import Kernel

ALICE = Principal.verified("alice")
BOB = Principal.verified("bob")
WAIT_S = 10.0


class Client:
    """A host participant that asks capsules over the bus, as the broker does."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.participant = kernel.attach_host(
            "test-client", publish=["resource.v1.request.*"], subscribe=["resource.v1.response.*"]
        )
        self._ids = 0

    def describe(self, principal: Principal = ALICE) -> list[Message]:
        with self.kernel.bus.subscribe(self.participant, "resource.v1.response.describe.*") as replies:
            delivery = self.kernel.bus.publish(self.participant, "resource.v1.request.describe", "{}", principal)
            assert delivery.wait(WAIT_S), "describe did not finish"
            return replies.poll()

    def read_raw(self, uri: str, principal: Principal = ALICE, correlation_id: str | None = None) -> list[Message]:
        self._ids += 1
        correlation_id = correlation_id or f"test-{self._ids}"
        exact = f"resource.v1.response.read.{correlation_id}"
        pattern = exact if is_clean_segment(correlation_id) else "resource.v1.response.read.*"
        with self.kernel.bus.subscribe(self.participant, pattern) as replies:
            payload = json.dumps({"uri": uri, "correlation_id": correlation_id})
            delivery = self.kernel.bus.publish(self.participant, "resource.v1.request.read", payload, principal)
            assert delivery.wait(WAIT_S), f"read of {uri} did not finish"
            return replies.poll()

    def read(self, uri: str, principal: Principal = ALICE) -> dict:
        replies = self.read_raw(uri, principal)
        assert len(replies) == 1, f"{len(replies)} replies to a read of {uri}"
        return json.loads(replies[0].payload)
