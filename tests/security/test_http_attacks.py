"""Attacks on `astrid mcp serve --http`: no credential, someone else's session, rebinding, floods.

Each asserts the defence from outside, over real HTTP: the status the
server answers, and (from its `-v` log) that no capsule ran for a request
that was refused.
"""

from __future__ import annotations

import json

import anyio
import httpx2
import pytest
from mcp import MCPError

from tests.support.http import HttpServer, http_server, http_session, text_of
from tests.support.jsonrpc import initialize_request
from tests.support.processes import run_astrid

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INITIALIZE = initialize_request("attacker")
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
SERVED_LINES = ("resources.list for", "resource.read ", "describe for")


@pytest.fixture
def served(built_introspect, built_probe, capsule_home, tmp_path):
    folders = (built_introspect.folder, built_probe.folder)
    with http_server(*folders, capsule_home=capsule_home, token_dir=tmp_path, verbose=True) as s:
        yield s


def _served_lines(server: HttpServer) -> list[str]:
    return [line for line in server.log().splitlines() if any(mark in line for mark in SERVED_LINES)]


def _read(uri: str, request_id: int = 2) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "resources/read", "params": {"uri": uri}}


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer not-a-token", "Bearer  x", "Basic YWxpY2U6YWxpY2U=", "bearer", "Bearer " + "x" * 5000],
    ids=["none", "unknown", "two-spaces", "basic", "no-token", "huge"],
)
async def test_a_request_without_a_valid_token_gets_401_and_runs_no_capsule(served: HttpServer, authorization):
    served.add_token("alice")
    before = _served_lines(served)
    headers = {**ACCEPT, **({"Authorization": authorization} if authorization else {})}
    async with httpx2.AsyncClient(timeout=10) as http:
        for body in (INITIALIZE, _read("astrid://whoami")):
            answer = await http.post(served.url, headers=headers, json=body)
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"].startswith("Bearer")
    assert _served_lines(served) == before


async def test_a_session_replayed_with_another_principals_token_is_refused(served: HttpServer):
    alice, bob = served.add_token("alice"), served.add_token("bob")
    async with httpx2.AsyncClient(timeout=10) as http:
        opened = await http.post(served.url, headers={**ACCEPT, "Authorization": f"Bearer {alice}"}, json=INITIALIZE)
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        session_headers = {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        before = _served_lines(served)
        stolen = await http.post(
            served.url, headers={**session_headers, "Authorization": f"Bearer {bob}"}, json=_read("astrid://whoami")
        )
        assert stolen.status_code == 404  # as if the session did not exist
        assert _served_lines(served) == before
        owned = await http.post(
            served.url, headers={**session_headers, "Authorization": f"Bearer {alice}"}, json=_read("astrid://whoami")
        )
    assert owned.status_code == 200
    assert '\\"principal\\": \\"alice\\"' in owned.text


async def test_headers_cannot_change_whom_a_token_acts_for(served: HttpServer):
    token = served.add_token("alice")
    spoof = {"X-Astrid-Principal": "bob", "X-Forwarded-User": "bob", "X-Remote-User": "bob"}
    with anyio.fail_after(30):
        async with http_session(served.url, token, headers=spoof) as session:
            whoami = await session.read_resource("astrid://whoami")
    assert json.loads(text_of(whoami))["principal"] == "alice"


@pytest.mark.parametrize(
    "headers",
    [{"Host": "evil.example"}, {"Host": "evil.example:80"}, {"Origin": "http://evil.example"}],
    ids=["host", "host-port", "origin"],
)
async def test_dns_rebinding_is_refused(served: HttpServer, headers):
    token = served.add_token("alice")
    before = _served_lines(served)
    async with httpx2.AsyncClient(timeout=10) as http:
        answer = await http.post(
            served.url, headers={**ACCEPT, "Authorization": f"Bearer {token}", **headers}, json=INITIALIZE
        )
    assert answer.status_code in (403, 421)
    assert _served_lines(served) == before


def test_no_auth_on_a_non_loopback_address_is_refused_at_start(tmp_path):
    done = run_astrid("mcp", "serve", "--http", "0.0.0.0:0", "--no-auth", cwd=tmp_path, timeout=60)
    assert done.returncode != 0
    assert "refusing to serve without auth on a non-loopback address" in done.stderr
    assert "Traceback" not in done.stderr


async def test_one_principals_flood_neither_hangs_nor_stalls_another(served: HttpServer):
    """alice fires 40 reads of a resource that never answers; the ones over her cap are
    refused as busy at once, and bob's read is served while hers still hang."""
    alice, bob = served.add_token("alice"), served.add_token("bob")
    outcomes: list[str] = []
    bob_done_while_alice_hangs: list[bool] = []

    async def hang(session) -> None:
        try:
            await session.read_resource("astrid://probe/forever")
            outcomes.append("answered")
        except MCPError as exc:
            outcomes.append("busy" if exc.error.code == -32000 else "failed")

    with anyio.fail_after(90):
        async with http_session(served.url, alice) as alice_session, http_session(served.url, bob) as bob_session:
            async with anyio.create_task_group() as tg:
                for _ in range(40):
                    tg.start_soon(hang, alice_session)
                with anyio.fail_after(30):
                    while outcomes.count("busy") < 40 - 16:  # everything over the cap, refused at once
                        await anyio.sleep(0.01)
                note = await bob_session.read_resource("astrid://probe/note")
                bob_done_while_alice_hangs.append(len(outcomes) == 40 - 16)
    assert text_of(note) == "the private note of bob"
    assert bob_done_while_alice_hangs == [True]
    assert outcomes.count("busy") == 40 - 16 and outcomes.count("answered") == 0


async def test_a_body_over_the_cap_is_refused_before_any_capsule_runs(served: HttpServer):
    token = served.add_token("alice")
    before = _served_lines(served)
    huge = {**_read("astrid://whoami"), "params": {"uri": "astrid://whoami", "pad": "x" * (2 << 20)}}
    async with httpx2.AsyncClient(timeout=30) as http:
        answer = await http.post(served.url, headers={**ACCEPT, "Authorization": f"Bearer {token}"}, json=huge)
    assert answer.status_code == 413
    assert _served_lines(served) == before


async def test_an_allowed_origin_is_let_in_and_others_are_not(built_introspect, capsule_home, tmp_path):
    extra = ("--allowed-origin", "https://app.example")
    with http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra) as served:
        token = served.add_token("alice")
        headers = {**ACCEPT, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=10) as http:
            allowed = await http.post(served.url, headers={**headers, "Origin": "https://app.example"}, json=INITIALIZE)
            refused = await http.post(
                served.url, headers={**headers, "Origin": "https://evil.example"}, json=INITIALIZE
            )
    assert allowed.status_code == 200
    assert refused.status_code == 403
