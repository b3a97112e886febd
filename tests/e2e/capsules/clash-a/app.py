"""Claims astrid://clash/shared, as its twin does: the broker's tie-break decides."""

from astrid_sdk import Capsule

capsule = Capsule("clash-a")


@capsule.resource("astrid://clash/shared", name="shared-from-clash-a", mime_type="text/plain")
def shared(ctx):
    return "served by clash-a"


@capsule.resource("astrid://clash/only-a", mime_type="text/plain")
def only(ctx):
    return "only clash-a has this"


WitWorld = capsule.world()
