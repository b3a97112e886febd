"""Many principals: the sandbox pool's cap, its least-recently-used eviction
over every (capsule, principal) pair, and what eviction must never do (close
a sandbox mid-call, forget a quarantine)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from astrid.host.bus import Principal
from astrid.host.kernel import sandbox
from astrid.host.kernel.kernel import Kernel, KernelConfig
from astrid.host.limits import Limits

from .conftest import client_for

FAST = Limits(call_wall_time_s=0.3, capsule_memory_bytes=4 << 20)
SPIN = Limits(call_wall_time_s=1.5, capsule_memory_bytes=4 << 20)  # long enough to act while it spins


def who(name: str) -> Principal:
    return Principal.verified(name)


@pytest.fixture
def capped(component_cache_dir: Path) -> Iterator[Callable[..., Kernel]]:
    kernels: list[Kernel] = []

    def make(paths: list[Path], max_instances: int, limits: Limits | None = None) -> Kernel:
        config = KernelConfig(capsule_paths=paths, cache_dir=component_cache_dir, max_instances=max_instances)
        if limits is not None:
            config.limits = limits
        kernel = Kernel(config)
        kernel.start()
        kernels.append(kernel)
        return kernel

    yield make
    for kernel in kernels:
        kernel.close()


def slots(kernel: Kernel) -> dict[str, tuple]:
    return {slot.capsule.name: (slot.capsule, slot.participant) for slot in kernel.capsules.values()}


def reused(kernel: Kernel, *sandboxes: tuple[str, str]) -> bool:
    """These (capsule name, principal id) sandboxes are live: using each again makes
    no new one. Used least recently used first, so the pool's order stays as it was."""
    caps = slots(kernel)
    created = kernel.sandboxes.stats.instances_created
    for name, principal in sandboxes:
        capsule, participant = caps[name]
        assert kernel.sandboxes.prewarm(capsule, participant, who(principal))
    return kernel.sandboxes.stats.instances_created == created


def live(kernel: Kernel, *sandboxes: tuple[str, str]) -> bool:
    """The live sandboxes are these and no others."""
    return kernel.sandboxes.live_instances() == len(sandboxes) and reused(kernel, *sandboxes)


def whoami(kernel: Kernel, principal: Principal) -> str | None:
    client = client_for(kernel)
    with kernel.bus.subscribe(client, "test.whoami") as replies:
        assert kernel.bus.publish(client, "probe.whoami", "{}", principal).wait(5)
        reply = replies.recv(2)
    return None if reply is None else json.loads(reply.payload)


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_the_cap_must_be_positive(capped) -> None:
    with pytest.raises(ValueError):
        capped([], max_instances=0)


def test_eviction_is_least_recently_used_over_every_capsule_and_principal(make_probe, capped, tmp_path) -> None:
    parent = tmp_path / "caps"
    make_probe("x", parent=parent)
    make_probe("y", parent=parent)
    kernel = capped([parent], max_instances=3)
    caps = slots(kernel)
    for name, principal in (("x", "a"), ("y", "a"), ("x", "b")):
        assert kernel.sandboxes.prewarm(*caps[name], who(principal))
    assert kernel.sandboxes.prewarm(*caps["x"], who("a"))  # used again: now the most recent
    assert kernel.sandboxes.prewarm(*caps["y"], who("b"))
    assert live(kernel, ("x", "b"), ("x", "a"), ("y", "b"))  # (y, a) was the least recently used
    assert kernel.sandboxes.stats.instances_evicted == 1
    assert kernel.sandboxes.prewarm(*caps["x"], who("c"))
    assert live(kernel, ("x", "a"), ("y", "b"), ("x", "c"))  # (x, b) was next


def test_a_sandbox_mid_call_is_never_evicted(make_probe, capped) -> None:
    kernel = capped([make_probe()], max_instances=2, limits=SPIN)
    capsule, participant = slots(kernel)["probe"]
    client = client_for(kernel)
    spinning = threading.Thread(
        target=lambda: kernel.bus.publish(client, "probe.spin", "{}", who("a")).wait(5), daemon=True
    )
    spinning.start()
    assert wait_for(lambda: kernel.sandboxes.live_instances() == 1)  # a's, the only caller
    (instance_a,) = list(kernel.sandboxes._instances.values())
    assert wait_for(instance_a.lock.locked)  # a is inside its call (it spins until its 1.5 s deadline)
    assert kernel.sandboxes.prewarm(capsule, participant, who("b"))
    assert kernel.sandboxes.prewarm(capsule, participant, who("c"))  # a is the LRU, but busy: b goes
    # b went: two live, c one of them, and a still open (its call holds its lock: not touched here)
    assert kernel.sandboxes.live_instances() == 2 and reused(kernel, ("probe", "c"))
    assert not instance_a.dead
    spinning.join(5)
    assert kernel.sandboxes.stats.instances_evicted == 1
    assert kernel.sandboxes.health("probe").timeouts == 1  # a's call ran to its own end: a timeout


