"""Capsule hosts on NATS: two `astrid host run` processes and one `astrid mcp serve --bus`, on a real nats-server.

The client sees the union of both hosts' resources and reads from each; a
host that dies takes its resources with it (list_changed, reads fail closed
within the window) and brings them back when it restarts; principals stay
apart across processes.
"""

from __future__ import annotations

import re
import time

import anyio
import mcp.types as types
import pytest

from tests.support.nats import capsule_host, eventually_listed, nats_server, stop_nats_on
from tests.support.processes import free_port
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DOCS_URI, PROBE_URI = "astrid://docs/index", "astrid://probe/note"


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
                    # each host's banner says who its capsules are, as `astrid mcp serve` does
                    banner = hosts_log.read_text()
                    for name in ("docs", "probe"):
                        assert re.search(rf"^astrid:   {name}: .*sha256:[0-9a-f]{{12}}", banner, re.MULTILINE), banner

                    served.rearm()
                    before = len(changed_notifications(served))
                    probe.__exit__(None, None, None)  # the probe host stops
                    with anyio.fail_after(20):
                        await served.changed.wait()
                    uris = await eventually_listed(served, {PROBE_URI}, present=False)
                    await anyio.sleep(5)  # past the heartbeat timeout: nothing more may come
                    assert len(changed_notifications(served)) - before == 1
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


def changed_notifications(served) -> list:
    return [n for n in served.notifications if isinstance(n, types.ResourceListChangedNotification)]


async def test_an_outage_of_the_nats_server_fails_requests_fast_and_service_resumes(
    capsules, capsule_home, tmp_path, stderr_file
) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    with (
        nats_server(tmp_path, port=port),
        capsule_host(url, capsules["probe"], capsule_home, tmp_path / "host.log"),
    ):
        async with stdio_session(capsule_home=capsule_home, stderr=stderr_file, extra=("--bus", url)) as served:
            await eventually_listed(served, {PROBE_URI})
            assert await served.text(PROBE_URI) == "the private note of alice"
            await anyio.to_thread.run_sync(stop_nats_on, port)  # the outage
            started = time.monotonic()
            while True:  # the MCP server notices the drop within moments; then it fails fast
                error = await served.error(PROBE_URI, timeout_s=10)
                if "unreachable" in error.error.message:
                    break
                assert time.monotonic() - started < 10, error.error.message
                await anyio.sleep(0.2)
            assert time.monotonic() - started < 10
            with nats_server(tmp_path, port=port):  # back on the same port
                deadline = time.monotonic() + 30
                while True:
                    try:
                        if await served.text(PROBE_URI) == "the private note of alice":
                            break
                    except Exception:
                        pass
                    assert time.monotonic() < deadline, "service did not resume after the restart"
                    await anyio.sleep(0.5)


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
