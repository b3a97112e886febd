"""Attacks through the files astrid keeps on disk (issue 18); each fails only because of a defence in
`astrid.host.kernel.cache_seal`, `astrid.host.kernel.digest_memo`, `astrid.host.owner_file` or
`astrid.host.watch`.

- the compile-cache key: an empty key (what an interrupted write used to
  leave) or a key others could read lets whoever may write the cache dir seal
  their own native code under another capsule's name; such a key file is
  refused (one warning naming the file, the cause and the fix) and never
  seals or verifies anything;
- the digest memo (a new process skips checks for entries it remembers): a
  memo forged without the key vouches for nothing, and an entry rewritten in
  place is checked again even with its mtime put back;
- the token and grants files: reached through a symlink, say into a folder
  anyone may write to (where anyone may delete them, locking every user out),
  they are refused with the fix, never read nor written through the link;
- a mount granted to a capsule: 20 000 empty folders or a chain 1 000 deep
  cost a poll of the mount watcher only up to its caps.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from wasmtime.component import Component

from astrid.host.auth.tokens import TokenStore
from astrid.host.capabilities.grants import GrantStore
from astrid.host.errors import GrantError, TokenError
from astrid.host.kernel import cache_seal
from astrid.host.kernel.cache_seal import CacheSeal
from astrid.host.kernel.compile_cache import MEMO_FILE, CompileCache
from astrid.host.kernel.digest_memo import DigestMemo, identity_of
from astrid.host.kernel.engine import shared_engine
from astrid.host.mcp.auth import BearerVerifier
from astrid.host.settings import CONFIG_DIR_ENV
from astrid.host.toolpaths import tool_path
from astrid.host.tuning import WATCH_TUNING
from astrid.host.watch import MountWatcher

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX owners, modes and symlinks")


# -- the compile-cache key ------------------------------------------------------------------


def which(name: str) -> bytes:
    """A component exporting `which-NAME`: telling the victim's native code from the attacker's."""
    return (
        f'(component (core module $m (func (export "f") (result i32) i32.const 1)) '
        f"(core instance $i (instantiate $m)) "
        f'(func (export "which-{name}") (result u32) (canon lift (core func $i "f"))))'
    ).encode()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CompileCache:
    monkeypatch.setattr(cache_seal, "_warned", set())
    return CompileCache(tmp_path / "cache", shared_engine())


def plant(cache: CompileCache, victim: Path, key: bytes) -> None:
    """The attacker (who may write the cache dir, and knows `key`) seals its own native code as the victim's entry."""
    native = Component(cache.wasm_engine.engine, which("attacker")).serialize()
    entry = cache.entry_for(victim)
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(native)
    entry.with_name(entry.name + ".seal").write_text(hmac.new(key, native, hashlib.sha256).hexdigest())


def runs(cache: CompileCache, victim: Path) -> set[str]:
    loaded = cache.load(victim)
    return set(loaded.component.type.exports(cache.wasm_engine.engine))


def key_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == cache_seal.__name__ and r.levelno >= logging.WARNING]


def test_an_empty_key_file_is_refused_and_an_entry_sealed_with_the_empty_key_never_runs(
    tmp_path: Path, cache: CompileCache, caplog: pytest.LogCaptureFixture
) -> None:
    key = tmp_path / "config" / "compile-cache.key"
    key.parent.mkdir(mode=0o700)
    key.write_bytes(b"")  # what an interrupted key write used to leave
    key.chmod(0o600)
    victim = tmp_path / "victim.wasm"
    victim.write_bytes(which("victim"))
    with caplog.at_level(logging.WARNING):
        cache.seal = CacheSeal(key)
        plant(cache, victim, b"")
        assert runs(cache, victim) == {"which-victim"}  # recompiled from the victim's own wasm
    (line,) = key_warnings(caplog)
    assert line.startswith(f"the compile-cache key {key} is too short (0 bytes, at least 32): ")
    assert f"delete {key} and astrid makes a new key" in line and "\n" not in line
    entry = cache.entry_for(victim)  # and what this process sealed is not sealed with the empty key
    assert entry.with_name(entry.name + ".seal").read_text() != hmac.new(b"", entry.read_bytes(), "sha256").hexdigest()


