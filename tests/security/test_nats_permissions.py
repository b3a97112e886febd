"""NATS subject permissions, enforced by a real nats-server: who may connect, and who may say what.

The server knows two roles (tests/support/nats.py, docs/nats.md): the MCP
server publishes resource requests and hears replies; a capsule host hears
requests and publishes replies. A client without credentials is refused; a
capsule host's credentials cannot publish a request (only the MCP server's
role may ask), and what the server drops never reaches the MCP process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrid.host.bus import Binding, Principal, host_participant
from astrid.host.bus.nats import NatsBus
from astrid.host.capabilities.kv_nats import NatsKvStore
from astrid.host.contract.topics import HOST_CLUSTER
from astrid.host.errors import BusError
from tests.support.nats import NatsServer, nats_server
from tests.support.processes import run_astrid

ALICE = Principal.verified("alice")
REQUESTS, REPLIES = "resource.v1.request.*", "resource.v1.response.*"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path, secured=True) as running:
        yield running


def joined(url: str, role: str) -> NatsBus:
    listen = (REPLIES,) if role == "mcp" else (REQUESTS,)
    return NatsBus(
        url, role=role, cluster=HOST_CLUSTER, shared=(REQUESTS, REPLIES), listen=listen, tracked=(REQUESTS,)
    ).connect()


def test_a_client_without_credentials_or_with_a_wrong_password_is_refused(server: NatsServer) -> None:
    with pytest.raises(BusError, match="cannot connect"):
        NatsBus(server.url(), role="mcp", cluster=HOST_CLUSTER).connect(timeout_s=2)
    wrong = f"nats://mcp:wrong@127.0.0.1:{server.port}"
    with pytest.raises(BusError, match="cannot connect") as caught:
        NatsBus(wrong, role="mcp", cluster=HOST_CLUSTER).connect(timeout_s=2)
    assert "wrong" not in str(caught.value)  # the password is never echoed


def test_a_capsule_host_cannot_ask_what_only_the_mcp_server_may(server: NatsServer) -> None:
    mcp = joined(server.url("mcp"), "mcp")
    rogue_host = joined(server.url("capsules"), "capsules")
    victim = joined(server.url("capsules"), "capsules")
    try:
        heard: list = []
        capsule = host_participant("capsule", "capsule-src", subscribe=[REQUESTS])
        victim.bind(Binding(capsule, "resource.v1.request.read", heard.append))
        # The rogue host's own bus lets it publish locally; the server drops it on the wire.
        rogue = host_participant("rogue", "rogue-src", publish=[REQUESTS])
        rogue_host.publish(rogue, "resource.v1.request.read", '{"uri": "astrid://probe/note"}', ALICE)
        time.sleep(1.0)
        assert heard == []
        # The MCP server's role may ask: the same request arrives.
        broker = host_participant("broker", "broker-src", publish=[REQUESTS])
        assert mcp.publish(broker, "resource.v1.request.read", '{"uri": "astrid://probe/note"}', ALICE).wait(5)
        assert [m.source_id for m in heard] == ["broker-src"]
    finally:
        for bus in (mcp, rogue_host, victim):
            bus.close()


MANIFEST = """
[package]
name = "narrow"
version = "0.1.0"

[[component]]
id = "narrow"
file = "narrow.wasm"

[publish]
"resource.v1.response.read.*" = "astrid-bus:resource@1.0.0"
"resource.v1.request.*" = "opaque"
"""


def test_a_host_may_publish_only_what_its_capsules_manifests_allow(tmp_path: Path) -> None:
    folder = tmp_path / "caps" / "narrow"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(MANIFEST)
    result = run_astrid("host", "nats-permissions", "--capsules", str(folder), "--user", "narrow-host", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    entry = json.loads(result.stdout)
    assert entry["permissions"]["publish"] == ["astrid.v1.host.>", "resource.v1.response.read.>"]  # no requests
    entry["password"] = "narrow-secret"
    with nats_server(tmp_path, secured=True, extra_users=[entry]) as server:
        mcp = joined(server.url("mcp"), "mcp")
        narrow = joined(f"nats://narrow-host:narrow-secret@127.0.0.1:{server.port}", "capsules")
        try:
            broker = host_participant("broker", "broker-src", subscribe=[REPLIES])
            capsule = host_participant("capsule", "capsule-src", publish=[REPLIES, REQUESTS])
            with (
                mcp.subscribe(broker, "resource.v1.response.read.c1") as reads,
                mcp.subscribe(broker, "resource.v1.response.templates.c1") as templates,
            ):
                narrow.publish(capsule, "resource.v1.response.templates.c1", "{}", ALICE)  # not in its manifest
                narrow.publish(capsule, "resource.v1.response.read.c1", "{}", ALICE)  # allowed
                assert reads.recv(5) is not None
                assert templates.recv(1.0) is None  # the server dropped it
        finally:
            mcp.close()
            narrow.close()


KV_MANIFEST = """
[package]
name = "keeper"
version = "0.1.0"

[[component]]
id = "keeper"
file = "keeper.wasm"

[capabilities]
kv = true

[publish]
"resource.v1.response.read.*" = "astrid-bus:resource@1.0.0"
"""


def test_a_kv_host_gets_the_kv_buckets_jetstream_subjects_and_no_other(tmp_path: Path) -> None:
    folder = tmp_path / "caps" / "keeper"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(KV_MANIFEST)
    result = run_astrid("host", "nats-permissions", "--capsules", str(folder), "--user", "keeper-host", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    entry = json.loads(result.stdout)
    publish = entry["permissions"]["publish"]
    assert "$KV.astrid-kv.>" in publish and "resource.v1.response.read.>" in publish
    # Narrowed to the bucket's stream: no `$JS.API.>`, no other stream, no stream delete/purge/update.
    assert all(s.startswith(("$KV.astrid-kv.", "resource.", "astrid.")) or "KV_astrid-kv" in s for s in publish)
    assert not any(op in s for s in publish for op in ("STREAM.DELETE", "PURGE", "UPDATE", "$JS.API.>"))
    entry["password"] = "keeper-secret"
    with nats_server(tmp_path, secured=True, jetstream=True, extra_users=[entry]) as server:
        keeper = joined(f"nats://keeper-host:keeper-secret@127.0.0.1:{server.port}", "capsules")
        try:
            # Every kv call works with exactly these permissions (the bucket is created on first use).
            space = NatsKvStore(keeper).namespace("alice", "keeper")
            space.set("a", b"1")
            space.set("a", b"2")
            space.set("b", b"3")
            assert space.get("a") == b"2" and space.list_keys() == ["a", "b"]
            space.delete("b")
            assert space.list_keys() == ["a"]

            # What the list leaves out, the server refuses: deleting the bucket, making another stream.
            async def delete_bucket() -> object:
                return await keeper.jetstream().delete_stream("KV_astrid-kv")

            async def other_stream() -> object:
                return await keeper.jetstream().add_stream(name="OTHER", subjects=["other.>"])

            for refused in (delete_bucket, other_stream):
                with pytest.raises(Exception):  # noqa: B017 - a timeout or a permission error: either way, refused
                    keeper.call(refused(), 3)
            assert space.get("a") == b"2"  # the state is still there
        finally:
            keeper.close()
