"""Faults while serving: the kernel keeps serving what it can and logs what it cannot."""

from __future__ import annotations

import errno
import json
import logging
import shutil

import pytest

from astrid.host.bus import Principal
from astrid.host.kernel import compile_cache
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.kernel import Kernel, KernelConfig
from astrid.host.kernel.loader import load_capsule

from .conftest import answers

ALICE = Principal.verified("alice")


def test_component_replaced_by_garbage_while_serving(make_probe, kernel_factory, tmp_path) -> None:
    parent = tmp_path / "caps"
    make_probe("steady", parent=parent)
    victim = make_probe("victim", parent=parent)
    kernel = kernel_factory([parent])
    assert len(answers(kernel)) == 2
    (victim / "probe.wasm").write_bytes(b"garbage")
    report = {r.name: r for r in kernel.reload()}
    assert [c.name for c in kernel.loaded()] == ["steady"]
    assert len(answers(kernel)) == 1
    assert "is not a WebAssembly file" in report["victim"].error


def test_capsule_folder_deleted_while_serving(make_probe, kernel_factory, tmp_path) -> None:
    parent = tmp_path / "caps"
    make_probe("steady", parent=parent)
    doomed = make_probe("doomed", parent=parent)
    kernel = kernel_factory([parent])
    shutil.rmtree(doomed)
    kernel.reload()
    assert [c.name for c in kernel.loaded()] == ["steady"] and len(answers(kernel)) == 1


def test_missing_capsule_home_loads_nothing_and_keeps_running(tmp_path, component_cache_dir) -> None:
    kernel = Kernel(KernelConfig(capsule_paths=[tmp_path / "does-not-exist"], cache_dir=component_cache_dir))
    try:
        assert kernel.start() == [] and kernel.loaded() == []
    finally:
        kernel.close()


def test_disk_full_on_the_cache_dir_still_serves(make_probe, tmp_path, monkeypatch, caplog) -> None:
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(compile_cache, "write_atomically", full)
    with caplog.at_level(logging.WARNING):
        capsule = load_capsule(make_probe(), CompileCache(tmp_path / "cache"))
    assert not capsule.from_cache
    assert "No space left on device" in caplog.text


def test_cache_entry_from_another_engine_config_is_recompiled(make_probe, tmp_path) -> None:
    cache = CompileCache(tmp_path / "cache")
    folder = make_probe()
    first = load_capsule(folder, cache)
    [entry] = list((tmp_path / "cache").glob("*.cwasm"))
    # truncate: a half-written entry from a crashed writer
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    again = load_capsule(folder, cache)
    assert not again.from_cache and again.source_id == first.source_id


@pytest.mark.parametrize("payload", ["{}", json.dumps({"k": "v" * 1000})])
def test_unknown_topics_reach_no_capsule(make_probe, kernel_factory, payload) -> None:
    kernel = kernel_factory([make_probe()])
    client = kernel.attach_host("c", publish=["nobody.*"])
    assert kernel.bus.publish(client, "nobody.home", payload, ALICE).receivers == 0


def test_an_altered_cache_entry_that_still_deserializes_is_never_run(make_probe, tmp_path) -> None:
    cache = CompileCache(tmp_path / "cache")
    folder = make_probe()
    load_capsule(folder, cache)
    [entry] = list((tmp_path / "cache").glob("*.cwasm"))
    data = bytearray(entry.read_bytes())
    marker = data.find(b"test.whoami")  # a string in the guest's data segment
    assert marker > 0
    data[marker : marker + 4] = b"TEST"
    entry.write_bytes(bytes(data))
    again = load_capsule(folder, CompileCache(tmp_path / "cache"))
    assert not again.from_cache  # the seal did not match: recompiled
    assert b"TEST.whoami" not in entry.read_bytes()
