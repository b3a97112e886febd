"""templated: resource templates and completion, with the conformance fixtures.

The contents the official MCP conformance suite (`@modelcontextprotocol/conformance`)
asks for, copied from its scenarios:

- `test://static-text` (`resources-read-text`): text/plain,
  "This is the content of the static text resource.";
- `test://static-binary` (`resources-read-binary`): image/png, a non-empty blob
  (a 1x1 PNG);
- `test://template/{id}/data` (`resources-templates-read`): application/json,
  `{"id":"123","templateTest":true,"data":"Data for ID: 123"}` for id 123.

And templates of each kind, with completion:

- `astrid://files/{+path}`: a small dict of fake files; `path` completes from
  it. The handler raises if it ever sees a `.` or `..` segment, so a
  traversal that got through would show up as a read error, not silence;
- `test://users/{user}/notes/{note}`: `note` completes from the notes of the
  `user` already given (the completion context);
- `astrid://private/{name}`: listed, served and completed for alice only.
"""

import base64
import json

from astrid_sdk import Capsule, NotFound

STATIC_TEXT = "This is the content of the static text resource."
# A 1x1 red RGBA PNG (70 bytes).
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP4z8DwHwAFAAH/VscvDQAAAABJRU5ErkJggg=="
)
IDS = ["1", "12", "123", "1234", "2", "42"]
FILES = {
    "README.md": "# Fake files\n",
    "notes/today.md": "today: write tests\n",
    "notes/later.md": "later: ship\n",
    "src/app/main.py": "print('hello')\n",
    "a b/c.txt": "a space in a directory name\n",
}
NOTES = {"ann": {"todo": "buy milk", "trip": "pack"}, "bob": {"taxes": "file them"}}

capsule = Capsule("templated")


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


@capsule.template(
    "test://template/{id}/data",
    name="template",
    title="Template data",
    description="Data for one id (conformance: resources-templates-read)",
    mime_type="application/json",
)
def template_data(ctx):
    item = ctx.params["id"]
    return json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"}, separators=(",", ":"))


@template_data.complete("id")
def template_ids(ctx, prefix):
    return IDS


@capsule.template(
    "astrid://files/{+path}",
    name="files",
    title="Files",
    description="A few fake files, by path",
    mime_type="text/plain",
    annotations={"audience": ["user"], "priority": 0.5},
    meta={"dev.astrid/kind": "files"},
)
def files(ctx):
    path = ctx.params["path"]
    if any(segment in (".", "..") for segment in path.split("/")):
        raise RuntimeError(f"a traversal reached the handler: {path!r}")
    if path not in FILES:
        raise NotFound(ctx.uri)
    return FILES[path]


@files.complete("path")
def file_paths(ctx, prefix):
    return sorted(FILES)


@capsule.template("test://users/{user}/notes/{note}", name="user-note", mime_type="text/plain")
def user_note(ctx):
    notes = NOTES.get(ctx.params["user"], {})
    if ctx.params["note"] not in notes:
        raise NotFound(ctx.uri)
    return notes[ctx.params["note"]]


@user_note.complete("user")
def users(ctx, prefix):
    return sorted(NOTES)


@user_note.complete("note")
def notes_of_user(ctx, prefix):
    return sorted(NOTES.get(ctx.arguments.get("user", ""), {}))


@capsule.template(
    "astrid://private/{name}",
    name="private",
    mime_type="text/plain",
    visible=lambda ctx: ctx.principal == "alice",
)
def private(ctx):
    return f"{ctx.params['name']}, for {ctx.principal} only"


@private.complete("name")
def private_names(ctx, prefix):
    return ["diary", "drafts"]


WitWorld = capsule.world()
