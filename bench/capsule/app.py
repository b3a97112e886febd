"""The benchmark capsule: 10 resources (5 x 1 KiB text, 5 x 64 KiB blob).

One build serves every benchmark capsule: `[config] index` in each copy's
Capsule.toml picks its URIs, so K capsules cost one componentize-py build.
"""

from payloads import BLOB, TEXT, keys_for

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


WitWorld = capsule.world()
