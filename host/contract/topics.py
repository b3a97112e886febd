"""Every topic the host speaks, and every host participant's ACL: one registry.

Topics are spelled here and nowhere else in the host; a test fails when a
second spelling appears. The ACLs are the least each host participant needs:

- the broker sends the resource requests and the front-door replies, and
  hears the resource replies, the front-door requests and capsule-set events;
- a front-door client (the MCP server, `astrid resources`) sends front-door
  requests and hears their replies and capsule-set events;
- the kernel announces capsule-set events and answers the inventory request;
- the broker also hears resource events (`resource.v1.event.*`) and hands
  the ones it checked to front-door clients (`astrid.v1.resource_updated`);
- the file watch announces, as a capsule, that a file its read touched changed.

Capsules get their ACLs from their manifests, minus the host's reserved
namespace (`CAPSULE_MAY_*` below, enforced by `kernel.reserved`), and minus
requests to other capsules and their replies unless the operator granted
`bus:request` (`REQUEST_SEGMENT`, `RESPONSE_SEGMENT`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from astrid.host.bus import Participant, host_participant
from astrid.host.bus.topics import ClusterTopics

# -- the resource contract (astrid-bus:resource@1.0.0; docs/contract/interface.md §4, docs/contract/resources.md §5) --
DESCRIBE_TOPIC = "resource.v1.request.describe"
DESCRIBE_REPLY_PREFIX = "resource.v1.response.describe."
DESCRIBE_REPLIES = DESCRIBE_REPLY_PREFIX + "*"
READ_REQUEST_TOPIC = "resource.v1.request.read"
READ_REPLY_PREFIX = "resource.v1.response.read."

# -- templates and completion (astrid-bus:resource-template@1.0.0; docs/contract/templates.md §9) --
TEMPLATES_TOPIC = "resource.v1.request.templates"
TEMPLATES_REPLY_PREFIX = "resource.v1.response.templates."
TEMPLATES_REPLIES = TEMPLATES_REPLY_PREFIX + "*"
COMPLETE_TOPIC = "resource.v1.request.complete"
COMPLETE_REPLY_PREFIX = "resource.v1.response.complete."
RESOURCE_REQUESTS = "resource.v1.request.*"
RESOURCE_REPLIES = "resource.v1.response.*"

# -- resource events (astrid-bus:resource-events@1.0.0; docs/contract/subscriptions.md §11) --
# A capsule (or the host, for a file a read touched) says a URI it owns changed.
RESOURCE_UPDATED_TOPIC = "resource.v1.event.updated"
RESOURCE_EVENTS = "resource.v1.event.*"

# -- the host's own namespace (docs/contract/mcp.md §6) ----------------------------
HOST_NAMESPACE = "astrid.v1."
CAPSULES_LOADED_TOPIC = "astrid.v1.capsules_loaded"
# Between hosts on NATS (host/bus/nats/): heartbeats and per-request done reports.
HOST_CLUSTER = ClusterTopics(
    pattern="astrid.v1.host.*", heartbeat="astrid.v1.host.heartbeat", done_prefix="astrid.v1.host.done."
)
INVENTORY_REQUEST = "astrid.v1.request.capsules"
INVENTORY_REPLY_PREFIX = "astrid.v1.response.capsules."

# What a capsule may still do in the host namespace, whatever its manifest says.
CAPSULE_MAY_PUBLISH = frozenset({INVENTORY_REQUEST})
CAPSULE_MAY_SUBSCRIBE = frozenset({CAPSULES_LOADED_TOPIC})
CAPSULE_MAY_SUBSCRIBE_UNDER = INVENTORY_REPLY_PREFIX

# The segments that make a topic a request or a reply (the first of them in a
# topic decides): asking other capsules, and hearing their replies, outside
# the host namespace takes the operator's `bus:request` grant (`contract/bus_asks.py`
# says which topics; `kernel.reserved` enforces it).
REQUEST_SEGMENT = "request"
RESPONSE_SEGMENT = "response"
# An event (`resource.v1.event.updated`) is neither: publishing one's own is
# free, but hearing another participant's takes `bus:request`, as a reply does
# (it names what that capsule's grants reached).
EVENT_SEGMENT = "event"


@dataclass(frozen=True)
class HostRole:
    """A kind of host-native participant: its name and its ACLs."""

    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    def participant(self, source_id: str | None = None) -> Participant:
        """A participant in this role; its source-id is fresh unless given."""
        return host_participant(self.name, source_id or f"{self.name}-{uuid.uuid4().hex}", self.publish, self.subscribe)


BROKER = HostRole(
    "broker",
    publish=(RESOURCE_REQUESTS,),
    subscribe=(RESOURCE_REPLIES, RESOURCE_EVENTS, CAPSULES_LOADED_TOPIC),
)
# What the MCP server hears on the bus (through the composition root: `Runtime.changes`): capsule-set
# changes. It asks the broker by calls (`broker.client`) and hears its updates by a call (`Events.listen`).
MCP_SERVER = HostRole("mcp-server", publish=(), subscribe=(CAPSULES_LOADED_TOPIC,))
KERNEL = HostRole(
    "kernel",
    publish=(CAPSULES_LOADED_TOPIC, INVENTORY_REPLY_PREFIX + "*"),
    subscribe=(INVENTORY_REQUEST,),
)
# The kernel announcing, for a capsule, that a file one of its reads touched
# changed: a participant with that capsule's source-id (`FILE_WATCH.participant(
# source_id)`), so the broker checks the announcement as the capsule's own.
FILE_WATCH = HostRole("file-watch", publish=(RESOURCE_UPDATED_TOPIC,), subscribe=())
