"""`--log-format json`: every line a running server writes on stderr is one JSON object, for log shippers.

A real `astrid mcp serve --http`, a real MCP client; the banner, the access
log, the failed logins (rate-limited, never the token) and errors are all
JSON, with what each line is about as fields.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest

from astrid.capsules import CAPSULES_DIR
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session
from tests.support.processes import astrid_exe, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(CAPSULES_DIR / "introspect", tmp_path_factory.mktemp("json-logs") / "introspect").folder


def json_lines(log: str) -> list[dict]:
    """Every stderr line as JSON (the test fails on the first that is not an object)."""
    lines = []
    for line in log.splitlines():
        parsed = json.loads(line)
        assert isinstance(parsed, dict) and {"time", "level", "logger", "message"} <= parsed.keys(), line
        lines.append(parsed)
    return lines


async def wait_for(served, predicate, timeout_s: float = 30) -> list[dict]:
    with anyio.fail_after(timeout_s):
        while True:
            lines = json_lines(served.log())
            if predicate(lines):
                return lines
            await anyio.sleep(0.05)


async def test_every_line_is_json_with_the_access_and_failed_login_fields(built, capsule_home, tmp_path) -> None:
    with http_server(built, capsule_home=capsule_home, token_dir=tmp_path, extra=("--log-format", "json")) as served:
        token = served.add_token("alice")
        async with http_session(served.url, token) as session:
            with anyio.fail_after(30):
                await session.read_resource("astrid://whoami")
        body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with httpx2.AsyncClient(timeout=30) as http:
            for _ in range(8):  # a guessing client: its first lines logged, the rest counted
                refused = await http.post(
                    served.url,
                    json=body,
                    headers={"Accept": "application/json, text/event-stream", "Authorization": "Bearer guess-SECRET"},
                )
                assert refused.status_code == 401
        lines = await wait_for(
            served, lambda lines: sum(1 for x in lines if x.get("event") == "access" and x["status"] == 401) == 8
        )
    log = served.log()
    assert "SECRET" not in log and token not in log
    banner = [x["message"] for x in lines if x["logger"] == "astrid"]
    assert any(m.startswith("serving MCP resources at http://127.0.0.1:") for m in banner)
    assert any(m.startswith("ready in ") for m in banner)

    (read,) = [x for x in lines if x.get("event") == "access" and x["method"] == "resources/read"]
    assert read["logger"] == "astrid.access" and read["level"] == "info"
    assert (read["client"], read["principal"], read["http_method"]) == ("127.0.0.1", "alice", "POST")
    assert (read["target"], read["status"]) == ("astrid://whoami", 200)
    assert isinstance(read["ms"], float) and read["ms"] >= 0
    assert read["time"].endswith("Z") and read["start"].endswith("Z")

    failed = [x for x in lines if x.get("event") == "auth_failed"]
    assert 1 <= len(failed) < 8  # rate-limited: five per ten seconds
    assert all(x["level"] == "warning" and x["logger"] == "astrid.events" for x in failed)
    assert {(x["client"], x["reason"]) for x in failed} == {("127.0.0.1", "unknown or revoked token")}


def test_an_error_is_a_json_line_too(built, capsule_home) -> None:
    done = subprocess.run(
        [astrid_exe(), "mcp", "serve", "--log-format", "json", "--metrics", "0.0.0.0:9464"]
        + ["--capsules", str(built)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(capsule_home),
    )
    assert done.returncode == 1
    (line,) = json_lines(done.stderr)
    assert line["level"] == "error"
    assert line["message"].startswith("--metrics 0.0.0.0:9464: refusing to serve metrics on a non-loopback address")
