"""conformance: the fixture URIs of the official MCP conformance suite
(`@modelcontextprotocol/conformance`), served for tests/e2e/test_conformance.py.

- `test://static-text`: text/plain, the text the scenario `resources-read-text` names;
- `test://static-binary`: image/png, a 1x1 PNG (`resources-read-binary` asks for a
  non-empty base64 `blob` with a mime type);
- the template `test://template/{id}/data` (`resources-templates-read` reads
  `test://template/123/data` and looks for the id in the text);
- `test://watched-resource`: what `resources-subscribe` and `resources-unsubscribe`
  subscribe to (a principal may subscribe only to a URI it could read).
"""

import base64
import json

from astrid_sdk import Capsule

STATIC_TEXT = "This is the content of the static text resource."
# A 1x1 red RGBA PNG (70 bytes).
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP4z8DwHwAFAAH/VscvDQAAAABJRU5ErkJggg=="
)

capsule = Capsule("conformance")


@capsule.resource(
    "test://static-text",
    name="static-text",
    title="Static text",
    description="A static text resource (conformance: resources-read-text)",
    mime_type="text/plain",
)
def static_text(ctx):
    return STATIC_TEXT


@capsule.resource(
    "test://static-binary",
    name="static-binary",
    title="Static binary",
    description="A static binary resource, a 1x1 PNG (conformance: resources-read-binary)",
    mime_type="image/png",
    size=len(PIXEL_PNG),
)
def static_binary(ctx):
    return PIXEL_PNG


@capsule.resource(
    "test://watched-resource",
    name="watched-resource",
    title="Watched resource",
    description="A resource to subscribe to (conformance: resources-subscribe, resources-unsubscribe)",
    mime_type="text/plain",
)
def watched_resource(ctx):
    return "watched"


@capsule.template(
    "test://template/{id}/data",
    name="template-data",
    title="Template data",
    description="Data for one id (conformance: resources-templates-read)",
    mime_type="application/json",
)
def template_data(ctx):
    ident = ctx.params["id"]
    return json.dumps({"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"}, separators=(",", ":"))


WitWorld = capsule.world()
