"""Hostile capsules on remote hosts: the broker's defences hold when capsules run in other processes.

Three processes on a real nats-server: a forger host, a victim host and the
MCP server. The forger answers reads it does not own, first; the victim
answers late. The listed owner's reply must win, across processes, and the
forger's words must never reach the client.
"""

from __future__ import annotations

import pytest

from tests.support.nats import capsule_host, eventually_listed, nats_server
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_a_forged_reply_from_another_host_loses_to_the_listed_owner(hostile_dir, capsule_home, tmp_path) -> None:
    forger = hostile_dir("forger", "forge")
    victim = hostile_dir("victim", "slow", ms=300)
    log, mcp_log = tmp_path / "hosts.log", tmp_path / "mcp.log"
    with (
        nats_server(tmp_path) as server,
        capsule_host(server.url(), forger, capsule_home, log),
        capsule_host(server.url(), victim, capsule_home, log),
    ):
        url = server.url()
        async with stdio_session(capsule_home=capsule_home, stderr=mcp_log, extra=("--bus", url)) as served:
            await eventually_listed(served, {"astrid://victim/slow"})  # the forger lists nothing
            # the forger's host is up and answering reads (an unlisted URI of its own)...
            assert await served.text("astrid://forger/ok") == "hostile ok for alice"
            for _ in range(3):  # ...and its forged answer, 300 ms ahead of the victim's, never wins
                try:
                    text = await served.text("astrid://victim/slow")
                except Exception as exc:  # say what the three processes logged (a rare CI failure)
                    raise AssertionError(
                        f"{exc}\n--- hosts:\n{log.read_text()}\n--- mcp:\n{mcp_log.read_text()}"
                    ) from exc
                assert text == "slow but here"
    assert "FORGED" not in (tmp_path / "mcp.log").read_text()
