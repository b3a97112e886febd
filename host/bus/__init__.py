"""The bus: the only way the layers talk to each other.

`base` holds the interface (`Bus`, `Subscription`, `Delivery`) and the values
that cross it (`Participant`, `Principal`, `Message`, `Binding`); `memory` the
in-process implementation; `topics` the topic grammar. The layers above
(kernel, broker, front-door clients) import from here and from nothing of
each other.
"""

from astrid.host.bus.base import (
    SYSTEM,
    Binding,
    Bus,
    Delivery,
    Handler,
    IpcErrorCode,
    Message,
    Participant,
    Principal,
    Subscription,
    host_participant,
)
from astrid.host.bus.memory import Dispatcher, InMemoryBus, InMemoryDelivery, InMemorySubscription
from astrid.host.errors import BusError

__all__ = [
    "SYSTEM",
    "Binding",
    "Bus",
    "BusError",
    "Delivery",
    "Dispatcher",
    "Handler",
    "InMemoryBus",
    "InMemoryDelivery",
    "InMemorySubscription",
    "IpcErrorCode",
    "Message",
    "Participant",
    "Principal",
    "Subscription",
    "host_participant",
]
