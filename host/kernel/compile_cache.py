"""Compiled components cached on disk, keyed by content hash.

Key: sha256(wasm bytes + engine key). An entry runs only if its seal (an
HMAC by this user's host, see cache_seal) matches its bytes; an entry that is
unsealed, altered or fails to deserialize (corrupt, truncated, from another
wasmtime) is deleted and recompiled, never trusted. Large components are compiled in a child process: an in-process
compile of a Python capsule leaves ~300 MB of RSS behind for good. A warm start takes the digests it
computed before from the sealed memo (`digest_memo.py`) while the files are unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import wasmtime
from wasmtime.component import Component

from astrid.host.kernel.cache_seal import CacheSeal
from astrid.host.kernel.digest_memo import DigestMemo, identity_of
from astrid.host.kernel.engine import WasmEngine, engine_key, shared_engine
from astrid.host.settings import CACHE_DIR_ENV, path_setting
from astrid.host.tuning import KERNEL_TUNING

log = logging.getLogger(__name__)

MEMO_FILE = "known-files.json"  # the digest memo, beside the entries


def default_cache_dir() -> Path:
    return path_setting(CACHE_DIR_ENV, Path(platformdirs.user_cache_dir("astrid")) / "components")


def cache_key(wasm_sha256: str) -> str:
    """The entry name: the wasm's digest combined with the engine key."""
    return hashlib.sha256(f"{wasm_sha256}\0{engine_key()}".encode()).hexdigest()


@dataclass(frozen=True)
class LoadedComponent:
    component: Component
    wasm_sha256: str
    from_cache: bool
    seconds: float


class CompileCache:
    def __init__(self, directory: Path | None = None, engine: WasmEngine | None = None) -> None:
        self.directory = Path(directory) if directory else default_cache_dir()
        self.wasm_engine = engine or shared_engine()
        self.seal = shared_seal()
        # under the seal's key, whichever seal this cache has when the memo is read or written
        self.memo = DigestMemo(self.directory / MEMO_FILE, lambda data: self.seal.mac_bytes(data))

    def entry_path(self, wasm_sha256: str) -> Path:
        return self.directory / f"{cache_key(wasm_sha256)}.cwasm"

    def entry_for(self, wasm_path: Path) -> Path:
        """Where the compiled form of the component at `wasm_path` is cached."""
        return self.entry_path(file_sha256(wasm_path))

    def load(self, wasm_path: Path) -> LoadedComponent:
        """The component for `wasm_path`, from the cache when possible."""
        started = time.perf_counter()
        # A hit needs only the digest: remembered from an earlier start while the file is unchanged,
        # else hashed as the file streams in (a warm start never holds the whole file).
        identity = identity_of(wasm_path)
        known = self.memo.get(identity)
        wasm_sha = known or file_sha256(wasm_path)
        if known is None:
            self.memo.put(identity, wasm_path, wasm_sha)
        entry = self.entry_path(wasm_sha)
        # Capsules load in parallel and may share a component: one compiles,
        # the others wait and then find it in the cache.
        with _entry_lock(entry):
            component = self._cached(entry)
        if component is None:
            # A miss compiles the bytes read now, named by their own digest (the file may have changed since).
            wasm = Path(wasm_path).read_bytes()
            wasm_sha = hashlib.sha256(wasm).hexdigest()
            entry = self.entry_path(wasm_sha)
            with _entry_lock(entry):
                component = self._cached(entry)  # another load may have compiled it meanwhile
                if component is None:
                    compiled = self._compile_and_store(wasm, entry)
                    return LoadedComponent(compiled, wasm_sha, False, time.perf_counter() - started)
        return LoadedComponent(component, wasm_sha, True, time.perf_counter() - started)

    def _cached(self, entry: Path) -> Component | None:
        """The sealed entry, deserialized; None (and the entry gone) when it is missing or unusable."""
        if not self._trusted(entry):
            return None
        try:
            return Component.deserialize_file(self.wasm_engine.engine, str(entry))
        except wasmtime.WasmtimeError as exc:
            log.warning("compile cache entry %s is unusable (%s); recompiling", entry.name, last_line(exc))
            self.seal.discard(entry)
            return None

    def precompile(self, wasm_path: Path) -> Path | None:
        """Make sure the cache holds `wasm_path`; the entry's path, or None if unwritable."""
        wasm = Path(wasm_path).read_bytes()
        entry = self.entry_path(hashlib.sha256(wasm).hexdigest())
        with _entry_lock(entry):
            if not self._trusted(entry):
                self._compile_and_store(wasm, entry)
        return entry if entry.exists() else None

    def _trusted(self, entry: Path) -> bool:
        """Does `entry` exist with a valid seal? An unsealed or altered one is removed."""
        if not entry.exists():
            return False
        if self.seal.verify(entry, self.memo):
            return True
        log.warning("compile cache entry %s is unsealed or altered; recompiling", entry.name)
        self.seal.discard(entry)
        return False

    def _compile_and_store(self, wasm: bytes, entry: Path) -> Component:
        engine = self.wasm_engine.engine
        if len(wasm) > KERNEL_TUNING.in_process_compile_max_bytes and self._compile_in_child(wasm, entry):
            self.seal.sign(entry, self.memo)
            try:
                return Component.deserialize_file(engine, str(entry))
            except wasmtime.WasmtimeError as exc:
                log.warning("freshly compiled %s is unusable (%s); compiling in process", entry.name, last_line(exc))
                self.seal.discard(entry)
        component = Component(engine, wasm)
        self._store(entry, component.serialize())
        return component

    def _compile_in_child(self, wasm: bytes, entry: Path) -> bool:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.directory, suffix=".wasm", delete=False) as source:
                source.write(wasm)
            try:
                result = subprocess.run(
                    # -P: not the working directory first on the module path (it may be a capsule
                    # folder with an `astrid/` of its own, which would then run here, natively).
                    [sys.executable, "-P", "-m", "astrid.host.kernel.compile_worker", source.name, str(entry)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
            finally:
                os.unlink(source.name)
        except OSError as exc:
            log.warning("cannot use the compile cache at %s (%s); compiling in memory", self.directory, exc)
            return False
        if result.returncode != 0:
            log.warning("compile worker failed: %s", result.stderr.strip().splitlines()[-1:] or "?")
            return False
        return entry.exists()

    def _store(self, entry: Path, data: bytes | bytearray) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_atomically(entry, data)
            self.seal.sign(entry, self.memo)
        except OSError as exc:
            log.warning("cannot write the compile cache at %s (%s); serving from memory", self.directory, exc)


_seal: CacheSeal | None = None
_seal_lock = threading.Lock()
_entry_locks: dict[str, threading.Lock] = {}


def _entry_lock(entry: Path) -> threading.Lock:
    with _seal_lock:
        return _entry_locks.setdefault(str(entry), threading.Lock())


def shared_seal() -> CacheSeal:
    """One seal (one key read) per process."""
    global _seal
    with _seal_lock:
        if _seal is None:
            _seal = CacheSeal()
        return _seal


def file_sha256(path: Path) -> str:
    """The file's sha256, read in chunks (no copy of the whole file in memory)."""
    with Path(path).open("rb") as source:
        return hashlib.file_digest(source, "sha256").hexdigest()


def write_atomically(path: Path, data: bytes | bytearray) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, path)


def last_line(exc: BaseException) -> str:
    """The useful line of a wasmtime error (its message ends with the cause)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
