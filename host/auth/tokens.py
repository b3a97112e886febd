"""Static bearer tokens: one per principal, kept as digests in a file only its owner can touch.

`astrid mcp token add NAME` makes a random token (256 bits), prints it once
and keeps only its SHA-256 digest, with the principal name and the creation
time. A server started with the token file checks a presented token against
every digest in constant time (`hmac.compare_digest`, no early exit), so
neither a stolen file nor the response timing gives a token away.

The server re-reads the file when it changes on disk (inode, size, mtime,
ctime, mode, owner), so `astrid mcp token revoke` takes effect on the next
request without a restart; while it is unchanged a check costs one `stat`.

The file is JSON (`{"version": 1, "tokens": [{"name", "sha256", "created"}]}`),
written atomically (a temp file in the same folder, then `os.replace`) with
mode 0600; a folder astrid creates for it gets mode 0700. Changes from two
processes at once are serialised by an advisory lock (`.tokens.json.lock`).

Whoever can write the file can let themselves in, so on POSIX astrid refuses
(a `TokenError` naming the fix, never a traceback) a token file that is not
owned by the user running astrid or that anyone else may read or write (like
ssh with a private key: reading reveals who may log in, and a loose mode is
usually a mistake), and a folder that others may write to (they could put
their own file in its place). On Windows the user profile's ACLs guard the
config dir and no check is made. A missing file means no tokens; a corrupt
one is refused, never guessed at.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from astrid.host.auth.principal import principal_problem
from astrid.host.errors import TokenError

TOKEN_BYTES = 32  # 256 bits of randomness per token
TOKEN_MAX = 1024  # a longer bearer string is not one of ours: refused without hashing it
FILE_VERSION = 1
_POSIX = os.name == "posix"
_HEX = frozenset("0123456789abcdef")

try:  # POSIX: serialise read-modify-write cycles across processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class TokenEntry:
    """What `list` shows of a token: whose it is and when it was made (never the token or its digest)."""

    name: str
    created: datetime


@dataclass(frozen=True)
class _Stored:
    name: str
    digest: str
    created: datetime

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "sha256": self.digest, "created": self.created.isoformat()}


# (inode, size, mtime, ctime, mode, owner): any write, replace or chmod changes one of them
_Signature = tuple[int, int, int, int, int, int]


class TokenStore:
    """The token file at `path`: add, list and revoke tokens, and find the principal of a presented token."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._loaded: tuple[_Signature | None, tuple[_Stored, ...]] | None = None

    # -- checking a token (the server's side) -------------------------------------------

    def principal_for(self, token: str) -> str | None:
        """The principal whose token this is, or None. Compares against every entry, in constant time."""
        if not isinstance(token, str) or not token or len(token) > TOKEN_MAX:
            return None
        digest = _digest(token)
        found: str | None = None
        for entry in self._entries():
            if hmac.compare_digest(entry.digest, digest):  # no early exit: every entry is compared
                found = entry.name
        return found

    # -- managing tokens (`astrid mcp token`) -------------------------------------------

    def add(self, name: str) -> str:
        """Make a token for principal `name`, keep its digest, and return the token (shown once)."""
        problem = principal_problem(name)
        if problem:
            raise TokenError(f"token name {name!r}: {problem}")
        token = secrets.token_urlsafe(TOKEN_BYTES)
        with self._changing() as entries:
            if any(entry.name == name for entry in entries):
                raise TokenError(
                    f"a token for {name!r} already exists in {self.path}: "
                    f"revoke it first (`astrid mcp token revoke {name}`), then add it again"
                )
            entries.append(_Stored(name, _digest(token), datetime.now(UTC).replace(microsecond=0)))
        return token

    def list(self) -> builtins.list[TokenEntry]:
        """Every token's principal and creation time, in the order they were added."""
        return [TokenEntry(entry.name, entry.created) for entry in self._entries()]

    def revoke(self, name: str) -> bool:
        """Remove the token of principal `name`; False when there is none."""
        if all(entry.name != name for entry in self._entries()):  # nothing to do: touch no file or folder
            return False
        with self._changing() as entries:
            kept = [entry for entry in entries if entry.name != name]
            removed = len(kept) != len(entries)
            entries[:] = kept
        return removed

    # -- the file -----------------------------------------------------------------------

    def _entries(self) -> tuple[_Stored, ...]:
        """The entries on disk now: one `stat` when the file is unchanged, else a checked re-read."""
        signature = _signature_of(self.path)
        loaded = self._loaded
        if loaded is not None and loaded[0] == signature:
            return loaded[1]
        with self._lock:
            self._loaded = self._read()
            return self._loaded[1]

    def _read(self) -> tuple[_Signature | None, tuple[_Stored, ...]]:
        try:
            with self.path.open("rb") as source:
                status = os.fstat(source.fileno())
                _check_file(self.path, status)
                raw = source.read()
        except FileNotFoundError:
            return None, ()
        except OSError as exc:
            raise TokenError(
                f"cannot read the token file {self.path}: {exc.strerror or exc}; check its permissions"
            ) from None
        return _signature(status), _parse(self.path, raw)

    @contextmanager
    def _changing(self) -> Iterator[builtins.list[_Stored]]:
        """A fresh copy of the entries to change in place; written back atomically unless the block raises."""
        _ensure_folder(self.path.parent)
        try:
            _check_folder(self.path.parent)
        except OSError as exc:
            raise TokenError(f"cannot use the folder {self.path.parent}: {exc.strerror or exc}") from None
        with _file_lock(self.path), self._lock:
            _, current = self._read()
            entries = builtins.list(current)
            yield entries
            if entries != builtins.list(current):
                self._write(entries)
            self._loaded = None

    def _write(self, entries: builtins.list[_Stored]) -> None:
        document = {"version": FILE_VERSION, "tokens": [entry.as_json() for entry in entries]}
        try:
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")  # 0600
        except OSError as exc:
            raise TokenError(f"cannot write the token file {self.path}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(document, out, indent=2)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except OSError as exc:
            raise TokenError(f"cannot write the token file {self.path}: {exc.strerror or exc}") from None
        finally:
            Path(temp).unlink(missing_ok=True)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _signature(status: os.stat_result) -> _Signature:
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_mode, status.st_uid)


