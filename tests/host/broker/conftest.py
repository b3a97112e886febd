from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from astrid.host.broker import Broker
from astrid.host.bus import Bus, InMemoryBus, Principal
from astrid.host.limits import Limits
from tests.host.broker.asker import Asker
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
def make_broker() -> Iterator[Callable[..., tuple[Broker, Callable[[Principal], Asker]]]]:
    made: list[Broker] = []

    def make(bus: Bus, limits: Limits = Limits()):
        broker = Broker(bus, limits=limits).start()
        made.append(broker)
        return broker, lambda principal: Asker(broker, principal)

    yield make
    for broker in made:
        broker.close()
