"""Dispatch to WAT capsules: get-caller, replies, envelopes, ACLs, isolation."""

from __future__ import annotations

import json
import time

from astrid.host.bus import Principal
from astrid.host.capsule.provenance import source_id_for

from .conftest import client_for as client_of
from .conftest import collect

ALICE = Principal.verified("alice")
BOB = Principal.verified("bob")


def test_wat_capsule_reads_get_caller_and_its_reply_has_the_right_envelope(make_probe, kernel_factory) -> None:
    folder = make_probe()
    kernel = kernel_factory([folder])
    [capsule] = kernel.loaded()
    client = client_of(kernel)
    with kernel.bus.subscribe(client, "test.whoami") as replies:
        delivery = kernel.bus.publish(client, "probe.whoami", "{}", ALICE)
        assert delivery.wait(5) and delivery.receivers == 1
        [reply] = collect(replies, 1)
    assert json.loads(reply.payload) == "alice"
    assert reply.source_id == capsule.source_id == source_id_for("probe", capsule.wasm_sha256)
    assert reply.principal == ALICE  # the reply inherits the request's principal
    assert reply.timestamp.endswith("Z")


def test_each_principal_gets_its_own_instance_and_memory(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()])
    client = client_of(kernel)
    with kernel.bus.subscribe(client, "test.recall") as recalls:
        assert kernel.bus.publish(client, "probe.keep", '"alice-secret"', ALICE).wait(5)
        assert kernel.bus.publish(client, "probe.recall", "{}", BOB).wait(5)
        assert kernel.bus.publish(client, "probe.recall", "{}", ALICE).wait(5)
        bob_reply, alice_reply = collect(recalls, 2)
    assert (bob_reply.principal, json.loads(bob_reply.payload)) == (BOB, None)
    assert (alice_reply.principal, json.loads(alice_reply.payload)) == (ALICE, "alice-secret")
    assert kernel.sandboxes.live_instances() == 2


def test_replies_on_a_shared_topic_carry_each_principal(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()])
    client = client_of(kernel)
    with kernel.bus.subscribe(client, "test.whoami", principal_scope=BOB) as bob_view:
        kernel.bus.publish(client, "probe.whoami", "{}", ALICE).wait(5)
        kernel.bus.publish(client, "probe.whoami", "{}", BOB).wait(5)
        seen = collect(bob_view, 2, timeout_s=0.3)
    assert [json.loads(m.payload) for m in seen] == ["bob"]


def test_publish_outside_the_acl_is_capability_denied_and_the_capsule_keeps_running(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()])
    client = client_of(kernel)
    with kernel.bus.subscribe(client, "test.result") as results, kernel.bus.subscribe(client, "test.whoami") as who:
        kernel.bus.publish(client, "probe.denied", "{}", ALICE).wait(5)
        kernel.bus.publish(client, "probe.nonjson", "{}", ALICE).wait(5)
        kernel.bus.publish(client, "probe.whoami", "{}", ALICE).wait(5)
        denied, nonjson = collect(results, 2)
        assert json.loads(who.recv(5).payload) == "alice"
    assert json.loads(denied.payload) == 0  # error-code case 0: capability-denied
    assert json.loads(nonjson.payload) == 1  # case 1: invalid-input


def test_system_messages_run_in_their_own_instance(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()])
    client = client_of(kernel)
    with kernel.bus.subscribe(client, "test.whoami") as who:
        kernel.bus.publish(client, "probe.whoami", "{}", Principal.system()).wait(5)
        reply = who.recv(5)
    assert json.loads(reply.payload) is None and reply.principal == Principal.system()


def test_the_dispatcher_reports_when_every_handler_finished(make_probe, kernel_factory, tmp_path) -> None:
    parent = tmp_path / "many"
    for n in range(3):
        make_probe(f"probe{n}", parent=parent)
    kernel = kernel_factory([parent])
    client = client_of(kernel)
    started = time.monotonic()
    delivery = kernel.bus.publish(client, "probe.whoami", "{}", ALICE)
    assert delivery.wait(5)
    assert delivery.receivers == 3 and delivery.finished
    assert time.monotonic() - started < 5
    nobody = kernel.bus.publish(client, "test.nobody", "{}", ALICE)
    assert nobody.receivers == 0 and nobody.wait(0)


def test_host_reserved_topics_stay_closed_to_capsules_whatever_the_manifest(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe(publish=("astrid.*", "test.*"))])
    [capsule] = kernel.loaded()
    participant = next(slot.participant for slot in kernel.capsules.values() if slot.capsule is capsule)
    assert participant.may_publish("test.anything")
    assert participant.may_publish("astrid.v1.request.capsules")
    for topic in ("astrid.v1.request.mcp.resource.read", "astrid.v1.response.abc", "astrid.v1.capsules_loaded"):
        assert not participant.may_publish(topic), topic
    wide = type(participant)(participant.source_id, participant.name, subscribe_acl=("astrid.*", "a.*"))
    assert not wide.may_subscribe("astrid.*")
    assert not wide.may_subscribe("astrid.v1.response.*")
    assert not wide.may_subscribe("astrid.v1.response.r1")
    assert not wide.may_subscribe("astrid.v1.request.*")
    assert not wide.may_subscribe("astrid.v1.request.mcp.resource.read")
    assert wide.may_subscribe("astrid.v1.response.capsules.*")
    assert wide.may_subscribe("astrid.v1.capsules_loaded")
    assert wide.may_subscribe("a.b")


def test_declared_uri_families_skip_reads_a_capsule_cannot_own(make_probe, kernel_factory, tmp_path) -> None:
    parent = tmp_path / "caps"
    hinted = make_probe("hinted", parent=parent)
    manifest = (hinted / "Capsule.toml").read_text()
    manifest = manifest.replace(
        '"probe.whoami"', '"resource.v1.request.read" = { wit = "x", handler = "whoami" }\n"probe.whoami"'
    )
    (hinted / "Capsule.toml").write_text(manifest + '\n[resources]\nfamilies = ["astrid://docs/"]\n')
    plain = make_probe("plain", parent=parent)
    manifest = (plain / "Capsule.toml").read_text()
    (plain / "Capsule.toml").write_text(
        manifest.replace(
            '"probe.whoami"', '"resource.v1.request.read" = { wit = "x", handler = "whoami" }\n"probe.whoami"'
        )
    )
    kernel = kernel_factory([parent])
    client = kernel.attach_host("c", publish=["resource.*"])
    read = '{{"uri": "{}", "correlation_id": "c1"}}'
    assert kernel.bus.publish(client, "resource.v1.request.read", read.format("astrid://docs/a"), ALICE).receivers == 2
    assert kernel.bus.publish(client, "resource.v1.request.read", read.format("astrid://other/a"), ALICE).receivers == 1
    assert kernel.bus.publish(client, "resource.v1.request.read", "[]", ALICE).receivers == 2
