"""A warm start in a new process takes the digests an earlier one computed, while the files are unchanged."""

from __future__ import annotations

import os
from pathlib import Path

from astrid.host.kernel import compile_cache
from astrid.host.kernel.cache_seal import CacheSeal, default_key_file
from astrid.host.kernel.compile_cache import MEMO_FILE, CompileCache
from astrid.host.kernel.digest_memo import DigestMemo
from astrid.host.kernel.loader import load_capsule


def as_a_new_process(directory: Path) -> CompileCache:
    """A compile cache as another process of the same user has it: its own seal (same key file), its own memo."""
    cache = CompileCache(directory)
    cache.seal = CacheSeal(default_key_file())
    cache.memo = DigestMemo(directory / MEMO_FILE, cache.seal.mac_bytes)
    return cache


def counting(monkeypatch) -> dict[str, int]:
    """How often a component is hashed and an entry's seal computed."""
    counts = {"component hashed": 0, "entry MACed": 0}
    hash_file, mac = compile_cache.file_sha256, CacheSeal._mac

    def hashed(path):
        counts["component hashed"] += 1
        return hash_file(path)

    def maced(self, path):
        counts["entry MACed"] += 1
        return mac(self, path)

    monkeypatch.setattr(compile_cache, "file_sha256", hashed)
    monkeypatch.setattr(CacheSeal, "_mac", maced)
    return counts


def test_a_new_process_loads_from_the_cache_without_hashing_again(make_probe, tmp_path, monkeypatch) -> None:
    folder = make_probe()
    first = load_capsule(folder, as_a_new_process(tmp_path / "cache"))  # compiles, seals, remembers
    counts = counting(monkeypatch)
    second = load_capsule(folder, as_a_new_process(tmp_path / "cache"))
    assert second.from_cache and second.source_id == first.source_id
    assert counts == {"component hashed": 0, "entry MACed": 0}
    assert os.stat(tmp_path / "cache" / MEMO_FILE).st_mode & 0o077 == 0  # it names the user's files


def test_a_changed_component_is_hashed_again_and_its_new_code_loaded(make_probe, tmp_path, monkeypatch) -> None:
    folder = make_probe()
    first = load_capsule(folder, as_a_new_process(tmp_path / "cache"))
    component = folder / "probe.wasm"
    component.write_bytes(component.read_bytes() + b"\0")  # a custom section's worth of change: new bytes
    counts = counting(monkeypatch)
    cache = as_a_new_process(tmp_path / "cache")
    try:
        second = load_capsule(folder, cache)
    except Exception:  # the changed bytes may not load at all: they were looked at, which is the point
        second = None
    assert counts["component hashed"] >= 1
    assert second is None or second.source_id != first.source_id
