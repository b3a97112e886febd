"""Seals on compile-cache entries: an entry runs only if this user's host wrote it.

A `.cwasm` is native code that wasmtime maps and runs as is, so an entry that
was corrupted or edited but still deserializes must not be trusted. Each entry
gets a sidecar `<entry>.seal` holding HMAC-SHA256(key, entry bytes); the key
is a per-user secret kept outside the cache directory
(`$ASTRID_CACHE_KEY_FILE`, default `<user config dir>/astrid/compile-cache.key`,
mode 0600). Without a usable key file the seal falls back to a per-process key:
entries then verify only within the process that wrote them.

Cost: ~23 ms per 34 MB entry (SHA-NI), once per entry per process.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
from pathlib import Path

import platformdirs

from astrid.host.settings import CACHE_KEY_ENV, path_setting

log = logging.getLogger(__name__)

SUFFIX = ".seal"
_CHUNK = 1 << 20


def default_key_file() -> Path:
    return path_setting(CACHE_KEY_ENV, Path(platformdirs.user_config_dir("astrid")) / "compile-cache.key")


def _load_or_create_key(path: Path) -> bytes:
    try:
        return path.read_bytes()[:64] or _create_key(path)
    except FileNotFoundError:
        return _create_key(path)


def _create_key(path: Path) -> bytes:
    key = secrets.token_bytes(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its key
        return path.read_bytes()[:64]
    with os.fdopen(fd, "wb") as out:
        out.write(key)
    return key


class CacheSeal:
    def __init__(self, key_file: Path | None = None) -> None:
        path = key_file or default_key_file()
        try:
            self._key = _load_or_create_key(path)
        except OSError as exc:
            log.info("no compile-cache key at %s (%s); cache entries verify only in this process", path, exc)
            self._key = secrets.token_bytes(32)
        self._verified: set[tuple[str, int, int, int, int]] = set()
        self._lock = threading.Lock()

    def _mac(self, path: Path) -> str:
        digest = hmac.new(self._key, digestmod=hashlib.sha256)
        with path.open("rb") as source:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    @staticmethod
    def _identity(path: Path) -> tuple[str, int, int, int, int]:
        # ctime too: a rewrite can put the mtime back, not the ctime
        stat = path.stat()
        return (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)

    def sign(self, entry: Path) -> None:
        """Seal `entry` as it is on disk now (best effort: an unwritable seal only costs a recompile)."""
        try:
            seal = entry.with_name(entry.name + SUFFIX)
            seal.write_text(self._mac(entry))
            with self._lock:
                self._verified.add(self._identity(entry))
        except OSError as exc:
            log.warning("cannot seal compile cache entry %s: %s", entry.name, exc)

    def verify(self, entry: Path) -> bool:
        """Is `entry` byte for byte what this user's host sealed?"""
        try:
            identity = self._identity(entry)
            with self._lock:
                if identity in self._verified:
                    return True
            expected = entry.with_name(entry.name + SUFFIX).read_text().strip()
            ok = hmac.compare_digest(expected, self._mac(entry))
        except OSError:
            return False
        if ok:
            with self._lock:
                self._verified.add(identity)
        return ok

    @staticmethod
    def discard(entry: Path) -> None:
        entry.unlink(missing_ok=True)
        entry.with_name(entry.name + SUFFIX).unlink(missing_ok=True)
