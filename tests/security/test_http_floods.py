"""Floods of `astrid mcp serve --http`: connections without a token, one principal's sessions and streams,
and sessions that outlive their credential.

Each attack runs against a real server over real sockets. The server under
the connection flood starts with the open-file limit of a small machine
(1 024, soft and hard), so without the caps it runs out of descriptors.
"""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import MCPError
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.http import HttpServer, http_server, http_session, text_of
from tests.support.jsonrpc import initialize_request
from tests.support.jwks import AUDIENCE, ISSUER, serve_jwks

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FD_LIMIT = 1024
INITIALIZE = initialize_request("t")
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(autouse=True)
def enough_files_for_the_attacker():
    """The attacker (this process) holds over a thousand sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    assert wanted >= 3000, f"the flood needs an open-file hard limit of 3000 or more here (it is {hard})"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- connections without a token ---------------------------------------------------------------


class Flood:
    """Raw sockets from other loopback addresses: idle, trickling a request head, or trickling a body."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.sockets: list[tuple[str, socket.socket]] = []
        self._stop = threading.Event()
        self._trickler = threading.Thread(target=self._trickle, daemon=True)

    def open(self, source: str, count: int, kind: str) -> None:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((source, 0))
            sock.settimeout(5)
            sock.connect(self.target)
            if kind == "head":
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            elif kind == "body":
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n\r\n{")
            self.sockets.append((kind, sock))

    def start_trickling(self) -> None:
        self._trickler.start()

    def _trickle(self) -> None:
        while not self._stop.wait(0.5):
            for kind, sock in list(self.sockets):
                try:
                    if kind == "head":
                        sock.send(b"X")
                    elif kind == "body":
                        sock.send(b" ")
                except OSError:
                    pass

    def still_open(self) -> int:
        """How many of the flood's sockets the server has not closed."""
        return sum(1 for _, sock in self.sockets if not _closed_by_peer(sock))

    def close(self) -> None:
        self._stop.set()
        if self._trickler.is_alive():
            self._trickler.join(5)
        for _, sock in self.sockets:
            sock.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


@contextmanager
def flood(url: str) -> Iterator[Flood]:
    attack = Flood(url)
    try:
        yield attack
    finally:
        attack.close()


async def _whoami_within(url: str, token: str, seconds: float) -> str:
    with anyio.fail_after(seconds):
        async with http_session(url, token) as session:
            await session.list_resources()
            return json.loads(text_of(await session.read_resource("astrid://whoami")))["principal"]


@pytest.fixture
def small_server(built_introspect, capsule_home, tmp_path):
    with http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, fd_limit=FD_LIMIT) as s:
        yield s


async def test_a_flood_of_idle_and_trickling_connections_leaves_room_for_a_real_client(small_server: HttpServer):
    token = small_server.add_token("alice")
    assert "capped by the open-file limit (1024)" in small_server.log()
    assert await _whoami_within(small_server.url, token, 30) == "alice"  # warm: the capsules are loaded
    with flood(small_server.url) as attack:
        # 1 200 connections from ten addresses, more than the server has descriptors for
        for index in range(10):
            source = f"127.0.0.{index + 2}"
            for kind in ("idle", "head", "body"):
                attack.open(source, 40, kind)
        attack.start_trickling()
        # well inside the head (10 s) and body (30 s) deadlines: the caps alone keep the room
        started = time.monotonic()
        assert await _whoami_within(small_server.url, token, 5) == "alice"
        assert time.monotonic() - started < 5
        assert attack.still_open() < FD_LIMIT - 100
    assert small_server.process.poll() is None


async def test_one_address_keeps_at_most_its_share_of_connections(small_server: HttpServer):
    token = small_server.add_token("alice")
    with flood(small_server.url) as attack:
        attack.open("127.0.0.2", 400, "idle")
        with anyio.fail_after(10):
            while attack.still_open() > 128:
                await anyio.sleep(0.1)
        assert await _whoami_within(small_server.url, token, 5) == "alice"


async def test_heads_and_bodies_that_never_end_are_closed_at_their_deadlines(built_introspect, capsule_home, tmp_path):
    limits = ("--http-limit", "header-timeout=1", "--http-limit", "body-timeout=2")
    with (
        http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=limits) as served,
        flood(served.url) as attack,
    ):
        for kind in ("idle", "head", "body"):
            attack.open("127.0.0.2", 3, kind)
        attack.start_trickling()
        started = time.monotonic()
        with anyio.fail_after(10):
            while attack.still_open():
                await anyio.sleep(0.1)
        assert time.monotonic() - started < 5  # each at its deadline (plus the sweep), not at a generic timeout
        with anyio.fail_after(15):
            while "closed connections in the last" not in served.log():
                await anyio.sleep(0.2)
        assert "head deadline" in served.log()


# -- sessions and streams of one principal -----------------------------------------------------


