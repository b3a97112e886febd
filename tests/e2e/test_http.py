"""`astrid mcp serve --http`: many principals on one server, through the MCP SDK's HTTP client.

Each principal presents its own static token and must see, read and be
notified about its own resources only, at the same time as the others;
both protocol eras are spoken on the same endpoint.
"""

from __future__ import annotations

import json
import shutil
import ssl

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.builds import build, write_variant
from tests.support.http import HttpServer, http_server, http_session, text_of
from tests.support.processes import run_astrid
from tests.support.tls import self_signed

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def served(capsules, capsule_home, tmp_path):
    with http_server(capsules["introspect"], capsules["probe"], capsule_home=capsule_home, token_dir=tmp_path) as s:
        yield s


async def _whoami_and_note(url: str, token: str) -> tuple[str, str, list[str]]:
    async with http_session(url, token) as session:
        whoami = await session.read_resource("astrid://whoami")
        note = await session.read_resource("astrid://probe/note")
        listed = await session.list_resources()
    return json.loads(text_of(whoami))["principal"], text_of(note), [r.uri for r in listed.resources]


async def test_each_token_sees_only_its_own_principal_concurrently(served: HttpServer):
    tokens = {name: served.add_token(name) for name in ("alice", "bob", "carol")}
    seen: dict[str, tuple[str, str, list[str]]] = {}

    async def visit(name: str) -> None:
        seen[name] = await _whoami_and_note(served.url, tokens[name])

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(3):  # each principal three times over, all at once
                for name in tokens:
                    tg.start_soon(visit, name)
    for name, (principal, note, uris) in seen.items():
        assert principal == name
        assert note == f"the private note of {name}"
        assert ("astrid://probe/alice-only" in uris) == (name == "alice")


async def test_a_2026_07_28_stateless_client_is_served_as_its_token(served: HttpServer):
    token = served.add_token("dave")
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        transport = streamable_http_client(served.url, http_client=http)
        with anyio.fail_after(30):
            async with Client(transport, mode="2026-07-28") as client:
                read = await client.read_resource("astrid://whoami")
    assert json.loads(text_of(read))["principal"] == "dave"


async def test_a_revoked_token_stops_working_without_a_restart(served: HttpServer):
    token = served.add_token("erin")
    with anyio.fail_after(30):
        assert (await _whoami_and_note(served.url, token))[0] == "erin"
    served.revoke_token("erin")
    async with httpx2.AsyncClient(timeout=10) as http:
        answer = await http.post(served.url, headers={"Authorization": f"Bearer {token}"}, json={})
    assert answer.status_code == 401


def test_the_banner_says_the_url_the_auth_mode_and_how_to_add_a_token(served: HttpServer):
    log = served.log()
    assert f"serving MCP resources at {served.url}" in log
    assert "auth: static tokens from" in log
    assert "astrid mcp token add NAME" in log


async def test_the_config_entry_for_http_connects_once_its_token_is_filled_in(served: HttpServer, tmp_path):
    done = run_astrid("mcp", "config", "--http", served.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)["mcpServers"].values()
    assert entry["type"] == "http" and entry["url"] == served.url
    token = served.add_token("frank")
    headers = {key: value.replace("<token>", token) for key, value in entry["headers"].items()}
    with anyio.fail_after(30):
        async with http_session(entry["url"], None, headers=headers) as session:
            whoami = await session.read_resource("astrid://whoami")
    assert json.loads(text_of(whoami))["principal"] == "frank"


async def test_list_changed_reaches_only_the_sessions_of_the_principal_whose_set_changed(
    capsules, capsule_home, tmp_path
):
    live = tmp_path / "live"
    folder = live / "mutable"
    shutil.copytree(capsules["mutable-v3"], folder)
    notes: dict[str, int] = {"alice": 0, "bob": 0}

    def counter(name: str):
        async def on_message(message) -> None:
            if isinstance(message, types.ResourceListChangedNotification):
                notes[name] += 1

        return on_message

    async def rebuild(variant: str) -> None:
        write_variant(folder, variant)
        await anyio.to_thread.run_sync(build, folder)  # a build-cache hit: the variants were built before

    async def until(predicate) -> None:
        with anyio.fail_after(30):
            while not predicate():
                await anyio.sleep(0.05)

    with http_server(live, capsule_home=capsule_home, token_dir=tmp_path) as served:
        alice, bob = served.add_token("alice"), served.add_token("bob")
        async with (
            http_session(served.url, alice, message_handler=counter("alice")) as alice_session,
            http_session(served.url, bob, message_handler=counter("bob")) as bob_session,
        ):
            for session in (alice_session, bob_session):
                await session.list_resources()
            await until(lambda: "watching the capsule folders" in served.log())

            await rebuild("v4")  # alice gains a resource; bob's set stays the same
            await until(lambda: notes["alice"] == 1)
            assert "astrid://mutable/mine" in [r.uri for r in (await alice_session.list_resources()).resources]
            assert "astrid://mutable/mine" not in [r.uri for r in (await bob_session.list_resources()).resources]

            await rebuild("v3")  # and loses it again
            await until(lambda: notes["alice"] == 2)
    assert notes == {"alice": 2, "bob": 0}


async def test_tls_is_served_with_the_given_certificate(built_introspect, capsule_home, tmp_path):
    cert, key = self_signed(tmp_path)
    extra = ("--tls-cert", cert, "--tls-key", key)
    with http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra) as served:
        assert served.url.startswith("https://127.0.0.1:")
        token = served.add_token("gina")
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, verify=ssl.create_default_context(cafile=cert), timeout=30
        ) as http:
            with anyio.fail_after(30):
                async with (
                    streamable_http_client(served.url, http_client=http) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    whoami = await session.read_resource("astrid://whoami")
    assert json.loads(text_of(whoami))["principal"] == "gina"


async def test_resource_tools_over_http_act_as_the_tokens_principal(built_introspect, capsule_home, tmp_path):
    extra = ("--resource-tools",)
    with http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra) as served:
        tokens = {name: served.add_token(name) for name in ("hana", "ivan")}
        seen = {}
        for name, token in tokens.items():
            with anyio.fail_after(30):
                async with http_session(served.url, token) as session:
                    assert {tool.name for tool in (await session.list_tools()).tools} == {
                        "list_resources",
                        "read_resource",
                    }
                    result = await session.call_tool("read_resource", {"uri": "astrid://whoami"})
            assert not result.is_error
            [content] = result.content
            assert isinstance(content, types.TextContent)
            seen[name] = json.loads(content.text)["principal"]
    assert seen == {"hana": "hana", "ivan": "ivan"}


async def test_more_users_than_sandboxes_are_all_served(built_introspect, capsule_home, tmp_path):
    extra = ("--max-sandboxes", "1")
    with http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra) as served:
        tokens = {name: served.add_token(name) for name in ("kim", "lee", "max")}
        for _ in range(2):  # each user's sandbox is closed by the next user's, and made again
            for name, token in tokens.items():
                with anyio.fail_after(30):
                    async with http_session(served.url, token) as session:
                        whoami = await session.read_resource("astrid://whoami")
                assert json.loads(text_of(whoami))["principal"] == name
