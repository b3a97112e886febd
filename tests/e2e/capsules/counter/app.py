"""counter: per-principal state through ctx.kv, and a refusal shown instead of raised.

- `astrid://counter/visits`: counts this principal's reads (kept in kv);
- `astrid://counter/refused`: the exception a call without a grant raises,
  as "<class>: <message>".
"""

from astrid_sdk import Capsule, HostError

capsule = Capsule("counter")


@capsule.resource("astrid://counter/visits", name="visits", mime_type="text/plain")
def visits(ctx):
    try:
        count = int((ctx.kv.get("visits") or b"0").decode()) + 1
        ctx.kv.set("visits", str(count))
    except HostError as exc:
        return f"{type(exc).__name__}: {exc}"
    return str(count)


@capsule.resource("astrid://counter/note", name="note", mime_type="text/plain")
def note(ctx):
    try:
        return ctx.fs.read_text("notes/note.txt")
    except HostError as exc:
        return f"{type(exc).__name__}: {exc}"


WitWorld = capsule.world()
