"""Manifests, capsule loading, the compile cache and reload events."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from astrid.host.bus import Principal
from astrid.host.capsule.manifest import ManifestError, parse_manifest
from astrid.host.contract.events import CapsulesLoaded
from astrid.host.contract.topics import CAPSULES_LOADED_TOPIC
from astrid.host.kernel import kernel as kernel_module
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.loader import CapsuleLoadError, load_capsule
from astrid.host.toolpaths import wasm_tools

from .conftest import answers, client_for

BASE = {
    "package": {"name": "demo", "version": "0.1.0"},
    "component": [{"id": "demo", "file": "demo.wasm"}],
}


def test_manifest_binds_handlers_and_grants_acls() -> None:
    manifest = parse_manifest(
        {
            **BASE,
            "subscribe": {
                "resource.v1.request.read": {"wit": "x", "handler": "read"},
                "resource.v1.response.*": "opaque",
            },
            "publish": {"resource.v1.response.read.*": "opaque"},
            "config": {"greeting": "hi", "n": 3},
        }
    )
    assert manifest.handlers() == {"resource.v1.request.read": "read"}
    assert set(manifest.subscribe) == {"resource.v1.request.read", "resource.v1.response.*"}
    assert (manifest.config_value("greeting"), manifest.config_value("n"), manifest.config_value("x")) == (
        "hi",
        "3",
        None,
    )


@pytest.mark.parametrize(
    "patch, expected",
    [
        ({"interceptor": []}, "unknown table(s) interceptor"),
        ({"package": {"name": "Bad Name", "version": "1"}}, "package.name"),
        ({"package": {"version": "1"}}, "package.name"),
        ({"subscribe": {"a.*.b": "opaque"}}, "`*` is allowed only as the last segment"),
        ({"publish": {"A.b": "opaque"}}, "[publish]"),
        ({"component": [{"id": "x", "file": "../escape.wasm"}]}, "inside the capsule folder"),
        ({"subscribe": {"a.b": {"handler": "h", "colour": 1}}}, "colour"),
        ({"config": {"astrid:memory-limit-mib": "4096"}}, "keys starting 'astrid:' are the host's"),
    ],
)
def test_bad_manifests_are_rejected_with_a_pointed_message(patch: dict, expected: str) -> None:
    with pytest.raises(ManifestError) as caught:
        parse_manifest({**BASE, **patch}, "caps/demo/Capsule.toml")
    assert expected in str(caught.value) and "caps/demo/Capsule.toml" in str(caught.value)


def test_a_broken_capsule_is_reported_by_name_and_the_others_still_load(make_probe, kernel_factory, tmp_path) -> None:
    parent = tmp_path / "caps"
    make_probe("good", parent=parent)
    broken = make_probe("broken", parent=parent)
    (broken / "probe.wasm").write_bytes(b"\0asm garbage")
    missing = make_probe("missing", parent=parent)
    (missing / "probe.wasm").unlink()
    kernel = kernel_factory([parent])
    report = {r.name: r for r in kernel.load_report}
    assert report["good"].ok
    assert not report["broken"].ok and "broken" in report["broken"].error
    assert not report["missing"].ok and "astrid capsule build" in report["missing"].error
    assert [c.name for c in kernel.loaded()] == ["good"]


def _importing(make_probe, tmp_path, instance: str, function: str) -> Path:
    """A probe capsule whose component imports `function` (no arguments, returning a string list) of `instance`."""
    wat = tmp_path / "wasi.wat"
    wat.write_text(f'(component (import "{instance}" (instance (export "{function}" (func (result (list string)))))))')
    folder = make_probe("wasi")
    subprocess.run([wasm_tools(), "parse", str(wat), "-o", str(folder / "probe.wasm")], check=True)
    return folder


def test_the_wasi_the_host_serves_may_be_imported(make_probe, tmp_path, component_cache_dir) -> None:
    folder = _importing(make_probe, tmp_path, "wasi:cli/environment@0.2.0", "get-arguments")
    with pytest.raises(CapsuleLoadError) as caught:
        load_capsule(folder, CompileCache(component_cache_dir))
    assert "does not export astrid-hook-trigger" in str(caught.value)  # past the import check


@pytest.mark.parametrize(
    ("instance", "function", "said"),
    [
        ("wasi:http/outgoing-handler@0.2.0", "handle", "wasi:http/outgoing-handler@0.2.0 (not offered to capsules)"),
        ("wasi:cli/environment@0.2.13", "get-arguments", "this host serves WASI 0.2.12"),
        ("wasi:cli/environment@0.3.0", "get-arguments", "this host serves WASI 0.2.12"),
        ("wasi:cli/environment@0.2.0", "get-secrets", "get-secrets (not offered to capsules)"),
    ],
)
def test_wasi_the_host_does_not_serve_is_refused_by_name(
    make_probe, tmp_path, component_cache_dir, instance: str, function: str, said: str
) -> None:
    folder = _importing(make_probe, tmp_path, instance, function)
    with pytest.raises(CapsuleLoadError) as caught:
        load_capsule(folder, CompileCache(component_cache_dir))
    assert said in str(caught.value) and "which the host does not provide" in str(caught.value)


def test_second_load_comes_from_the_compile_cache(make_probe, tmp_path) -> None:
    cache = CompileCache(tmp_path / "cache")
    folder = make_probe()
    first = load_capsule(folder, cache)
    second = load_capsule(folder, cache)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.source_id == second.source_id


def test_a_corrupt_cache_entry_is_recompiled_not_trusted(make_probe, tmp_path) -> None:
    cache = CompileCache(tmp_path / "cache")
    folder = make_probe()
    load_capsule(folder, cache)
    [entry] = list((tmp_path / "cache").glob("*.cwasm"))
    entry.write_bytes(b"corrupt" * 100)
    again = load_capsule(folder, cache)
    assert not again.from_cache
    assert load_capsule(folder, cache).from_cache


def test_an_unwritable_cache_still_loads(make_probe, tmp_path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("file where the cache dir should be")
    capsule = load_capsule(make_probe(), CompileCache(blocker / "cache"))
    assert not capsule.from_cache


def test_reload_announces_capsule_set_changes_per_principal(make_probe, kernel_factory, tmp_path) -> None:
    parent = tmp_path / "caps"
    make_probe("one", parent=parent)
    kernel = kernel_factory([parent])
    kernel.watch_principal("alice")
    kernel.watch_principal("bob")
    client = client_for(kernel)
    with kernel.bus.subscribe(client, CAPSULES_LOADED_TOPIC) as events:
        kernel.reload()  # nothing changed: no event
        assert events.recv(0.2) is None
        make_probe("two", parent=parent)
        kernel.reload()
        first, second = events.recv(2), events.recv(2)
        shutil.rmtree(parent / "one")
        kernel.reload()
        third = events.recv(2)
    by_principal = {m.principal.name: CapsulesLoaded.model_validate_json(m.payload) for m in (first, second)}
    assert set(by_principal) == {"alice", "bob"}
    assert [c.name for c in by_principal["alice"].capsules] == ["one", "two"]
    assert all(c.principal == "alice" for c in by_principal["alice"].capsules)
    assert [c.name for c in CapsulesLoaded.model_validate_json(third.payload).capsules] == ["two"]


def test_rebuilt_component_gets_a_new_source_id(make_probe, kernel_factory, tmp_path) -> None:
    folder = make_probe()
    kernel = kernel_factory([folder])
    [before] = kernel.loaded()
    wasm = folder / "probe.wasm"
    subprocess.run([wasm_tools(), "metadata", "add", "--name", "rebuilt", str(wasm), "-o", str(wasm)], check=True)
    kernel.reload()
    [after] = kernel.loaded()
    assert after.name == before.name and after.source_id != before.source_id


def test_kernel_answers_the_inventory_request_for_the_callers_principal(make_probe, kernel_factory) -> None:
    kernel = kernel_factory([make_probe()])
    client = kernel.attach_host("c", publish=["astrid.v1.request.capsules"], subscribe=["astrid.v1.response.*"])
    with kernel.bus.subscribe(client, "astrid.v1.response.capsules.c1") as replies:
        delivery = kernel.bus.publish(
            client, "astrid.v1.request.capsules", '{"correlation_id":"c1"}', Principal.verified("al")
        )
        # answered in the publisher's thread: no pool thread (maybe held by a
        # broker waiting on this very capsule) is needed
        assert delivery.finished
        reply = replies.poll()[0]
    body = json.loads(reply.payload)
    assert reply.principal == Principal.verified("al")
    assert [c["name"] for c in body["capsules"]] == ["probe"] and body["capsules"][0]["principal"] == "al"
    assert body["host"]["limits"]["capsule_memory_bytes"] == 64 << 20


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"PK\x03\x04 a zip, not wasm", "is not a WebAssembly file"),
        (b"", "is not a WebAssembly file"),
        (b"\0asm\x01\x00\x00\x00", "is a core wasm module, not a component"),
    ],
)
def test_a_file_that_is_not_a_component_is_named_for_what_it_is(make_probe, tmp_path, content, expected) -> None:
    folder = make_probe()
    (folder / "probe.wasm").write_bytes(content)
    with pytest.raises(CapsuleLoadError) as caught:
        load_capsule(folder, CompileCache(tmp_path / "cache"))
    assert expected in str(caught.value) and "astrid capsule build" in str(caught.value)


def test_a_failed_capsule_is_retried_only_once_its_files_change(
    make_probe, kernel_factory, tmp_path, monkeypatch
) -> None:
    parent = tmp_path / "caps"
    make_probe("good", parent=parent)
    broken = make_probe("broken", parent=parent)
    good_wasm = (broken / "probe.wasm").read_bytes()
    (broken / "probe.wasm").write_bytes(b"\0asm\x0d\x00\x01\x00 truncated")
    kernel = kernel_factory([parent])
    attempts: list[Path] = []
    real_load = kernel_module.load_capsule

    def counting_load(folder, cache, vet=None):
        attempts.append(folder)
        return real_load(folder, cache, vet)

    monkeypatch.setattr(kernel_module, "load_capsule", counting_load)

    make_probe("other", parent=parent)  # an unrelated change
    report = {r.name: r for r in kernel.reload()}
    assert attempts == [parent.resolve() / "other"]  # the broken one is not tried again...
    assert not report["broken"].ok and "broken" in report["broken"].error  # ...but still reported

    (broken / "probe.wasm").write_bytes(good_wasm)  # repaired
    report = {r.name: r for r in kernel.reload()}
    assert attempts[-1] == broken.resolve() and report["broken"].ok
    assert [c.name for c in kernel.loaded()] == ["broken", "good", "other"]


def test_a_capsule_rebuilt_under_load_is_always_reachable_and_loaded_once(
    make_probe, kernel_factory, monkeypatch
) -> None:
    folder = make_probe()
    kernel = kernel_factory([folder])
    client = client_for(kernel)
    wasm = folder / "probe.wasm"
    unreached: list[int] = []
    stop = threading.Event()

    def publish_all_the_time() -> None:
        while not stop.is_set():
            delivery = kernel.bus.publish(client, "probe.whoami", "{}", Principal.verified("alice"))
            if delivery.receivers == 0:
                unreached.append(1)
            delivery.wait(5)

    publisher = threading.Thread(target=publish_all_the_time)
    publisher.start()
    try:
        source_ids = {kernel.loaded()[0].source_id}
        for build in range(5):
            subprocess.run(
                [wasm_tools(), "metadata", "add", "--name", f"rebuild-{build}", str(wasm), "-o", str(wasm)], check=True
            )
            kernel.reload()
            source_ids.add(kernel.loaded()[0].source_id)
    finally:
        stop.set()
        publisher.join(10)
    assert len(source_ids) == 6  # every rebuild was swapped in...
    assert not unreached  # ...and no publish fell between the old build and the new

    attempts: list[Path] = []
    real_load = kernel_module.load_capsule

    def counting_load(folder, cache, vet=None):
        attempts.append(folder)
        return real_load(folder, cache, vet)

    monkeypatch.setattr(kernel_module, "load_capsule", counting_load)
    kernel.reload()
    assert attempts == []  # the rebuilt capsule is kept as loaded, not loaded again


def test_a_second_capsule_of_the_same_name_is_refused_until_the_first_is_gone(
    make_probe, kernel_factory, tmp_path
) -> None:
    first = make_probe("twin", parent=tmp_path / "a")
    second = make_probe("twin", parent=tmp_path / "b")  # a copy: same name, same build, same source-id
    kernel = kernel_factory([tmp_path / "a", tmp_path / "b"])
    report = {r.folder: r for r in kernel.load_report}
    assert report[first.resolve()].ok
    refused = report[second.resolve()]
    assert not refused.ok and "already served from" in refused.error and str(first.resolve()) in refused.error
    assert len(answers(kernel)) == 1

    shutil.rmtree(first)
    report = {r.folder: r for r in kernel.reload()}
    assert report[second.resolve()].ok  # retried although its own files did not change
    assert [c.folder for c in kernel.loaded()] == [second.resolve()]
    assert len(answers(kernel)) == 1
