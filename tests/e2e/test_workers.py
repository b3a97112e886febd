"""`astrid mcp serve --workers N`: a private nats-server and N capsule-host processes behind one MCP server.

A real MCP client serves a full session over stdio with `--workers 2`; the
child processes the banner names are alive while it serves and gone once it
exits (end of input, SIGTERM, Ctrl-C, and SIGKILL of serve itself: no orphan).
Another local user gets nothing: the nats-server takes no client without the
generated credentials, and they appear on no command line.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import mcp.types as types
import pytest

from astrid.host.bus.nats import NatsBus
from astrid.host.contract.topics import HOST_CLUSTER
from astrid.host.errors import BusError
from astrid.host.serving.workers import write_private
from tests.e2e.builds import build, write_variant
from tests.support.nats import capsule_host, nats_server
from tests.support.processes import alive, all_gone, astrid_exe, run_astrid, serve_args, server_env, wait_for_text
from tests.support.stdio import stdio_session

DOCS_URI, PROBE_URI = "astrid://docs/index", "astrid://probe/note"
FRONT_ENDS = re.compile(r"--workers 2: 2 front-end processes \(pids (\d+), (\d+)\)")
BANNER = re.compile(r"started nats-server \(pid (\d+)\) on 127\.0\.0\.1:(\d+).*pids ([\d, ]+)\)")


def started(log: str) -> tuple[int, int, list[int]]:
    """The nats-server's pid and port, and the workers' pids, as the banner says them."""
    found = BANNER.search(log)
    assert found, log
    return int(found[1]), int(found[2]), [int(pid) for pid in found[3].split(", ")]


@pytest.mark.anyio
@pytest.mark.slow
async def test_two_workers_serve_a_full_session_and_leave_nothing_behind(capsules, capsule_home, tmp_path) -> None:
    log = tmp_path / "serve.log"
    async with stdio_session(
        capsules["docs"], capsules["probe"], capsule_home=capsule_home, stderr=log, extra=("--workers", "2")
    ) as served:
        # The front end waits for its workers before joining: the first list already has their capsules.
        uris = await served.uris()
        assert {DOCS_URI, PROBE_URI} <= set(uris) and uris.count(PROBE_URI) == 1  # two replicas, listed once
        assert await served.text(PROBE_URI) == "the private note of alice"
        assert "astrid" in (await served.text(DOCS_URI)).lower()
        for _ in range(10):
            assert await served.text(PROBE_URI) == "the private note of alice"

        nats_pid, port, workers = started(served.log())
        children = [nats_pid, *workers]
        assert len(workers) == 2 and all(alive(pid) for pid in children)
        text = served.log()
        assert "worker 1: hosting" in text and "worker 2: hosting" in text
        # Another local user: sees every command line, holds no credential, cannot connect.
        for pid in children:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert b"@127.0.0.1" not in command and b"nats://" not in command, command
        with pytest.raises(BusError, match="cannot connect"):
            NatsBus(f"nats://127.0.0.1:{port}", role="mcp", cluster=HOST_CLUSTER).connect(timeout_s=2)
        # The config that holds the passwords was read at start and is gone: a serve killed with no
        # clean-up (SIGKILL, or a client's kill after its grace period) leaves none on disk.
        config = Path(Path(f"/proc/{nats_pid}/cmdline").read_bytes().split(b"\0")[2].decode())
        assert not config.parent.exists()
    # The client closed stdin: serve stopped its workers and its nats-server.
    assert all_gone(children) == []


def start_serving(capsules, capsule_home: Path, log: Path, http: bool) -> tuple[subprocess.Popen, list[int]]:
    """`astrid mcp serve --workers 2` (stdio with an open stdin, or HTTP), once both workers host their
    capsules: its children (stdio: the nats-server and the capsule hosts; HTTP: the two front ends)."""
    extra = ("--workers", "2", "--no-watch") + (("--http", "127.0.0.1:0", "--no-auth") if http else ())
    args = serve_args(capsules["probe"], principal="alice", extra=extra)
    with log.open("w") as errors:
        process = subprocess.Popen(
            [astrid_exe(), *args],
            env=server_env(capsule_home),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    deadline = time.monotonic() + 120
    ready = ("ready in",) if http else ("worker 1: hosting", "worker 2: hosting")
    while not all(mark in log.read_text() for mark in ready):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    if http:
        found = FRONT_ENDS.search(log.read_text())
        assert found, log.read_text()
        return process, [int(found[1]), int(found[2])]
    nats_pid, _, workers = started(log.read_text())
    return process, [nats_pid, *workers]


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_workers_reload_a_rebuilt_capsule_and_the_client_hears_of_it(
    capsules, capsule_home, tmp_path
) -> None:
    """Hot reload as without --workers: each worker watches the capsule folders, a rebuild with a new
    URI reaches the client as list_changed, and a rebuild with new contents is what both serve."""
    folder = tmp_path / "live" / "mutable"
    shutil.copytree(capsules["mutable-v1"], folder)
    log = tmp_path / "serve.log"

    async def eventually(predicate) -> None:
        with anyio.fail_after(30):
            while not await predicate():
                await anyio.sleep(0.1)

    async def rebuild(variant: str) -> None:
        write_variant(folder, variant)
        await anyio.to_thread.run_sync(build, folder)  # a build-cache hit: the variants were built before

    async with stdio_session(folder.parent, capsule_home=capsule_home, stderr=log, extra=("--workers", "2")) as served:
        assert await served.uris() == ["astrid://mutable/one"]
        with anyio.fail_after(30):
            while not all(f"worker {number}: watching" in served.log() for number in (1, 2)):
                await anyio.sleep(0.1)

        await rebuild("v2")  # a new URI: the client is told
        with anyio.fail_after(30):
            await served.changed.wait()
        await eventually(lambda: _uris_are(served, ["astrid://mutable/one", "astrid://mutable/two"]))
        assert "reloaded mutable (a new build)" in served.log()

        await rebuild("v3")  # new contents, same URIs: once both workers have it, every read is of it
        await eventually(lambda: _reads_all_start_with(served, "astrid://mutable/two", "version 3"))
        assert sum(isinstance(n, types.ResourceListChangedNotification) for n in served.notifications) >= 1


async def _uris_are(served, wanted: list[str]) -> bool:
    return await served.uris() == wanted


async def _reads_all_start_with(served, uri: str, prefix: str, reads: int = 10) -> bool:
    """Every one of `reads` reads (spread over the workers by their queue group) starts with `prefix`."""
    for _ in range(reads):
        if not (await served.text(uri)).startswith(prefix):
            return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, and the parent-death signal of Linux")
@pytest.mark.parametrize(
    ("signum", "http"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGKILL, False), (signal.SIGTERM, True)],
)
def test_serve_stopped_by_a_signal_leaves_no_child(capsules, capsule_home, tmp_path, signum, http) -> None:
    log = tmp_path / "serve.log"
    process, children = start_serving(capsules, capsule_home, log, http)
    try:
        assert all(alive(pid) for pid in children)
        process.send_signal(signum)  # SIGKILL: serve cleans nothing up; the kernel signals its children
        process.wait(30)
        # Stopped in order, serve has reaped its children before exiting; after SIGKILL the kernel's
        # signal to them (Linux) takes them down shortly after.
        assert all_gone(children, within_s=15 if signum == signal.SIGKILL else 5) == [], log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in children:  # never leave one to the next test, whatever failed
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal of Linux")
@pytest.mark.parametrize("signals", [1, 2000])
def test_a_capsule_host_stops_on_one_signal_and_on_a_burst(capsules, capsule_home, tmp_path, signals) -> None:
    """A worker may get SIGTERM twice (serve's, then the kernel's when serve dies): a handler that took a
    lock deadlocked when the second landed inside the first, and the worker outlived serve. One signal
    stops it in order (status 0); a burst stops it too, in order or at once (a signal after the first),
    or by the signal itself once the interpreter is past its handlers."""
    log = tmp_path / "host.log"
    with nats_server(tmp_path) as server, capsule_host(server.url(), capsules["docs"], capsule_home, log) as host:
        # at once when it says it hosts (a signal right after the banner found SIGTERM's default action)
        wait_for_text(log, "astrid: hosting", host, poll_s=0.001)
        for _ in range(signals):  # spread out, so that some land while a handler runs
            try:
                os.kill(host.pid, signal.SIGTERM)
            except ProcessLookupError:  # already gone: the burst has done its work
                break
            time.sleep(0.0005)
        host.wait(30)  # the deadlock: it never exits
        at_once = "stopped at once" in log.read_text()
        if signals == 1:
            assert host.returncode == 0 and not at_once, log.read_text()
        else:
            assert host.returncode in (0, 130, -signal.SIGTERM), log.read_text()
            assert host.returncode != 130 or at_once


def test_the_nats_config_is_private_while_it_exists(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # as the cluster makes it
    config = write_private(folder / "nats.conf", "authorization { }")
    assert config.stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700
    with pytest.raises(FileExistsError):  # never written through a file or link planted there first
        write_private(config, "again")


def serve_with_nats_server(binary: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`astrid mcp serve ARGS...` with $ASTRID_NATS_SERVER=binary and no input, run to its end."""
    return subprocess.run(
        [astrid_exe(), "mcp", "serve", *args],
        env={**os.environ, "ASTRID_NATS_SERVER": str(binary), **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_nats_server_that_fails_to_start_is_one_line_with_its_reason(tmp_path: Path) -> None:
    failing = tmp_path / "nats-server"
    failing.write_text("#!/bin/sh\necho 'starting' >&2\necho '[FTL] cannot listen here' >&2\nexit 1\n")
    failing.chmod(0o755)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    started = serve_with_nats_server(failing, "--workers", "1", "--no-watch", TMPDIR=str(temporary))
    assert started.returncode != 0
    assert started.stderr.strip().splitlines()[-1] == (
        "error: --workers: nats-server did not start on 127.0.0.1 ([FTL] cannot listen here)"
    )
    assert list(temporary.iterdir()) == []  # no config left behind


def test_workers_errors_are_one_line(tmp_path: Path) -> None:
    missing = serve_with_nats_server(tmp_path / "no-nats-server", "--workers", "2")
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines()[-1] == (
        f"error: --workers: $ASTRID_NATS_SERVER={tmp_path / 'no-nats-server'}: not an executable nats-server"
    )
    both = run_astrid("mcp", "serve", "--workers", "2", "--bus", "nats://127.0.0.1:4222", cwd=tmp_path, timeout=60)
    assert both.returncode != 0 and "give --workers or --bus, not both" in both.stderr
    zero = run_astrid("mcp", "serve", "--workers", "0", cwd=tmp_path, timeout=60)
    assert zero.returncode == 2 and "at least 1 (or auto: one per core)" in zero.stderr
