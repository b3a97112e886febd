"""Resources as tools end to end: `astrid mcp serve --resource-tools` over stdio with the bundled capsules.

The Python SDK's client and the TypeScript SDK's (the one Claude Desktop is
built on, started from the entry `astrid mcp config --resource-tools`
prints) read through `list_resources` / `read_resource` exactly what
resources/list and resources/read give.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import anyio
import mcp.types as types
import pytest
from mcp import MCPError

from tests.e2e.test_ts_client import PER_REQUEST, ProbeProcess, python_view
from tests.support.capsules import BUNDLED
from tests.support.processes import astrid_exe, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FLAG = ("--resource-tools",)
MISSING = "astrid://no-such-capsule/x"
READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


def bundled(capsules):
    return [capsules[name] for name in BUNDLED]


async def test_the_tools_read_what_resources_read_reads(capsules, capsule_home, stderr_file):
    async with stdio_session(
        *bundled(capsules), principal="alice", capsule_home=capsule_home, stderr=stderr_file, extra=FLAG
    ) as served:
        session = served.session
        assert served.init.capabilities.tools is not None
        assert served.init.capabilities.resources.list_changed is True
        with anyio.fail_after(60):
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            listed = await session.call_tool("list_resources", {})
            resources = (await session.list_resources()).resources

            index_tool = await session.call_tool("read_resource", {"uri": "astrid://docs/index"})
            index_read = await session.read_resource("astrid://docs/index")
            logo_tool = await session.call_tool("read_resource", {"uri": "astrid://docs/logo.png"})
            logo_read = await session.read_resource("astrid://docs/logo.png")
            missing = await session.call_tool("read_resource", {"uri": MISSING})
            bad = await session.call_tool("read_resource", {"uri": 42})
            with pytest.raises(MCPError) as unknown:
                await session.call_tool("delete_resource", {"uri": "astrid://docs/index"})

    assert list(tools) == ["list_resources", "read_resource"]
    for tool in tools.values():
        assert tool.annotations.model_dump(by_alias=True, exclude_none=True) == READ_ONLY

    assert listed.is_error is False
    assert [entry["uri"] for entry in listed.structured_content["resources"]] == [r.uri for r in resources]
    assert json.loads(listed.content[0].text) == listed.structured_content

    # the same text as resources/read
    assert index_tool.is_error is False
    assert [c.text for c in index_tool.content] == [c.text for c in index_read.contents]
    assert all(isinstance(c, types.TextContent) for c in index_tool.content)
    # the PNG logo: image content with the same base64
    [image] = logo_tool.content
    [blob] = logo_read.contents
    assert isinstance(image, types.ImageContent) and isinstance(blob, types.BlobResourceContents)
    assert image.mime_type == blob.mime_type == "image/png"
    assert image.data == blob.blob and base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")

    # failures the model reads: one line, isError
    assert missing.is_error is True and "not found" in missing.content[0].text and MISSING in missing.content[0].text
    assert bad.is_error is True and "needs a uri" in bad.content[0].text
    assert unknown.value.code == types.INVALID_PARAMS
    assert "list_resources, read_resource" in served.log()  # the banner says the tools are on


async def test_without_the_flag_tools_list_is_method_not_found(capsules, capsule_home, stderr_file):
    async with stdio_session(
        capsules["docs"], principal="alice", capsule_home=capsule_home, stderr=stderr_file
    ) as served:
        assert served.init.capabilities.tools is None
        with anyio.fail_after(30), pytest.raises(MCPError) as caught:
            await served.session.list_tools()
    assert caught.value.code == types.METHOD_NOT_FOUND


def test_mcp_config_passes_the_flag_on_and_refuses_it_for_a_remote_server(capsule_home):
    env = server_env(capsule_home)
    printed = subprocess.run(
        [astrid_exe(), "mcp", "config", "--resource-tools"], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(printed.stdout)["mcpServers"]["astrid"]["args"][-3:] == ["mcp", "serve", "--resource-tools"]
    plain = subprocess.run([astrid_exe(), "mcp", "config"], env=env, capture_output=True, text=True, check=True)
    assert "--resource-tools" not in json.loads(plain.stdout)["mcpServers"]["astrid"]["args"]

    remote = subprocess.run(
        [astrid_exe(), "mcp", "config", "--http", "https://mcp.example.com/mcp", "--resource-tools"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert remote.returncode != 0 and remote.stdout == ""
    assert "--resource-tools belongs to the server" in remote.stderr
    assert "astrid mcp serve --http" in remote.stderr


async def test_the_typescript_client_reads_the_same_through_the_tools(capsules, capsule_home, tmp_path):
    live = tmp_path / "live"
    for name in BUNDLED:
        shutil.copytree(capsules[name], live / name)
    python = await python_view(live, capsule_home, tmp_path / "python.log")

    config = tmp_path / "claude_desktop_config.json"
    printed = subprocess.run(
        [astrid_exe(), "mcp", "config", "--name", "astrid", "--capsules", str(live), "--principal", "alice"]
        + ["--resource-tools"],
        env=server_env(capsule_home),
        capture_output=True,
        text=True,
        check=True,
    )
    config.write_text(printed.stdout)
    probe_env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)), "PROBE_WAIT_MS": "1"}
    probe = ProbeProcess(config, probe_env, tmp_path / "ts.log")
    try:
        listed = await anyio.to_thread.run_sync(probe.next_event, 90)
        assert listed["event"] == "listed", probe.log()
        assert listed["capabilities"]["tools"] is not None
        view = listed["tools"]
        assert view is not None, probe.log()
        assert [tool["name"] for tool in view["tools"]] == ["list_resources", "read_resource"]
        assert all(tool["annotations"] == READ_ONLY for tool in view["tools"])

        # list_resources names what resources/list names, for both clients
        assert view["listed"]["isError"] is False
        entries = view["listed"]["structured"]["resources"]
        assert [e["uri"] for e in entries] == [r["uri"] for r in python["resources"]]
        assert [(e["uri"], e["name"], e.get("mimeType")) for e in entries] == [
            (r["uri"], r["name"], r["mimeType"]) for r in python["resources"]
        ]

        # read_resource gives the bytes resources/read gives
        assert set(view["reads"]) == set(python["reads"])
        for uri, chunks in python["reads"].items():
            read = view["reads"][uri]
            assert read["isError"] is False, (uri, read)
            assert len(read["content"]) == len(chunks), uri
            for content, chunk in zip(read["content"], chunks, strict=True):
                expected = "text" if chunk["text"] is not None else "image"  # the bundled blobs are images
                assert content["type"] == expected, uri
                if uri not in PER_REQUEST:
                    assert content["sha256"] == chunk["sha256"], uri
        assert any(c["type"] == "image" for read in view["reads"].values() for c in read["content"])

        missing = view["missing"]
        assert missing["isError"] is True and MISSING in missing["content"][0]["text"]
        assert (await anyio.to_thread.run_sync(probe.next_event, 30))["event"] == "timeout"
    finally:
        code = await anyio.to_thread.run_sync(probe.close)
    assert code == 0, probe.log()
    assert "Traceback" not in probe.log()
