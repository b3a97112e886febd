"""Compiled components cached on disk, keyed by content hash.

Key: sha256(wasm bytes + engine key). An entry runs only if its seal (an
HMAC by this user's host, see cache_seal) matches its bytes; an entry that is
unsealed, altered or fails to deserialize (corrupt, truncated, from another
wasmtime) is deleted and recompiled, never trusted. Large components are compiled in a child process: an in-process
compile of a Python capsule leaves ~300 MB of RSS behind for good. A warm start takes the digests it
computed before from the sealed memo (`digest_memo.py`) while the files are unchanged.

A stopping server does not wait for a compile (5-10 s for a Python capsule): `stop()` kills the child
compiling, whose output is a file of its own, moved into the cache only once it is whole.
"""

from __future__ import annotations

import contextlib
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

from astrid.host.errors import CapsuleLoadError
from astrid.host.kernel.cache_seal import CacheSeal
from astrid.host.kernel.digest_memo import DigestMemo, identity_of
from astrid.host.kernel.engine import WasmEngine, engine_key, shared_engine
from astrid.host.settings import CACHE_DIR_ENV, path_setting
from astrid.host.tuning import KERNEL_TUNING

log = logging.getLogger(__name__)
events = logging.getLogger("astrid.events")  # what a server shows the operator

MEMO_FILE = "known-files.json"  # the digest memo, beside the entries


def default_cache_dir() -> Path:
    return path_setting(CACHE_DIR_ENV, Path(platformdirs.user_cache_dir("astrid")) / "components")


def cache_key(wasm_sha256: str) -> str:
    """The entry name: the wasm's digest combined with the engine key."""
    return hashlib.sha256(f"{wasm_sha256}\0{engine_key()}".encode()).hexdigest()


class CompileStopped(CapsuleLoadError):
    """A component was not compiled: its cache was stopped (the server is stopping)."""


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
        self._stopped = False
        self._workers: set[subprocess.Popen[bytes]] = set()  # the compiles running in child processes
        self._workers_lock = threading.Lock()

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
                    compiled = self._compile_and_store(wasm, entry, Path(wasm_path).name)
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
                self._compile_and_store(wasm, entry, Path(wasm_path).name)
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

    def stop(self) -> None:
        """Compile nothing more: a compile in a child process is killed now, and a load that needs
        one raises `CompileStopped`. For good (a stopping server). Takes no lock: safe in a signal
        handler."""
        self._stopped = True
        for worker in list(self._workers):  # a copy: a compile may end meanwhile
            worker.kill()

    def _compile_and_store(self, wasm: bytes, entry: Path, name: str) -> Component:
        if len(wasm) > KERNEL_TUNING.in_process_compile_max_bytes:
            compiled = self._compiled_in_child(wasm, entry, name)
            if compiled is not None:
                return compiled
        self._refuse_if_stopped(name)  # a child killed by `stop()` is no reason to compile here
        component = Component(self.wasm_engine.engine, wasm)
        self._store(entry, component.serialize())
        return component

    def _compiled_in_child(self, wasm: bytes, entry: Path, name: str) -> Component | None:
        """Compiled in a child process and stored in `entry`; None when that did not work."""
        self._refuse_if_stopped(name)
        events.info(
            "compiling %s (once per build: cached afterwards)...",
            name,
            extra={"event": "compiling", "fields": {"component": name, "bytes": len(wasm)}},
        )
        if not self._compile_in_child(wasm, entry):
            return None
        self.seal.sign(entry, self.memo)
        try:
            return Component.deserialize_file(self.wasm_engine.engine, str(entry))
        except wasmtime.WasmtimeError as exc:
            log.warning("freshly compiled %s is unusable (%s); compiling in process", entry.name, last_line(exc))
            self.seal.discard(entry)
            return None

    def _refuse_if_stopped(self, name: str) -> None:
        if self._stopped:
            raise CompileStopped(f"{name}: not compiled: stopping")

    def _compile_in_child(self, wasm: bytes, entry: Path) -> bool:
        """Compile into `entry` in a child process; False when that failed (compile in process instead)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            source = _new_file(self.directory, ".wasm", wasm)
        except OSError as exc:
            log.warning("cannot use the compile cache at %s (%s); compiling in memory", self.directory, exc)
            return False
        output = None
        try:
            output = _new_file(self.directory, ".cwasm.partial", b"")  # the child's alone until it exits 0
            if not self._run_worker(source, output):
                return False
            os.replace(output, entry)
            return True
        except OSError as exc:
            log.warning("cannot use the compile cache at %s (%s); compiling in memory", self.directory, exc)
            return False
        finally:
            for leftover in (source, output):
                if leftover is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(leftover)

    def _run_worker(self, source: str, output: str) -> bool:
        """Run the compile worker until it exits; True when it wrote `output` whole."""
        with tempfile.TemporaryFile() as errors:  # a file, not a pipe: a long trace cannot block the child
            worker = subprocess.Popen(
                # -P: not the working directory first on the module path (it may be a capsule
                # folder with an `astrid/` of its own, which would then run here, natively).
                [sys.executable, "-P", "-m", "astrid.host.kernel.compile_worker", source, output],
                stdin=subprocess.PIPE,  # the worker exits when this closes: it never outlives us
                stdout=subprocess.DEVNULL,
                stderr=errors,
                # not in the terminal's process group: a Ctrl-C is ours to act on, in order
                start_new_session=True,
            )
            with self._workers_lock:
                self._workers.add(worker)
            try:
                if self._stopped:  # `stop()` may have looked before this worker was added
                    worker.kill()
                code = worker.wait()
            finally:
                with self._workers_lock:
                    self._workers.discard(worker)
                if worker.poll() is None:  # we were interrupted (KeyboardInterrupt on the main thread)
                    worker.kill()
                    worker.wait()
                assert worker.stdin is not None
                worker.stdin.close()
            if code != 0 and not self._stopped:
                errors.seek(0)
                said = errors.read().decode(errors="replace").strip().splitlines()
                log.warning("compile worker failed: %s", said[-1] if said else f"exit status {code}")
        return code == 0

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


def _new_file(directory: Path, suffix: str, data: bytes) -> str:
    """A new file of our own in `directory`, holding `data`; its path."""
    with tempfile.NamedTemporaryFile(dir=directory, suffix=suffix, delete=False) as made:
        made.write(data)
    return made.name


def write_atomically(path: Path, data: bytes | bytearray) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, path)


def last_line(exc: BaseException) -> str:
    """The useful line of a wasmtime error (its message ends with the cause)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
