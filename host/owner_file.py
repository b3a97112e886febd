"""A small JSON file that decides who may do what, so only its owner may touch it.

The token file (who may log in) and the grants file (what capsules may reach)
are such files. Whoever can write one can let themselves in, so on POSIX a
file not owned by the user running astrid, or one others may read or write,
is refused (like ssh with a private key: reading reveals the policy, and a
loose mode is usually a mistake), and so is a folder others may write to (they
could put their own file in its place). The file is never reached through a
symlink (`O_NOFOLLOW`: a link, say into a folder others may write to, is
refused naming the fix), and every open, lock and rename happens relative to
a descriptor of the folder that was checked, so swapping the folder between
the check and the use changes nothing. On Windows the user profile's ACLs
guard the config dir and no check is made.

Writes are atomic (a 0600 temp file in the same folder, fsynced, then renamed
over the file); a folder made for the file gets mode 0700. Read-modify-write
cycles from two processes at once are serialised by an advisory lock beside
the file (`.<name>.lock`). `current()` keeps the parsed content and re-reads the file
only when its signature (inode, size, times, mode, owner) changed, at the cost
of one `stat`, so a server sees another process's change on its next look.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
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
# Open the folder once, check it, and reach the file relative to that descriptor
# (O_PATH where there is one: it needs no read permission on the folder).
_AT = _POSIX and {os.open, os.rename, os.stat, os.unlink} <= os.supports_dir_fd  # os.replace: as os.rename
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO put in the file's place never blocks the reader

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
        """What changes whenever the file does; None when it is missing (or unreadable: `read` says why).
        The link itself when the file is a symlink, so that never matches what `read` saw."""
        try:
            return _signature(os.stat(self.path, follow_symlinks=False))
        except OSError:
            return None

    def read(self) -> tuple[Signature | None, bytes | None]:
        """The file's signature and bytes, after the ownership checks; (None, None) when it is missing."""
        try:
            folder = self._open_folder()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise self._cannot("read", exc) from None
        try:
            try:
                fd = self._open(folder, self.path.name, os.O_RDONLY | _NONBLOCK)
            except FileNotFoundError:
                return None, None
            except OSError as exc:
                raise self._refused_link(folder) or self._cannot("read", exc) from None
            with os.fdopen(fd, "rb") as source:
                status = os.fstat(fd)
                self._check_file(status)
                self._check_folder(folder)
                try:
                    return _signature(status), source.read()
                except OSError as exc:
                    raise self._cannot("read", exc) from None
        finally:
            _close(folder)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the advisory lock for a read-modify-write cycle (the folder is made and checked first)."""
        self._ensure_folder(self.path.parent)
        try:
            folder = self._open_folder()
        except OSError as exc:
            raise self.error(f"cannot use the folder {self.path.parent}: {exc.strerror or exc}") from None
        try:
            self._check_folder(folder)
            if fcntl is None:  # pragma: no cover - Windows
                yield
                return
            lock_name = f".{self.path.name}.lock"
            try:
                fd = self._open(folder, lock_name, os.O_RDWR | os.O_CREAT)
            except OSError as exc:
                lock_path = self.path.with_name(lock_name)
                raise self.error(f"cannot create the lock file {lock_path}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the lock
        finally:
            _close(folder)

    def write_json(self, document: Any) -> None:
        """Replace the file with `document`, atomically, mode 0600 (call it under `locked()`)."""
        text = json.dumps(document, indent=2) + "\n"
        try:
            folder = self._open_folder()
        except OSError as exc:
            raise self._cannot("write", exc) from None
        temp = f".{self.path.name}.{secrets.token_hex(8)}.tmp"
        try:
            self._check_folder(folder)
            fd = self._open(folder, temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    if _POSIX:
                        os.fchmod(out.fileno(), 0o600)  # whatever the umask
                    out.write(text)
                    out.flush()
                    os.fsync(out.fileno())
                if folder is None:  # pragma: no cover - Windows
                    os.replace(self.path.with_name(temp), self.path)
                else:
                    os.replace(temp, self.path.name, src_dir_fd=folder, dst_dir_fd=folder)
            finally:
                _unlink(folder, self.path.with_name(temp))
        except OSError as exc:
            raise self._cannot("write", exc) from None
        finally:
            _close(folder)

    # -- reaching the file ----------------------------------------------------------------------

    def _open_folder(self) -> int | None:
        """A descriptor of the file's folder, to check and to open the file relative to (None on Windows)."""
        return os.open(self.path.parent, _FOLDER_FLAGS) if _AT else None

    def _open(self, folder: int | None, name: str, flags: int) -> int:
        """Open `name` in the folder, never through a symlink (O_NOFOLLOW)."""
        if folder is None:  # pragma: no cover - Windows
            return os.open(self.path.with_name(name), flags | _FILE_FLAGS, 0o600)
        return os.open(name, flags | _FILE_FLAGS, 0o600, dir_fd=folder)

    def _refused_link(self, folder: int | None) -> AstridError | None:
        """The error for a file that is a symlink (which O_NOFOLLOW refused to open), else None."""
        try:
            if folder is None:  # pragma: no cover - Windows
                is_link = self.path.is_symlink()
            else:
                is_link = stat.S_ISLNK(os.stat(self.path.name, dir_fd=folder, follow_symlinks=False).st_mode)
        except OSError:
            return None
        if not is_link:
            return None
        target = os.path.realpath(self.path)
        return self.error(
            f"the {self.noun} {self.path} is a symbolic link (to {target}), which astrid does not follow: "
            f"whoever can change the link or its target's folder decides {self.stakes}; "
            f"put the file itself in its place (`mv {target} {self.path}`)"
        )

    def _cannot(self, verb: str, exc: OSError) -> AstridError:
        return self.error(f"cannot {verb} the {self.noun} {self.path}: {exc.strerror or exc}; check its permissions")

    # -- who may change the file ------------------------------------------------------------

    def _check_file(self, status: os.stat_result) -> None:
        if not stat.S_ISREG(status.st_mode):
            raise self.error(
                f"the {self.noun} {self.path} is not a regular file: move it away and keep the {self.noun} "
                "as a plain file"
            )
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

    def _check_folder(self, folder_fd: int | None) -> None:
        """The folder (as opened: `folder_fd`) is the user's or root's, and only its owner may write to it."""
        if not _POSIX:
            return
        folder = self.path.parent
        try:
            status = os.fstat(folder_fd) if folder_fd is not None else os.stat(folder)
        except OSError as exc:
            raise self.error(f"cannot use the folder {folder}: {exc.strerror or exc}") from None
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
            folder.mkdir(parents=True, mode=0o700, exist_ok=True)  # another process may make it first
            os.chmod(folder, 0o700)  # whatever the umask
        except OSError as exc:
            raise self.error(f"cannot create the folder {folder} for the {self.noun}: {exc.strerror or exc}") from None


def _signature(status: os.stat_result) -> Signature:
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_mode, status.st_uid)


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _unlink(folder: int | None, path: Path) -> None:
    """Remove a temp file that is still there (after a failed write); nothing when it was renamed."""
    with contextlib.suppress(OSError):  # already renamed into place, or gone: nothing is left to remove
        if folder is None:  # pragma: no cover - Windows
            path.unlink()
        else:
            os.unlink(path.name, dir_fd=folder)
