"""Claims astrid://clash/shared, as its twin does: the broker's tie-break decides."""

from astrid_sdk import Capsule

capsule = Capsule("clash-b")


@capsule.resource("astrid://clash/shared", name="shared-from-clash-b", mime_type="text/plain")
def shared(ctx):
    return "served by clash-b"


@capsule.resource("astrid://clash/only-b", mime_type="text/plain")
def only(ctx):
    return "only clash-b has this"


WitWorld = capsule.world()
