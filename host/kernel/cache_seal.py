"""Seals on compile-cache entries: an entry runs only if this user's host wrote it.

A `.cwasm` is native code that wasmtime maps and runs as is, so an entry that
was corrupted or edited but still deserializes must not be trusted. Each entry
gets a sidecar `<entry>.seal` holding HMAC-SHA256(key, entry bytes); the key
is a per-user secret kept outside the cache directory
(`$ASTRID_CACHE_KEY_FILE`, default `<user config dir>/astrid/compile-cache.key`).

The key file is made atomically (32 random bytes written to a 0600 temp file
in the same folder, fsynced, then hard-linked into place, which never clobbers
a concurrent creator: the loser uses the winner's key), so a failed or
interrupted write never leaves an empty or short key. A key file is used only
when it is a regular file (not a symlink), at least 32 bytes, owned by the
user and closed to group and others (on POSIX); any other is refused with one
line naming the file, the cause and the fix, and never seals or verifies
anything. Refused or unusable, the seal falls back to a per-process key
(logged once per key file): the server keeps serving, and entries then verify
only within the process that wrote them (the others are compiled again).

Cost: ~23 ms per 34 MB entry (SHA-NI), once per entry per process, and not
again in a later process while the entry is unchanged (`digest_memo.py`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import stat
import tempfile
import threading
from pathlib import Path

import platformdirs

from astrid.host.errors import AstridError
from astrid.host.kernel.digest_memo import DigestMemo, identity_of
from astrid.host.settings import CACHE_KEY_ENV, path_setting

log = logging.getLogger(__name__)

SUFFIX = ".seal"
_CHUNK = 1 << 20
KEY_BYTES = 32  # a new key: 256 bits, the HMAC-SHA256 output size
KEY_MIN_BYTES = 32  # a shorter file (empty: an interrupted write by an older astrid) is refused, not used
KEY_MAX_BYTES = 64  # bytes of the file used as the key (SHA-256's block size)

_POSIX = os.name == "posix"
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)

_warned: set[str] = set()  # key files already reported as refused (once per process each)
_warned_lock = threading.Lock()


class CacheKeyError(AstridError):
    """A compile-cache key file that must not be used; the message names the file, the cause and the fix."""


def default_key_file() -> Path:
    return path_setting(CACHE_KEY_ENV, Path(platformdirs.user_config_dir("astrid")) / "compile-cache.key")


def load_or_create_key(path: Path) -> bytes:
    """The key in `path`, made first when there is none. Raises `CacheKeyError` for a key
    file that must not be used, `OSError` when none can be read or made."""
    try:
        return read_key(path)
    except FileNotFoundError:
        return _create_key(path)


def read_key(path: Path) -> bytes:
    """The key in the file at `path`, after the checks (`CacheKeyError` says which failed)."""
    fresh = f"delete {path} and astrid makes a new key"
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        if path.is_symlink():  # O_NOFOLLOW refused it (ELOOP)
            raise CacheKeyError(
                f"the compile-cache key {path} is a symbolic link (to {os.readlink(path)}), which astrid does not "
                f"follow: {fresh}, or move the key file itself there"
            ) from None
        raise  # missing (made then), or unreadable: the caller's OSError
    try:
        status = os.fstat(fd)
        _check(path, status, fresh)
        key = b""
        while len(key) < KEY_MAX_BYTES and (chunk := os.read(fd, KEY_MAX_BYTES - len(key))):
            key += chunk
    finally:
        os.close(fd)
    if len(key) < KEY_MIN_BYTES:
        raise CacheKeyError(
            f"the compile-cache key {path} is too short ({len(key)} bytes, at least {KEY_MIN_BYTES}): {fresh}"
        )
    return key


def _check(path: Path, status: os.stat_result, fresh: str) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise CacheKeyError(f"the compile-cache key {path} is not a regular file: {fresh}")
    if not _POSIX:
        return
    me = os.getuid()
    if status.st_uid != me:
        raise CacheKeyError(
            f"the compile-cache key {path} belongs to uid {status.st_uid}, not to you (uid {me}), so its owner "
            f"could seal native code for you: {fresh}"
        )
    if status.st_mode & 0o077:
        raise CacheKeyError(
            f"the compile-cache key {path} is open to other users (mode {stat.filemode(status.st_mode)}), who may "
            f"know it: {fresh} (or run `chmod 600 {path}` if nobody else could ever read or write it)"
        )


def _create_key(path: Path) -> bytes:
    """Write a new key beside `path` and link it into place; a concurrent creator's key wins."""
    key = secrets.token_bytes(KEY_BYTES)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(key)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, path)  # all or nothing, and never over an existing file (or symlink)
        except FileExistsError:  # another process won the race: use its key, checked like any other
            return read_key(path)
        _fsync_folder(path.parent)
    finally:
        Path(temp).unlink(missing_ok=True)
    return key


def _fsync_folder(folder: Path) -> None:
    if not _POSIX:
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # a folder that cannot be synced: the rename stands, only less durable
            os.fsync(fd)
    finally:
        os.close(fd)


def _warn_once(path: Path, message: str) -> None:
    with _warned_lock:
        if str(path) in _warned:
            return
        _warned.add(str(path))
    log.warning(
        "%s; until then compile-cache entries verify only in this process (the others are compiled again)", message
    )


class CacheSeal:
    def __init__(self, key_file: Path | None = None) -> None:
        path = key_file or default_key_file()
        try:
            self._key = load_or_create_key(path)
        except CacheKeyError as exc:  # refused: never seals nor verifies anything
            _warn_once(path, str(exc))
            self._key = secrets.token_bytes(KEY_BYTES)
        except OSError as exc:
            log.info("no compile-cache key at %s (%s); cache entries verify only in this process", path, exc)
            self._key = secrets.token_bytes(KEY_BYTES)
        # entries verified in this process, by identity (ctime too: a rewrite can put the mtime back, not the ctime)
        self._verified: set[str] = set()
        self._lock = threading.Lock()

    def _mac(self, path: Path) -> str:
        digest = hmac.new(self._key, digestmod=hashlib.sha256)
        with path.open("rb") as source:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def sign(self, entry: Path, memo: DigestMemo | None = None) -> None:
        """Seal `entry` as it is on disk now (best effort: an unwritable seal only costs a recompile);
        `memo` remembers the seal for a later process."""
        try:
            before = identity_of(entry)
            mac = self._mac(entry)
            entry.with_name(entry.name + SUFFIX).write_text(mac)
            with self._lock:
                self._verified.add(identity_of(entry))
            if memo is not None:
                memo.put(before, entry, mac)
        except OSError as exc:
            log.warning("cannot seal compile cache entry %s: %s", entry.name, exc)

    def mac_bytes(self, data: bytes) -> str:
        """The HMAC of `data` under this seal's key (what vouches for the digest memo)."""
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()

    def verify(self, entry: Path, memo: DigestMemo | None = None) -> bool:
        """Is `entry` byte for byte what this user's host sealed? `memo`: a MAC computed by an
        earlier process for the entry as it is now (same identity) is taken, not computed again."""
        try:
            identity = identity_of(entry)
            with self._lock:
                if identity in self._verified:
                    return True
            expected = entry.with_name(entry.name + SUFFIX).read_text().strip()
            known = memo.get(identity) if memo is not None else None
            if known is not None and hmac.compare_digest(expected, known):
                ok = True
            else:
                mac = self._mac(entry)
                ok = hmac.compare_digest(expected, mac)
                if ok and memo is not None:
                    memo.put(identity, entry, mac)
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
