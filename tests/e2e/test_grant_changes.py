"""A grant or a revoke while a client is connected: its list follows at once, with list_changed.

A real MCP client (the Python SDK's, over stdio) on `astrid mcp serve` with
the bundled `files` capsule; the operator runs the real `astrid capsule
grant` and `astrid capsule revoke` meanwhile. No file under the folder
changes: the grants file alone must make the list follow. The server's
stderr says what changed, and names a granted folder that is not there.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp.types as types
import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV, DATA_DIR_ENV
from tests.support.capsules import build_clean
from tests.support.processes import astrid_exe, server_env
from tests.support.stdio import StdioSession, stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# A grants change is seen at the next poll (1 s), then described again: well within this.
FOLLOWS_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def files_capsule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("grant-changes") / "files").folder


@pytest.fixture
def user(tmp_path: Path) -> Iterator[dict[str, str]]:
    """This test's own config and data dirs (its grants file)."""
    yield {CONFIG_DIR_ENV: str(tmp_path / "config"), DATA_DIR_ENV: str(tmp_path / "data")}


async def operator(user: dict[str, str], capsule_home: Path, *args: str) -> str:
    """`astrid ARGS...` as the operator runs it in another terminal; its stderr."""
    env = {**os.environ, **user, "ASTRID_CAPSULE_HOME": str(capsule_home)}
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run([astrid_exe(), *args], capture_output=True, text=True, timeout=60, env=env)
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


async def settled(served: StdioSession) -> None:
    """Until the server watches (grants and mounts are watched from then on)."""
    with anyio.fail_after(60):
        while "watching the capsule folders" not in served.log():
            await anyio.sleep(0.05)


async def changed(served: StdioSession) -> float:
    started = time.perf_counter()
    with anyio.fail_after(FOLLOWS_WITHIN_S):
        await served.changed.wait()
    return time.perf_counter() - started


def list_changed(served: StdioSession) -> int:
    return sum(isinstance(n, types.ResourceListChangedNotification) for n in served.notifications)


async def test_a_grant_and_a_revoke_reach_a_connected_client_at_once(
    files_capsule, user, capsule_home, tmp_path, stderr_file
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("# Today\n")
    env = server_env(capsule_home, **user)
    async with stdio_session(files_capsule, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        assert await served.uris() == []
        await settled(served)

        served.rearm()
        await operator(
            user, capsule_home, "capsule", "grant", "files", f"fs:files={notes}", "--capsules", str(files_capsule)
        )
        granted_after = await changed(served)
        assert await served.uris() == ["astrid://files/today.md"]
        assert await served.text("astrid://files/today.md") == "# Today\n"

        served.rearm()
        await operator(user, capsule_home, "capsule", "revoke", "files", "fs:files")
        revoked_after = await changed(served)
        assert await served.uris() == []
        assert list_changed(served) == 2
    print(f"\ngrant -> list_changed after {granted_after:.2f} s, revoke -> after {revoked_after:.2f} s")
    log = served.log()
    assert f"astrid: grants changed: files: granted fs:files={notes}; describing the resources again" in log
    assert f"astrid: grants changed: files: revoked fs:files={notes}; describing the resources again" in log
    assert "capsule folders changed" not in log and "Traceback" not in log  # announced, never reloaded


async def test_a_grant_of_a_capsule_not_served_announces_nothing(
    files_capsule, user, capsule_home, tmp_path, stderr_file
) -> None:
    env = server_env(capsule_home, **user)
    async with stdio_session(files_capsule, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        assert await served.uris() == []
        await settled(served)
        await operator(user, capsule_home, "capsule", "grant", "counter", "kv")
        (tmp_path / "marker").mkdir()
        await operator(user, capsule_home, "capsule", "grant", "files", f"fs:other={tmp_path / 'marker'}")
        # the second grant (files, a mount it does not ask for) is announced: the first one was not
        with anyio.fail_after(FOLLOWS_WITHIN_S):
            while "grants changed: files" not in served.log():
                await anyio.sleep(0.05)
    assert "grants changed: counter" not in served.log()
    assert list_changed(served) == 0  # described again, and the same URIs: no notification


async def test_a_missing_granted_folder_is_named_once_and_served_once_it_is_made(
    files_capsule, user, capsule_home, tmp_path, stderr_file
) -> None:
    later = tmp_path / "later"
    GrantStore(Path(user[CONFIG_DIR_ENV]) / "grants.json").grant("files", f"fs:files={later}")
    env = server_env(capsule_home, **user)
    async with stdio_session(files_capsule, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        assert await served.uris() == []
        await settled(served)
        line = f"astrid: the folder {later}, granted to a capsule as an fs mount, does not exist"
        with anyio.fail_after(10):
            while line not in served.log():
                await anyio.sleep(0.05)
        for _ in range(3):  # more lists, more polls: still named once
            assert await served.uris() == []
            await anyio.sleep(1.0)
        assert served.log().count(line) == 1, served.log()

        served.rearm()
        later.mkdir()
        (later / "plan.md").write_text("# Plan\n")
        await changed(served)
        assert await served.uris() == ["astrid://files/plan.md"]
        assert f"astrid: files changed in {later}; describing the resources again for alice" in served.log()
