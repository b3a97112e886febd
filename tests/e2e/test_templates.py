"""Templates and completion end to end: the Python and TypeScript SDK clients on `astrid mcp serve`.

Both clients list the templated capsule's templates, read URIs that only a
template covers (a one-segment `{id}` and a multi-segment `{+path}`),
complete variables by prefix, and see a `{+path}` traversal refused; they
must see exactly the same things.
"""

from __future__ import annotations

import json
import os
import subprocess

import anyio
import mcp.types as types
import pytest
from mcp import MCPError

from tests.support.processes import astrid_exe, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLIENT_DIR = os.path.join(os.path.dirname(__file__), "ts_client")
READS = [
    "test://template/7/data",
    "astrid://files/notes/today.md",
    "astrid://files/a%20b/c.txt",
    "astrid://files/notes/../README.md",
    "astrid://files/%2e%2e/README.md",
]
COMPLETIONS = [
    ("astrid://files/{+path}", "path", "notes/"),
    ("test://template/{id}/data", "id", "12"),
]


async def python_view(folder, capsule_home, stderr) -> dict:
    async with stdio_session(folder, principal="alice", capsule_home=capsule_home, stderr=stderr) as served:
        session = served.session
        with anyio.fail_after(60):
            listed = await session.list_resource_templates()
            reads: dict[str, object] = {}
            for uri in READS:
                try:
                    contents = (await session.read_resource(uri)).contents
                    reads[uri] = [getattr(chunk, "text", None) for chunk in contents]
                except MCPError as exc:
                    reads[uri] = {"error": exc.error.code}
            capabilities = session.server_capabilities
            assert capabilities is not None
            completions = {}
            for uri_template, argument, value in COMPLETIONS:
                result = await session.complete(
                    types.ResourceTemplateReference(type="ref/resource", uri=uri_template),
                    argument={"name": argument, "value": value},
                )
                completions[f"{uri_template} {argument}={value}"] = result.completion.values
    return {
        "capabilities": sorted(name for name, value in capabilities.model_dump().items() if value is not None),
        "templates": [
            {"uriTemplate": t.uri_template, "name": t.name, "mimeType": t.mime_type} for t in listed.resource_templates
        ],
        "reads": reads,
        "completions": completions,
    }


def typescript_view(folder, capsule_home, tmp_path) -> dict:
    config = tmp_path / "claude_desktop_config.json"
    printed = subprocess.run(
        [astrid_exe(), "mcp", "config", "--name", "astrid", "--capsules", str(folder), "--principal", "alice"],
        env=server_env(capsule_home),
        capture_output=True,
        text=True,
        check=True,
    )
    config.write_text(printed.stdout)
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path))}
    with (tmp_path / "ts.log").open("w") as stderr:
        done = subprocess.run(
            ["node", os.path.join(CLIENT_DIR, "templates.mjs"), str(config)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            timeout=120,
            text=True,
        )
    assert done.returncode == 0, (tmp_path / "ts.log").read_text()
    return json.loads(done.stdout)


async def test_both_clients_list_read_and_complete_templates_alike(built_templated, capsule_home, tmp_path):
    ours = await python_view(built_templated.folder, capsule_home, tmp_path / "python.log")
    theirs = await anyio.to_thread.run_sync(typescript_view, built_templated.folder, capsule_home, tmp_path)

    assert "completions" in ours["capabilities"]
    listed = {t["uriTemplate"] for t in ours["templates"]}
    assert {"test://template/{id}/data", "astrid://files/{+path}"} <= listed
    assert "astrid://private/{name}" in listed  # alice's own template
    reads = ours["reads"]
    assert reads["test://template/7/data"] == ['{"id":"7","templateTest":true,"data":"Data for ID: 7"}']
    assert reads["astrid://files/notes/today.md"] == ["today: write tests\n"]  # {+path} spans a `/`
    assert reads["astrid://files/a%20b/c.txt"] == ["a space in a directory name\n"]  # decoded
    for traversal in ("astrid://files/notes/../README.md", "astrid://files/%2e%2e/README.md"):
        assert reads[traversal] == {"error": -32002}, traversal  # never served (resource not found)
    assert ours["completions"] == {
        "astrid://files/{+path} path=notes/": ["notes/later.md", "notes/today.md"],
        "test://template/{id}/data id=12": ["12", "123", "1234"],
    }

    assert theirs["templates"] == ours["templates"]
    assert theirs["reads"] == ours["reads"]
    assert theirs["completions"] == ours["completions"]
    assert "completions" in theirs["capabilities"]
