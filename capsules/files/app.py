"""files: the folder the operator granted as the mount `files`, served as resources.

    astrid capsule grant files fs:files=~/notes

- describe lists the files under the mount (dot-files skipped, at most
  `MAX_FILES` files, `MAX_DEPTH` folders deep) as `astrid://files/<path>`,
  with a title (a Markdown file's first `# ` heading, else its name), size,
  modified time and MIME type (by extension);
- `astrid://files/{+path}` reads any file under the mount: text as text,
  anything else as a blob; completion offers the listed paths;
- without the grant it lists nothing and logs the command that grants it.

Every read goes to the host, so it sees the file as it is now; a change under
the mount makes the host describe the capsule again (clients get
list_changed when the URIs changed).
"""

import datetime
from urllib.parse import quote

from astrid_sdk import Annotations, Capsule, FileNotFound, HostError, NotGranted, Resource, blob, text

capsule = Capsule("files")
MOUNT = "files"
PREFIX = "astrid://files/"
MAX_FILES = 500
MAX_DEPTH = 8
TITLE_SCAN_BYTES = 4096  # only files this small are opened for their heading when listing

TEXT_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".rst": "text/x-rst",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".html": "text/html",
    ".htm": "text/html",
    ".css": "text/css",
    ".js": "text/javascript",
    ".py": "text/x-python",
    ".json": "application/json",
    ".toml": "application/toml",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".xml": "application/xml",
    ".svg": "image/svg+xml",
}
BINARY_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
    ".zip": "application/zip",
}


def mime_type(path: str) -> str:
    dot = path.rfind(".")
    extension = path[dot:].lower() if dot > path.rfind("/") else ""
    return TEXT_TYPES.get(extension) or BINARY_TYPES.get(extension) or "application/octet-stream"


def is_text(mime: str) -> bool:
    return mime in TEXT_TYPES.values()


def title_of(path: str, head: bytes | None) -> str:
    name = path.rsplit("/", 1)[-1]
    if head is not None and mime_type(path) == "text/markdown":
        for line in head.decode("utf-8", "replace").splitlines():
            if line.startswith("# ") and line[2:].strip():
                return line[2:].strip()[:200]
    return name


def iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def walk(ctx) -> list:
    """(relative path, Entry) of the regular files under the mount, breadth first, bounded."""
    found = []
    folders = [("", 0)]
    while folders and len(found) < MAX_FILES:
        folder, depth = folders.pop(0)
        for entry in ctx.fs.list(MOUNT + ("/" + folder if folder else "")):
            if entry.name.startswith("."):
                continue
            path = folder + "/" + entry.name if folder else entry.name
            if entry.kind == "directory" and depth + 1 < MAX_DEPTH:
                folders.append((path, depth + 1))
            elif entry.kind == "file":
                found.append((path, entry))
                if len(found) >= MAX_FILES:
                    break
    return found


@capsule.template(
    PREFIX + "{+path}",
    name="file",
    title="A file in the granted folder",
    description="Any file under the folder granted to the files capsule, by its path",
)
def file(ctx):
    path = ctx.params["path"]
    data = ctx.fs.read(MOUNT + "/" + path)  # FileNotFound is a NotFound: an unknown URI
    mime = mime_type(path)
    if is_text(mime):
        try:
            return [text(data.decode("utf-8"), mime_type=mime)]
        except UnicodeDecodeError:
            pass
        return [blob(data, mime_type="application/octet-stream")]
    return [blob(data, mime_type=mime)]


@file.lister
def listed(ctx):
    try:
        files = walk(ctx)
    except NotGranted as exc:
        ctx.log(f"serving nothing: {exc}", level="warn")
        return []
    except FileNotFound:
        ctx.log("serving nothing: the granted folder does not exist", level="warn")
        return []
    resources = []
    for path, entry in files:
        head = None
        if entry.size <= TITLE_SCAN_BYTES and mime_type(path) == "text/markdown":
            try:
                head = ctx.fs.read(MOUNT + "/" + path)
            except HostError:
                head = None
        resources.append(
            Resource(
                PREFIX + quote(path, safe="/"),  # the template decodes it back
                path,
                title=title_of(path, head),
                mime_type=mime_type(path),
                size=entry.size,
                annotations=Annotations(last_modified=iso(entry.modified_ms)),
            )
        )
    return resources


@file.complete("path")
def paths(ctx, prefix):
    try:
        return [path for path, _ in walk(ctx)]
    except HostError:
        return []


WitWorld = capsule.world()
