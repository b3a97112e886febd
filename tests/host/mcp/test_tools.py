"""Resources as tools (`--resource-tools`): the in-process client on the real Server, over a stand-in kernel."""

from __future__ import annotations

import base64
import json
import threading
from contextlib import asynccontextmanager

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError

from astrid.host.limits import Limits
from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from tests.host.broker.fakes import FakeCapsule, blob, resource, text
from tests.host.mcp.fakes import FakeKernel
from tests.host.mcp.test_server import PNG, docs_capsule

pytestmark = pytest.mark.anyio

MODES = ["legacy", "2026-07-28"]
ZIP = base64.b64encode(b"PK\x03\x04 not really a zip").decode()
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


def with_archive(kernel) -> None:
    """The docs capsule plus a capsule serving a non-image blob."""
    kernel.add(docs_capsule(kernel.bus))
    kernel.add(
        FakeCapsule(
            kernel.bus,
            "files",
            resources={"alice": [resource("astrid://files/archive", "archive", mime_type="application/zip")]},
            contents={
                "alice": {"astrid://files/archive": [blob("astrid://files/archive", ZIP, mime_type="application/zip")]}
            },
        )
    )


@asynccontextmanager
async def serving(setup=None, *, resource_tools=True, principal="alice", mode="legacy", limits=Limits(), **server_kw):
    kernel = FakeKernel(setup or with_archive)
    runtime = Runtime(
        RuntimeConfig(capsule_paths=[], principal=principal, limits=limits), kernel_factory=lambda c: kernel
    )
    runtime.start(background=True)
    server = AstridMcpServer(runtime, limits=limits, resource_tools=resource_tools, **server_kw)
    try:
        with anyio.fail_after(15):
            async with Client(server.server, mode=mode) as client:
                yield client, server
    finally:
        runtime.close()


async def call(client: Client, name: str, arguments: dict | None = None) -> types.CallToolResult:
    with anyio.fail_after(10):
        return await client.call_tool(name, arguments or {})


def error_line(result: types.CallToolResult) -> str:
    assert result.is_error is True
    [content] = result.content
    assert isinstance(content, types.TextContent)
    assert "\n" not in content.text
    return content.text


# -- advertised only with the flag ---------------------------------------------------------------


async def test_without_the_flag_there_are_no_tools():
    async with serving(resource_tools=False) as (client, _):
        assert client.server_capabilities.tools is None
        assert "list_resources" not in (client.instructions or "")
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.list_tools()
    assert caught.value.code == types.METHOD_NOT_FOUND


async def test_without_the_flag_the_2026_07_28_discovery_has_no_tools():
    async with serving(resource_tools=False, mode="2026-07-28") as (client, _):
        with anyio.fail_after(10):
            raw = await client.session.send_discover("2026-07-28")
    assert types.DiscoverResult.model_validate(raw).capabilities.tools is None


@pytest.mark.parametrize("mode", MODES)
async def test_with_the_flag_two_read_only_tools(mode):
    async with serving(mode=mode) as (client, _):
        with anyio.fail_after(10):
            listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert list(tools) == ["list_resources", "read_resource"]
    for tool in tools.values():
        assert tool.title and tool.description
        assert tool.annotations.model_dump(by_alias=True, exclude_none=True) == READ_ONLY
    assert tools["list_resources"].input_schema == {"type": "object", "properties": {}}
    read_schema = tools["read_resource"].input_schema
    assert read_schema["required"] == ["uri"] and read_schema["properties"]["uri"]["type"] == "string"
    assert tools["list_resources"].output_schema["required"] == ["resources"]


async def test_the_capability_and_instructions_name_the_tools():
    async with serving() as (client, _):
        tools = client.server_capabilities.tools
        assert tools is not None and not tools.list_changed
        assert client.server_capabilities.resources.list_changed is True
        assert "read_resource" in (client.instructions or "")


async def test_the_2026_07_28_discovery_advertises_tools():
    async with serving(mode="2026-07-28") as (client, _):
        with anyio.fail_after(10):
            raw = await client.session.send_discover("2026-07-28")
    capabilities = types.DiscoverResult.model_validate(raw).capabilities
    assert capabilities.tools is not None and capabilities.resources.list_changed is True


