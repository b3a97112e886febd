"""The MCP server in-process (mcp's Client on the real Server), over a stand-in kernel.

The same server runs behind `astrid mcp serve`; tests/e2e drives that one
over stdio with real capsules.
"""

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

pytestmark = pytest.mark.anyio

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00").decode()


def docs_capsule(bus) -> FakeCapsule:
    return FakeCapsule(
        bus,
        "docs",
        resources={
            "alice": [
                resource(
                    "astrid://docs/readme",
                    "readme",
                    title="Read me",
                    description="start here",
                    mime_type="text/markdown",
                    size=4,
                    annotations={"audience": ["user"], "priority": 0.7, "last_modified": "2025-01-12T15:00:58Z"},
                    icons=[{"src": "data:image/png;base64," + PNG, "mime_type": "image/png", "sizes": ["16x16"]}],
                    meta=json.dumps({"com.example/rev": 3, "io.modelcontextprotocol/x": 1, "dev.mcp/y": 2}),
                ),
                resource("astrid://docs/logo", "logo", mime_type="image/png"),
                resource("astrid://docs/book", "book"),
                resource(
                    "astrid://docs/odd",
                    "odd",
                    annotations={"priority": 7.5, "last_modified": "last tuesday"},
                ),
            ]
        },
        contents={
            "alice": {
                "astrid://docs/readme": [
                    text(
                        "astrid://docs/readme", "# hi", mime_type="text/markdown", meta=json.dumps({"com.example/a": 1})
                    )
                ],
                "astrid://docs/logo": [blob("astrid://docs/logo", PNG, mime_type="image/png")],
                "astrid://docs/book": [text("astrid://docs/book#1", "one"), text("astrid://docs/book#2", "two")],
                "astrid://docs/broken": "the disk is on fire",
            }
        },
    )


@asynccontextmanager
async def serving(setup=None, *, principal="alice", mode="legacy", limits=Limits(), message_handler=None):
    kernel = FakeKernel(setup or (lambda k: k.add(docs_capsule(k.bus))))
    runtime = Runtime(
        RuntimeConfig(capsule_paths=[], principal=principal, limits=limits), kernel_factory=lambda c: kernel
    )
    runtime.start(background=True)
    server = AstridMcpServer(runtime, limits=limits)
    try:
        with anyio.fail_after(15):
            async with Client(server.server, mode=mode, message_handler=message_handler) as client:
                yield client, server, kernel
    finally:
        runtime.close()


async def test_initialize_advertises_resources_with_list_changed_and_subscribe():
    async with serving() as (client, _, _):
        caps = client.server_capabilities
        assert caps.resources is not None
        assert caps.resources.list_changed is True
        assert caps.resources.subscribe is True  # docs/contract/subscriptions.md §11
        assert caps.tools is None and caps.prompts is None
        assert client.protocol_version == "2025-11-25"


async def test_modern_discover_advertises_the_same():
    async with serving(mode="2026-07-28") as (client, _, _):
        with anyio.fail_after(10):
            raw = await client.session.send_discover("2026-07-28")
        result = types.DiscoverResult.model_validate(raw)
        assert result.capabilities.resources.list_changed is True
        assert result.capabilities.resources.subscribe is True
        assert "2026-07-28" in result.supported_versions


async def test_list_reshapes_every_field():
    async with serving() as (client, _, _):
        with anyio.fail_after(10):
            listed = await client.list_resources()
    assert listed.next_cursor is None
    by_uri = {r.uri: r for r in listed.resources}
    assert list(by_uri) == sorted(by_uri)
    readme = by_uri["astrid://docs/readme"]
    assert readme.name == "readme" and readme.title == "Read me" and readme.description == "start here"
    assert readme.mime_type == "text/markdown" and readme.size == 4
    assert readme.annotations.audience == ["user"] and readme.annotations.priority == pytest.approx(0.7)
    assert readme.annotations.last_modified == "2025-01-12T15:00:58Z"
    assert readme.icons[0].src.startswith("data:image/png") and readme.icons[0].sizes == ["16x16"]
    assert readme.meta == {"com.example/rev": 3}  # reserved prefixes dropped
    odd = by_uri["astrid://docs/odd"]
    assert odd.annotations.priority == 1.0  # clamped
    assert odd.annotations.last_modified is None  # invalid ISO-8601 dropped alone


async def test_read_text_blob_and_multi_chunk():
    async with serving() as (client, _, _):
        with anyio.fail_after(10):
            readme = await client.read_resource("astrid://docs/readme")
            logo = await client.read_resource("astrid://docs/logo")
            book = await client.read_resource("astrid://docs/book")
    [chunk] = readme.contents
    assert isinstance(chunk, types.TextResourceContents)
    assert chunk.text == "# hi" and chunk.mime_type == "text/markdown" and chunk.meta == {"com.example/a": 1}
    [image] = logo.contents
    assert isinstance(image, types.BlobResourceContents) and image.blob == PNG and image.mime_type == "image/png"
    assert [(c.uri, c.text) for c in book.contents] == [
        ("astrid://docs/book#1", "one"),
        ("astrid://docs/book#2", "two"),
    ]


