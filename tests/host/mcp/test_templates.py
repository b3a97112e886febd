"""Resource templates and completion through the MCP server, in-process (mcp's Client on the real Server)."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError

from astrid.host.limits import Limits
from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from tests.host.broker.fakes import FakeCapsule, resource, template, template_body, text
from tests.host.mcp.fakes import FakeKernel

pytestmark = pytest.mark.anyio

MODES = ["legacy", "2026-07-28"]
FILES = "astrid://files/{dir}/{+path}"


def files_capsule(bus) -> FakeCapsule:
    return FakeCapsule(
        bus,
        "files",
        resources={"alice": [resource("astrid://files/index")]},
        contents={"alice": {"astrid://files/index": [text("astrid://files/index", "the index")]}},
        templates={
            "alice": [
                template(
                    FILES,
                    "file",
                    title="A file",
                    description="any file under a folder",
                    mime_type="text/plain",
                    annotations={"audience": ["user"], "priority": 3.0, "last_modified": "yesterday"},
                    icons=[{"src": "data:image/png;base64,AAAA", "mime_type": "image/png", "sizes": ["16x16"]}],
                    meta=json.dumps({"com.example/kind": "fs", "io.modelcontextprotocol/x": 1}),
                ),
                template("astrid://files/by-id/{id}", "by-id"),
            ],
            "bob": [template("astrid://bobs/{x}", "bobs")],
        },
        completion_values={"dir": ["docs", "drafts", "src"], "path": ["readme.md"]},
    )


@asynccontextmanager
async def serving(setup=None, *, principal="alice", mode="legacy", limits=Limits()):
    kernel = FakeKernel(setup or (lambda k: k.add(files_capsule(k.bus))))
    runtime = Runtime(
        RuntimeConfig(capsule_paths=[], principal=principal, limits=limits), kernel_factory=lambda c: kernel
    )
    runtime.start(background=True)
    server = AstridMcpServer(runtime, limits=limits)
    try:
        with anyio.fail_after(15):
            async with Client(server.server, mode=mode) as client:
                yield client, server, kernel
    finally:
        runtime.close()


async def test_initialize_advertises_completions():
    async with serving() as (client, _, _):
        caps = client.server_capabilities
        assert caps.completions is not None
        assert caps.resources is not None and caps.resources.list_changed is True and caps.resources.subscribe is True


async def test_discover_advertises_completions():
    async with serving(mode="2026-07-28") as (client, _, _):
        with anyio.fail_after(10):
            raw = await client.session.send_discover("2026-07-28")
        capabilities = types.DiscoverResult.model_validate(raw).capabilities
        assert capabilities.completions is not None
        assert capabilities.resources.list_changed is True


@pytest.mark.parametrize("mode", MODES)
async def test_templates_list_reshapes_every_field(mode):
    async with serving(mode=mode) as (client, _, _):
        with anyio.fail_after(10):
            result = await client.list_resource_templates()
    assert result.next_cursor is None
    assert [t.uri_template for t in result.resource_templates] == ["astrid://files/by-id/{id}", FILES]
    file = result.resource_templates[1]
    assert file.name == "file" and file.title == "A file" and file.description == "any file under a folder"
    assert file.mime_type == "text/plain"
    assert file.annotations.audience == ["user"]
    assert file.annotations.priority == 1.0  # clamped
    assert file.annotations.last_modified is None  # not ISO-8601: dropped alone
    assert file.icons[0].src == "data:image/png;base64,AAAA" and file.icons[0].sizes == ["16x16"]
    assert file.meta == {"com.example/kind": "fs"}  # the reserved prefix dropped


async def test_each_principal_lists_its_own_templates():
    async with serving(principal="bob") as (client, _, _):
        with anyio.fail_after(10):
            result = await client.list_resource_templates()
    assert [t.uri_template for t in result.resource_templates] == ["astrid://bobs/{x}"]


async def test_a_templates_cursor_we_never_issued_is_invalid_params():
    async with serving() as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.session.list_resource_templates(params=types.PaginatedRequestParams(cursor="nope"))
    assert caught.value.code == types.INVALID_PARAMS


@pytest.mark.parametrize("mode", MODES)
async def test_a_template_uri_reads_from_the_template_owner(mode):
    async with serving(mode=mode) as (client, _, _):
        with anyio.fail_after(10):
            read = await client.read_resource("astrid://files/docs/guide/intro.md")
            listed = await client.read_resource("astrid://files/index")
    [chunk] = read.contents
    assert chunk.text == template_body("files", {"dir": "docs", "path": "guide/intro.md"})
    assert listed.contents[0].text == "the index"


@pytest.mark.parametrize("mode", MODES)
async def test_completion_of_a_template_variable(mode):
    async with serving(mode=mode) as (client, _, _):
        with anyio.fail_after(10):
            result = await client.complete(
                types.ResourceTemplateReference(uri=FILES), {"name": "dir", "value": "d"}, {"path": "x"}
            )
    assert result.completion.values == ["docs", "drafts"]
    assert result.completion.total == 2 and result.completion.has_more is False


@pytest.mark.parametrize("mode", MODES)
async def test_completion_of_an_unknown_template_is_invalid_params(mode):
    async with serving(mode=mode) as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.complete(
                types.ResourceTemplateReference(uri="astrid://nobody/{x}"), {"name": "x", "value": ""}
            )
    assert caught.value.code == types.INVALID_PARAMS
    assert caught.value.data == {"uriTemplate": "astrid://nobody/{x}", "reason": "not_found"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_prompt_reference_is_invalid_params(mode):
    async with serving(mode=mode) as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.complete(types.PromptReference(name="greeting"), {"name": "who", "value": ""})
    assert caught.value.code == types.INVALID_PARAMS


async def test_a_failing_owner_is_internal_error():
    def setup(kernel):
        kernel.add(
            FakeCapsule(
                kernel.bus,
                "broken",
                templates={"alice": [template("astrid://broken/{x}")]},
                raw_complete=lambda r: json.dumps({"values": [], "error": "the index is gone"}),
            )
        )

    async with serving(setup) as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.complete(
                types.ResourceTemplateReference(uri="astrid://broken/{x}"), {"name": "x", "value": ""}
            )
    assert caught.value.code == types.INTERNAL_ERROR
    assert "the index is gone" in caught.value.message
    assert caught.value.data["reason"] == "capsule_error"


async def test_a_server_with_no_templates_lists_none():
    def setup(kernel):
        kernel.add(FakeCapsule(kernel.bus, "plain", resources={"alice": [resource("astrid://plain/x")]}))

    async with serving(setup) as (client, _, _):
        with anyio.fail_after(10):
            result = await client.list_resource_templates()
    assert result.resource_templates == []
