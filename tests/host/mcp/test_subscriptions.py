"""Resource subscriptions in-process (docs/contract/subscriptions.md §11): mcp's Client on the real Server, the
real Bus and broker, a stand-in capsule announcing `resource.v1.event.updated` as a capsule does.

tests/e2e drives the same over stdio and HTTP with real capsules and real file changes.
"""

from __future__ import annotations

import json
import warnings
from contextlib import asynccontextmanager

import anyio
import mcp.types as types
import pytest
from mcp import Client, MCPError

from astrid.host.limits import Limits, SubscriptionLimits
from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from tests.host.broker.fakes import FakeCapsule, resource, text
from tests.host.mcp.fakes import FakeKernel

pytestmark = pytest.mark.anyio

README = "astrid://docs/readme"
GUIDE = "astrid://docs/guide"


def docs(bus, source_id: str = "") -> FakeCapsule:
    return FakeCapsule(
        bus,
        "docs",
        source_id=source_id,
        resources={
            # the guide is declared fresh for a minute: the broker keeps a read of it
            "alice": [
                resource(README, "readme"),
                resource(GUIDE, "guide", meta=json.dumps({"astrid": {"max_age_s": 60}})),
            ],
            "bob": [resource(README, "readme")],
        },
        contents={
            "alice": {README: [text(README, "alice's")], GUIDE: [text(GUIDE, "guide")]},
            "bob": {README: [text(README, "bob's")]},
        },
        templates={"alice": [{"uri_template": "astrid://docs/page/{name}", "name": "page"}]},
    )


def other(bus) -> FakeCapsule:
    return FakeCapsule(bus, "other", resources={"alice": [resource("astrid://other/x", "x")]})


@asynccontextmanager
async def serving(*, mode="legacy", limits=None, principal="alice"):
    def setup(k: FakeKernel) -> None:
        k.add(docs(k.bus))
        k.add(other(k.bus))

    kernel = FakeKernel(setup)
    config = RuntimeConfig(capsule_paths=[], principal=principal, limits=Limits())
    if limits is not None:
        config.subscription_limits = limits
    runtime = Runtime(config, kernel_factory=lambda c: kernel)
    runtime.start(background=True)
    server = AstridMcpServer(runtime, subscription_limits=limits or SubscriptionLimits())
    updates: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(message.params.uri)

    try:
        with anyio.fail_after(30):
            async with Client(server.server, mode=mode, message_handler=on_message) as client:
                # the kernel starts in the background: its capsules are there once it is ready
                await anyio.to_thread.run_sync(runtime.wait_ready, 30)
                yield client, server, kernel, updates
    finally:
        runtime.close()


async def subscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK marks subscribe deprecated (2026-07-28 has listen)
        await client.session.subscribe_resource(uri)


async def unsubscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await client.session.unsubscribe_resource(uri)


async def until(predicate, timeout_s: float = 5.0) -> None:
    with anyio.fail_after(timeout_s):
        while not predicate():
            await anyio.sleep(0.01)


async def announce(capsule: FakeCapsule, uri: str, principal: str = "alice") -> None:
    await anyio.to_thread.run_sync(capsule.announce, uri, principal)


async def test_an_announced_update_reaches_the_subscriber_once_and_unsubscribe_stops_it():
    async with serving() as (client, server, kernel, updates):
        await subscribe(client, README)
        await announce(kernel.capsules["docs"], README)
        await until(lambda: updates == [README])
        await unsubscribe(client, README)
        await anyio.sleep(server.subscriptions.limits.coalesce_s + 0.1)
        await announce(kernel.capsules["docs"], README)
        await announce(kernel.capsules["docs"], GUIDE)  # never subscribed
        await anyio.sleep(0.5)
        assert updates == [README]


async def test_a_template_covered_uri_is_subscribable_and_its_owner_may_announce_it():
    async with serving() as (client, _, kernel, updates):
        await subscribe(client, "astrid://docs/page/intro")
        await announce(kernel.capsules["docs"], "astrid://docs/page/intro")
        await until(lambda: updates == ["astrid://docs/page/intro"])


async def test_updates_of_one_uri_are_coalesced_and_the_last_change_is_never_lost():
    limits = SubscriptionLimits(coalesce_s=0.5)
    async with serving(limits=limits) as (client, server, kernel, updates):
        await subscribe(client, README)
        for _ in range(10):
            await announce(kernel.capsules["docs"], README)
        await until(lambda: len(updates) == 1)  # the first at once
        await anyio.sleep(1.0)
        assert updates == [README, README]  # the other nine: one, at the end of the window
        assert server.subscriptions.sent == 2


