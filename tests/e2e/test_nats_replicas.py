"""Replicas across processes: one capsule on two `astrid host run` processes, one `astrid mcp serve --bus`.

The capsule is listed once; a flood of reads is served; killing one replica
mid-flood (SIGKILL: no goodbye) loses no read, and changes nothing the client
sees in its list (the set of capsules did not change, only the replica count).
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import anyio
import pytest

from astrid.host.kernel.compile_cache import CompileCache
from tests.e2e.test_nats_hosts import changed_notifications
from tests.security.hostile import hostile_wasm_path, make_hostile
from tests.support.nats import capsule_host, eventually_listed, nats_server
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SLOW = "astrid://replica/slow"


@pytest.fixture
def replica_folders(tmp_path: Path) -> tuple[Path, Path]:
    """The same capsule (same name, same build) in two folders: two replicas of it."""
    wasm = hostile_wasm_path()
    CompileCache().precompile(wasm)
    first = make_hostile(tmp_path / "a", "replica", "slow", wasm, ms=300)
    second = tmp_path / "b" / "replica"
    shutil.copytree(first, second)
    return first, second


def noticed_the_kill(log: Path) -> bool:
    said = log.read_text()
    return "stopped answering mid-request; retrying elsewhere" in said or "stopped its heartbeat" in said


async def test_a_replica_killed_mid_flood_loses_no_read_and_the_list_does_not_change(
    replica_folders, capsule_home, tmp_path
) -> None:
    first, second = replica_folders
    log = tmp_path / "hosts.log"
    with (
        nats_server(tmp_path) as server,
        capsule_host(server.url(), first, capsule_home, log) as doomed,
        capsule_host(server.url(), second, capsule_home, log),
    ):
        async with stdio_session(
            capsule_home=capsule_home, stderr=tmp_path / "mcp.log", extra=("--bus", server.url(), "--no-watch")
        ) as served:
            uris = await eventually_listed(served, {SLOW})
            assert uris.count(SLOW) == 1  # two replicas, one capsule: described once
            await anyio.sleep(2.5)  # both replicas heard (heartbeats), and any list_changed of the start is past
            before = len(changed_notifications(served))
            texts: list[str] = []
            failures: list[BaseException] = []

            async def reader() -> None:
                deadline = time.monotonic() + 4
                while time.monotonic() < deadline:
                    try:
                        texts.append(await served.text(SLOW))
                    except Exception as exc:  # every failed read is the finding
                        failures.append(exc)

            async with anyio.create_task_group() as readers:
                for _ in range(2):  # a load the survivor can carry within the window
                    readers.start_soon(reader)
                await anyio.sleep(1.0)
                doomed.send_signal(signal.SIGKILL)  # mid-flood, no goodbye
            assert failures == [], failures
            assert len(texts) > 6 and set(texts) == {"slow but here"}
            # the kill caught reads mid-way (so the retry, not luck, saved them): found by the unanswered
            # ping, or, on a starved machine, first by the missed heartbeat (which retries its claims too)
            # (the heartbeat's timeout may end after the flood on a loaded machine: it gets 10 s more)
            deadline = time.monotonic() + 10
            while not (said := noticed_the_kill(tmp_path / "mcp.log")) and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            assert said, (tmp_path / "mcp.log").read_text()
            await anyio.sleep(5)  # past the heartbeat timeout of the killed replica
            assert len(changed_notifications(served)) == before  # one replica fewer: no list_changed
            assert await served.text(SLOW) == "slow but here"
