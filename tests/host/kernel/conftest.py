"""WAT capsules built on the fly (milliseconds) for the kernel tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from astrid.host.bus import Message, Participant, Principal, Subscription
from astrid.host.kernel.kernel import Kernel, KernelConfig
from astrid.host.limits import Limits
from tests.support.paths import FIXTURES
from tests.support.wat import build_wat

WAT = FIXTURES / "wat"
PROBE_HANDLERS = ("whoami", "echo", "keep", "recall", "denied", "nonjson", "spin", "grow", "trap")


def probe_manifest(name: str, publish: tuple[str, ...] = ("test.*",)) -> str:
    lines = [
        "[package]",
        f'name = "{name}"',
        'version = "0.1.0"',
        "",
        "[[component]]",
        f'id = "{name}"',
        'file = "probe.wasm"',
        "",
        "[subscribe]",
    ]
    lines += [f'"probe.{h}" = {{ wit = "opaque", handler = "{h}" }}' for h in PROBE_HANDLERS]
    lines += ["", "[publish]"] + [f'"{p}" = "opaque"' for p in publish]
    lines += ["", "[config]", 'greeting = "hi"']
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def probe_wasm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wat(WAT / "probe.wat", tmp_path_factory.mktemp("wat") / "probe.wasm")


@pytest.fixture
def make_probe(tmp_path: Path, probe_wasm: Path) -> Callable[..., Path]:
    def make(name: str = "probe", parent: Path | None = None, **kwargs: object) -> Path:
        folder = (parent or tmp_path) / name
        folder.mkdir(parents=True)
        (folder / "Capsule.toml").write_text(probe_manifest(name, **kwargs))  # type: ignore[arg-type]
        (folder / "probe.wasm").write_bytes(probe_wasm.read_bytes())
        return folder

    return make


@pytest.fixture
def kernel_factory(component_cache_dir: Path) -> Iterator[Callable[..., Kernel]]:
    kernels: list[Kernel] = []

    def make(paths: list[Path], limits: Limits | None = None) -> Kernel:
        config = KernelConfig(capsule_paths=paths, cache_dir=component_cache_dir)
        if limits is not None:
            config.limits = limits
        kernel = Kernel(config)
        kernel.start()
        kernels.append(kernel)
        return kernel

    yield make
    for kernel in kernels:
        kernel.close()


def client_for(kernel: Kernel) -> Participant:
    return kernel.attach_host("test-client", publish=["probe.*", "test.*"], subscribe=["test.*", "astrid.*"])


def answers(kernel: Kernel) -> list[str]:
    """The source-ids of the probes that answer one `probe.whoami` (one per loaded probe)."""
    client = client_for(kernel)
    with kernel.bus.subscribe(client, "test.whoami") as who:
        delivery = kernel.bus.publish(client, "probe.whoami", "{}", Principal.verified("alice"))
        delivery.wait(5)
        messages = [who.recv(2) for _ in range(delivery.receivers)]
    assert all(messages), "a receiver did not answer whoami"
    return [m.source_id for m in messages if m is not None]


def collect(subscription: Subscription, count: int, timeout_s: float = 5.0) -> list[Message]:
    messages: list[Message] = []
    while len(messages) < count:
        message = subscription.recv(timeout_s)
        if message is None:
            break
        messages.append(message)
    return messages