@pytest.fixture
def served(built_introspect, capsule_home, tmp_path):
    extra = ("--http-limit", "credential-check=0.5")
    with http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra) as s:
        yield s


async def _open_session(http: httpx2.AsyncClient, url: str, token: str) -> httpx2.Response:
    return await http.post(url, headers={**ACCEPT, "Authorization": f"Bearer {token}"}, json=INITIALIZE)


async def test_one_principal_opening_hundreds_of_sessions_cannot_lock_out_another(served: HttpServer):
    mallory, alice = served.add_token("mallory"), served.add_token("alice")
    async with httpx2.AsyncClient(timeout=10) as http:
        opened = []
        for _ in range(300):  # more than the whole server's session cap (256)
            answer = await _open_session(http, served.url, mallory)
            assert answer.status_code == 200, answer.text
            opened.append(answer.headers["mcp-session-id"])
        assert (await _open_session(http, served.url, alice)).status_code == 200

        # mallory pushed out only its own oldest sessions: the newest sixteen still answer
        async def status_of(session_id: str) -> int:
            headers = {**ACCEPT, "Authorization": f"Bearer {mallory}", "Mcp-Session-Id": session_id}
            return (await http.post(served.url, headers=headers, json=INITIALIZED)).status_code

        assert await status_of(opened[0]) == 404
        assert [await status_of(session) for session in opened[-16:]] == [202] * 16
    assert "mallory opened more than 16 sessions: closing its oldest" in served.log()


async def _modern_client(url: str, token: str):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28")


async def test_one_principal_cannot_hold_more_than_its_listen_streams(served: HttpServer):
    mallory, alice = served.add_token("mallory"), served.add_token("alice")
    http, client = await _modern_client(served.url, mallory)
    other_http, other = await _modern_client(served.url, alice)
    async with http, other_http, client, other:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                opened = anyio.Event()
                count = 0

                async def hold() -> None:
                    nonlocal count
                    async with client.listen(resources_list_changed=True):
                        count += 1
                        if count == 16:
                            opened.set()
                        await anyio.sleep_forever()

                for _ in range(16):
                    tg.start_soon(hold)
                await opened.wait()
                with pytest.raises(MCPError) as refused:
                    async with client.listen(resources_list_changed=True):
                        pass
                assert "listen streams of this user are open" in refused.value.message
                async with other.listen(resources_list_changed=True) as subscription:  # alice still gets hers
                    assert subscription is not None
                tg.cancel_scope.cancel()


async def _get_stream_ends(url: str, token: str, revoke) -> float:
    """Open a session and its GET stream, call `revoke`; seconds until the server ended the stream."""
    async with httpx2.AsyncClient(timeout=30) as http:
        auth = {"Authorization": f"Bearer {token}"}
        opened = await http.post(url, headers={**ACCEPT, **auth}, json=INITIALIZE)
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        await http.post(url, headers={**ACCEPT, **auth, **session}, json=INITIALIZED)
        get_headers = {"Accept": "text/event-stream", **auth, **session}
        async with http.stream("GET", url, headers=get_headers) as stream:
            assert stream.status_code == 200
            revoke()
            started = time.monotonic()
            with anyio.fail_after(10):
                async for _ in stream.aiter_bytes():
                    pass
            return time.monotonic() - started


async def test_revoking_a_token_ends_its_open_get_stream(served: HttpServer):
    token = served.add_token("erin")
    assert await _get_stream_ends(served.url, token, lambda: served.revoke_token("erin")) < 5
    assert "ending 1 open session of erin: its credential is no longer valid" in served.log()


async def test_revoking_a_token_ends_its_open_listen_stream(served: HttpServer):
    token = served.add_token("erin")
    http, client = await _modern_client(served.url, token)

    async def listen_until_it_ends() -> Exception | None:
        try:
            async with client.listen(resources_list_changed=True) as subscription:
                served.revoke_token("erin")
                async for _ in subscription:
                    pass
        except Exception as exc:  # the SDK reports the server's final error as a lost subscription
            return exc
        return None

    async with http, client:
        with anyio.fail_after(10):
            assert await listen_until_it_ends() is not None
    assert "ending 1 open stream of erin: its credential is no longer valid" in served.log()


async def test_a_jwt_passing_its_expiry_ends_its_open_get_stream(built_introspect, capsule_home, tmp_path):
    with serve_jwks() as issuer:
        extra = ("--jwks", issuer.url, "--issuer", ISSUER, "--audience", AUDIENCE)
        extra += ("--http-limit", "credential-check=0.5")
        with http_server(built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra) as s:
            token = issuer.mint(issuer.claims(sub="frank", exp=int(time.time()) + 4))
            seconds = await _get_stream_ends(s.url, token, lambda: None)
            assert seconds < 8
            assert "ending 1 open session of frank: its credential expired" in s.log()
