"""astrid_sdk: write resource-serving capsules in Python.

Runs inside the WebAssembly guest (CPython 3.14 built by componentize-py with
no WASI), so it uses the stdlib only and never the clock, files, randomness
or stdout: use `ctx.clock_ms()` and `ctx.log()` instead.

    from astrid_sdk import Capsule

    capsule = Capsule("docs")

    @capsule.resource("astrid://docs/readme", name="readme", mime_type="text/markdown")
    def readme(ctx):
        return "# Hello " + ctx.principal

    @capsule.resource_family("astrid://notes/")
    def note(ctx, uri):
        return "note " + ctx.key

    WitWorld = capsule.world()
"""

from astrid_sdk._capsule import Capsule, Context, Family
from astrid_sdk._errors import DefinitionError, HostError, NotFound, RequestError
from astrid_sdk._wire import Annotations, Chunk, Icon, Resource, blob, text

__version__ = "1.0.0"

__all__ = [
    "Annotations",
    "Capsule",
    "Chunk",
    "Context",
    "DefinitionError",
    "Family",
    "HostError",
    "Icon",
    "NotFound",
    "RequestError",
    "Resource",
    "blob",
    "text",
]
