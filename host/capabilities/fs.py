"""Read-only files beneath the folders the operator granted as mounts.

A guest path is relative and its first segment names the mount:
`notes/today.md` is `today.md` in the mount `notes`. The path is checked as
text first (no absolute paths, `.`/`..` or empty segments, backslashes, NUL,
control characters, nor anything over the length caps), then resolved
relative to the mount folder's descriptor so it can never leave it:

- with `openat2(2)` and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` where the
  kernel has it (Linux 5.6+): the kernel follows a symlink only while it
  stays beneath the mount, and refuses one that leaves (EXDEV);
- else by walking component by component with `O_NOFOLLOW`, which refuses
  every symlink (checking where one points is what openat2 does atomically;
  doing it by hand would race with a rename).

A file is opened `O_NONBLOCK` and checked with `fstat` before any read, so a
FIFO never blocks the host and a device is never read; only regular files
are read. Nothing here creates or writes anything, and no error text names a
host path: only the path the guest asked for.

`on_touch` (optional) hears the mount folder and the host path of every
well-formed request for a granted mount, before it is opened (a missing file
too: it may appear), with its kind: `file` (read, stat) or `folder` (list). The kernel records with it
which files a resource read touched, so a change to one of them updates that
resource for its subscribers (docs/contract/subscriptions.md §11).
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import logging
import os
import stat
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from astrid.host.capabilities.errors import CapabilityError

_T = TypeVar("_T")
log = logging.getLogger(__name__)

# (mount folder, host path, "file" | "folder"): what one fs call looked at
Touch = Callable[[str, str, str], None]

READ_CAP = 8 << 20  # bytes per read
LIST_CAP = 4096  # entries per list
MAX_PATH_BYTES = 4096
MAX_SEGMENT_BYTES = 255

_OPENAT2 = 437  # the same syscall number on x86-64 and aarch64 (the generic table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_O_PATH = getattr(os, "O_PATH", 0)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@dataclass(frozen=True)
class FileStat:
    kind: str  # "file", "directory", "symlink" or "other"
    size: int
    modified_ms: int


@dataclass(frozen=True)
class DirEntry:
    name: str
    kind: str
    size: int
    modified_ms: int


class MountedFiles:
    """The mounts one capsule may read in one call: mount name -> folder."""

    def __init__(
        self,
        capsule: str,
        mounts: Mapping[str, Path],
        *,
        asked: Collection[str] | None = None,
        use_openat2: bool | None = None,
        on_touch: Touch | None = None,
    ) -> None:
        self.capsule = capsule
        self.mounts = dict(mounts)
        self.asked = set(self.mounts if asked is None else asked)  # for the error text: ask, or grant?
        self.use_openat2 = openat2_available() if use_openat2 is None else use_openat2
        self.on_touch = on_touch

    def read(self, path: str) -> bytes:
        self._touch(path, "file")
        fd = self._open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            status = os.fstat(fd)
            if stat.S_ISDIR(status.st_mode):
                raise CapabilityError("is-directory")
            if not stat.S_ISREG(status.st_mode):
                raise CapabilityError("access")  # FIFOs, devices, sockets are never read
            if status.st_size > READ_CAP:
                raise CapabilityError("too-large")
            return _read_capped(fd)
        finally:
            os.close(fd)

    def list(self, path: str) -> builtins.list[DirEntry]:
        self._touch(path, "folder")
        fd = self._open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names = os.listdir(fd)
            if len(names) > LIST_CAP:
                raise CapabilityError("too-large")
            entries = []
            for name in sorted(names):
                try:
                    status = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since the listing
                entries.append(DirEntry(name, _kind(status), status.st_size, status.st_mtime_ns // 1_000_000))
            return entries
        finally:
            os.close(fd)

    def stat(self, path: str) -> FileStat:
        self._touch(path, "file")
        mount, parts = self._split(path)
        if not parts:
            fd = self._open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                status = os.fstat(fd)
            finally:
                os.close(fd)
        else:  # the entry itself, not what a symlink points to
            parent = self._open("/".join([mount, *parts[:-1]]), os.O_RDONLY | os.O_DIRECTORY)
            try:
                status = _os_call(lambda: os.stat(parts[-1], dir_fd=parent, follow_symlinks=False))
            finally:
                os.close(parent)
        return FileStat(_kind(status), status.st_size, status.st_mtime_ns // 1_000_000)

    # -- resolution -------------------------------------------------------------------

    def host_path(self, path: str) -> tuple[str, str]:
        """(the mount folder, where `path` lies on the host), spelled as a walk of the mount
        folder spells them (`MOUNT_FOLDER/a/b`); refuses what `read` would, opening nothing."""
        mount, parts = self._split(path)
        root = str(self.mounts[mount])
        return root, os.path.join(root, *parts)

    def _touch(self, path: str, kind: str) -> None:
        """Tell `on_touch` what this call looks at; a path it refuses is nobody's news."""
        if self.on_touch is None:
            return
        try:
            root, where = self.host_path(path)
        except CapabilityError:
            return  # the call itself says why
        try:
            self.on_touch(root, where, kind)
        except Exception:  # recording must never fail the call
            log.exception("recording an fs call failed")

    def _split(self, path: str) -> tuple[str, builtins.list[str]]:
        """(mount, segments beneath it) of a well-formed guest path; refuses the rest."""
        problem = path_problem(path)
        if problem:
            raise CapabilityError("invalid-path", f"{problem}: {_shown(path)}")
        mount, *parts = path.rstrip("/").split("/")
        if mount not in self.mounts and mount not in self.asked:
            raise CapabilityError(
                "capability-denied",
                f"{self.capsule} does not ask for the fs mount {mount!r}: add it to `fs` under [capabilities] "
                "in its Capsule.toml",
            )
        if mount not in self.mounts:
            raise CapabilityError(
                "capability-denied",
                f"no grant for the fs mount {mount!r}: the operator runs "
                f"`astrid capsule grant {self.capsule} fs:{mount}=PATH`",
            )
        return mount, parts

    def _open(self, path: str, flags: int) -> int:
        """A descriptor for `path` beneath its mount, opened with `flags` (plus O_NOFOLLOW, O_CLOEXEC)."""
        mount, parts = self._split(path)
        root = _os_call(lambda: os.open(self.mounts[mount], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        if not parts:
            if flags & os.O_DIRECTORY:
                return root
            os.close(root)
            raise CapabilityError("is-directory")
        try:
            if self.use_openat2:  # the kernel keeps every step, symlinks included, beneath root
                return _openat2(root, "/".join(parts), flags | os.O_CLOEXEC)
            return _walk(root, parts, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
        finally:
            os.close(root)


def path_problem(path: object) -> str | None:
    """What makes `path` unacceptable as a guest path (a phrase), or None."""
    if not isinstance(path, str) or not path:
        return "empty path"
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if len(encoded) > MAX_PATH_BYTES:
        return f"longer than {MAX_PATH_BYTES} bytes"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in path):
        return "NUL or a control character"
    if path.startswith("/"):
        return "an absolute path (start with a mount name)"
    if "\\" in path:
        return "a backslash"
    for segment in path[:-1].split("/") if path.endswith("/") else path.split("/"):
        if segment in ("", ".", ".."):
            return "an empty, '.' or '..' segment"
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            return f"a segment longer than {MAX_SEGMENT_BYTES} bytes"
    return None


_availability: bool | None = None
_availability_lock = threading.Lock()


def openat2_available() -> bool:
    """Does this kernel have openat2 (asked once per process)?"""
    global _availability
    with _availability_lock:
        if _availability is None:
            _availability = _probe_openat2()
        return _availability


def _probe_openat2() -> bool:
    if not hasattr(os, "O_PATH"):
        return False
    try:
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        found = _openat2(fd, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        os.close(found)
        return True
    except (CapabilityError, OSError):
        return False
    finally:
        os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def _openat2(root: int, relative: str, flags: int) -> int:
    how = _OpenHow(flags=flags, mode=0, resolve=_RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd = _syscall(
        ctypes.c_long(_OPENAT2),
        ctypes.c_int(root),
        ctypes.c_char_p(relative.encode("utf-8")),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        raise _error(ctypes.get_errno())
    return int(fd)


def _walk(root: int, parts: list[str], flags: int) -> int:
    """Open `parts` beneath `root` one component at a time, refusing every symlink."""
    current = os.dup(root)
    try:
        for name in parts[:-1]:
            following = _beneath(current, name, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            os.close(current)
            current = following
        return _beneath(current, parts[-1], flags)
    finally:
        os.close(current)


def _beneath(folder: int, name: str, flags: int) -> int:
    """`openat(folder, name, flags)` for one component; a symlink there is a boundary escape."""
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_symlink(folder, name):
            raise CapabilityError("boundary-escape") from None
        raise _error(exc.errno or 0) from None


def _is_symlink(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _os_call(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except OSError as exc:
        raise _error(exc.errno or 0) from None


def _error(number: int) -> CapabilityError:
    """The WIT error for an errno; never the host path."""
    if number == errno.ENOENT:
        return CapabilityError("not-found")
    if number in (errno.EACCES, errno.EPERM, errno.ENXIO, errno.ENODEV):
        return CapabilityError("access")
    if number == errno.ENOTDIR:
        return CapabilityError("not-directory")
    if number in (errno.ELOOP, errno.EXDEV):  # a symlink out (openat2) or any symlink (the walk)
        return CapabilityError("boundary-escape")
    if number == errno.EISDIR:
        return CapabilityError("is-directory")
    if number == errno.ENAMETOOLONG:
        return CapabilityError("invalid-path", "name too long")
    return CapabilityError("unknown", errno.errorcode.get(number, str(number)))


def _read_capped(fd: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, READ_CAP + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > READ_CAP:  # it grew while we read
            raise CapabilityError("too-large")


def _kind(status: os.stat_result) -> str:
    if stat.S_ISREG(status.st_mode):
        return "file"
    if stat.S_ISDIR(status.st_mode):
        return "directory"
    if stat.S_ISLNK(status.st_mode):
        return "symlink"
    return "other"


def _shown(path: str) -> str:
    """The guest's path for an error text: printable and short."""
    shown = path.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
    return repr(shown[:200])
