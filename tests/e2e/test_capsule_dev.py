"""`astrid capsule dev DIR`: a capsule folder served from its sources, an edit live without a build.

A real MCP client (the Python SDK's) on the real `astrid capsule dev`
process over stdio. The runner is built once per session (cached by content
hash, as a user's first `capsule dev` builds it). The seconds from saving a
file to the new content served are printed (`-s` shows them), not asserted:
the machine decides them.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import anyio
import pytest
from mcp import MCPError as McpError

from tests.support.http import http_server, http_session, text_of
from tests.support.stdio import StdioSession, stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

URI = "astrid://hello/greeting"
ADDED = "astrid://hello/added"
EDIT_WAIT_S = 30  # a bound on the wait, not the expectation (printed: within 2 s)

MANIFEST = """\
[package]
name = "hello"
version = "0.1.0"
description = "dev mode test capsule"

[[component]]
id = "hello"
file = "hello.wasm"

[subscribe]
"resource.v1.request.describe" = { wit = "astrid-bus:resource@1.0.0", handler = "describe" }
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }

[publish]
"resource.v1.response.describe.*" = { wit = "astrid-bus:resource@1.0.0" }
"resource.v1.response.read.*" = { wit = "astrid-bus:resource@1.0.0" }
"""

APP = """\
from astrid_sdk import Capsule

import greeting

capsule = Capsule("hello")


@capsule.resource("astrid://hello/greeting", name="greeting", mime_type="text/plain")
def greet(ctx):
    return greeting.TEXT
{more}

WitWorld = capsule.world()
"""

MORE = """

@capsule.resource("astrid://hello/added", name="added", mime_type="text/plain")
def added(ctx):
    return "added in dev mode"
"""


@pytest.fixture
def runner_ready(dev_runner_built: Path) -> Path:
    return dev_runner_built


def hello(folder: Path) -> Path:
    """The test capsule: one resource whose text comes from greeting.py."""
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(MANIFEST, encoding="utf-8")
    (folder / "app.py").write_text(APP.format(more=""), encoding="utf-8")
    (folder / "greeting.py").write_text('TEXT = "hello, version 1"\n', encoding="utf-8")
    return folder


async def until_served(served: StdioSession, uri: str, text: str, since: float) -> float:
    """Seconds from `since` until a read of `uri` answers `text` (read over and over)."""
    with anyio.fail_after(EDIT_WAIT_S):
        while True:
            # an error (the URI not listed yet while the capsule set changes) is read again
            with contextlib.suppress(McpError):
                if await served.text(uri) == text:
                    return time.monotonic() - since
            await anyio.sleep(0.02)


async def until_logged(served: StdioSession, needle: str) -> str:
    """The server's stderr line holding `needle`, once there is one."""
    with anyio.fail_after(EDIT_WAIT_S):
        while True:
            lines = [line for line in served.log().splitlines() if needle in line]
            if lines:
                return lines[-1]
            await anyio.sleep(0.05)


async def test_an_edit_is_served_within_seconds_and_a_syntax_error_keeps_the_last_good_version(
    runner_ready: Path, tmp_path: Path, capsule_home: Path, stderr_file: Path
) -> None:
    folder = hello(tmp_path / "hello")
    args = ["capsule", "dev", str(folder), "--principal", "alice"]
    async with stdio_session(capsule_home=capsule_home, stderr=stderr_file, args=args, init_timeout_s=60) as served:
        with anyio.fail_after(120):  # the first read waits for the load (the runner compiled, or from the cache)
            assert await served.text(URI) == "hello, version 1"
        assert "dev mode" in served.log()
        assert not (folder / "hello.wasm").exists()  # nothing was built
        # the client entry it points to starts dev mode again, not a serve of a build that is not there
        hint = await until_logged(served, "connect a client:")
        assert f"mcp config --dev {folder} --principal alice" in hint, hint

        started = time.monotonic()
        (folder / "greeting.py").write_text('TEXT = "hello, version 2"\n', encoding="utf-8")
        seconds = await until_served(served, URI, "hello, version 2", started)
        print(f"\ncapsule dev: an edit of greeting.py served after {seconds:.2f} s")

        (folder / "greeting.py").write_text("TEXT = (\n", encoding="utf-8")
        line = await until_logged(served, "greeting.py:1")
        assert "SyntaxError" in line and "still serving the last good version" in line, line
        assert await served.text(URI) == "hello, version 2"

        started = time.monotonic()
        (folder / "greeting.py").write_text('TEXT = "hello, version 3"\n', encoding="utf-8")
        seconds = await until_served(served, URI, "hello, version 3", started)
        print(f"capsule dev: the fixed file served after {seconds:.2f} s")

        served.rearm()
        (folder / "app.py").write_text(APP.format(more=MORE), encoding="utf-8")
        with anyio.fail_after(EDIT_WAIT_S):
            await served.changed.wait()  # notifications/resources/list_changed
        assert ADDED in await served.uris()
        assert await served.text(ADDED) == "added in dev mode"


