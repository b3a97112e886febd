"""astrid_sdk: write resource-serving capsules in Python.

Runs inside the WebAssembly guest (CPython 3.14 built by componentize-py with
no WASI), so it uses the stdlib only and never the clock, files, randomness
or stdout: use `ctx.clock_ms()` and `ctx.log()` instead.

    from astrid_sdk import Capsule, NotFound

    capsule = Capsule("docs")

    @capsule.resource("astrid://docs/readme", name="readme", mime_type="text/markdown")
    def readme(ctx):
        return "# Hello " + ctx.principal

    @capsule.resource_family("astrid://notes/")
    def note(ctx, uri):
        return "note " + ctx.key

    @capsule.template("astrid://files/{+path}", name="file", mime_type="text/plain")
    def file(ctx):  # never sees a `..` segment, `?`, `#` or a control character
        if ctx.params["path"] not in FILES:
            raise NotFound(ctx.uri)
        return FILES[ctx.params["path"]]

    @file.complete("path")
    def file_paths(ctx, prefix):
        return sorted(FILES)  # the SDK keeps those starting with prefix, at most 100

    WitWorld = capsule.world()
"""

from astrid_sdk._capsule import Capsule, Context, Family, Template
from astrid_sdk._errors import DefinitionError, HostError, NotFound, RequestError
from astrid_sdk._template import UriTemplate
from astrid_sdk._wire import Annotations, Chunk, Icon, Resource, ResourceTemplate, blob, text

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
    "ResourceTemplate",
    "Template",
    "UriTemplate",
    "blob",
    "text",
]
