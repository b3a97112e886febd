"""The MCP Skills extension (`io.modelcontextprotocol/skills`, SEP-2640) over the principal's resources.

A capsule serves each file of a skill as a resource (`skill://<prefix>/<name>/<path>`,
docs/skills.md); its describe record carries the file's sha256 in `_meta`
(`DIGEST_META`), and the `SKILL.md` record also the frontmatter (`SKILL_META`).
This module builds the extension's answers from the principal's resource
list, as resources/list has it (so per principal, after the URI authority
and every capsule's `visible` filter):

- `skills/list`: every skill the principal sees, one page (no cursor);
- `skills/get {uri}`: the entry of one skill by its `SKILL.md` URI, -32602
  for anything else;
- `resources/directory/read {uri}`: the direct children of a directory
  (`skill://docs/reading`, no trailing slash), files as resources and
  subfolders as `inode/directory`, -32602 for a URI that is no directory.

An entry lists the files under the skill's folder that the `SKILL.md`'s
owner serves (a file another capsule serves there is never part of it),
each `{uri, digest: "sha256:<hex>", size}`; `"dynamic"` when one of them
declares no digest. The server declares the extension with
`directoryRead: true` (`CAPABILITY`).
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp.types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from astrid.host.contract.resource import ResourceDefinition
from astrid.host.mcp.reshape import to_resource

if TYPE_CHECKING:
    from mcp.server import Server

    from astrid.host.mcp.server import AstridMcpServer, FrontDoor

EXTENSION = "io.modelcontextprotocol/skills"
CAPABILITY: dict[str, Any] = {"directoryRead": True}
SKILL_FILE = "SKILL.md"
SKILL_META = "dev.astrid/skill"  # on a SKILL.md record: {"frontmatter": {...}} (the SDK's `_skills.py`)
DIGEST_META = "dev.astrid/sha256"  # on every skill file's record: its sha256, lowercase hex
DIRECTORY_MIME = "inode/directory"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class UriParams(types.RequestParams):
    uri: str


class DirectoryParams(types.PaginatedRequestParams):
    uri: str


@dataclass(frozen=True)
class SkillEntry:
    uri: str
    frontmatter: dict[str, Any]
    resources: tuple[dict[str, Any], ...] | None  # None: "dynamic"

    def to_json(self) -> dict[str, Any]:
        resources: Any = [dict(r) for r in self.resources] if self.resources is not None else "dynamic"
        return {"uri": self.uri, "frontmatter": self.frontmatter, "resources": resources}


def _meta(definition: ResourceDefinition) -> dict[str, Any]:
    if definition.meta is None:
        return {}
    try:
        value = json.loads(definition.meta)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _frontmatter(definition: ResourceDefinition) -> dict[str, Any] | None:
    """The frontmatter a SKILL.md record declares, when it is a well-formed skill's (name = folder)."""
    if not definition.uri.endswith("/" + SKILL_FILE):
        return None
    skill = _meta(definition).get(SKILL_META)
    frontmatter = skill.get("frontmatter") if isinstance(skill, dict) else None
    if not isinstance(frontmatter, dict):
        return None
    folder = definition.uri[: -len(SKILL_FILE) - 1]
    name = folder.rsplit("/", 1)[-1]
    if frontmatter.get("name") != name or not isinstance(frontmatter.get("description"), str):
        return None
    return frontmatter


def skill_uris(definitions: list[ResourceDefinition]) -> list[str]:
    """The `SKILL.md` URIs of the skills among `definitions`, sorted (the serve banner names them)."""
    return sorted(d.uri for d in definitions if _frontmatter(d) is not None)


