"""`astrid mcp serve --http --workers 2`: two front-end processes on one socket, both eras, one state.

Each front end runs every capsule; the kernel gives each new connection to
either. A response says which process answered (`astrid-worker`, diagnostics
only) and, when it reached another one first, which forwarded it
(`astrid-forwarded-by`). The counter capsule keeps its count in kv, one
SQLite file for both processes, so the counts prove they share state: every
bump is one more whichever process ran it.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV, DATA_DIR_ENV
from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.http import http_server, text_of
from tests.support.jsonrpc import initialize_request
from tests.support.processes import all_gone
from tests.support.tls import self_signed

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HITS, BUMP = "astrid://counter/hits", "astrid://counter/bump"
BANNER = re.compile(r"--workers 2: 2 front-end processes \(pids (\d+), (\d+)\)")


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(TEST_CAPSULES / "counter", tmp_path_factory.mktemp("workers-http") / "counter").folder


@pytest.fixture
def user(tmp_path: Path) -> dict[str, str]:
    """This test's own config and data dirs, the counter granted kv."""
    dirs = {CONFIG_DIR_ENV: str(tmp_path / "config"), DATA_DIR_ENV: str(tmp_path / "data")}
    GrantStore(Path(dirs[CONFIG_DIR_ENV]) / "grants.json").grant("counter", "kv")
    return dirs


class Answers:
    """Who answered each response: `astrid-worker` and `astrid-forwarded-by`, as an httpx event hook."""

    def __init__(self) -> None:
        self.by: Counter[str] = Counter()
        self.forwarded: Counter[str] = Counter()

    async def __call__(self, response: httpx2.Response) -> None:
        self.by[response.headers.get("astrid-worker", "none")] += 1
        if "astrid-forwarded-by" in response.headers:
            self.forwarded[response.headers["astrid-forwarded-by"]] += 1


async def stateless_bump(url: str, token: str, answers: Answers, verify: ssl.SSLContext | bool = True) -> int:
    """One 2026-07-28 client on a connection of its own: the count after its bump."""
    hooks: dict[str, list[Callable[..., Any]]] = {"response": [answers]}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30, event_hooks=hooks, verify=verify) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
            return int(text_of(await client.read_resource(BUMP)))


async def test_two_front_ends_answer_both_eras_with_one_state(counter, user, capsule_home, tmp_path) -> None:
    extra = ("--workers", "2", "--no-watch")
    with http_server(counter, capsule_home=capsule_home, token_dir=tmp_path, extra=extra, env=user) as served:
        token = served.add_token("alice")
        pids = [int(p) for p in BANNER.search(served.log()).groups()]  # type: ignore[union-attr]

        # 2026-07-28: stateless, any process answers (each client its own connection, which the kernel
        # gives to either); one count for both: each bump is one more than the last, wherever it ran
        answers = Answers()
        counts: list[int] = []
        with anyio.fail_after(120):
            while len(answers.by) < 2 or len(counts) < 8:
                counts.append(await stateless_bump(served.url, token, answers))
                assert len(counts) < 64, answers.by
        assert set(answers.by) == {"1", "2"}, answers.by  # both front ends answered
        assert counts == list(range(1, len(counts) + 1))

        # 2025-11-25: one session, a subscription, many requests, whichever connection they come on
        updates: list[str] = []

        async def on_message(message) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                updates.append(str(message.params.uri))

        session_answers = Answers()
        hooks: dict[str, list[Callable[..., Any]]] = {"response": [session_answers]}
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30, event_hooks=hooks) as http,
            streamable_http_client(served.url, http_client=http) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            with anyio.fail_after(60):
                await session.initialize()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # resources/subscribe: deprecated in 2026-07-28
                    await session.subscribe_resource(HITS)
                before = int(text_of(await session.read_resource(HITS)))
                for number in range(1, 21):
                    assert int(text_of(await session.read_resource(BUMP))) == before + number
                while HITS not in updates:  # over the GET stream, wherever its connection landed
                    await anyio.sleep(0.05)
            holders = {k for k in session_answers.by if k != "none"}
            assert len(holders) == 1, session_answers.by  # one process holds the session and answered it all

            # a bump that the other process runs (a stateless client's): its update reaches this session too
            (holder,) = holders
            with anyio.fail_after(120):
                while True:
                    await anyio.sleep(1.0)  # past the coalescing window of the updates before
                    updates.clear()
                    elsewhere = Answers()
                    await stateless_bump(served.url, token, elsewhere)
                    if holder not in elsewhere.by:
                        break
                while HITS not in updates:
                    await anyio.sleep(0.05)

        # a session from fresh connections (as a client's second connection would be): those that land
        # on the other process are forwarded to the owner and answered as usual
        session_id = await _open_session(served.url, token)
        forwarded = Answers()
        with anyio.fail_after(60):
            for _ in range(30):
                status = await _ping(served.url, token, session_id, forwarded)
                assert status == 200
                if forwarded.forwarded:
                    break
        assert len(set(forwarded.by)) == 1 and forwarded.forwarded, (forwarded.by, forwarded.forwarded)
        (owner,) = forwarded.by.keys()
        assert session_id.startswith(f"w{owner}.")
        assert set(forwarded.forwarded) == {"1", "2"} - {owner}
        # a forged id naming the other process reaches an owner that knows no such session
        forged = "w1.0" if owner == "2" else "w2.0"
        assert await _ping(served.url, token, forged, Answers()) == 404

    assert all_gone(pids) == []


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _open_session(url: str, token: str) -> str:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", **HEADERS}, timeout=30) as http:
        made = await http.post(url, json=initialize_request("workers"))
        assert made.status_code == 200, made.text
        session_id = made.headers["mcp-session-id"]
        session = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers=session)).status_code == 202
        return session_id


