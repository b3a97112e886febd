"""Live data end to end: a real MCP client on `astrid mcp serve`, real capsules, real grants.

The bundled `files` capsule serves a granted folder (reads see edits at once,
a new file reaches a connected client as list_changed); the `counter` test
capsule keeps per-principal state in kv (it survives a restart, principals
never share it) and shows what a call without a grant gets.

Resource subscriptions (docs/contract/subscriptions.md §11): a subscribed file's URI is
updated when the file changes; the counter's `ctx.updated` after a kv write
reaches its principal's subscribers only, over stdio and HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV, DATA_DIR_ENV
from tests.e2e.builds import TEST_CAPSULES
from tests.support.capsules import build_clean
from tests.support.http import http_server, http_session, text_of
from tests.support.nats import capsule_host, eventually_listed, nats_server
from tests.support.processes import LineReader, astrid_exe, server_env
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TS_CLIENT = Path(__file__).resolve().parent / "ts_client"


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


# -- resource subscriptions (docs/contract/subscriptions.md §11) ---------------------------------

UPDATE_WITHIN_S = 2.0  # the bound: one poll of the granted folder, then the bus


def updates_of(served, uri: str) -> int:
    return sum(isinstance(n, types.ResourceUpdatedNotification) and n.params.uri == uri for n in served.notifications)


async def subscribe(session, uri: str, *, on: bool = True) -> None:
    with anyio.fail_after(30), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated (2026-07-28 listens)
        await (session.subscribe_resource(uri) if on else session.unsubscribe_resource(uri))


async def until(predicate, timeout_s: float) -> None:
    with anyio.fail_after(timeout_s):
        while not predicate():
            await anyio.sleep(0.02)


async def test_a_subscribed_file_is_updated_once_when_it_changes_and_no_more_once_unsubscribed(
    built, user, capsule_home, tmp_path, stderr_file
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("buy milk\n")
    (notes / "other.md").write_text("other\n")
    grants(user).grant("files", f"fs:files={notes}")
    env = server_env(capsule_home, **user)
    today = "astrid://files/today.md"
    async with stdio_session(built["files"], capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        resources = served.init.capabilities.resources
        assert resources is not None and resources.subscribe is True
        await subscribe(served.session, today)
        assert await served.text(today) == "buy milk\n"  # the read tells the host which file it is

        (notes / "other.md").write_text("other, changed\n")  # a file the read never touched
        (notes / "today.md").write_text("buy bread and milk\n")
        await until(lambda: updates_of(served, today) == 1, UPDATE_WITHIN_S + 1.0)  # + the process's lag
        assert await served.text(today) == "buy bread and milk\n"
        await anyio.sleep(1.5)  # a later poll finds nothing new: still exactly one
        assert updates_of(served, today) == 1
        assert not any(
            isinstance(n, types.ResourceUpdatedNotification) and n.params.uri != today for n in served.notifications
        )

        await subscribe(served.session, today, on=False)
        (notes / "today.md").write_text("nothing to buy\n")
        await anyio.sleep(2.5)
        assert updates_of(served, today) == 1
        assert await served.text(today) == "nothing to buy\n"


async def test_a_capsule_update_after_a_kv_write_reaches_its_subscriber_over_stdio(
    built, user, capsule_home, stderr_file
) -> None:
    grants(user).grant("counter", "kv")
    env = server_env(capsule_home, **user)
    hits = "astrid://counter/hits"
    async with stdio_session(built["counter"], capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
        await subscribe(served.session, hits)
        assert await served.text(hits) == "0"
        assert await served.text("astrid://counter/bump") == "1"
        await until(lambda: updates_of(served, hits) == 1, UPDATE_WITHIN_S)
        assert await served.text(hits) == "1"
        assert updates_of(served, "astrid://counter/bump") == 0  # not subscribed


async def test_a_capsule_update_reaches_only_its_principals_sessions_over_http(
    built, user, capsule_home, tmp_path
) -> None:
    grants(user).grant("counter", "kv")
    hits = "astrid://counter/hits"
    seen: dict[str, list[str]] = {"alice": [], "bob": []}

    def recorder(name: str):
        async def on_message(message) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                seen[name].append(message.params.uri)

        return on_message

    with http_server(built["counter"], capsule_home=capsule_home, token_dir=tmp_path, env=user) as served:
        alice, bob = served.add_token("alice"), served.add_token("bob")
        async with (
            http_session(served.url, alice, message_handler=recorder("alice")) as alice_session,
            http_session(served.url, bob, message_handler=recorder("bob")) as bob_session,
        ):
            for session in (alice_session, bob_session):
                await subscribe(session, hits)
            with anyio.fail_after(30):
                assert text_of(await alice_session.read_resource("astrid://counter/bump")) == "1"
            await until(lambda: seen["alice"] == [hits], UPDATE_WITHIN_S)
            with anyio.fail_after(30):
                assert text_of(await alice_session.read_resource(hits)) == "1"
                assert text_of(await bob_session.read_resource(hits)) == "0"  # bob's count is his own
            await anyio.sleep(1.0)
            assert seen == {"alice": [hits], "bob": []}  # bob's session heard nothing of alice's change

            await subscribe(alice_session, hits, on=False)
            with anyio.fail_after(30):
                assert text_of(await bob_session.read_resource("astrid://counter/bump")) == "1"
            await until(lambda: seen["bob"] == [hits], UPDATE_WITHIN_S)
            await anyio.sleep(0.5)
            assert seen["alice"] == [hits]


async def test_a_2026_07_28_listen_stream_hears_a_capsule_update_over_http(built, user, capsule_home, tmp_path) -> None:
    grants(user).grant("counter", "kv")
    hits = "astrid://counter/hits"
    with http_server(built["counter"], capsule_home=capsule_home, token_dir=tmp_path, env=user) as served:
        token = served.add_token("carol")
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            transport = streamable_http_client(served.url, http_client=http)
            with anyio.fail_after(30):
                async with Client(transport, mode="2026-07-28") as client:
                    with pytest.raises(MCPError) as caught:  # only what carol could read
                        async with client.listen(resource_subscriptions=["astrid://counter/nope"]):
                            pass
                    assert caught.value.error.code == -32602
                    async with client.listen(resource_subscriptions=[hits]) as subscription:
                        assert subscription.honored.resource_subscriptions == [hits]
                        assert text_of(await client.read_resource("astrid://counter/bump")) == "1"
                        with anyio.fail_after(UPDATE_WITHIN_S):
                            async for event in subscription:
                                assert isinstance(event, ResourceUpdated) and event.uri == hits
                                break
                    assert text_of(await client.read_resource(hits)) == "1"


async def test_updates_cross_nats_from_capsule_hosts_to_the_mcp_server(
    built, user, capsule_home, tmp_path, stderr_file
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("one\n")
    grants(user).grant("files", f"fs:files={notes}")
    grants(user).grant("counter", "kv")
    today, hits = "astrid://files/today.md", "astrid://counter/hits"
    hosts_log = tmp_path / "hosts.log"
    with nats_server(tmp_path, jetstream=True) as server:  # the counter keeps its count in kv
        url = server.url()
        with (
            capsule_host(url, built["files"], capsule_home, hosts_log, env=user),
            capsule_host(url, built["counter"], capsule_home, hosts_log, env=user),
        ):
            env = server_env(capsule_home, **user)
            async with stdio_session(
                capsule_home=capsule_home, stderr=stderr_file, env=env, extra=("--bus", url)
            ) as served:
                await eventually_listed(served, {today, hits})
                for uri in (today, hits):
                    await subscribe(served.session, uri)
                assert await served.text(today) == "one\n"  # the capsule host learns which file it is
                assert await served.text("astrid://counter/bump") == "1"
                await until(lambda: updates_of(served, hits) == 1, UPDATE_WITHIN_S + 1.0)
                # A capsule host polls a folder from the first read that looked under it on; a change
                # before that first poll is named by it (docs/nats.md, "How it works"): no wait here.
                (notes / "today.md").write_text("two, longer\n")
                await until(lambda: updates_of(served, today) == 1, UPDATE_WITHIN_S + 1.0)
                assert await served.text(today) == "two, longer\n"
                assert await served.text(hits) == "1"


async def test_the_typescript_client_hears_a_subscribed_file_change_once(built, user, capsule_home, tmp_path) -> None:
    node = shutil.which("node")
    assert node and (TS_CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(), (
        "the TypeScript client is not installed: run `make test` (it runs `npm ci` in tests/e2e/ts_client)"
    )
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("one\n")
    grants(user).grant("files", f"fs:files={notes}")
    config = tmp_path / "claude_desktop_config.json"
    printed = subprocess.run(
        [astrid_exe(), "mcp", "config", "--name", "astrid", "--capsules", str(built["files"]), "--principal", "alice"],
        env=server_env(capsule_home, **user),
        capture_output=True,
        text=True,
        check=True,
    )
    config.write_text(printed.stdout)
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path))}
    today = "astrid://files/today.md"
    with (tmp_path / "ts.log").open("w") as stderr:
        process = subprocess.Popen(
            [node, str(TS_CLIENT / "subscribe.mjs"), str(config), today],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None and stdout is not None
    reader = LineReader(stdout)

    def next_event(timeout_s: float) -> dict:
        line = reader.next(timeout_s)
        assert line is not None, (tmp_path / "ts.log").read_text()
        return json.loads(line)

    def send(command: str) -> None:
        stdin.write(command.encode() + b"\n")
        stdin.flush()

    try:
        assert await anyio.to_thread.run_sync(next_event, 60.0) == {
            "event": "ready",
            "subscribe": True,
            "text": "one\n",
        }
        (notes / "today.md").write_text("two, longer\n")
        event = await anyio.to_thread.run_sync(next_event, UPDATE_WITHIN_S + 1.0)
        assert event == {"event": "updated", "uri": today}
        with pytest.raises(TimeoutError):  # exactly one
            await anyio.to_thread.run_sync(reader.next, 1.5)
        send("read")
        assert await anyio.to_thread.run_sync(next_event, 30.0) == {"event": "read", "text": "two, longer\n"}
        send("unsubscribe")
        assert await anyio.to_thread.run_sync(next_event, 30.0) == {"event": "unsubscribed"}
        (notes / "today.md").write_text("three, longer still\n")
        with pytest.raises(TimeoutError):  # no more once unsubscribed
            await anyio.to_thread.run_sync(reader.next, 2.5)
        send("close")
        stdin.close()
        assert await anyio.to_thread.run_sync(lambda: process.wait(30)) == 0
    finally:
        if process.poll() is None:
            process.kill()
