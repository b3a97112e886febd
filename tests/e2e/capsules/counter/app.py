"""counter: per-principal state through ctx.kv, and a refusal shown instead of raised.

- `astrid://counter/visits`: counts this principal's reads (kept in kv);
- `astrid://counter/refused`: the exception a call without a grant raises,
  as "<class>: <message>";
- `astrid://counter/hits`: this principal's hit count (kv), read only;
- `astrid://counter/bump`: reading it adds a hit, then announces
  `ctx.updated("astrid://counter/hits")` to this principal's subscribers.
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


@capsule.resource("astrid://counter/hits", name="hits", mime_type="text/plain")
def hits(ctx):
    return (ctx.kv.get("hits") or b"0").decode()


@capsule.resource("astrid://counter/bump", name="bump", mime_type="text/plain")
def bump(ctx):
    count = int((ctx.kv.get("hits") or b"0").decode()) + 1
    ctx.kv.set("hits", str(count))
    ctx.updated("astrid://counter/hits")  # after the write: a read it prompts sees the new count
    return str(count)


WitWorld = capsule.world()
