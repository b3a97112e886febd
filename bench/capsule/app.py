"""The benchmark capsule: 10 resources (5 x 1 KiB text, 5 x 64 KiB blob), and
2 more 1 KiB texts under `astrid://bench-fresh/` that declare `max_age_s`.

One build serves every benchmark capsule: `[config] index` in each copy's
Capsule.toml picks its URIs, so K capsules cost one componentize-py build.
"""

from payloads import BLOB, FRESH_MAX_AGE_S, TEXT, fresh_keys_for, keys_for

from astrid_sdk import Capsule, NotFound, Resource

capsule = Capsule("bench")


def own_index(ctx) -> str:
    return ctx.config("index") or "0"


@capsule.resource_family("astrid://bench/")
def item(ctx, uri):
    key = uri.rsplit("/", 1)[-1]
    if key not in keys_for(own_index(ctx)):
        raise NotFound(uri)
    return TEXT if "-text-" in key else BLOB


@item.lister
def members(ctx):
    return [
        Resource(
            "astrid://bench/" + key,
            key,
            mime_type="text/plain" if "-text-" in key else "application/octet-stream",
            size=len(TEXT) if "-text-" in key else len(BLOB),
        )
        for key in keys_for(own_index(ctx))
    ]


@capsule.resource_family("astrid://bench-fresh/", mime_type="text/plain", max_age_s=FRESH_MAX_AGE_S)
def fresh(ctx, uri):
    if uri.rsplit("/", 1)[-1] not in fresh_keys_for(own_index(ctx)):
        raise NotFound(uri)
    return TEXT


@fresh.lister
def fresh_members(ctx):
    keys = fresh_keys_for(own_index(ctx))
    return [Resource("astrid://bench-fresh/" + key, key, mime_type="text/plain", size=len(TEXT)) for key in keys]


WitWorld = capsule.world()
