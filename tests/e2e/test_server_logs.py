"""What a running server says on stderr by default: reloads, the HTTP access log and failed logins.

Real servers (`astrid mcp serve` over stdio and `--http`), real MCP clients
(the Python SDK's), real capsules. The lines are the CLI's `astrid: ...`
lines, shown without `-v`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import MCPError

from astrid.capsules import CAPSULES_DIR
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session, text_of
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ACCESS = re.compile(
    r"^astrid: access (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) (\S+) (\S+) (\S+) (\S+) (\d{3}) (\d+\.\d)ms$",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("server-logs")
    return {name: build_clean(CAPSULES_DIR / name, root / name).folder for name in ("docs", "introspect")}


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 30) -> None:
    with anyio.fail_after(timeout_s):
        while not predicate():
            await anyio.sleep(0.05)


def access_lines(log: str) -> list[tuple[str, ...]]:
    """(client, principal, HTTP method, JSON-RPC method, target, status) of every access line."""
    return [match.groups()[1:7] for match in ACCESS.finditer(log)]


# -- reloads ---------------------------------------------------------------------------------------


async def test_a_capsule_added_or_removed_while_serving_is_said_on_stderr(built, capsule_home, tmp_path, stderr_file):
    live, staged = tmp_path / "live", tmp_path / "staged"
    build_clean(CAPSULES_DIR / "docs", live / "docs")  # build-cache hits: the module built both already
    build_clean(CAPSULES_DIR / "introspect", staged / "introspect")
    async with stdio_session(live, capsule_home=capsule_home, stderr=stderr_file) as served:
        assert "astrid://whoami" not in await served.uris()
        await wait_until(lambda: "watching the capsule folders" in served.log())

        os.rename(staged / "introspect", live / "introspect")  # one step: never half there
        with anyio.fail_after(20):
            await served.changed.wait()
        assert "astrid://whoami" in await served.uris()
        await wait_until(
            lambda: "astrid: capsule folders changed: loaded introspect; serving 2 capsules" in served.log()
        )

        served.rearm()
        os.rename(live / "introspect", staged / "introspect")
        with anyio.fail_after(20):
            await served.changed.wait()
        await wait_until(
            lambda: "astrid: capsule folders changed: unloaded introspect; serving 1 capsule\n" in served.log()
        )
        assert "astrid://whoami" not in await served.uris()


# -- the HTTP access log ---------------------------------------------------------------------------


async def test_every_http_request_gets_one_access_line(built, capsule_home, tmp_path) -> None:
    with http_server(built["docs"], built["introspect"], capsule_home=capsule_home, token_dir=tmp_path) as served:
        assert "astrid: access log: one line per request" in served.log()
        token = served.add_token("alice")
        started = time.time()
        async with http_session(served.url, token) as session:
            with anyio.fail_after(30):
                await session.list_resources()
                assert json.loads(text_of(await session.read_resource("astrid://whoami")))["principal"] == "alice"
                with pytest.raises(MCPError):
                    await session.read_resource("astrid://nowhere/at-all")
        await wait_until(lambda: ("127.0.0.1", "alice", "DELETE", "-", "-", "200") in access_lines(served.log()))
        lines = access_lines(served.log())
        assert ("127.0.0.1", "alice", "POST", "initialize", "-", "200") in lines
        assert ("127.0.0.1", "alice", "POST", "notifications/initialized", "-", "202") in lines
        assert ("127.0.0.1", "alice", "POST", "resources/list", "-", "200") in lines
        assert ("127.0.0.1", "alice", "POST", "resources/read", "astrid://whoami", "200") in lines
        assert ("127.0.0.1", "alice", "POST", "resources/read", "astrid://nowhere/at-all", "200") in lines
        stamp = ACCESS.search(served.log())
        assert stamp is not None
        when = time.mktime(time.strptime(stamp.group(1)[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert abs(when - started) < 60  # UTC, the request's own time


async def test_failed_logins_are_logged_with_the_reason_and_address_never_the_token(
    built, capsule_home, tmp_path
) -> None:
    with http_server(built["docs"], capsule_home=capsule_home, token_dir=tmp_path) as served:
        served.add_token("alice")
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(timeout=30) as http:
            wrong = await http.post(
                served.url, json=body, headers={**headers, "Authorization": "Bearer not-a-token-SECRET"}
            )
            none = await http.post(served.url, json=body, headers=headers)
            basic = await http.post(served.url, json=body, headers={**headers, "Authorization": "Basic dXNlcjpwdw=="})
            assert (wrong.status_code, none.status_code, basic.status_code) == (401, 401, 401)
            for _ in range(20):  # a guessing client: logged, but not line after line
                assert (
                    await http.post(served.url, json=body, headers={**headers, "Authorization": "Bearer x"})
                ).status_code == 401
        await wait_until(lambda: len([a for a in access_lines(served.log()) if a[5] == "401"]) == 23)
        log = served.log()
        failed = [line for line in log.splitlines() if "authentication failed" in line]
        assert failed[:3] == [
            "astrid: authentication failed from 127.0.0.1: unknown or revoked token",
            "astrid: authentication failed from 127.0.0.1: no credential (no Authorization header)",
            "astrid: authentication failed from 127.0.0.1: not a bearer credential",
        ]
        assert len(failed) == 5  # per ten seconds; the rest are counted in the next window's line
        assert "SECRET" not in log and "dXNlcjpwdw" not in log
        assert ("127.0.0.1", "-", "POST", "-", "-", "401") in access_lines(log)


async def test_no_access_log_turns_the_access_lines_off_but_not_failed_logins(built, capsule_home, tmp_path) -> None:
    with http_server(
        built["docs"], capsule_home=capsule_home, token_dir=tmp_path, extra=("--no-access-log",)
    ) as served:
        token = served.add_token("alice")
        async with http_session(served.url, token) as session:
            with anyio.fail_after(30):
                listed = await session.list_resources()
        assert any(r.uri == "astrid://docs/index" for r in listed.resources)
        async with httpx2.AsyncClient(timeout=30) as http:
            refused = await http.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401
        await wait_until(lambda: "authentication failed from 127.0.0.1" in served.log())
        assert access_lines(served.log()) == [] and "access log" not in served.log()


def test_no_access_log_is_an_http_option(built, capsule_home) -> None:
    import subprocess

    from tests.support.processes import astrid_exe, server_env

    done = subprocess.run(
        [astrid_exe(), "mcp", "serve", "--no-access-log", "--capsules", str(built["docs"])],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(capsule_home),
    )
    assert done.returncode == 1
    assert "--no-access-log: HTTP options, give them with --http [HOST:]PORT" in done.stderr


async def test_the_banner_warns_when_a_capsules_code_is_newer_than_its_build(built, capsule_home, tmp_path):
    import shutil

    folder = tmp_path / "docs"
    shutil.copytree(built["docs"], folder)
    later = time.time() + 60
    os.utime(folder / "app.py", (later, later))  # edited after the last build
    stderr = tmp_path / "stderr.log"
    async with stdio_session(folder, capsule_home=capsule_home, stderr=stderr) as served:
        with anyio.fail_after(30):
            while "connect a client" not in stderr.read_text():
                await anyio.sleep(0.05)
        assert (await served.session.list_resources()).resources
    assert "warning: docs: app.py is newer than docs.wasm" in stderr.read_text()
