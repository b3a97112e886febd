"""astrid_sdk: write resource-serving capsules in Python.

Runs inside the WebAssembly guest (CPython 3.14 built by componentize-py), so
it uses the stdlib only. The sandbox offers clocks (1 ms resolution), random
numbers and print, and no files, environment, sockets or processes: using one
raises an exception naming what to use instead (`ctx.fs`, `ctx.config`,
`ctx.http`; `_sandbox.py`). `print()` and anything written to `sys.stdout` /
`sys.stderr` go to the host's log (stdout at info, stderr at warn, bounded per
call), as `ctx.log(message, level)` does.

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

    @capsule.resource("astrid://notes/today", name="today", mime_type="text/markdown")
    def today(ctx):  # needs `fs = ["notes"]` in Capsule.toml and the operator's grant
        return ctx.fs.read_text("notes/today.md")

    WitWorld = capsule.world()

Live data (docs/capabilities.md): `ctx.fs` (read-only files under granted
mounts), `ctx.kv` (durable state per principal), `ctx.http` (granted hosts).
A refusal raises a `HostError` subclass: `NotGranted`, `Denied`,
`FileNotFound` (also a `NotFound`), `TooLarge`, `QuotaExceeded`,
`InvalidArgument`.
"""

import sys

from astrid_sdk import _output, _sandbox
from astrid_sdk._capabilities import Entry, Response, Stat
from astrid_sdk._capsule import Capsule
from astrid_sdk._chunks import Chunk, blob, text
from astrid_sdk._context import Context
from astrid_sdk._errors import (
    DefinitionError,
    Denied,
    FileNotFound,
    HostError,
    InvalidArgument,
    NotFound,
    NotGranted,
    QuotaExceeded,
    RequestError,
    TooLarge,
)
from astrid_sdk._records import Annotations, Icon, Resource, ResourceTemplate
from astrid_sdk._registry import Family, Template
from astrid_sdk._template import UriTemplate

if sys.platform == "wasi":  # inside the capsule only: the SDK also runs natively, in tests
    _sandbox.install()

__version__ = "1.0.0"

# Inside the guest, print() and sys.stdout/sys.stderr go to the host's log instead of
# trapping. Done at import, which is build time: the built component keeps it.
_output.install_in_guest()

__all__ = [
    "Annotations",
    "Capsule",
    "Chunk",
    "Context",
    "DefinitionError",
    "Denied",
    "Entry",
    "Family",
    "FileNotFound",
    "HostError",
    "Icon",
    "InvalidArgument",
    "NotFound",
    "NotGranted",
    "QuotaExceeded",
    "RequestError",
    "Resource",
    "ResourceTemplate",
    "Response",
    "Stat",
    "Template",
    "TooLarge",
    "UriTemplate",
    "blob",
    "text",
]
