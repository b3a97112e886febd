"""Bounding hostile guests: wall time, memory, traps, quarantine."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from astrid.host.bus import Principal
from astrid.host.kernel import sandbox
from astrid.host.limits import Limits

from .conftest import client_for

ALICE = Principal.verified("alice")
FAST = Limits(call_wall_time_s=0.3, capsule_memory_bytes=4 << 20)


def whoami_works(kernel, client) -> bool:
    with kernel.bus.subscribe(client, "test.whoami") as who:
        kernel.bus.publish(client, "probe.whoami", "{}", ALICE).wait(5)
        reply = who.recv(2)
    return reply is not None and json.loads(reply.payload) == "alice"


def test_infinite_loop_is_stopped_within_the_call_bound(make_probe, kernel_factory, tmp_path) -> None:
    parent = tmp_path / "caps"
    make_probe("looper", parent=parent)
    make_probe("bystander", parent=parent)
    kernel = kernel_factory([parent], limits=FAST)
    client = client_for(kernel)
    started = time.monotonic()
    delivery = kernel.bus.publish(client, "probe.spin", "{}", ALICE)
    assert delivery.wait(5)
    elapsed = time.monotonic() - started
    assert elapsed < FAST.call_wall_time_s + 1.0
    health = kernel.sandboxes.health("looper")
    assert health.timeouts == 1 and "timed out" in health.last_error
    assert whoami_works(kernel, client)  # both capsules, including the looper, answer the next call


def test_memory_bomb_is_stopped_by_the_memory_bound(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()], limits=FAST)
    client = client_for(kernel)
    assert kernel.bus.publish(client, "probe.grow", "{}", ALICE).wait(5)
    health = kernel.sandboxes.health("probe")
    assert health.failures == 1 and "unreachable" in health.last_error
    assert whoami_works(kernel, client)


def test_trap_discards_the_instance_and_the_next_call_gets_a_fresh_one(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()])
    client = client_for(kernel)
    kernel.bus.publish(client, "probe.keep", '"state"', ALICE).wait(5)
    kernel.bus.publish(client, "probe.trap", "{}", ALICE).wait(5)
    assert kernel.sandboxes.stats.instances_discarded == 1
    with kernel.bus.subscribe(client, "test.recall") as recall:
        kernel.bus.publish(client, "probe.recall", "{}", ALICE).wait(5)
        assert json.loads(recall.recv(2).payload) is None  # fresh memory


def test_a_capsule_that_keeps_failing_is_quarantined(make_probe, kernel_factory, monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "KERNEL_TUNING", replace(sandbox.KERNEL_TUNING, quarantine_after_failures=3))
    kernel = kernel_factory([make_probe()])
    client = client_for(kernel)
    for _ in range(3):
        kernel.bus.publish(client, "probe.trap", "{}", ALICE).wait(5)
    created = kernel.sandboxes.stats.instances_created
    kernel.bus.publish(client, "probe.whoami", "{}", ALICE).wait(5)
    assert kernel.sandboxes.stats.instances_created == created  # not even instantiated
    assert kernel.sandboxes.health("probe").quarantined_until > time.monotonic()


def test_instances_are_capped_and_evicted_lru(make_probe, component_cache_dir) -> None:
    from astrid.host.kernel.kernel import Kernel, KernelConfig

    kernel = Kernel(KernelConfig(capsule_paths=[make_probe()], cache_dir=component_cache_dir, max_instances=2))
    try:
        kernel.start()
        client = client_for(kernel)
        for name in ("a", "b", "c"):
            kernel.bus.publish(client, "probe.whoami", "{}", Principal.verified(name)).wait(5)
        assert kernel.sandboxes.live_instances() == 2
        assert kernel.sandboxes.stats.instances_evicted == 1
    finally:
        kernel.close()


def test_concurrent_calls_and_traps_on_one_instance_never_share_a_store(
    make_probe, kernel_factory, monkeypatch
) -> None:
    # Two threads inside one Store abort the whole process, so this test
    # "fails" by killing pytest if the per-Store lock is ever bypassed.
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(sandbox, "KERNEL_TUNING", replace(sandbox.KERNEL_TUNING, quarantine_after_failures=10_000))
    kernel = kernel_factory([make_probe()])
    client = client_for(kernel)

    def hammer(n: int) -> bool:
        topic = "probe.trap" if n % 3 == 0 else "probe.whoami"
        return kernel.bus.publish(client, topic, "{}", ALICE).wait(10)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(hammer, range(300)))
    stats = kernel.sandboxes.stats
    assert stats.instances_discarded == 100
    assert whoami_works(kernel, client)


def test_the_wasmtime_fast_path_is_active() -> None:
    # The fast path also fixes wasmtime-py's shared variant-lowering set,
    # which parallel Stores would otherwise race on.
    from wasmtime.component import _linker

    from astrid.host.kernel import fastpath

    assert fastpath.install()
    assert _linker.func_impl is fastpath._fast_func_impl


def test_the_conversions_memory_helpers_keep_the_gil_and_the_guest_runs_without_it() -> None:
    # A release wakes a thread waiting for the GIL (the event loop) for nothing: the value and
    # vector helpers keep it; the call into the guest must still release it.
    import ctypes

    from wasmtime import _bindings

    from astrid.host.kernel import fastpath

    keeps_gil = ctypes._FUNCFLAG_PYTHONAPI  # type: ignore[attr-defined]  # set by PYFUNCTYPE: ctypes holds the GIL
    assert fastpath.install()
    for name in fastpath.KEEP_GIL:
        assert getattr(_bindings, "_" + name)._flags_ & keeps_gil, name
    assert not _bindings._wasmtime_component_func_call._flags_ & keeps_gil


def test_payloads_reach_the_guest_byte_for_byte(make_probe, kernel_factory) -> None:
    # The fast path writes a payload's bytes straight into wasmtime's value cells:
    # every byte value, empty and multi-page payloads come back unchanged.
    kernel = kernel_factory([make_probe()])
    client = client_for(kernel)
    every_char = "".join(chr(c) for c in range(32, 0x2FF) if chr(c) not in '"\\')
    payloads = ['""', json.dumps(every_char), json.dumps("é✓" * 30_000), json.dumps({"k": list(range(2000))})]
    with kernel.bus.subscribe(client, "test.echo") as echo:
        for payload in payloads:
            kernel.bus.publish(client, "probe.echo", payload, ALICE).wait(5)
            reply = echo.recv(2)
            assert reply is not None and reply.payload == payload


def test_watched_principals_get_their_sandboxes_prewarmed(make_probe, kernel_factory) -> None:
    import time as clock

    kernel = kernel_factory([make_probe()])
    kernel.watch_principal("alice")
    deadline = clock.monotonic() + 5
    while kernel.sandboxes.live_instances() == 0 and clock.monotonic() < deadline:
        clock.sleep(0.01)
    assert kernel.sandboxes.live_instances() == 1
    created = kernel.sandboxes.stats.instances_created
    client = client_for(kernel)
    assert whoami_works(kernel, client)  # served by the prewarmed instance
    assert kernel.sandboxes.stats.instances_created == created


def test_quarantine_is_per_principal(make_probe, kernel_factory, monkeypatch) -> None:
    # alice can make the capsule fail for herself, never bench it for bob
    monkeypatch.setattr(sandbox, "KERNEL_TUNING", replace(sandbox.KERNEL_TUNING, quarantine_after_failures=3))
    kernel = kernel_factory([make_probe()])
    client = client_for(kernel)
    for _ in range(3):
        kernel.bus.publish(client, "probe.trap", "{}", ALICE).wait(5)
    assert not whoami_works(kernel, client)  # alice's sandbox is benched
    bob = Principal.verified("bob")
    with kernel.bus.subscribe(client, "test.whoami") as who:
        kernel.bus.publish(client, "probe.whoami", "{}", bob).wait(5)
        reply = who.recv(2)
    assert reply is not None and json.loads(reply.payload) == "bob"