async def test_a_failing_import_names_its_file_and_line_and_the_fix_is_served(
    runner_ready: Path, tmp_path: Path, capsule_home: Path, stderr_file: Path
) -> None:
    folder = hello(tmp_path / "hello")
    (folder / "greeting.py").write_text('TEXT = "one"\nraise RuntimeError("not yet")\n', encoding="utf-8")
    args = ["capsule", "dev", str(folder), "--principal", "alice"]
    async with stdio_session(capsule_home=capsule_home, stderr=stderr_file, args=args, init_timeout_s=60) as served:
        line = await until_logged(served, "greeting.py:2")
        assert "RuntimeError: not yet" in line, line
        (folder / "greeting.py").write_text('TEXT = "now it imports"\n', encoding="utf-8")
        await until_served(served, URI, "now it imports", time.monotonic())


async def test_over_http_an_edit_is_served_too(runner_ready: Path, tmp_path: Path, capsule_home: Path) -> None:
    folder = hello(tmp_path / "hello")
    args = ["capsule", "dev", str(folder), "--principal", "alice", "--http", "127.0.0.1:0"]
    with http_server(capsule_home=capsule_home, token_dir=tmp_path, args=args) as server:
        assert "dev mode" in server.log()
        async with http_session(server.url, None) as session:
            with anyio.fail_after(EDIT_WAIT_S):
                assert text_of(await session.read_resource(URI)) == "hello, version 1"
            started = time.monotonic()
            (folder / "greeting.py").write_text('TEXT = "hello over http"\n', encoding="utf-8")
            with anyio.fail_after(EDIT_WAIT_S):
                while text_of(await session.read_resource(URI)) != "hello over http":
                    await anyio.sleep(0.02)
            print(f"\ncapsule dev --http: an edit served after {time.monotonic() - started:.2f} s")


async def test_a_new_pin_in_requirements_txt_is_served_without_a_build(
    runner_ready: Path, tmp_path: Path, capsule_home: Path, stderr_file: Path
) -> None:
    from tests.host.build.wheels import make_wheel

    folder = hello(tmp_path / "hello")
    for version in ("1.0", "2.0"):
        make_wheel(folder / "wheels", "alpha", version, {"alpha/__init__.py": f'WORD = "alpha {version}"\n'})
    pins = "--no-index\n--find-links wheels\nalpha=={}\n"
    (folder / "requirements.txt").write_text(pins.format("1.0"), encoding="utf-8")
    (folder / "greeting.py").write_text("from alpha import WORD as TEXT\n", encoding="utf-8")
    args = ["capsule", "dev", str(folder), "--principal", "alice"]
    async with stdio_session(capsule_home=capsule_home, stderr=stderr_file, args=args, init_timeout_s=60) as served:
        with anyio.fail_after(120):
            assert await served.text(URI) == "alpha 1.0"
        started = time.monotonic()
        (folder / "requirements.txt").write_text(pins.format("2.0"), encoding="utf-8")
        seconds = await until_served(served, URI, "alpha 2.0", started)
        print(f"\ncapsule dev: a new pin in requirements.txt served after {seconds:.2f} s (pip included)")
