"""Its URIs come from uris.txt and its text from body.txt, both baked in at build time.

A line `URI @NAME` lists URI for principal NAME only.
"""

import os

from astrid_sdk import Capsule

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "uris.txt"), encoding="utf-8") as handle:
    URIS = [line.strip() for line in handle if line.strip()]
with open(os.path.join(HERE, "body.txt"), encoding="utf-8") as handle:
    BODY = handle.read()

capsule = Capsule("mutable")


def _serve(uri):
    def handler(ctx):
        return f"{BODY} ({uri})"

    handler.__name__ = uri.rsplit("/", 1)[-1]
    return handler


def _only(name):
    return lambda ctx: ctx.principal == name


for _line in URIS:
    _uri, _, _owner = _line.partition(" @")
    _visible = _only(_owner) if _owner else None
    capsule.resource(_uri, mime_type="text/plain", visible=_visible)(_serve(_uri))

WitWorld = capsule.world()