def skills_in(definitions: list[ResourceDefinition], owner_of: Callable[[str], str | None]) -> list[SkillEntry]:
    """The skill entries among `definitions` (one principal's resources), sorted by URI."""
    ordered = sorted(definitions, key=lambda d: d.uri)
    uris = [d.uri for d in ordered]
    entries = []
    for skill_md in ordered:
        frontmatter = _frontmatter(skill_md)
        if frontmatter is None:
            continue
        folder = skill_md.uri[: -len(SKILL_FILE)]
        owner = owner_of(skill_md.uri)
        files: list[dict[str, Any]] = []
        dynamic = False
        # the folder's files are one run of the sorted URIs
        for definition in ordered[bisect.bisect_left(uris, folder) :]:
            if not definition.uri.startswith(folder):
                break
            if owner_of(definition.uri) != owner:
                continue  # another capsule's file in this folder is never part of the skill
            digest = _meta(definition).get(DIGEST_META)
            if not isinstance(digest, str) or not _HEX64.fullmatch(digest) or definition.size is None:
                dynamic = True  # a file without a stable digest: the skill is dynamic
                break
            files.append({"uri": definition.uri, "digest": f"sha256:{digest}", "size": definition.size})
        entries.append(SkillEntry(skill_md.uri, frontmatter, None if dynamic else tuple(files)))
    return entries


def directory_children(definitions: list[ResourceDefinition], uri: str) -> list[ResourceDefinition | str] | None:
    """The direct children of the directory `uri`: a file's definition, or a subfolder's URI; None when
    no listed resource is under it (not a directory)."""
    if "://" not in uri or uri.endswith("/") or uri.split("://", 1)[1] == "":
        return None
    prefix = uri + "/"
    files: dict[str, ResourceDefinition] = {}
    folders: set[str] = set()
    for definition in definitions:
        if not definition.uri.startswith(prefix):
            continue
        rest = definition.uri[len(prefix) :]
        head, slash, _ = rest.partition("/")
        if not head:
            continue
        if slash:
            folders.add(prefix + head)
        else:
            files[definition.uri] = definition
    if not files and not folders:
        return None
    children: list[ResourceDefinition | str] = [*files.values(), *sorted(folders - set(files))]
    return sorted(children, key=lambda c: c if isinstance(c, str) else c.uri)


class SkillsExtension:
    """The extension's three methods, registered on the server's low-level `Server`."""

    def __init__(self, server: AstridMcpServer) -> None:
        self.server = server

    def register(self, lowlevel: Server[Any]) -> None:
        lowlevel.add_request_handler("skills/list", types.PaginatedRequestParams, self._on_list)
        lowlevel.add_request_handler("skills/get", UriParams, self._on_get)
        lowlevel.add_request_handler("resources/directory/read", DirectoryParams, self._on_directory)

    async def entries(self, principal: str) -> list[SkillEntry]:
        """The skills `principal` sees."""

        def find(door: FrontDoor) -> list[SkillEntry]:
            return skills_in(door.list_resources(), door.subscribable)

        return await self.server.call(principal, find)

    async def _on_list(self, ctx: ServerRequestContext, params: types.PaginatedRequestParams) -> dict[str, Any]:
        if params.cursor is not None:  # one page, never a cursor: any cursor is one we did not issue
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor", data={"cursor": params.cursor})
        entries = await self.entries(self.server.principal_of(ctx))
        return _complete({"skills": [e.to_json() for e in entries]})

    async def _on_get(self, ctx: ServerRequestContext, params: UriParams) -> dict[str, Any]:
        entries = await self.entries(self.server.principal_of(ctx))
        for entry in entries:
            if entry.uri == params.uri:
                return _complete({"skill": entry.to_json()})
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"No skill is served at {params.uri} (skills/list names the skills you can see)",
            data={"uri": params.uri},
        )

    async def _on_directory(self, ctx: ServerRequestContext, params: DirectoryParams) -> dict[str, Any]:
        if params.cursor is not None:
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor", data={"cursor": params.cursor})
        definitions = await self.server.call(self.server.principal_of(ctx), lambda door: door.list_resources())
        children = directory_children(definitions, params.uri)
        if children is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"{params.uri} is not a directory resource (a directory URI has no trailing '/')",
                data={"uri": params.uri},
            )
        resources = []
        for child in children:
            if isinstance(child, str):
                resources.append({"uri": child, "name": child.rsplit("/", 1)[-1], "mimeType": DIRECTORY_MIME})
                continue
            resource = to_resource(child, self.server.limits)
            if resource is not None:
                resources.append(resource.model_dump(by_alias=True, mode="json", exclude_none=True))
        return _complete({"resources": resources})


def _complete(result: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 result: principal-scoped, never kept by a shared cache (as resources/list)."""
    return {"resultType": "complete", **result, "ttlMs": 0, "cacheScope": "private"}
