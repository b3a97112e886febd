"""Several MCP front ends on one bus: two `astrid mcp serve --http --bus` and a capsule host, on a real nats-server.

Behind one address (docs/nats.md, "Several front ends"): a 2026-07-28
stateless request may go to either front end and gets the same answer; a
2025-11-25 session lives in the front end that made it (the other answers
its id with 404: route by `Mcp-Session-Id`); a change in the capsule set
reaches the sessions of every front end as `list_changed`.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.http import HttpServer, http_server, http_session, text_of
from tests.support.jsonrpc import initialize_request
from tests.support.nats import capsule_host, nats_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROBE_NOTE, DOCS_URI = "astrid://probe/note", "astrid://docs/index"


@contextmanager
def two_front_ends(url: str, capsule_home: Path, tmp_path: Path) -> Iterator[tuple[HttpServer, HttpServer]]:
    """Front ends A and B on the bus at `url`, each with its own log; B reads A's tokens file (a copy)."""
    with ExitStack() as stack:
        fronts = []
        for name in ("a", "b"):
            folder = tmp_path / f"front-{name}"
            folder.mkdir()
            extra = ("--bus", url, "--no-watch")
            fronts.append(stack.enter_context(http_server(capsule_home=capsule_home, token_dir=folder, extra=extra)))
        yield fronts[0], fronts[1]


@contextmanager
def capsules_behind_two_front_ends(
    capsules, names: tuple[str, ...], capsule_home: Path, tmp_path: Path
) -> Iterator[tuple[str, HttpServer, HttpServer, str]]:
    """A nats-server, a capsule host for each capsule of `names`, and front ends A and B on it: yields the
    bus URL, A, B, and a token of alice's that both accept."""
    with nats_server(tmp_path) as server, ExitStack() as stack:
        url = server.url()
        for name in names:
            stack.enter_context(capsule_host(url, capsules[name], capsule_home, tmp_path / f"{name}-host.log"))
        a, b = stack.enter_context(two_front_ends(url, capsule_home, tmp_path))
        yield url, a, b, same_token_on_both(a, b, "alice")


def same_token_on_both(a: HttpServer, b: HttpServer, name: str) -> str:
    """One static token for principal `name`, accepted by both front ends (one tokens file, as a shared
    config dir would give them)."""
    token = a.add_token(name)
    shutil.copyfile(a.token_file, b.token_file)
    b.token_file.chmod(0o600)  # a token file must be its owner's alone
    return token


async def stateless_view(url: str, token: str) -> tuple[list[str], str, str]:
    """Through a 2026-07-28 client: the listed URIs, the probe's note, and the docs index."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="2026-07-28") as client:
            assert client.protocol_version == "2026-07-28"
            listed = await client.list_resources()
            note = text_of(await client.read_resource(PROBE_NOTE))
            index = text_of(await client.read_resource(DOCS_URI))
    return sorted(r.uri for r in listed.resources), note, index


async def eventually_both_list(fronts: tuple[HttpServer, HttpServer], token: str, wanted: set[str]) -> None:
    """Until each front end has heard the capsule host (its heartbeat) and lists `wanted`."""
    with anyio.fail_after(30):
        for front in fronts:
            while True:
                async with http_session(front.url, token) as session:
                    uris = {r.uri for r in (await session.list_resources()).resources}
                if wanted <= uris:
                    break
                await anyio.sleep(0.25)


async def test_two_front_ends_answer_the_same_principals_stateless_requests_with_the_same_content(
    capsules, capsule_home, tmp_path
) -> None:
    with capsules_behind_two_front_ends(capsules, ("probe", "docs"), capsule_home, tmp_path) as (url, a, b, token):
        await eventually_both_list((a, b), token, {PROBE_NOTE, DOCS_URI})
        with anyio.fail_after(60):
            views = [await stateless_view(front.url, token) for front in (a, b, b, a)]
        assert all(view == views[0] for view in views), views
        uris, note, index = views[0]
        assert {PROBE_NOTE, DOCS_URI} <= set(uris)
        assert note == "the private note of alice"
        assert "astrid" in index.lower()


async def test_a_2025_11_25_session_stays_with_the_front_end_that_made_it(capsules, capsule_home, tmp_path) -> None:
    with capsules_behind_two_front_ends(capsules, ("probe",), capsule_home, tmp_path) as (url, a, b, token):
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        initialize = initialize_request("sticky")
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            made = await http.post(a.url, json=initialize)
            assert made.status_code == 200, made.text
            session_id = made.headers["mcp-session-id"]
            session = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(a.url, json=initialized, headers=session)).status_code == 202
            assert (await http.post(a.url, json=ping, headers=session)).status_code == 200
            elsewhere = await http.post(b.url, json=ping, headers=session)
            assert elsewhere.status_code == 404, elsewhere.text  # B never made it: route by Mcp-Session-Id
            assert (await http.post(a.url, json=ping, headers=session)).status_code == 200


async def test_list_changed_reaches_the_sessions_of_every_front_end(capsules, capsule_home, tmp_path) -> None:
    heard = {"a": anyio.Event(), "b": anyio.Event()}
    counts = {"a": 0, "b": 0}

    def on_list_changed(name: str):
        async def handler(message) -> None:
            if isinstance(message, types.ResourceListChangedNotification):
                counts[name] += 1
                heard[name].set()

        return handler

    with capsules_behind_two_front_ends(capsules, ("probe",), capsule_home, tmp_path) as (url, a, b, token):
        await eventually_both_list((a, b), token, {PROBE_NOTE})
        async with (
            http_session(a.url, token, message_handler=on_list_changed("a")) as on_a,
            http_session(b.url, token, message_handler=on_list_changed("b")) as on_b,
        ):
            for session in (on_a, on_b):  # each session knows its list before the change
                assert DOCS_URI not in {r.uri for r in (await session.list_resources()).resources}
            with capsule_host(url, capsules["docs"], capsule_home, tmp_path / "docs-host.log"):
                with anyio.fail_after(30):  # a second capsule host joins: both front ends' sessions hear it
                    await heard["a"].wait()
                    await heard["b"].wait()
                for session in (on_a, on_b):
                    assert DOCS_URI in {r.uri for r in (await session.list_resources()).resources}
                heard.update(a=anyio.Event(), b=anyio.Event())
            with anyio.fail_after(30):  # and leaves: again on both
                await heard["a"].wait()
                await heard["b"].wait()
            for session in (on_a, on_b):
                assert DOCS_URI not in {r.uri for r in (await session.list_resources()).resources}
    assert counts["a"] >= 2 and counts["b"] >= 2
