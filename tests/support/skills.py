"""A real MCP client's side of the Skills extension: its three requests, sent on the SDK's ClientSession,
and the check a host makes of every file it reads against the skill's entry (digest and size)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import mcp.types as types
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from pydantic import BaseModel, ConfigDict

from tests.support.processes import astrid_exe, serve_args, server_env

EXTENSION = "io.modelcontextprotocol/skills"


class _Raw(BaseModel):
    """A result as the server sent it (the SDK has no types for the extension's results)."""

    model_config = ConfigDict(extra="allow")


class UriParams(types.RequestParams):
    uri: str


class ListSkills(types.Request[types.PaginatedRequestParams, Literal["skills/list"]]):
    method: Literal["skills/list"] = "skills/list"
    params: types.PaginatedRequestParams = types.PaginatedRequestParams()


class GetSkill(types.Request[UriParams, Literal["skills/get"]]):
    method: Literal["skills/get"] = "skills/get"


class ReadDirectory(types.Request[UriParams, Literal["resources/directory/read"]]):
    method: Literal["resources/directory/read"] = "resources/directory/read"


async def list_skills(session: ClientSession) -> dict[str, Any]:
    return (await session.send_request(ListSkills(), _Raw)).model_dump()


async def get_skill(session: ClientSession, uri: str) -> dict[str, Any]:
    return (await session.send_request(GetSkill(params=UriParams(uri=uri)), _Raw)).model_dump()


async def read_directory(session: ClientSession, uri: str) -> dict[str, Any]:
    return (await session.send_request(ReadDirectory(params=UriParams(uri=uri)), _Raw)).model_dump()


def raw_bytes(contents: types.TextResourceContents | types.BlobResourceContents) -> bytes:
    """The bytes a read returned: a text chunk's UTF-8, a blob's decoded base64."""
    if isinstance(contents, types.TextResourceContents):
        return contents.text.encode("utf-8")
    return base64.b64decode(contents.blob)


async def verified_files(session: ClientSession, entry: dict[str, Any]) -> dict[str, types.ReadResourceResult]:
    """Read every file of a skill entry and check it as a host must: one chunk whose bytes have the entry's
    size and sha256. The reads by URI."""
    reads = {}
    for file in entry["resources"]:
        result = await session.read_resource(file["uri"])
        [contents] = result.contents
        data = raw_bytes(contents)
        assert len(data) == file["size"], file["uri"]
        assert file["digest"] == "sha256:" + hashlib.sha256(data).hexdigest(), file["uri"]
        reads[file["uri"]] = result
    return reads


@asynccontextmanager
async def modern_client(
    *folders: Path, principal: str, capsule_home: Path, stderr: Path, env: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """`astrid mcp serve --principal P --capsules F...` under the SDK's Client on the 2026-07-28 revision."""
    params = StdioServerParameters(
        command=astrid_exe(), args=serve_args(*folders, principal=principal), env=env or server_env(capsule_home)
    )
    with stderr.open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="2026-07-28") as client:
            assert client.protocol_version == "2026-07-28"
            yield client


def with_claims(built: Path, target: Path, *namespaces: str, name: str | None = None) -> Path:
    """A copy of the built capsule folder `built` whose Capsule.toml claims `namespaces` (and maybe another
    name); the component is the same bytes."""
    shutil.copytree(built, target)
    manifest = target / "Capsule.toml"
    text = manifest.read_text(encoding="utf-8")
    head, version, rest = text.partition("\nversion = ")
    line, _, rest = rest.partition("\n")
    claims = "namespaces = [" + ", ".join(json.dumps(n) for n in namespaces) + "]"
    text = f"{head}{version}{line}\n{claims}\n{rest}"
    if name is not None:
        text = re.sub(r'(?m)^name = "[^"]*"', f'name = "{name}"', text, count=1)
    manifest.write_text(text, encoding="utf-8")
    return target