# -- list_resources --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_list_resources_gives_what_resources_list_gives(mode):
    async with serving(mode=mode) as (client, _):
        result = await call(client, "list_resources")
        with anyio.fail_after(10):
            listed = await client.list_resources()
    assert result.is_error is False
    [content] = result.content
    assert isinstance(content, types.TextContent)
    assert json.loads(content.text) == result.structured_content  # the text is the structured content, compact
    assert ": " not in content.text and "\n" not in content.text
    entries = result.structured_content["resources"]
    assert [e["uri"] for e in entries] == [r.uri for r in listed.resources]
    by_uri = {e["uri"]: e for e in entries}
    assert by_uri["astrid://docs/readme"] == {
        "uri": "astrid://docs/readme",
        "name": "readme",
        "title": "Read me",
        "description": "start here",
        "mimeType": "text/markdown",
        "size": 4,
    }
    assert by_uri["astrid://docs/book"] == {"uri": "astrid://docs/book", "name": "book"}  # no empty fields
    assert by_uri["astrid://files/archive"]["mimeType"] == "application/zip"


async def test_list_resources_ignores_arguments_it_does_not_take():
    async with serving() as (client, _):
        result = await call(client, "list_resources", {"filter": "docs"})
    assert result.is_error is False and len(result.structured_content["resources"]) == 5


async def test_list_resources_with_nothing_served_is_an_empty_list():
    async with serving(lambda kernel: None) as (client, _):
        result = await call(client, "list_resources")
    assert result.is_error is False
    assert result.structured_content == {"resources": []}
    assert result.content[0].text == '{"resources":[]}'


# -- read_resource ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_text_chunks_become_text_content(mode):
    async with serving(mode=mode) as (client, _):
        readme = await call(client, "read_resource", {"uri": "astrid://docs/readme"})
        book = await call(client, "read_resource", {"uri": "astrid://docs/book"})
    assert readme.is_error is False
    [content] = readme.content
    assert isinstance(content, types.TextContent) and content.text == "# hi"
    assert content.meta == {"com.example/a": 1}
    assert [(type(c), c.text) for c in book.content] == [(types.TextContent, "one"), (types.TextContent, "two")]


@pytest.mark.parametrize("mode", MODES)
async def test_an_image_becomes_image_content_with_the_same_base64(mode):
    async with serving(mode=mode) as (client, _):
        result = await call(client, "read_resource", {"uri": "astrid://docs/logo"})
        with anyio.fail_after(10):
            read = await client.read_resource("astrid://docs/logo")
    [content] = result.content
    assert isinstance(content, types.ImageContent)
    assert content.mime_type == "image/png"
    assert content.data == read.contents[0].blob == PNG


@pytest.mark.parametrize("mode", MODES)
async def test_another_blob_becomes_an_embedded_resource_with_the_same_base64(mode):
    async with serving(mode=mode) as (client, _):
        result = await call(client, "read_resource", {"uri": "astrid://files/archive"})
        with anyio.fail_after(10):
            read = await client.read_resource("astrid://files/archive")
    [content] = result.content
    assert isinstance(content, types.EmbeddedResource)
    assert isinstance(content.resource, types.BlobResourceContents)
    assert content.resource == read.contents[0]
    assert content.resource.blob == ZIP and content.resource.mime_type == "application/zip"


async def test_every_read_matches_resources_read():
    async with serving() as (client, _):
        listed = await call(client, "list_resources")
        for entry in listed.structured_content["resources"]:
            uri = entry["uri"]
            tool = await call(client, "read_resource", {"uri": uri})
            try:
                with anyio.fail_after(10):
                    read = await client.read_resource(uri)
            except MCPError as exc:  # astrid://docs/odd is listed but never answers
                assert exc.message in error_line(tool), uri
                continue
            assert len(tool.content) == len(read.contents), uri
            for content, chunk in zip(tool.content, read.contents, strict=True):
                if isinstance(chunk, types.TextResourceContents):
                    assert content.text == chunk.text
                elif isinstance(content, types.ImageContent):
                    assert (content.data, content.mime_type) == (chunk.blob, chunk.mime_type)
                else:
                    assert content.resource == chunk