def test_a_full_pool_of_busy_sandboxes_makes_the_next_caller_wait(make_probe, capped) -> None:
    kernel = capped([make_probe()], max_instances=1, limits=FAST)
    capsule, participant = slots(kernel)["probe"]
    client = client_for(kernel)
    spinning = threading.Thread(
        target=lambda: kernel.bus.publish(client, "probe.spin", "{}", who("a")).wait(5), daemon=True
    )
    spinning.start()
    assert wait_for(lambda: any(i.lock.locked() for i in list(kernel.sandboxes._instances.values())))  # a mid-call
    assert kernel.sandboxes.prewarm(capsule, participant, who("b"))  # waits for a's call to end
    spinning.join(5)
    assert kernel.sandboxes.stats.slot_waits == 1
    assert live(kernel, ("probe", "b"))
    assert whoami(kernel, who("b")) == "b"


def test_live_instances_never_exceed_the_cap(make_probe, capped, tmp_path) -> None:
    parent = tmp_path / "caps"
    make_probe("x", parent=parent)
    make_probe("y", parent=parent)
    kernel = capped([parent], max_instances=3)
    client = client_for(kernel)
    seen: list[int] = []

    def call(n: int) -> bool:
        delivered = kernel.bus.publish(client, "probe.whoami", "{}", who(f"p{n % 10}")).wait(10)
        seen.append(kernel.sandboxes.live_instances())
        return delivered

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(call, range(200)))
    assert max(seen) <= 3
    assert kernel.sandboxes.live_instances() <= 3
    assert kernel.sandboxes.stats.instances_evicted > 0
    assert kernel.sandboxes.stats.instances_discarded == 0


def test_an_evicted_principal_next_call_works_on_a_fresh_sandbox(make_probe, capped) -> None:
    kernel = capped([make_probe()], max_instances=1)
    client = client_for(kernel)
    assert kernel.bus.publish(client, "probe.keep", '"state"', who("alice")).wait(5)
    assert whoami(kernel, who("bob")) == "bob"  # evicts alice's sandbox
    assert live(kernel, ("probe", "bob"))
    created = kernel.sandboxes.stats.instances_created
    assert whoami(kernel, who("alice")) == "alice"
    assert kernel.sandboxes.stats.instances_created == created + 1
    with kernel.bus.subscribe(client, "test.recall") as recall:
        assert kernel.bus.publish(client, "probe.recall", "{}", who("alice")).wait(5)
        assert json.loads(recall.recv(2).payload) is None  # a fresh instance: its memory is new


def test_strikes_and_quarantine_survive_eviction(make_probe, capped, monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "KERNEL_TUNING", replace(sandbox.KERNEL_TUNING, quarantine_after_failures=3))
    kernel = capped([make_probe()], max_instances=1)
    capsule, participant = slots(kernel)["probe"]
    client = client_for(kernel)
    for _ in range(2):
        assert kernel.bus.publish(client, "probe.trap", "{}", who("mallory")).wait(5)
    assert kernel.sandboxes.prewarm(capsule, participant, who("mallory"))
    assert whoami(kernel, who("bob")) == "bob"  # evicts mallory's sandbox
    assert kernel.sandboxes.stats.instances_evicted == 1
    assert kernel.bus.publish(client, "probe.trap", "{}", who("mallory")).wait(5)  # the third in a row
    assert kernel.sandboxes.health("probe").quarantined_until > time.monotonic()
    assert whoami(kernel, who("bob")) == "bob"  # evicts whatever is left of mallory's
    created = kernel.sandboxes.stats.instances_created
    assert whoami(kernel, who("mallory")) is None  # still quarantined: not even instantiated
    assert kernel.sandboxes.stats.instances_created == created
    assert whoami(kernel, who("bob")) == "bob"  # per principal: bob is not benched


def test_a_clean_record_keeps_no_strikes(make_probe, capped) -> None:
    kernel = capped([make_probe()], max_instances=4)
    for n in range(10):
        assert whoami(kernel, who(f"p{n}")) == f"p{n}"
    assert kernel.sandboxes._strikes == {}  # nothing kept per principal that never failed


def test_the_runtime_config_sets_the_cap(component_cache_dir) -> None:
    from astrid.host.runtime import RuntimeConfig, _real_kernel

    kernel = _real_kernel(
        RuntimeConfig(capsule_paths=[], principal=None, cache_dir=component_cache_dir, max_instances=7)
    )
    try:
        assert isinstance(kernel, Kernel)
        assert kernel.sandboxes.max_instances == 7
    finally:
        kernel.close()