@posix_only
@pytest.mark.parametrize("mode", [0o640, 0o644, 0o604, 0o660, 0o666])
def test_a_key_file_others_may_read_is_refused_so_a_stolen_key_seals_nothing(
    tmp_path: Path, cache: CompileCache, caplog: pytest.LogCaptureFixture, mode: int
) -> None:
    key = tmp_path / "config" / "compile-cache.key"
    CacheSeal(key)  # made by astrid, 0600...
    key.chmod(mode)  # ...then opened up by mistake, and read by the attacker
    stolen = key.read_bytes()
    victim = tmp_path / "victim.wasm"
    victim.write_bytes(which("victim"))
    with caplog.at_level(logging.WARNING):
        cache.seal = CacheSeal(key)
        plant(cache, victim, stolen)
        assert runs(cache, victim) == {"which-victim"}
    (line,) = key_warnings(caplog)
    assert f"the compile-cache key {key} is open to other users" in line
    assert f"delete {key} and astrid makes a new key" in line and f"chmod 600 {key}" in line


@posix_only
def test_a_good_key_file_still_serves_from_the_cache(tmp_path: Path, cache: CompileCache) -> None:
    key = tmp_path / "config" / "compile-cache.key"
    victim = tmp_path / "victim.wasm"
    victim.write_bytes(which("victim"))
    cache.seal = CacheSeal(key)
    assert not cache.load(victim).from_cache
    cache.seal = CacheSeal(key)  # another process of the same user
    assert cache.load(victim).from_cache


@posix_only
def test_a_forged_digest_memo_never_vouches_for_native_code_the_attacker_put_in(
    tmp_path: Path, cache: CompileCache, caplog: pytest.LogCaptureFixture
) -> None:
    """The memo lets a new process skip the seal's check of an entry it remembers: the attacker, who
    may write the cache dir but not read the key, swaps in its own code and writes a memo that says
    the swapped entry was checked. Without the key it cannot seal the memo, so the memo is ignored."""
    key = tmp_path / "config" / "compile-cache.key"
    victim = tmp_path / "victim.wasm"
    victim.write_bytes(which("victim"))
    cache.seal = CacheSeal(key)
    cache.load(victim)  # compiled, sealed, remembered in the memo
    entry = cache.entry_for(victim)
    entry.write_bytes(Component(cache.wasm_engine.engine, which("attacker")).serialize())  # the victim's seal kept
    memo = tmp_path / "cache" / MEMO_FILE
    forged = json.loads(memo.read_text())
    forged["digests"][identity_of(entry)] = entry.with_name(entry.name + ".seal").read_text()
    memo.write_text(json.dumps(forged))  # its "mac" is the old one: the attacker cannot make a new one
    cache.seal = CacheSeal(key)  # a new process of the victim's user
    cache.memo = DigestMemo(memo, cache.seal.mac_bytes)
    with caplog.at_level(logging.WARNING):
        assert runs(cache, victim) == {"which-victim"}
    assert any("is unsealed or altered" in r.getMessage() for r in caplog.records)


@posix_only
def test_an_entry_rewritten_in_place_with_its_mtime_put_back_is_checked_again_by_a_new_process(
    tmp_path: Path, cache: CompileCache, caplog: pytest.LogCaptureFixture
) -> None:
    """The memo remembers an entry by its identity, ctime included: a same-size rewrite with the
    mtime put back still changes the ctime, so the next process checks the seal again."""
    key = tmp_path / "config" / "compile-cache.key"
    victim = tmp_path / "victim.wasm"
    victim.write_bytes(which("victim"))
    cache.seal = CacheSeal(key)
    cache.load(victim)
    entry = cache.entry_for(victim)
    before = entry.stat()
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    os.utime(entry, ns=(before.st_atime_ns, before.st_mtime_ns))
    cache.seal = CacheSeal(key)  # a new process, with the memo that remembered the entry
    cache.memo = DigestMemo(tmp_path / "cache" / MEMO_FILE, cache.seal.mac_bytes)
    with caplog.at_level(logging.WARNING):
        assert runs(cache, victim) == {"which-victim"}
    assert any("is unsealed or altered" in r.getMessage() for r in caplog.records)


# -- the token and grants files, through a symlink --------------------------------------------


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    """(config dir 0700, a folder anyone may write to)."""
    config, shared = tmp_path / "config", tmp_path / "shared"
    config.mkdir(mode=0o700)
    shared.mkdir()
    shared.chmod(0o777)
    return config, shared


def link_into(path: Path, folder: Path) -> Path:
    """Move `path` into `folder` and leave a symlink in its place; the moved file."""
    target = folder / path.name
    os.replace(path, target)
    path.symlink_to(target)
    return target


