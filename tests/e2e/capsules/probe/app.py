"""Per-principal content, plus a resource whose read never returns.

- `astrid://probe/note`: the private note of the calling principal;
- `astrid://probe/alice-only`: listed and served for alice only;
- `astrid://probe/forever`: reading it loops until the host's wall-time
  limit traps the call (the server must answer -32603 and keep serving).
"""

from astrid_sdk import Capsule

capsule = Capsule("probe")


@capsule.resource("astrid://probe/note", mime_type="text/plain")
def note(ctx):
    return f"the private note of {ctx.principal}"


@capsule.resource("astrid://probe/alice-only", mime_type="text/plain", visible=lambda ctx: ctx.principal == "alice")
def alice_only(ctx):
    return "for alice's eyes"


@capsule.resource("astrid://probe/forever", mime_type="text/plain")
def forever(ctx):
    n = 0
    while True:
        n += 1


WitWorld = capsule.world()
