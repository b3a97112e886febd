from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from astrid.host.broker import Broker
from astrid.host.kernel.bus import Bus, Principal
from astrid.host.limits import Limits
from astrid.host.mcp.frontdoor import FrontDoorClient, mcp_participant
from tests.host.broker.fakes import ThreadDispatcher

ALICE = Principal.verified("alice")
BOB = Principal.verified("bob")


@pytest.fixture(params=["threads", "inline"])
def bus(request) -> Bus:
    """The real Bus, with handlers on threads (as in the kernel) or inline."""
    return Bus(ThreadDispatcher() if request.param == "threads" else None)


@pytest.fixture
def threaded_bus() -> Bus:
    return Bus(ThreadDispatcher())


@pytest.fixture
def limits() -> Limits:
    return Limits()


@pytest.fixture
def make_broker() -> Iterator[Callable[..., tuple[Broker, Callable[[Principal], FrontDoorClient]]]]:
    made: list[Broker] = []

    def make(bus: Bus, limits: Limits = Limits(), timeout_s: float = 10.0):
        ingress = mcp_participant()
        broker = Broker(bus, limits=limits, trusted_ingress=[ingress.source_id]).start()
        made.append(broker)

        def client(principal: Principal) -> FrontDoorClient:
            return FrontDoorClient(bus, ingress, principal, limits=limits, timeout_s=timeout_s)

        return broker, client

    yield make
    for broker in made:
        broker.close()