def _signature_of(path: Path) -> _Signature | None:
    try:
        return _signature(os.stat(path))
    except OSError:  # missing (or unreadable: the re-read says why)
        return None


# -- who may change the file ----------------------------------------------------------------


def _check_file(path: Path, status: os.stat_result) -> None:
    """Refuse a token file someone else could have written, or may read (POSIX; see the module docstring)."""
    if not _POSIX:
        return
    me = os.getuid()
    if status.st_uid != me:
        raise TokenError(
            f"the token file {path} belongs to uid {status.st_uid}, not to you (uid {me}): "
            "whoever owns it decides who may log in; use a token file of your own"
        )
    if status.st_mode & 0o077:
        raise TokenError(
            f"the token file {path} is open to other users (mode {stat.filemode(status.st_mode)}): "
            f"run `chmod 600 {path}`"
        )
    _check_folder(path.parent)


def _check_folder(folder: Path) -> None:
    """Refuse a folder others may write to: they could put a token file of their own in its place."""
    if not _POSIX:
        return
    status = os.stat(folder)
    if status.st_uid not in (os.getuid(), 0) or status.st_mode & 0o022:
        raise TokenError(
            f"the folder {folder} of the token file may be written by other users "
            f"(owner uid {status.st_uid}, mode {stat.filemode(status.st_mode)}), who could replace the file: "
            f"run `chmod 700 {folder}`, or keep the tokens in a folder of your own"
        )


def _ensure_folder(folder: Path) -> None:
    """Create the token file's folder (mode 0700) when it does not exist yet."""
    if folder.is_dir():
        return
    try:
        folder.mkdir(parents=True, mode=0o700)
        os.chmod(folder, 0o700)  # whatever the umask
    except FileExistsError:
        pass
    except OSError as exc:
        raise TokenError(f"cannot create the folder {folder} for the token file: {exc.strerror or exc}") from None


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An advisory lock beside the token file, so two `astrid mcp token` runs never lose each other's change."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    lock_path = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise TokenError(f"cannot create the lock file {lock_path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# -- the format -----------------------------------------------------------------------------


def _parse(path: Path, raw: bytes) -> tuple[_Stored, ...]:
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("version") != FILE_VERSION:
            raise ValueError(f'expected an object with "version": {FILE_VERSION}')
        items = document.get("tokens")
        if not isinstance(items, builtins.list):
            raise ValueError('expected a "tokens" list')
        entries = tuple(_parse_entry(item) for item in items)
        _check_unique(entries)
    except ValueError as exc:  # JSON and UTF-8 errors are ValueErrors too
        raise TokenError(
            f"the token file {path} is corrupt ({exc}): fix it, or delete it and add the tokens again "
            "with `astrid mcp token add NAME`"
        ) from None
    return entries


def _parse_entry(item: Any) -> _Stored:
    if not isinstance(item, dict):
        raise ValueError("a token entry is not an object")
    name, digest, created = item.get("name"), item.get("sha256"), item.get("created")
    problem = principal_problem(name)
    if problem is not None or not isinstance(name, str):
        raise ValueError(f"token name {name!r}: {problem}")
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
        raise ValueError(f"the token of {name!r} has no valid sha256 (64 lowercase hex digits)")
    if not isinstance(created, str):
        raise ValueError(f"the token of {name!r} has no creation time")
    when = datetime.fromisoformat(created)
    if when.tzinfo is None:
        raise ValueError(f"the creation time of {name!r} has no time zone")
    return _Stored(name, digest, when)


def _check_unique(entries: tuple[_Stored, ...]) -> None:
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        raise ValueError("a name appears twice")
    if len({entry.digest for entry in entries}) != len(entries):
        raise ValueError("a token digest appears twice")
