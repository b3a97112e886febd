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