# -- failures are results the model reads ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_an_unknown_uri_is_a_tool_error(mode):
    async with serving(mode=mode) as (client, _):
        result = await call(client, "read_resource", {"uri": "astrid://nobody/home"})
    line = error_line(result)
    assert "not found" in line and "astrid://nobody/home" in line and "list_resources" in line


async def test_a_capsule_error_is_a_tool_error_with_its_message():
    async with serving() as (client, _):
        result = await call(client, "read_resource", {"uri": "astrid://docs/broken"})
    assert error_line(result) == "cannot read astrid://docs/broken: the disk is on fire"


async def test_a_long_multi_line_capsule_error_is_one_bounded_line():
    def setup(kernel):
        story = "line one\nline two\n" + "x" * 5000
        kernel.add(FakeCapsule(kernel.bus, "loud", contents={"alice": {"astrid://loud/x": story}}))

    async with serving(setup) as (client, _):
        result = await call(client, "read_resource", {"uri": "astrid://loud/x"})
    line = error_line(result)
    assert line.startswith("cannot read astrid://loud/x: line one line two x") and len(line) <= 500


@pytest.mark.parametrize("arguments", [{}, {"uri": ""}, {"uri": 7}, {"uri": None}, {"url": "astrid://docs/readme"}])
async def test_a_bad_argument_is_a_tool_error(arguments):
    async with serving() as (client, _):
        result = await call(client, "read_resource", arguments)
    assert "needs a uri" in error_line(result)


async def test_a_timeout_is_a_tool_error_and_the_server_keeps_serving():
    release = threading.Event()

    def setup(kernel):
        kernel.add(docs_capsule(kernel.bus))
        kernel.add(FakeCapsule(kernel.bus, "hang", resources={"alice": [resource("astrid://hang/x")]}, hang=release))

    try:
        async with serving(setup, limits=Limits(read_window_s=0.4, describe_window_s=0.4)) as (client, _):
            result = await call(client, "read_resource", {"uri": "astrid://hang/x"})
            assert error_line(result).startswith("cannot read astrid://hang/x:")
            readme = await call(client, "read_resource", {"uri": "astrid://docs/readme"})
            assert readme.content[0].text == "# hi"
    finally:
        release.set()


async def test_the_busy_cap_applies_to_tools_too():
    async with serving(max_requests_per_principal=0) as (client, _):
        listed = await call(client, "list_resources")
        read = await call(client, "read_resource", {"uri": "astrid://docs/readme"})
    assert "busy" in error_line(listed) and "busy" in error_line(read)


async def test_a_kernel_failure_is_a_tool_error():
    def broken(kernel):
        raise RuntimeError("no engine today")

    async with serving(broken) as (client, _):
        result = await call(client, "list_resources")
    assert "no engine today" in error_line(result)


async def test_an_unknown_tool_is_a_json_rpc_error():
    async with serving() as (client, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.call_tool("write_resource", {"uri": "astrid://docs/readme"})
    assert caught.value.code == types.INVALID_PARAMS
    assert "Unknown tool: write_resource" in caught.value.message


# -- as whom ---------------------------------------------------------------------------------


async def test_each_principal_sees_only_its_own_through_the_tools():
    def setup(kernel):
        kernel.add(
            FakeCapsule(
                kernel.bus,
                "notes",
                resources={"alice": [resource("astrid://notes/a")], "bob": [resource("astrid://notes/b")]},
                contents={
                    "alice": {"astrid://notes/me": [text("astrid://notes/me", "alice's")]},
                    "bob": {"astrid://notes/me": [text("astrid://notes/me", "bob's")]},
                },
            )
        )

    for principal, uri, body in (("alice", "astrid://notes/a", "alice's"), ("bob", "astrid://notes/b", "bob's")):
        async with serving(setup, principal=principal) as (client, _):
            listed = await call(client, "list_resources")
            read = await call(client, "read_resource", {"uri": "astrid://notes/me"})
        assert [e["uri"] for e in listed.structured_content["resources"]] == [uri]
        assert read.content[0].text == body
