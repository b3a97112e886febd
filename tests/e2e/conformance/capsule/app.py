"""conformance: the fixture URIs of the official MCP conformance suite
(`@modelcontextprotocol/conformance`), served for tests/e2e/test_conformance.py.

- `test://static-text`: text/plain, the text the scenario `resources-read-text` names;
- `test://static-binary`: image/png, a 1x1 PNG (`resources-read-binary` asks for a
  non-empty base64 `blob` with a mime type).

Not served yet: `test://template/{id}/data` (`resources-templates-read`). It
is a resource template, which the guest SDK cannot declare until templates
land (issue 12), and a family cannot stand in for it: a family member is
`prefix + key` with one flat key, and `123/data` holds a `/`. A read of
`test://template/123/data` therefore ends as "resource not found"; once the
SDK has templates, declare it here and drop the scenario from
expected-failures.yml.
"""

import base64

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


WitWorld = capsule.world()