async def _ping(url: str, token: str, session_id: str, answers: Answers) -> int:
    """A ping on the session from a new connection (a client of its own)."""
    headers = {"Authorization": f"Bearer {token}", **HEADERS, "Mcp-Session-Id": session_id}
    headers["MCP-Protocol-Version"] = "2025-11-25"
    async with httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [answers]}) as http:
        answer = await http.post(url, json={"jsonrpc": "2.0", "id": 7, "method": "ping"})
        return answer.status_code


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_front_end_that_dies_stops_the_others_and_serve_says_which(counter, user, capsule_home, tmp_path) -> None:
    extra = ("--workers", "2", "--no-watch", "--no-auth")
    with http_server(counter, capsule_home=capsule_home, token_dir=tmp_path, extra=extra, env=user) as served:
        first, second = (int(p) for p in BANNER.search(served.log()).groups())  # type: ignore[union-attr]
        os.kill(second, signal.SIGKILL)
        served.process.wait(30)
        assert served.process.returncode == 1, served.log()
        assert served.log().strip().splitlines()[-1] == (
            "error: --workers: front end 2 exited (status -9): stopped the others, see its lines above"
        )
    assert all_gone([first, second]) == []


async def test_a_session_is_forwarded_to_its_owner_over_tls_too(counter, user, capsule_home, tmp_path) -> None:
    """With --tls-cert every socket speaks TLS, the front ends' unix sockets too: the hop does as well."""
    cert, key = self_signed(tmp_path)
    extra = ("--workers", "2", "--no-watch", "--tls-cert", cert, "--tls-key", key)
    with http_server(counter, capsule_home=capsule_home, token_dir=tmp_path, extra=extra, env=user) as served:
        token = served.add_token("alice")
        verify = ssl.create_default_context(cafile=cert)
        headers = {"Authorization": f"Bearer {token}", **HEADERS}
        async with httpx2.AsyncClient(headers=headers, verify=verify, timeout=30) as http:
            made = await http.post(served.url, json=initialize_request("tls"))
            assert made.status_code == 200, made.text
        session = {"Mcp-Session-Id": made.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        forwarded = 0
        with anyio.fail_after(60):
            for _ in range(40):  # fresh connections until some landed on the other process
                async with httpx2.AsyncClient(headers={**headers, **session}, verify=verify, timeout=30) as http:
                    answer = await http.post(served.url, json={"jsonrpc": "2.0", "id": 3, "method": "ping"})
                assert answer.status_code == 200, answer.text
                forwarded += "astrid-forwarded-by" in answer.headers
                if forwarded >= 2:
                    break
        assert forwarded >= 2

        # and a resource update passes between them over TLS: a bump run by the process that does not
        # hold the subscribing session reaches it
        updates: list[str] = []

        async def on_message(message) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                updates.append(str(message.params.uri))

        answers = Answers()
        hooks: dict[str, list[Callable[..., Any]]] = {"response": [answers]}
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, verify=verify, event_hooks=hooks) as http,
            streamable_http_client(served.url, http_client=http) as (read, write),
            ClientSession(read, write, message_handler=on_message) as subscriber,
        ):
            with anyio.fail_after(120):
                await subscriber.initialize()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # resources/subscribe: deprecated in 2026-07-28
                    await subscriber.subscribe_resource(HITS)
                (holder,) = {k for k in answers.by if k != "none"}
                while True:
                    await anyio.sleep(1.0)  # past the coalescing window of the updates before
                    updates.clear()
                    elsewhere = Answers()
                    await stateless_bump(served.url, token, elsewhere, verify)
                    if holder not in elsewhere.by:
                        break
                while HITS not in updates:
                    await anyio.sleep(0.05)
