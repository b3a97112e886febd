"""introspect: what astrid knows about the calling principal, its capsules and itself.

- `astrid://whoami`: the calling principal, how the host vouches for it and
  which participant sent the request;
- `astrid://capsules`: the capsules this principal sees;
- `astrid://host`: host facts (versions and limits).

The last two ask the kernel over the bus: publish `{"correlation_id": ...}`
on `astrid.v1.request.capsules`, read the reply on
`astrid.v1.response.capsules.<correlation_id>` (scoped to the caller's
principal by the host).
"""

import json

import astrid_sdk
from astrid_sdk import Annotations, Capsule

INVENTORY_REQUEST = "astrid.v1.request.capsules"
INVENTORY_REPLY = "astrid.v1.response.capsules"
JSON = "application/json"

capsule = Capsule("introspect")


def _json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _inventory(ctx) -> dict:
    timeout = ctx.config("inventory_timeout_ms")
    timeout_ms = int(timeout) if timeout and timeout.isdigit() else 1000
    return ctx.request(INVENTORY_REQUEST, INVENTORY_REPLY, {}, timeout_ms=min(timeout_ms, 1500))


@capsule.resource(
    "astrid://whoami",
    name="whoami",
    title="Who am I",
    description="The principal this session acts as, how the host vouches for it, and who sent the request",
    mime_type=JSON,
    annotations=Annotations(audience=["user", "assistant"], priority=0.9),
    meta={"dev.astrid/scope": "principal"},
)
def whoami(ctx):
    return _json(
        {
            "principal": ctx.principal,
            "attribution": ctx.attribution,
            "caller_source_id": ctx.source_id,
            "request_timestamp": ctx.timestamp,
            "served_by": ctx.capsule,
        }
    )


@capsule.resource(
    "astrid://capsules",
    name="capsules",
    title="Capsules",
    description="The capsules loaded for this principal: name, version, description and source-id",
    mime_type=JSON,
    annotations=Annotations(audience=["user", "assistant"], priority=0.6),
)
def capsules(ctx):
    inventory = _inventory(ctx)
    listed = [
        {key: entry.get(key) for key in ("name", "version", "description", "source_id")}
        for entry in inventory.get("capsules") or []
        if isinstance(entry, dict)
    ]
    return _json({"principal": ctx.principal, "count": len(listed), "capsules": listed})


@capsule.resource(
    "astrid://host",
    name="host",
    title="Host",
    description="The astrid host: versions and the limits it enforces",
    mime_type=JSON,
    annotations=Annotations(audience=["user", "assistant"], priority=0.4),
)
def host(ctx):
    facts = dict(_inventory(ctx).get("host") or {})
    facts["sdk_version"] = astrid_sdk.__version__
    return _json(facts)


WitWorld = capsule.world()
