"""Interop: the MCP TypeScript SDK's client (the one Claude Desktop and the
Inspector are built on) against `astrid mcp serve`, started as Claude Desktop
starts it: from the entry `astrid mcp config` prints, over the SDK's minimal
environment. What it sees must be exactly what the Python SDK's client sees:
the same resources, the same bytes.

`make test` installs the client (`npm ci` in tests/e2e/ts_client).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from tests.support.capsules import BUNDLED
from tests.support.processes import LineReader, astrid_exe, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLIENT_DIR = Path(__file__).resolve().parent / "ts_client"
PER_REQUEST = {"astrid://whoami"}  # carries the request's timestamp: compared by meaning, not bytes


def node() -> str:
    found = shutil.which("node")
    assert found, "Node.js 20+ is needed for this test (it runs the MCP TypeScript SDK's client)"
    assert (CLIENT_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(), (
        "the TypeScript client is not installed: run `make test` (it runs `npm ci` in tests/e2e/ts_client)"
    )
    return found


async def python_view(folder: Path, capsule_home: Path, stderr: Path) -> dict:
    """Every resource and its chunks as the Python SDK's client reads them."""
    async with stdio_session(folder, principal="alice", capsule_home=capsule_home, stderr=stderr) as served:
        with anyio.fail_after(60):
            resources = (await served.session.list_resources()).resources
            reads = {}
            for resource in resources:
                contents = (await served.session.read_resource(resource.uri)).contents
                reads[resource.uri] = [chunk_view(chunk.model_dump(by_alias=True)) for chunk in contents]
    return {"resources": [{"uri": r.uri, "name": r.name, "mimeType": r.mime_type} for r in resources], "reads": reads}


def chunk_view(chunk: dict) -> dict:
    text = chunk.get("text")
    data = text.encode("utf-8") if text is not None else base64.b64decode(chunk["blob"])
    return {
        "uri": chunk["uri"],
        "mimeType": chunk.get("mimeType"),
        "text": text,
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def assert_same_view(typescript: dict, python: dict) -> None:
    assert typescript["resources"] == python["resources"]
    assert set(typescript["reads"]) == set(python["reads"])
    for uri, chunks in python["reads"].items():
        if uri in PER_REQUEST:
            [theirs], [ours] = typescript["reads"][uri], chunks
            assert json.loads(theirs["text"])["principal"] == json.loads(ours["text"])["principal"] == "alice"
        else:
            assert typescript["reads"][uri] == chunks, uri


class ProbeProcess:
    """`node probe.mjs claude_desktop_config.json`, its stdout read line by line."""

    def __init__(self, config: Path, env: dict[str, str], stderr: Path) -> None:
        self._stderr = stderr.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            [node(), str(CLIENT_DIR / "probe.mjs"), str(config)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self.reader = LineReader(self.process.stdout)

    def next_event(self, timeout_s: float) -> dict:
        try:
            line = self.reader.next(timeout_s)
        except TimeoutError:
            line = None
        assert line is not None, f"the TypeScript client said nothing more; its stderr:\n{self.log()}"
        return json.loads(line)

    def log(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return Path(self._stderr.name).read_text(encoding="utf-8", errors="replace")

    def close(self) -> int:
        try:
            return self.process.wait(30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self._stderr.close()


async def test_the_typescript_client_sees_what_the_python_client_sees(capsules, capsule_home, tmp_path):
    live = tmp_path / "live"
    for name in BUNDLED:
        shutil.copytree(capsules[name], live / name)
    before = await python_view(live, capsule_home, tmp_path / "python-before.log")

    # The config entry a user pastes into Claude Desktop; it carries the ASTRID_* settings.
    config = tmp_path / "claude_desktop_config.json"
    printed = subprocess.run(
        [astrid_exe(), "mcp", "config", "--name", "astrid", "--capsules", str(live), "--principal", "alice"],
        env=server_env(capsule_home),
        capture_output=True,
        text=True,
        check=True,
    )
    config.write_text(printed.stdout)
    assert json.loads(printed.stdout)["mcpServers"]["astrid"]["env"]["ASTRID_CAPSULE_HOME"] == str(capsule_home)
    probe_env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)), "PROBE_WAIT_MS": "30000"}
    probe = ProbeProcess(config, probe_env, tmp_path / "ts.log")
    try:
        listed = await anyio.to_thread.run_sync(probe.next_event, 90)
        assert listed["event"] == "listed"
        assert listed["server"]["name"] == "astrid"
        assert listed["capabilities"]["resources"]["listChanged"] is True
        assert listed["missing"]["code"] == -32002  # resource not found, as the SDK reports it
        assert_same_view(listed, before)
        assert any(chunk["mimeType"] == "image/png" for chunks in listed["reads"].values() for chunk in chunks)

        with anyio.fail_after(30):  # the folder watcher has its baseline once this is logged
            while "watching the capsule folders" not in probe.log():
                await anyio.sleep(0.05)
        shutil.copytree(capsules["mutable-v2"], live / "mutable")  # a capsule is installed while serving
        changed = await anyio.to_thread.run_sync(probe.next_event, 60)
        assert changed["event"] == "changed", probe.log()
    finally:
        code = await anyio.to_thread.run_sync(probe.close)
    assert code == 0, probe.log()

    after = await python_view(live, capsule_home, tmp_path / "python-after.log")
    assert {"astrid://mutable/one", "astrid://mutable/two"} <= {r["uri"] for r in after["resources"]}
    assert_same_view(changed, after)
    assert "Traceback" not in probe.log()
