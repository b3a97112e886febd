"""A subscription needs no prior read (docs/contract/subscriptions.md §11.2, "first read"): a real MCP
client on `astrid mcp serve` over stdio, the bundled `files` capsule on a granted folder.

The host learns which files a URI depends on from a read of it; a client that subscribes and never
reads must still hear the first change after its subscription was answered, on both protocol eras:
2025-11-25's `resources/subscribe` and 2026-07-28's `subscriptions/listen`. A URI only the capsule's
template covers (a file that does not exist yet) is learned the same way. Over HTTP a principal's mount
is polled from its first request on: a change before that poll is not lost either.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp.shared.subscriptions import ResourceUpdated

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV, DATA_DIR_ENV
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session
from tests.support.processes import astrid_exe, serve_args, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TODAY = "astrid://files/today.md"
LATER = "astrid://files/later.md"  # no such file yet: only the template covers it
UPDATE_WITHIN_S = 10.0  # generous: one poll of the granted folder (1 s), then the bus, on a busy machine
QUIET_S = 2.0  # two more polls find nothing new


@pytest.fixture(scope="module")
def files_capsule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("unread") / "files").folder


@pytest.fixture
def served_folder(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A granted notes folder with one file, and the environment (config and data dirs) that grants it."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("buy milk\n")
    (notes / "other.md").write_text("other\n")
    user = {CONFIG_DIR_ENV: str(tmp_path / "config"), DATA_DIR_ENV: str(tmp_path / "data")}
    GrantStore(Path(user[CONFIG_DIR_ENV]) / "grants.json").grant("files", f"fs:files={notes}")
    yield notes, user


def updates_of(notifications: list, uri: str) -> int:
    return sum(isinstance(n, types.ResourceUpdatedNotification) and n.params.uri == uri for n in notifications)


async def until(predicate, timeout_s: float) -> None:
    with anyio.fail_after(timeout_s):
        while not predicate():
            await anyio.sleep(0.02)


async def test_a_file_subscribed_without_a_read_is_updated_once_when_it_changes(
    files_capsule, served_folder, capsule_home, stderr_file
) -> None:
    notes, user = served_folder
    env = server_env(capsule_home, **user)
    async with stdio_session(files_capsule, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        with anyio.fail_after(30), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated (2026-07-28 listens)
            await served.session.subscribe_resource(TODAY)  # no resources/read, no resources/list first
            await served.session.subscribe_resource(LATER)

        (notes / "other.md").write_text("other, changed\n")  # a file neither subscribed URI depends on
        (notes / "today.md").write_text("buy bread and milk\n")
        await until(lambda: updates_of(served.notifications, TODAY) == 1, UPDATE_WITHIN_S)
        (notes / "later.md").write_text("# Later\n")  # the template-covered URI's file comes
        await until(lambda: updates_of(served.notifications, LATER) == 1, UPDATE_WITHIN_S)
        await anyio.sleep(QUIET_S)
        assert updates_of(served.notifications, TODAY) == 1  # exactly one per change
        assert updates_of(served.notifications, LATER) == 1
        others = {n.params.uri for n in served.notifications if isinstance(n, types.ResourceUpdatedNotification)}
        assert others == {TODAY, LATER}
        assert await served.text(TODAY) == "buy bread and milk\n"
    log = stderr_file.read_text()
    assert "Traceback" not in log


async def test_a_2026_07_28_listen_stream_hears_a_file_it_never_read_change_once(
    files_capsule, served_folder, capsule_home, stderr_file
) -> None:
    notes, user = served_folder
    params = StdioServerParameters(
        command=astrid_exe(), args=serve_args(files_capsule, principal="alice"), env=server_env(capsule_home, **user)
    )
    heard: list[str] = []
    with stderr_file.open("w") as errlog, anyio.fail_after(120):
        async with Client(stdio_client(params, errlog=errlog), mode="2026-07-28") as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(resource_subscriptions=[TODAY]) as subscription:
                assert subscription.honored.resource_subscriptions == [TODAY]
                (notes / "today.md").write_text("buy bread and milk\n")

                async def hear() -> None:
                    async for event in subscription:
                        if isinstance(event, ResourceUpdated):
                            heard.append(event.uri)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(hear)
                    await until(lambda: heard == [TODAY], UPDATE_WITHIN_S)
                    await anyio.sleep(QUIET_S)
                    tg.cancel_scope.cancel()
            assert heard == [TODAY]  # exactly one


async def test_over_http_a_new_users_first_subscription_hears_a_change_made_right_after_it(
    files_capsule, served_folder, capsule_home, tmp_path
) -> None:
    notes, user = served_folder
    heard: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(message.params.uri)

    with http_server(files_capsule, capsule_home=capsule_home, token_dir=tmp_path, env=user) as served:
        token = served.add_token("dana")  # nobody has used the server yet: dana's mount is not polled
        async with http_session(served.url, token, message_handler=on_message) as session:
            with anyio.fail_after(30), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated
                await session.subscribe_resource(TODAY)  # dana's first request
            (notes / "today.md").write_text("changed before the folder's first poll\n")
            await until(lambda: heard == [TODAY], UPDATE_WITHIN_S)
            await anyio.sleep(QUIET_S)
            assert heard == [TODAY]