async def test_a_uri_the_principal_cannot_read_is_not_subscribable_and_the_cap_holds():
    async with serving(limits=SubscriptionLimits(subscriptions_per_principal=2)) as (client, server, _, _):
        with pytest.raises(MCPError) as caught:
            await subscribe(client, "astrid://docs/secret")
        assert caught.value.code == -32002  # as a read of it would say: not found
        await subscribe(client, README)
        await subscribe(client, README)  # the same URI again: still one
        await subscribe(client, GUIDE)
        with pytest.raises(MCPError) as caught:
            await subscribe(client, "astrid://other/x")
        assert caught.value.code == -32000 and "cap" in caught.value.message
        assert server.subscriptions.count("alice") == 2


async def test_an_update_for_another_principal_never_reaches_this_one():
    async with serving() as (client, _, kernel, updates):
        await subscribe(client, README)
        await client.list_resources()
        # bob's update of the same URI (bob has a snapshot once his set was listed)
        await anyio.to_thread.run_sync(lambda: kernel.capsules["docs"].announce(README, "bob"))
        await anyio.sleep(0.5)
        assert updates == []
        await announce(kernel.capsules["docs"], README)
        await until(lambda: updates == [README])


async def test_a_kept_read_is_dropped_before_the_update_goes_out():
    async with serving() as (client, server, kernel, updates):
        docs_capsule = kernel.capsules["docs"]
        await client.list_resources()
        await subscribe(client, GUIDE)
        assert (await client.read_resource(GUIDE)).contents[0].text == "guide"
        docs_capsule.contents["alice"][GUIDE] = [text(GUIDE, "guide, changed")]
        assert (await client.read_resource(GUIDE)).contents[0].text == "guide"  # kept
        await announce(docs_capsule, GUIDE)
        await until(lambda: updates == [GUIDE])
        assert (await client.read_resource(GUIDE)).contents[0].text == "guide, changed"


async def test_a_subscription_reads_a_uri_nobody_read_once_before_its_answer_on_both_eras():
    async with serving() as (client, server, kernel, _):
        docs_capsule = kernel.capsules["docs"]
        await subscribe(client, README)  # answered once the host's read of it is done
        assert docs_capsule.read_uris == [README]
        await unsubscribe(client, README)
        await subscribe(client, README)  # its owner answered a read of it already: no second one
        assert (await client.read_resource(GUIDE)).contents[0].text == "guide"
        await subscribe(client, GUIDE)  # read by the client first: none either
        assert docs_capsule.read_uris == [README, GUIDE]
    async with serving(mode="2026-07-28") as (client, _, kernel, _):
        with anyio.fail_after(10):
            async with client.listen(resource_subscriptions=[README, "astrid://docs/page/intro"]):
                assert sorted(kernel.capsules["docs"].read_uris) == ["astrid://docs/page/intro", README]


async def test_a_2026_07_28_listen_stream_hears_its_resource_subscriptions_only():
    async with serving(mode="2026-07-28") as (client, server, kernel, _):
        with anyio.fail_after(10):
            await client.list_resources()
            async with client.listen(resource_subscriptions=[README]) as subscription:
                assert subscription.honored.resource_subscriptions == [README]
                await announce(kernel.capsules["docs"], GUIDE)  # not asked for
                await announce(kernel.capsules["docs"], README)
                async for event in subscription:
                    assert type(event).__name__ == "ResourceUpdated" and event.uri == README
                    break
            assert server.subscriptions.count("alice") == 1
        await until(lambda: server.subscriptions.count("alice") == 0)  # they end with the stream


async def test_a_2026_07_28_listen_stream_for_an_unreadable_uri_is_refused_before_its_ack():
    async with serving(mode="2026-07-28") as (client, server, _, _):
        with anyio.fail_after(10), pytest.raises(MCPError) as caught:
            async with client.listen(resource_subscriptions=[README, "astrid://docs/secret"]):
                pass
        assert caught.value.error.code == -32602  # 2026-07-28's "resource not found" (invalid params)
        assert server.subscriptions.count("alice") == 0


async def test_a_rebuilt_or_removed_owner_updates_its_subscribed_uris():
    async with serving() as (client, server, kernel, updates):
        await client.list_resources()
        await server.watching.wait()
        await subscribe(client, README)
        await subscribe(client, "astrid://other/x")

        def rebuild_docs() -> None:
            kernel.remove("docs")
            kernel.add(docs(kernel.bus, source_id="src-docs-rebuilt"))
            kernel.reload()

        await anyio.to_thread.run_sync(rebuild_docs)
        await until(lambda: updates == [README])  # the other capsule's URI did not move
        # the rebuilt owner never served README to alice: the host reads it once for her, so the
        # files it depends on are watched again (docs/contract/subscriptions.md §11.2)
        await until(lambda: kernel.capsules["docs"].read_uris == [README])
        await anyio.to_thread.run_sync(lambda: (kernel.remove("other"), kernel.reload()))
        await until(lambda: updates == [README, "astrid://other/x"])
        await anyio.sleep(0.3)
        assert updates == [README, "astrid://other/x"]