@posix_only
@pytest.mark.anyio
async def test_a_token_file_reached_through_a_symlink_is_refused(linked: tuple[Path, Path]) -> None:
    config, shared = linked
    path = config / "tokens.json"
    token = TokenStore(path).add("alice")
    target = link_into(path, shared)  # anyone may now delete it (lockout) or watch it
    store = TokenStore(path)
    for action in (lambda: store.principal_for(token), store.list, lambda: store.add("bob")):
        with pytest.raises(TokenError) as caught:
            action()
        assert f"the token file {path} is a symbolic link (to {target})" in str(caught.value)
        assert f"mv {target} {path}" in str(caught.value)
    assert path.is_symlink() and target.exists()  # nothing written through or over the link
    assert await BearerVerifier(TokenStore(path)).verify_token(token) is None  # the server fails closed


@posix_only
def test_the_cli_names_the_symlinked_token_file_in_one_line(linked: tuple[Path, Path]) -> None:
    config, shared = linked
    TokenStore(config / "tokens.json").add("alice")
    link_into(config / "tokens.json", shared)
    env = {**os.environ, CONFIG_DIR_ENV: str(config)}
    result = subprocess.run(
        [tool_path("astrid"), "mcp", "token", "list"], capture_output=True, text=True, timeout=60, env=env
    )
    lines = result.stderr.strip().splitlines()
    assert (
        result.returncode != 0 and len(lines) == 1 and "symbolic link" in lines[0] and "Traceback" not in result.stderr
    )


@posix_only
def test_a_grants_file_reached_through_a_symlink_is_refused(linked: tuple[Path, Path]) -> None:
    config, shared = linked
    path = config / "grants.json"
    GrantStore(path).grant("files", "kv")
    target = link_into(path, shared)
    store = GrantStore(path)
    for action in (store.all, lambda: store.for_capsule("files"), lambda: store.grant("files", "http:example.com")):
        with pytest.raises(GrantError, match=rf"the grants file {path} is a symbolic link \(to {target}\)"):
            action()
    assert path.is_symlink() and b"example.com" not in target.read_bytes()


# -- the mount watcher ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def empty_folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 000 empty folders: ten mounts of 2 000 under one root."""
    root = tmp_path_factory.mktemp("mounts")
    for m in range(10):
        for i in range(2_000):
            os.makedirs(root / f"m{m}" / f"d{i:04}")
    return root


def listings(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    listed: list[Any] = []
    real = os.scandir

    def counting(path: Any = ".") -> Any:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    return listed


def polled(targets: dict[Path, frozenset[str]], monkeypatch: pytest.MonkeyPatch) -> tuple[int, float]:
    """(folders listed, seconds) of one poll after the baseline."""
    watcher = MountWatcher(lambda: targets, lambda users: None, interval_s=60)
    watcher.poll()
    listed = listings(monkeypatch)
    started = time.perf_counter()
    watcher.poll()
    return len(listed), time.perf_counter() - started


def test_a_mount_with_20000_empty_folders_costs_a_poll_only_its_cap(
    empty_folders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count, seconds = polled({empty_folders: frozenset({"alice"})}, monkeypatch)
    assert count <= WATCH_TUNING.mount_max_folders  # not 20 011
    assert seconds < 0.1  # 0.21 s without the cap


def test_many_mounts_of_empty_folders_cost_a_poll_only_its_budget(
    empty_folders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = {empty_folders / f"m{m}": frozenset({f"user{m}"}) for m in range(10)}
    count, _ = polled(targets, monkeypatch)
    assert count <= WATCH_TUNING.poll_max_folders + WATCH_TUNING.mount_max_folders  # not 20 010


def test_a_chain_1000_folders_deep_costs_a_poll_only_the_depth_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount = tmp_path / "mount"
    mount.mkdir()
    folder = os.open(mount, os.O_RDONLY)
    for _ in range(1_000):  # one level at a time: a path this long is past what pathlib recurses through
        os.mkdir("d", dir_fd=folder)
        below = os.open("d", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = below
    os.close(folder)
    try:
        count, _ = polled({mount: frozenset({"alice"})}, monkeypatch)
        assert count == WATCH_TUNING.mount_max_depth + 1  # not 1 001
    finally:
        unchain(mount)


def unchain(mount: Path) -> None:
    """Remove the chain a level at a time (pytest's cleanup would recurse 1 000 deep)."""
    top, spare = mount / "d", mount / "spare"
    while top.exists():
        if (top / "d").exists():
            os.rename(top / "d", spare)  # the rest of the chain moves up one level
            os.rmdir(top)
            os.rename(spare, top)
        else:
            os.rmdir(top)
