"""Capsule hosts on NATS: two `astrid host run` processes and one `astrid mcp serve --bus`, on a real nats-server.

The client sees the union of both hosts' resources and reads from each; a
host that dies takes its resources with it (list_changed, reads fail closed
within the window) and brings them back when it restarts; principals stay
apart across processes.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.support.nats import nats_server
from tests.support.processes import astrid_exe, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DOCS_URI, PROBE_URI = "astrid://docs/index", "astrid://probe/note"


@contextmanager
def capsule_host(url: str, folder: Path, capsule_home: Path, log: Path) -> Iterator[subprocess.Popen]:
    """`astrid host run --bus URL --capsules FOLDER` until the block ends."""
    with log.open("a") as errors:
        process = subprocess.Popen(
            [astrid_exe(), "host", "run", "--bus", url, "--capsules", str(folder)],
            env=server_env(capsule_home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


async def eventually_listed(served, wanted: set[str], present: bool = True, timeout_s: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        uris = await served.uris()
        if (wanted <= set(uris)) if present else not (wanted & set(uris)):
            return uris
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout_s} s the list is {uris}")
        await anyio.sleep(0.25)


async def test_two_hosts_one_server_and_a_host_that_dies_and_comes_back(
    capsules, capsule_home, tmp_path, stderr_file
) -> None:
    hosts_log = tmp_path / "hosts.log"
    with nats_server(tmp_path) as server:
        url = server.url()
        with capsule_host(url, capsules["docs"], capsule_home, hosts_log):
            probe = capsule_host(url, capsules["probe"], capsule_home, hosts_log)
            probe.__enter__()
            try:
                async with stdio_session(
                    capsule_home=capsule_home, stderr=stderr_file, extra=("--bus", url, "--no-watch")
                ) as served:
                    await eventually_listed(served, {DOCS_URI, PROBE_URI})
                    assert (await served.text(PROBE_URI)) == "the private note of alice"
                    assert "astrid" in (await served.text(DOCS_URI)).lower()

                    served.rearm()
                    probe.__exit__(None, None, None)  # the probe host stops
                    with anyio.fail_after(20):
                        await served.changed.wait()
                    uris = await eventually_listed(served, {PROBE_URI}, present=False)
                    assert DOCS_URI in uris
                    started = time.monotonic()
                    gone = await served.error(PROBE_URI)
                    assert gone.error.code in (-32002, -32603) and time.monotonic() - started < 5

                    served.rearm()
                    probe = capsule_host(url, capsules["probe"], capsule_home, hosts_log)
                    probe.__enter__()
                    with anyio.fail_after(30):
                        await served.changed.wait()
                    await eventually_listed(served, {DOCS_URI, PROBE_URI})
                    assert (await served.text(PROBE_URI)) == "the private note of alice"
            finally:
                probe.__exit__(None, None, None)


async def test_principals_stay_apart_across_processes(capsules, capsule_home, tmp_path, stderr_file) -> None:
    with nats_server(tmp_path) as server, capsule_host(server.url(), capsules["probe"], capsule_home, tmp_path / "h"):
        url = server.url()
        async with (
            stdio_session(capsule_home=capsule_home, stderr=stderr_file, extra=("--bus", url)) as alice,
            stdio_session(
                capsule_home=capsule_home, stderr=tmp_path / "bob.log", principal="bob", extra=("--bus", url)
            ) as bob,
        ):
            await eventually_listed(alice, {PROBE_URI, "astrid://probe/alice-only"})
            assert await alice.text(PROBE_URI) == "the private note of alice"
            bob_uris = await eventually_listed(bob, {PROBE_URI})
            assert "astrid://probe/alice-only" not in bob_uris
            assert await bob.text(PROBE_URI) == "the private note of bob"
            denied = await bob.error("astrid://probe/alice-only")
            assert denied.error.code in (-32002, -32603)
