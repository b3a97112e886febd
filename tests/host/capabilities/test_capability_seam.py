"""A new capability is one plug-in class and its WIT package (issue 35): this test-only `echo`
capability, registered for the test, is asked by a manifest, granted and revoked by the operator,
recorded in an artifact's metadata, accepted by the loader and linked by the kernel, with no other
change anywhere. Unregistered, every one of those refuses it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from astrid.host.bus import Principal
from astrid.host.capabilities.asks import Asks
from astrid.host.capabilities.capability import Call, Calls, HostSettings, Served, Switch
from astrid.host.capabilities.errors import CapabilityError
from astrid.host.capabilities.grants import GrantStore, usable
from astrid.host.capabilities.registry import registered
from astrid.host.capsule.manifest import parse_manifest
from astrid.host.errors import CapsuleLoadError, GrantError, ManifestError
from astrid.host.identity.artifact import Metadata
from astrid.host.kernel.kernel import Kernel, KernelConfig
from astrid.wit import WIT_DIR
from tests.host.kernel.conftest import client_for
from tests.support.paths import FIXTURES
from tests.support.wat import build_wat

ECHO_FIXTURE = FIXTURES / "wat" / "echo"
ALICE = Principal.verified("alice")
MANIFEST = """\
[package]
name = "shouter"
version = "0.1.0"

[[component]]
id = "shouter"
file = "shouter.wasm"

[subscribe]
"test.go" = { wit = "opaque", handler = "go" }

[publish]
"test.shout" = "opaque"
"test.refused" = "opaque"

[capabilities]
echo = true
"""


class Echo(Switch):
    """Asked `echo = true`, granted `echo`: `shout(text)` answers the text in capitals."""

    name = "echo"
    interface = "astrid:echo/host@1.0.0"
    cases_with_text = frozenset({"capability-denied", "unknown"})
    cases_without_text: frozenset[str] = frozenset()

    def serve(self, settings: HostSettings) -> Served:
        return ServedEcho()


class ServedEcho(Served):
    def link(self, root: Any, calls: Calls) -> None:
        with root.add_instance(ECHO.interface) as echo:
            echo.add_func("shout", calls.func(ECHO, "shout", shout))


def shout(call: Call, text: str) -> str:
    """The payload it was given (JSON text), in capitals, and for whom: what the capsule publishes."""
    if not call.granted:
        raise CapabilityError("capability-denied", f"no echo grant for {call.capsule}")
    return json.dumps({"shout": json.loads(text).upper(), "for": call.principal})


ECHO = Echo()


@pytest.fixture
def echo() -> Iterator[Echo]:
    with registered(ECHO):
        yield ECHO


@pytest.fixture(scope="module")
def shouter_wasm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The WAT capsule, built against the capsule world plus the echo interface."""
    wit = tmp_path_factory.mktemp("wit") / "wit"
    shutil.copytree(WIT_DIR, wit, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    shutil.copy(ECHO_FIXTURE / "echo-world.wit", wit / "echo-world.wit")
    (wit / "deps" / "astrid-echo").mkdir()
    shutil.copy(ECHO_FIXTURE / "echo.wit", wit / "deps" / "astrid-echo" / "echo.wit")
    return build_wat(ECHO_FIXTURE / "shouter.wat", wit.parent / "shouter.wasm", wit=wit, world="echo-capsule")


@pytest.fixture
def shouter(tmp_path: Path, shouter_wasm: Path) -> Path:
    folder = tmp_path / "capsules" / "shouter"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(MANIFEST)
    shutil.copy(shouter_wasm, folder / "shouter.wasm")
    return folder


@pytest.fixture
def start_kernel(component_cache_dir: Path, tmp_path: Path) -> Iterator[Callable[[Path], Kernel]]:
    kernels: list[Kernel] = []

    def start(folder: Path) -> Kernel:
        config = KernelConfig(
            capsule_paths=[folder], cache_dir=component_cache_dir, grants_file=tmp_path / "config" / "grants.json"
        )
        kernel = Kernel(config)
        kernels.append(kernel)
        kernel.start()
        return kernel

    yield start
    for kernel in kernels:
        kernel.close()


def shouted(kernel: Kernel, text: str) -> tuple[str, str]:
    """(topic, payload) of what the capsule published when asked to shout `text`, as alice."""
    client = client_for(kernel)
    with kernel.bus.subscribe(client, "test.shout") as shouts, kernel.bus.subscribe(client, "test.refused") as refusals:
        delivery = kernel.bus.publish(client, "test.go", json.dumps(text), ALICE)
        assert delivery.wait(10)
        heard = shouts.poll() + refusals.poll()
    assert len(heard) == 1, f"the capsule published {heard}"
    return heard[0].topic, heard[0].payload


def test_a_registered_capability_is_asked_granted_recorded_linked_and_served(echo, shouter, start_kernel, tmp_path):
    manifest = parse_manifest(
        {
            "package": {"name": "shouter", "version": "0.1.0"},
            "component": [{"id": "shouter", "file": "shouter.wasm"}],
            "capabilities": {"echo": True},
        }
    )
    assert manifest.capabilities.of(echo) is True and manifest.capabilities.specs() == ["echo"]
    assert Metadata.describe(manifest, b"", b"").as_json()["capabilities"]["echo"] is True  # what a signature covers

    grants = GrantStore(tmp_path / "config" / "grants.json")
    assert grants.grant("shouter", "echo") == "echo"
    assert usable(grants.for_capsule("shouter"), Asks.parse({"echo": True})).specs() == ["echo"]

    kernel = start_kernel(shouter.parent)  # the loader accepts its import; the kernel links it
    assert [capsule.name for capsule in kernel.loaded()] == ["shouter"]
    topic, payload = shouted(kernel, "hello")
    assert (topic, json.loads(payload)) == ("test.shout", {"shout": "HELLO", "for": "alice"})

    assert grants.revoke("shouter", "echo")
    assert shouted(kernel, "hello") == ("test.refused", "0")  # capability-denied, from the next call


def test_an_unregistered_capability_is_refused_everywhere(shouter, start_kernel, tmp_path):
    with pytest.raises(ManifestError, match="echo: no such capability"):
        parse_manifest(
            {
                "package": {"name": "shouter", "version": "0.1.0"},
                "component": [{"id": "shouter", "file": "shouter.wasm"}],
                "capabilities": {"echo": True},
            }
        )
    with pytest.raises(GrantError, match="grant 'echo'"):
        GrantStore(tmp_path / "grants.json").grant("shouter", "echo")
    (shouter / "Capsule.toml").write_text(MANIFEST.replace("[capabilities]\necho = true\n", ""))
    kernel = start_kernel(shouter.parent)
    assert kernel.loaded() == []  # it imports an interface the host does not provide
    with pytest.raises(CapsuleLoadError, match="astrid:echo/host@1.0.0, which the host does not provide"):
        from astrid.host.kernel.compile_cache import CompileCache
        from astrid.host.kernel.loader import load_capsule

        load_capsule(shouter, CompileCache())
