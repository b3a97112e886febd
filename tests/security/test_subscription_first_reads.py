"""Attacks through a subscription's first read (docs/contract/subscriptions.md §11.2): a subscribed URI
nobody has read yet is read once by the host, on the subscriber's behalf, so its files are watched.

That read must be the subscriber's own: made as the subscribing principal (its `{principal}` mount,
its sandbox), watching that principal's files only, and never made for a URI the principal could not
read. A real MCP client (mcp's Client, in-process) on the real server, kernel and broker, the real
bundled `files` capsule on a per-principal grant, the real mount watcher.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError

from astrid.capsules import CAPSULES_DIR
from astrid.host.bus import Principal
from astrid.host.capabilities.grants import GrantStore
from astrid.host.kernel.file_tracking import ReadKey
from astrid.host.mcp.server import AstridMcpServer
from tests.security.servers import InProcessServer
from tests.support.capsules import build_clean

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

DIARY = "astrid://files/diary.md"
ESCAPE = "astrid://files/%2e%2e/bob/diary.md"  # alice's mount is notes/alice: this would be bob's
WATCH_S = 0.2  # the mount watcher's poll in these tests
HEARD_WITHIN_S = 10.0  # generous: a poll or two, then the bus


@pytest.fixture(scope="module")
def files_capsule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("first-reads") / "files").folder


@pytest.fixture
def notes(tmp_path: Path) -> tuple[Path, Path]:
    """One folder per principal, each with its own diary; the grants file giving `files` the one of the caller."""
    root = tmp_path / "notes"
    for name in ("alice", "bob"):
        (root / name).mkdir(parents=True)
        (root / name / "diary.md").write_text(f"{name}'s diary\n")
    store = GrantStore(tmp_path / "config" / "grants.json")
    store.grant("files", f"fs:files={root}/{{principal}}")
    return root, store.path


def diary(root: Path, name: str) -> str:
    return os.path.realpath(root / name / "diary.md")


def tracked(served: InProcessServer, path: str) -> list[ReadKey]:
    """Which (capsule, principal, uri) the kernel would update when `path` changes."""
    return served.kernel.abi.capabilities.reads.touched([path])


async def subscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated (2026-07-28 listens)
        await client.session.subscribe_resource(uri)


async def test_a_first_read_is_the_subscribers_own_and_watches_only_its_files(
    serve, bundled, files_capsule, notes
) -> None:
    root, grants_file = notes
    served = await anyio.to_thread.run_sync(
        lambda: serve(*bundled, files_capsule, principal="bob", grants_file=grants_file)
    )
    await anyio.to_thread.run_sync(lambda: served.runtime.watch_mounts(WATCH_S))
    server = AstridMcpServer(served.runtime)
    heard: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(message.params.uri)

    bob = Principal.verified("bob")
    with anyio.fail_after(60):
        async with Client(server.server, mode="legacy", message_handler=on_message) as client:
            await subscribe(client, DIARY)  # no read first
            # The host read it as bob: bob's diary is watched for bob, alice's for nobody.
            assert tracked(served, diary(root, "bob")) == [ReadKey(served.source_id("files"), bob, DIARY)]
            assert tracked(served, diary(root, "alice")) == []
            assert served.broker.first_reads.done == 1

            (root / "alice" / "diary.md").write_text("alice's diary, changed\n")  # not bob's business
            (root / "bob" / "diary.md").write_text("bob's diary, changed\n")
            with anyio.fail_after(HEARD_WITHIN_S):
                while heard != [DIARY]:
                    await anyio.sleep(0.02)
            await anyio.sleep(5 * WATCH_S)
            assert heard == [DIARY]  # once: bob's change; alice's went nowhere
            [chunk] = (await client.read_resource(DIARY)).contents
            assert isinstance(chunk, types.TextResourceContents) and chunk.text == "bob's diary, changed\n"


async def test_a_subscription_cannot_make_the_host_read_what_the_principal_cannot_see(
    serve, bundled, files_capsule, notes
) -> None:
    root, grants_file = notes
    served = await anyio.to_thread.run_sync(
        lambda: serve(*bundled, files_capsule, principal="alice", grants_file=grants_file)
    )
    server = AstridMcpServer(served.runtime)
    with anyio.fail_after(60):
        async with Client(server.server, mode="legacy") as client:
            reads = served.broker.stats.reads
            for uri in ("astrid://nobody/serves/this", ESCAPE, "astrid://files/" + "x" * 3000):
                with pytest.raises(MCPError) as caught:
                    await subscribe(client, uri)
                assert caught.value.error.code == -32002, uri  # as a read would say: not found
            assert served.broker.stats.reads == reads  # no read was made for them
            assert served.broker.first_reads.done == 0
            assert tracked(served, diary(root, "bob")) == []

            await subscribe(client, DIARY)  # the control: one read, alice's own
            assert served.broker.stats.reads == reads + 1
            alice = Principal.verified("alice")
            assert tracked(served, diary(root, "alice")) == [ReadKey(served.source_id("files"), alice, DIARY)]
            assert tracked(served, diary(root, "bob")) == []
