"""The host ABI from a real componentize-py guest (--stub-wasi)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from astrid.host.build import build_capsule
from astrid.host.bus import Principal

from .conftest import client_for

PYPROBE = Path(__file__).resolve().parents[2] / "fixtures" / "pyprobe"
ALICE = Principal.verified("alice")


def build_pyprobe(folder: Path) -> Path:
    """A clean copy of the fixture, built through the project's builder (content-hash cached)."""
    shutil.copytree(PYPROBE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.wasm"))
    build_capsule(folder)
    return folder


@pytest.fixture(scope="module")
def pyprobe_kernel(tmp_path_factory, component_cache_dir):
    from astrid.host.kernel.kernel import Kernel, KernelConfig

    folder = build_pyprobe(tmp_path_factory.mktemp("py") / "pyprobe")
    kernel = Kernel(KernelConfig(capsule_paths=[folder], cache_dir=component_cache_dir))
    kernel.start()
    yield kernel
    kernel.close()


def call(kernel, action: str, principal: Principal = ALICE, payload: str = "{}"):
    client = client_for(kernel)
    with kernel.bus.subscribe(client, f"test.pyprobe.{action}") as replies:
        assert kernel.bus.publish(client, f"probe.{action}", payload, principal).wait(30)
        reply = replies.recv(5)
    assert reply is not None, f"no reply to {action}: {kernel.sandboxes.health('pyprobe')}"
    return reply


def test_python_capsule_reads_get_caller_and_replies_with_the_right_envelope(pyprobe_kernel) -> None:
    [capsule] = pyprobe_kernel.loaded()
    reply = call(pyprobe_kernel, "whoami", payload='{"x": 1}')
    body = json.loads(reply.payload)
    assert body["principal"] == "alice" and body["attribution"] == "verified"
    assert body["request"] == {"x": 1}
    assert body["source_id"].startswith("test-client-")
    assert reply.source_id == capsule.source_id and reply.principal == ALICE


def test_hook_payload_bytes_arrive_intact(pyprobe_kernel) -> None:
    # list<u8> is lowered by the fast path in one pass: every byte must survive.
    request = {"text": "é✓ \u0000 \x7f" + "".join(chr(n) for n in range(32, 0x250)), "big": "y" * 70_000}
    body = json.loads(call(pyprobe_kernel, "whoami", payload=json.dumps(request, ensure_ascii=False)).payload)
    assert body["request"] == request


def test_strings_the_host_lowers_arrive_intact(pyprobe_kernel) -> None:
    # The fast path lowers each string in one C call: get-caller's record (its field names and
    # values) must reach the guest unchanged, multi-byte characters and long values included.
    name = "zoë ✓ " + "n" * 300
    body = json.loads(call(pyprobe_kernel, "whoami", Principal.verified(name)).payload)
    assert (body["principal"], body["attribution"]) == (name, "verified")


def test_claimed_principal_is_visible_as_claimed(pyprobe_kernel) -> None:
    body = json.loads(call(pyprobe_kernel, "whoami", Principal.claimed("mallory")).payload)
    assert (body["principal"], body["attribution"]) == ("mallory", "claimed")


def test_subscription_poll_and_recv_timeout(pyprobe_kernel) -> None:
    body = json.loads(call(pyprobe_kernel, "roundtrip").payload)
    assert body == {"topics": ["test.loop.one", "test.loop.two"], "principals": ["verified"] * 2, "recv": "Timeout"}
    assert pyprobe_kernel.bus._subscriptions == [] or all(
        s.owner.name != "pyprobe" for s in pyprobe_kernel.bus._subscriptions
    )  # leaving `with` dropped the handle


def test_acl_denials_are_capability_denied(pyprobe_kernel) -> None:
    body = json.loads(call(pyprobe_kernel, "denied").payload)
    assert body == {"errors": ["CapabilityDenied", "CapabilityDenied"]}


def test_config_and_clock(pyprobe_kernel) -> None:
    body = json.loads(call(pyprobe_kernel, "config").payload)
    assert body == {"greeting": "hello", "missing": "err", "clock": True}


def test_bad_publishes_are_refused_with_error_codes_and_the_capsule_keeps_running(pyprobe_kernel) -> None:
    body = json.loads(call(pyprobe_kernel, "abuse").payload)
    assert body == {
        "oversized": "InvalidInput",
        "nonjson": "InvalidInput",
        "deep": "InvalidInput",
        "badtopic": "InvalidInput",
        "wildpublish": "InvalidInput",
        "frontdoor": "CapabilityDenied",  # granted by the manifest, reserved by the host
    }
    assert json.loads(call(pyprobe_kernel, "whoami").payload)["principal"] == "alice"


def test_a_publish_flood_is_rate_limited_per_call(pyprobe_kernel) -> None:
    client = client_for(pyprobe_kernel)
    with pyprobe_kernel.bus.subscribe(client, "test.flood") as flood:
        assert pyprobe_kernel.bus.publish(client, "probe.flood", "{}", ALICE).wait(30)
        delivered = flood.poll(10_000)
    from astrid.host.kernel.abi import PUBLISHES_PER_CALL

    assert len(delivered) == PUBLISHES_PER_CALL
    assert json.loads(call(pyprobe_kernel, "whoami").payload)["principal"] == "alice"
