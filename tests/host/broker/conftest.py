from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from astrid.host.broker import Broker
from astrid.host.broker.client import FrontDoorClient
from astrid.host.bus import Bus, InMemoryBus, Principal
from astrid.host.contract.topics import FRONT_DOOR_CLIENT
from astrid.host.limits import Limits
from tests.host.broker.fakes import ThreadDispatcher
from tests.host.broker.kinds import KINDS, Kind


@pytest.fixture(params=["threads", "inline"])
def bus(request) -> Bus:
    """The real Bus, with handlers on threads (as in the kernel) or inline."""
    return InMemoryBus(ThreadDispatcher() if request.param == "threads" else None)


@pytest.fixture(params=KINDS, ids=lambda kind: kind.array)
def kind(request) -> Kind:
    """Each listing the broker merges by the shared rules: resources, then templates."""
    return request.param


@pytest.fixture
def threaded_bus() -> Bus:
    return InMemoryBus(ThreadDispatcher())


@pytest.fixture
def limits() -> Limits:
    return Limits()


@pytest.fixture
def make_broker() -> Iterator[Callable[..., tuple[Broker, Callable[[Principal], FrontDoorClient]]]]:
    made: list[Broker] = []

    def make(bus: Bus, limits: Limits = Limits(), timeout_s: float = 10.0):
        ingress = FRONT_DOOR_CLIENT.participant()
        broker = Broker(bus, limits=limits, trusted_ingress=[ingress.source_id]).start()
        made.append(broker)

        def client(principal: Principal) -> FrontDoorClient:
            return FrontDoorClient(bus, ingress, principal, limits=limits, timeout_s=timeout_s)

        return broker, client

    yield make
    for broker in made:
        broker.close()
