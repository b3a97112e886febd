"""`astrid mcp serve --http --workers 2`: what the front ends say to each other stays between them.

Two front-end processes share one socket; each also listens on a unix socket
where the other forwards its sessions' requests and passes the resource
updates its broker checked. An attacker with a token (bob), on the TCP
address everyone reaches, tries to:

- plant a resource update for alice through the peers' update path: that path
  answers on the unix socket only (on TCP it is an unknown one, 404), so
  alice's subscribed session hears nothing;
- take over alice's session by its id from any connection: a request that
  lands on the other process is forwarded to the owner with bob's own
  credential, and the owner refuses a session that is not bob's (404);
- reach a process that does not exist, or make one forward to itself, with a
  forged id: answered 404, nothing forwarded.

The unix sockets live in a folder only this user can open (0700).
"""

from __future__ import annotations

import re
import stat
import warnings
from collections import Counter
from pathlib import Path

import anyio
import httpx2
import mcp.types as types
import pytest

from tests.support.http import http_server, http_session
from tests.support.jsonrpc import initialize_request

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOTE = "astrid://probe/note"
PIDS = re.compile(r"--workers 2: 2 front-end processes \(pids (\d+), (\d+)\)")
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
TRIES = 12  # fresh connections: the kernel spreads them over both processes


async def _post(url: str, token: str, body: object, **headers: str) -> httpx2.Response:
    """One request on a connection of its own (so it may land on either process)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}", **HEADERS, **headers}) as http:
        return await http.post(url, json=body, timeout=30)


async def test_a_client_cannot_plant_updates_nor_take_another_principals_session(
    built_probe, capsule_home, tmp_path
) -> None:
    extra = ("--workers", "2", "--no-watch")
    with http_server(built_probe.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra) as served:
        alice, bob = served.add_token("alice"), served.add_token("bob")
        pids = [int(p) for p in PIDS.search(served.log()).groups()]  # type: ignore[union-attr]
        sockets = {Path(p) for pid in pids for p in _unix_sockets_of(pid)}
        assert sockets and all(stat.S_IMODE(s.parent.stat().st_mode) == 0o700 for s in sockets), sockets

        updates: list[str] = []

        async def on_message(message) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                updates.append(str(message.params.uri))

        async with http_session(served.url, alice, message_handler=on_message) as session:
            with anyio.fail_after(60), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # resources/subscribe: deprecated in 2026-07-28
                await session.subscribe_resource(NOTE)
                await session.read_resource(NOTE)

            # 1. a planted update, on the TCP address, at both processes
            base = served.url.removesuffix("/mcp")
            answered: Counter[str] = Counter()
            for _ in range(TRIES):
                planted = await _post(f"{base}/_astrid/peer/updated", bob, [["alice", NOTE]])
                assert planted.status_code == 404, planted.text
                answered[planted.headers.get("astrid-worker", "?")] += 1
            await anyio.sleep(1.5)
            assert updates == [], updates  # alice's session heard nothing
            assert set(answered) == {"1", "2"}, answered  # both processes were tried

            # 2. alice's session id in bob's hands, from connections landing on either process
            made = await _post(served.url, alice, initialize_request("alice"))
            session_id = made.headers["mcp-session-id"]
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            forwarded = 0
            for _ in range(TRIES):
                taken = await _post(served.url, bob, ping, **{"Mcp-Session-Id": session_id})
                assert taken.status_code == 404, taken.text
                forwarded += "astrid-forwarded-by" in taken.headers
            assert forwarded > 0  # some landed on the process that does not hold it, and went to the owner

            # 3. forged ids: a process that does not exist, a malformed number, our own number
            for forged in ("w9.abc", "w99999.abc", "w.abc", "w1.nope", "w2.nope"):
                answer = await _post(served.url, alice, ping, **{"Mcp-Session-Id": forged})
                assert answer.status_code == 404, (forged, answer.text)

            # alice's own session still works, wherever the request lands
            assert (await _post(served.url, alice, ping, **{"Mcp-Session-Id": session_id})).status_code == 200


def _unix_sockets_of(pid: int) -> list[str]:
    """The unix sockets `pid` listens on (from /proc/net/unix, by the inodes of its fds)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if str(target).startswith("socket:["):
            inodes.add(str(target)[8:-1])
    found = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[6] in inodes and "astrid-front-ends-" in parts[7]:
            found.append(parts[7])
    return found
