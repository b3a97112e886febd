"""Live data end to end: a real MCP client on `astrid mcp serve`, real capsules, real grants.

The bundled `files` capsule serves a granted folder (reads see edits at once,
a new file reaches a connected client as list_changed); the `counter` test
capsule keeps per-principal state in kv (it survives a restart, principals
never share it) and shows what a call without a grant gets.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV, DATA_DIR_ENV
from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.processes import server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("live-capsules")
    return {
        "files": build_clean(CAPSULES_DIR / "files", root / "files").folder,
        "counter": build_clean(TEST_CAPSULES / "counter", root / "counter").folder,
    }


@pytest.fixture
def user(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A user's own config and data dirs: the grants and kv state of this test only."""
    yield {CONFIG_DIR_ENV: str(tmp_path / "config"), DATA_DIR_ENV: str(tmp_path / "data")}


def grants(user: dict[str, str]) -> GrantStore:
    return GrantStore(Path(user[CONFIG_DIR_ENV]) / "grants.json")


async def test_a_granted_folder_is_served_live(built, user, capsule_home, tmp_path, stderr_file) -> None:
    notes = tmp_path / "notes"
    (notes / "projects").mkdir(parents=True)
    (notes / "today.md").write_text("# Today\n\nbuy milk\n")
    (notes / "projects" / "plan.txt").write_text("step one")
    grants(user).grant("files", f"fs:files={notes}")
    env = server_env(capsule_home, **user)
    async with stdio_session(built["files"], capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        listed = (await served.session.list_resources()).resources
        titles = {r.uri: r.title for r in listed}
        assert titles == {"astrid://files/today.md": "Today", "astrid://files/projects/plan.txt": "plan.txt"}
        assert await served.text("astrid://files/today.md") == "# Today\n\nbuy milk\n"
        assert await served.text("astrid://files/projects/plan.txt") == "step one"

        (notes / "today.md").write_text("# Today\n\nbuy bread\n")  # no rebuild, no reload
        assert await served.text("astrid://files/today.md") == "# Today\n\nbuy bread\n"

        served.rearm()
        (notes / "new.md").write_text("# New\n")
        with anyio.fail_after(20):
            await served.changed.wait()
        assert "astrid://files/new.md" in await served.uris()

        missing = await served.error("astrid://files/missing.md")
        assert missing.error.code == -32002  # resource not found
        escape = await served.error("astrid://files/projects/%2e%2e/%2e%2e/secret")
        assert escape.error.code == -32002


async def test_without_the_grant_the_files_capsule_lists_nothing(built, user, capsule_home, stderr_file) -> None:
    env = server_env(capsule_home, **user)
    async with stdio_session(built["files"], capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        assert await served.uris() == []
    assert "astrid capsule grant files fs:files=PATH" in stderr_file.read_text()


async def test_kv_state_is_per_principal_and_survives_a_restart(built, user, capsule_home, stderr_file) -> None:
    grants(user).grant("counter", "kv")
    env = server_env(capsule_home, **user)
    folder = built["counter"]
    async with stdio_session(folder, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        assert [await served.text("astrid://counter/visits") for _ in range(2)] == ["1", "2"]
    async with stdio_session(folder, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        assert await served.text("astrid://counter/visits") == "3"  # a new server process, the same state
    async with stdio_session(folder, capsule_home=capsule_home, stderr=stderr_file, env=env, principal="bob") as bob:
        assert await bob.text("astrid://counter/visits") == "1"  # bob never sees alice's count


async def test_a_call_without_the_grant_is_refused_naming_the_command(
    built, user, capsule_home, tmp_path, stderr_file
) -> None:
    store = grants(user)
    store.grant("counterfeit", "kv")  # another capsule's name gives nothing
    store.grant("counterfeit", f"fs:notes={tmp_path}")
    (tmp_path / "note.txt").write_text("not for counter")
    env = server_env(capsule_home, **user)
    async with stdio_session(built["counter"], capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        visits = await served.text("astrid://counter/visits")
        assert visits.startswith("NotGranted: capability-denied") and "astrid capsule grant counter kv" in visits
        note = await served.text("astrid://counter/note")
        assert note.startswith("NotGranted") and "astrid capsule grant counter fs:notes=PATH" in note
        store.grant("counter", f"fs:notes={tmp_path}")  # granted while serving: the next call has it
        assert await served.text("astrid://counter/note") == "not for counter"
        store.revoke("counter", "fs:notes")
        assert (await served.text("astrid://counter/note")).startswith("NotGranted")
