"""A small JSON file that decides who may do what, so only its owner may touch it.

The token file (who may log in) and the grants file (what capsules may reach)
are such files. Whoever can write one can let themselves in, so on POSIX a
file not owned by the user running astrid, or one others may read or write,
is refused (like ssh with a private key: reading reveals the policy, and a
loose mode is usually a mistake), and so is a folder others may write to (they
could put their own file in its place). On Windows the user profile's ACLs
guard the config dir and no check is made.

Writes are atomic (a temp file in the same folder, then `os.replace`) with
mode 0600; a folder made for the file gets mode 0700. Read-modify-write cycles
from two processes at once are serialised by an advisory lock beside the file
(`.<name>.lock`). `current()` keeps the parsed content and re-reads the file
only when its signature (inode, size, times, mode, owner) changed, at the cost
of one `stat`, so a server sees another process's change on its next look.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

from astrid.host.errors import AstridError

try:  # POSIX: serialise read-modify-write cycles across processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_POSIX = os.name == "posix"

# (inode, size, mtime, ctime, mode, owner): any write, replace or chmod changes one of them
Signature = tuple[int, int, int, int, int, int]
Content = TypeVar("Content")


class OwnerOnlyFile(Generic[Content]):
    """The file at `path`; `noun` names it in errors ("token file"), `stakes` says
    what its owner decides ("who may log in"), `error` is the exception to raise;
    `parse(path, bytes)` turns its bytes into content (`empty` when it is missing)."""

    def __init__(
        self,
        path: Path,
        *,
        noun: str,
        stakes: str,
        error: type[AstridError],
        parse: Callable[[Path, bytes], Content],
        empty: Content,
    ) -> None:
        self.path = Path(path)
        self.noun = noun
        self.stakes = stakes
        self.error = error
        self._parse = parse
        self._empty = empty
        self._lock = threading.Lock()
        self._loaded: tuple[Signature | None, Content] | None = None

    def current(self) -> Content:
        """The content on disk now: one `stat` while the file is unchanged, else a checked re-read."""
        signature = self.signature()
        loaded = self._loaded
        if loaded is not None and loaded[0] == signature:
            return loaded[1]
        with self._lock:
            self._loaded = self._load()
            return self._loaded[1]

    @contextmanager
    def rewriting(self) -> Iterator[Content]:
        """The content as on disk, under the file's lock, for a read-modify-write cycle:
        the block writes the new content with `write_json` (or leaves the file as it is)."""
        with self.locked(), self._lock:
            try:
                yield self._load()[1]
            finally:
                self._loaded = None  # the next look re-reads whatever the block did

    def _load(self) -> tuple[Signature | None, Content]:
        signature, raw = self.read()
        return signature, (self._empty if raw is None else self._parse(self.path, raw))

    def signature(self) -> Signature | None:
        """What changes whenever the file does; None when it is missing (or unreadable: `read` says why)."""
        try:
            return _signature(os.stat(self.path))
        except OSError:
            return None

    def read(self) -> tuple[Signature | None, bytes | None]:
        """The file's signature and bytes, after the ownership checks; (None, None) when it is missing."""
        try:
            with self.path.open("rb") as source:
                status = os.fstat(source.fileno())
                self._check_file(status)
                return _signature(status), source.read()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise self.error(
                f"cannot read the {self.noun} {self.path}: {exc.strerror or exc}; check its permissions"
            ) from None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the advisory lock for a read-modify-write cycle (the folder is made and checked first)."""
        folder = self.path.parent
        self._ensure_folder(folder)
        try:
            self._check_folder(folder)
        except OSError as exc:
            raise self.error(f"cannot use the folder {folder}: {exc.strerror or exc}") from None
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        lock_path = self.path.with_name(f".{self.path.name}.lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise self.error(f"cannot create the lock file {lock_path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def write_json(self, document: Any) -> None:
        """Replace the file with `document`, atomically, mode 0600 (call it under `locked()`)."""
        try:
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")  # 0600
        except OSError as exc:
            raise self.error(f"cannot write the {self.noun} {self.path}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(document, out, indent=2)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except OSError as exc:
            raise self.error(f"cannot write the {self.noun} {self.path}: {exc.strerror or exc}") from None
        finally:
            Path(temp).unlink(missing_ok=True)

    # -- who may change the file ------------------------------------------------------------

    def _check_file(self, status: os.stat_result) -> None:
        if not _POSIX:
            return
        me = os.getuid()
        if status.st_uid != me:
            raise self.error(
                f"the {self.noun} {self.path} belongs to uid {status.st_uid}, not to you (uid {me}): "
                f"whoever owns it decides {self.stakes}; use a {self.noun} of your own"
            )
        if status.st_mode & 0o077:
            raise self.error(
                f"the {self.noun} {self.path} is open to other users (mode {stat.filemode(status.st_mode)}): "
                f"run `chmod 600 {self.path}`"
            )
        self._check_folder(self.path.parent)

    def _check_folder(self, folder: Path) -> None:
        if not _POSIX:
            return
        status = os.stat(folder)
        if status.st_uid not in (os.getuid(), 0) or status.st_mode & 0o022:
            raise self.error(
                f"the folder {folder} of the {self.noun} may be written by other users "
                f"(owner uid {status.st_uid}, mode {stat.filemode(status.st_mode)}), who could replace the file: "
                f"run `chmod 700 {folder}`, or keep the {self.noun} in a folder of your own"
            )

    def _ensure_folder(self, folder: Path) -> None:
        if folder.is_dir():
            return
        try:
            folder.mkdir(parents=True, mode=0o700)
            os.chmod(folder, 0o700)  # whatever the umask
        except FileExistsError:
            pass
        except OSError as exc:
            raise self.error(f"cannot create the folder {folder} for the {self.noun}: {exc.strerror or exc}") from None


def _signature(status: os.stat_result) -> Signature:
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_mode, status.st_uid)