@pytest.mark.parametrize(("mode", "code"), [("legacy", -32002), ("2026-07-28", -32602)])
async def test_unknown_uri_code_depends_on_the_protocol_revision(mode, code):
    async with serving(mode=mode) as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.read_resource("astrid://nobody/home")
    assert caught.value.code == code
    assert caught.value.data["uri"] == "astrid://nobody/home"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_capsule_error_is_internal_error_with_the_message(mode):
    async with serving(mode=mode) as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.read_resource("astrid://docs/broken")
    assert caught.value.code == -32603
    assert "the disk is on fire" in caught.value.message
    assert caught.value.data["uri"] == "astrid://docs/broken"


async def test_read_timeout_is_internal_error_and_the_server_keeps_serving():
    release = threading.Event()

    def setup(kernel):
        kernel.add(docs_capsule(kernel.bus))
        kernel.add(FakeCapsule(kernel.bus, "hang", resources={"alice": [resource("astrid://hang/x")]}, hang=release))

    limits = Limits(read_window_s=0.4, describe_window_s=0.4)
    try:
        async with serving(setup, limits=limits) as (client, _, _):
            with anyio.fail_after(10):
                with pytest.raises(MCPError) as caught:
                    await client.read_resource("astrid://hang/x")
                assert caught.value.code == -32603
                readme = await client.read_resource("astrid://docs/readme")
                assert readme.contents[0].text == "# hi"
    finally:
        release.set()


async def test_subscribe_is_offered_for_a_uri_the_principal_could_read_only():
    # Was "not offered" (-32601) until resource subscriptions (docs/contract/subscriptions.md §11).
    async with serving() as (client, _, _):
        with anyio.fail_after(10):
            await client.session.send_request(
                types.SubscribeRequest(params=types.SubscribeRequestParams(uri="astrid://docs/readme")),
                types.EmptyResult,
            )
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.session.send_request(
                types.SubscribeRequest(params=types.SubscribeRequestParams(uri="astrid://docs/nope")),
                types.EmptyResult,
            )
    assert caught.value.code == -32002


async def test_templates_list_is_empty():
    async with serving() as (client, _, _):
        with anyio.fail_after(10):
            result = await client.list_resource_templates()
    assert result.resource_templates == []


async def test_a_cursor_we_never_issued_is_invalid_params():
    async with serving() as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.session.list_resources(params=types.PaginatedRequestParams(cursor="nope"))
    assert caught.value.code == types.INVALID_PARAMS


async def test_each_principal_sees_only_its_own():
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
        async with serving(setup, principal=principal) as (client, _, _):
            with anyio.fail_after(10):
                listed = await client.list_resources()
                read = await client.read_resource("astrid://notes/me")
        assert [r.uri for r in listed.resources] == [uri]
        assert read.contents[0].text == body


async def _wait_for(predicate, timeout=10.0):
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def test_list_changed_exactly_once_per_change_and_never_when_unchanged():
    notes: list[object] = []

    async def on_message(message):
        if isinstance(message, types.ResourceListChangedNotification):
            notes.append(message)

    async with serving(message_handler=on_message) as (client, server, kernel):
        with anyio.fail_after(10):
            await client.list_resources()
            await server.watching.wait()

        # a capsule-set change that leaves the URI set alone: no notification
        await anyio.to_thread.run_sync(kernel.reload)
        await _wait_for(lambda: server.changes_handled == 1)

        # a change of the URI set: exactly one notification
        kernel.capsules["docs"].resources["alice"].append(resource("astrid://docs/new"))
        await anyio.to_thread.run_sync(kernel.reload)
        await _wait_for(lambda: server.changes_handled == 2)
        await _wait_for(lambda: len(notes) == 1)

        listed = await client.list_resources()
        assert "astrid://docs/new" in [r.uri for r in listed.resources]

        # a removed capsule changes the set again
        kernel.remove("docs")
        await anyio.to_thread.run_sync(kernel.reload)
        await _wait_for(lambda: server.changes_handled == 3)
        await _wait_for(lambda: len(notes) == 2)
        assert (await client.list_resources()).resources == []
        assert server.list_changed_sent == 2


async def test_requests_wait_for_loading():
    gate = threading.Event()

    def slow_setup(kernel):
        gate.wait(10)
        kernel.add(docs_capsule(kernel.bus))

    async with serving(slow_setup) as (client, _, _):
        # initialize was answered while loading; list waits for the load to finish
        async with anyio.create_task_group() as tg:
            result: list = []

            async def do_list():
                result.append(await client.list_resources())

            tg.start_soon(do_list)
            await anyio.wait_all_tasks_blocked()  # the list is parked, waiting for the load
            assert not result
            gate.set()
        assert len(result[0].resources) == 4


async def test_kernel_failure_is_reported_on_every_request():
    def broken(kernel):
        raise RuntimeError("no engine today")

    async with serving(broken) as (client, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.list_resources()
    assert caught.value.code == -32603
    assert "no engine today" in caught.value.message


async def test_list_changed_reaches_a_2026_07_28_listen_stream():
    async with serving(mode="2026-07-28") as (client, server, kernel):
        with anyio.fail_after(10):
            await client.list_resources()
            await server.watching.wait()
            async with client.listen(resources_list_changed=True) as subscription:
                kernel.capsules["docs"].resources["alice"].append(resource("astrid://docs/new"))
                await anyio.to_thread.run_sync(kernel.reload)
                async for event in subscription:
                    assert type(event).__name__ == "ResourcesListChanged"
                    break
        listed = await client.list_resources()
        assert "astrid://docs/new" in [r.uri for r in listed.resources]
        assert server.list_changed_sent == 1
