"""Resources as tools (`--resource-tools`): `list_resources` and `read_resource`.

Some clients (Claude Desktop among them) let the model read a resource only
when the user attaches it by hand. With these two read-only tools the model
fetches context itself. They are a second front door onto the very same
calls, through the server's public ones (`AstridMcpServer.resources`,
`.read`): `list_resources` is resources/list and `read_resource` is
resources/read, as the same principal, under the same busy cap, with the
same reshaping (`reshape.py`).

- `list_resources` answers `{"resources": [{uri, name, title?, description?,
  mimeType?, size?}, ...]}` as compact JSON text, and the same object as
  `structuredContent` (the tool declares it as its `outputSchema`);
- `read_resource` answers each chunk in order: a text chunk as text content
  (its text verbatim), an `image/*` blob as image content, any other blob as
  an embedded resource (`BlobResourceContents`); the base64 is the one
  resources/read gives;
- a failure the model can act on (an unknown URI, a capsule error, a
  timeout, busy, a bad argument) is a result with `isError: true` and one
  line of text; an unknown tool name is a JSON-RPC error (-32602), as the
  MCP spec has it.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import mcp.types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from astrid.host.contract.outcomes import FailureCode
from astrid.host.mcp.reshape import to_contents

if TYPE_CHECKING:
    from mcp.server import Server

    from astrid.host.mcp.server import AstridMcpServer

log = logging.getLogger("astrid.host.mcp")

LIST_TOOL = "list_resources"
READ_TOOL = "read_resource"
INSTRUCTIONS = (
    " The same resources are also offered as two read-only tools: list_resources, then read_resource with a uri."
)
MAX_ERROR_CHARS = 500  # one line a model reads, not a capsule's whole story

# Every hint says: reads only, nothing changes, nothing outside this server.
READ_ONLY = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

LIST_INPUT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
READ_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "uri": {
            "type": "string",
            "description": "The uri of a resource, exactly as list_resources gave it (e.g. astrid://docs/index).",
        }
    },
    "required": ["uri"],
}
LISTED_FIELDS = ("uri", "name", "title", "description", "mimeType", "size")
LIST_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "resources": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "uri": {"type": "string"},
                    "name": {"type": "string"},
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                    "mimeType": {"type": "string"},
                    "size": {"type": "integer"},
                },
                "required": ["uri", "name"],
            },
        }
    },
    "required": ["resources"],
}

TOOLS = (
    types.Tool(
        name=LIST_TOOL,
        title="List resources",
        description=(
            "List the resources (documents, files, data) this server can read for the user. "
            'Returns JSON: {"resources": [{uri, name, title, description, mimeType, size}]}. '
            "Call it first to find what is available, then read_resource with one of the uris."
        ),
        input_schema=LIST_INPUT_SCHEMA,
        output_schema=LIST_OUTPUT_SCHEMA,
        annotations=READ_ONLY,
    ),
    types.Tool(
        name=READ_TOOL,
        title="Read a resource",
        description=(
            "Read one resource by its uri (from list_resources) and return its contents: "
            "text as text, images as images, other binary data as an embedded resource."
        ),
        input_schema=READ_INPUT_SCHEMA,
        annotations=READ_ONLY,
    ),
)
INPUT_SCHEMAS = {tool.name: tool.input_schema for tool in TOOLS}


class ResourceTools:
    """The two tools of one server; `register` puts their handlers on its SDK `Server`."""

    def __init__(self, server: AstridMcpServer) -> None:
        self.server = server

    def register(self, sdk: Server[Any]) -> None:
        sdk.add_request_handler("tools/list", types.PaginatedRequestParams, self.on_list_tools)
        sdk.add_request_handler("tools/call", types.CallToolRequestParams, self.on_call_tool)
        # 2026-07-28 HTTP checks `Mcp-Param-*` headers against the schema: no tools/list round for it.
        sdk.get_tool_input_schema = INPUT_SCHEMAS.get
        sdk.instructions = (sdk.instructions or "") + INSTRUCTIONS

    @staticmethod
    def capability() -> types.ToolsCapability:
        return types.ToolsCapability(list_changed=False)  # the two tools never change

    async def on_list_tools(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if params is not None and params.cursor is not None:
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor", data={"cursor": params.cursor})
        return types.ListToolsResult(tools=list(TOOLS))

    async def on_call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == LIST_TOOL:
            return await self._list(ctx)
        if params.name == READ_TOOL:
            uri = arguments.get("uri")
            if not isinstance(uri, str) or not uri.strip():
                return failed("read_resource needs a uri: a string from list_resources, e.g. astrid://docs/index")
            return await self._read(ctx, uri)
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}", data={"name": params.name})

    async def _list(self, ctx: ServerRequestContext) -> types.CallToolResult:
        principal = self.server.principal_of(ctx)  # no principal: a JSON-RPC error, as resources/list
        try:
            resources = await self.server.resources(principal)
        except MCPError as exc:
            return failed(f"cannot list resources: {exc.message}")
        listed = {"resources": [listed_view(resource) for resource in resources]}
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(listed, separators=(",", ":"), ensure_ascii=False))],
            structured_content=listed,
        )

    async def _read(self, ctx: ServerRequestContext, uri: str) -> types.CallToolResult:
        principal = self.server.principal_of(ctx)
        try:
            reply = await self.server.read(principal, uri)
        except MCPError as exc:
            return failed(f"cannot read {uri}: {exc.message}")
        if reply.error is not None:
            if reply.error.code is FailureCode.NOT_FOUND:
                return failed(f"Resource not found: {uri} (list_resources gives the uris there are)")
            return failed(f"cannot read {uri}: {reply.error.message or reply.error.code.value}")
        try:
            content: list[types.ContentBlock] = [
                to_content(to_contents(chunk, self.server.limits)) for chunk in reply.contents
            ]
        except ValueError:
            log.exception("read of %s could not be reshaped", uri)
            return failed(f"cannot read {uri}: the contents could not be expressed in MCP")
        if not content:
            return failed(f"cannot read {uri}: the capsule returned no contents")
        return types.CallToolResult(content=content)


def listed_view(resource: types.Resource) -> dict[str, Any]:
    """What a model needs to choose a resource: the fields it reads, none of the display extras."""
    dumped = resource.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {key: dumped[key] for key in LISTED_FIELDS if key in dumped}


def to_content(
    contents: types.TextResourceContents | types.BlobResourceContents,
) -> types.TextContent | types.ImageContent | types.EmbeddedResource:
    """One resources/read chunk as tool content: text verbatim, the base64 of a blob untouched."""
    if isinstance(contents, types.TextResourceContents):
        return types.TextContent(text=contents.text, _meta=contents.meta)
    mime_type = contents.mime_type or ""
    if mime_type.lower().startswith("image/"):
        return types.ImageContent(data=contents.blob, mime_type=mime_type, _meta=contents.meta)
    return types.EmbeddedResource(resource=contents)


def failed(message: str) -> types.CallToolResult:
    """A tool error the model reads: one line, bounded."""
    line = " ".join(message.split())
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 1] + "…"
    return types.CallToolResult(content=[types.TextContent(text=line)], is_error=True)
