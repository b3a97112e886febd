"""docs: astrid's documentation as resources.

- `astrid://docs/<page>`: the Markdown pages in `pages/`, a URI family
  listed in describe (one entry per page);
- `astrid://docs/logo.png`: a PNG served as a blob;
- `astrid://docs/tour`: one URI that reads as several chunks, text and blob;
- `skill://docs/astrid-resources/...`: an Agent Skill (skills/), how to use
  astrid's resources, served by the SDK from the build's index (docs/skills.md).

The pages and the image are read at import time, which runs while
`astrid capsule build` builds the component: they are baked into it (the
capsule has no filesystem at run time).
"""

import base64
import os

from astrid_sdk import Annotations, Capsule, Icon, NotFound, Resource, blob, text

HERE = os.path.dirname(os.path.abspath(__file__))
UPDATED = "2026-12-01T00:00:00Z"
PREFIX = "astrid://docs/"


def _load_pages() -> dict:
    pages = {}
    folder = os.path.join(HERE, "pages")
    for filename in sorted(os.listdir(folder)):
        if filename.endswith(".md"):
            with open(os.path.join(folder, filename), encoding="utf-8") as handle:
                pages[filename[: -len(".md")]] = handle.read()
    return pages


def _title(markdown: str, fallback: str) -> str:
    for line in markdown.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def _summary(markdown: str) -> str:
    for paragraph in markdown.split("\n\n")[1:]:
        if paragraph.strip() and not paragraph.startswith(("```", "|", "-")):
            return " ".join(paragraph.split())[:300]
    return ""


PAGES = _load_pages()
with open(os.path.join(HERE, "assets", "logo.png"), "rb") as _handle:
    LOGO = _handle.read()
LOGO_ICON = Icon(
    "data:image/png;base64," + base64.b64encode(LOGO).decode(), mime_type="image/png", sizes=["16x16"], theme="light"
)

capsule = Capsule("docs")


@capsule.resource(
    PREFIX + "logo.png",
    name="logo",
    title="astrid logo",
    description="The astrid logo, a 16x16 PNG",
    mime_type="image/png",
    size=len(LOGO),
    annotations=Annotations(audience=["user"], priority=0.2, last_modified=UPDATED),
    icons=[LOGO_ICON],
    meta={"dev.astrid/kind": "image", "width": 16, "height": 16},
)
def logo(ctx):
    return LOGO


@capsule.resource(
    PREFIX + "tour",
    name="tour",
    title="A tour in several parts",
    description="One URI that reads as several chunks: an introduction, the logo and every page",
    mime_type="text/markdown",
    annotations=Annotations(audience=["user", "assistant"], priority=0.8, last_modified=UPDATED),
    icons=[LOGO_ICON],
    meta={"dev.astrid/kind": "bundle"},
)
def tour(ctx):
    chunks = [
        text(f"# Welcome, {ctx.principal}\n\nThis tour has {len(PAGES) + 2} parts.\n", mime_type="text/markdown"),
        blob(LOGO, uri=PREFIX + "logo.png", mime_type="image/png", meta={"dev.astrid/alt": "the astrid logo"}),
    ]
    for key, page in PAGES.items():
        chunks.append(text(page, uri=PREFIX + key, mime_type="text/markdown"))
    return chunks


@capsule.resource_family(PREFIX, mime_type="text/markdown")
def page(ctx, uri):
    markdown = PAGES.get(ctx.key)
    if markdown is None:
        raise NotFound(uri)
    return markdown


@page.lister
def list_pages(ctx):
    return [
        Resource(
            PREFIX + key,
            key,
            title=_title(markdown, key),
            description=_summary(markdown) or None,
            mime_type="text/markdown",
            size=len(markdown.encode("utf-8")),
            annotations=Annotations(
                audience=["user", "assistant"], priority=1.0 if key == "index" else 0.5, last_modified=UPDATED
            ),
            icons=[LOGO_ICON],
            meta={"dev.astrid/kind": "page"},
        )
        for key, markdown in PAGES.items()
    ]


WitWorld = capsule.world()
