"""What a warm start already knew: the digest of each file it hashed, by the file's identity.

Before it runs anything, a start hashes every component (~14 ms per 19 MB, to
find its compiled entry) and checks the seal of every entry (~25 ms per
35 MB). The memo keeps each digest under the file's identity (path, size,
mtime, ctime, inode) in one file in the cache folder, so the next start of
any process skips both for files that did not change. It is trusted only as
far as the seal is:

- the memo file carries an HMAC of its contents under the compile cache's
  key: without the key nobody can make it vouch for a file (a memo that does
  not verify is ignored, and rewritten);
- a digest counts only while the identity is the same. Any write to a file
  changes its ctime, which only root can set back: the identity the seal
  already trusts within one process, kept across processes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

MAX_FILES = 4096  # identities remembered (the oldest go first)

Identity = str


def identity_of(path: Path) -> Identity:
    """The file's identity: what any change to its bytes changes."""
    status = os.stat(path)
    return f"{os.path.abspath(path)}\0{status.st_size}\0{status.st_mtime_ns}\0{status.st_ctime_ns}\0{status.st_ino}"


class DigestMemo:
    def __init__(self, path: Path, mac: Callable[[bytes], str]) -> None:
        """`path`: the memo file; `mac`: the HMAC of some bytes under the cache's key."""
        self.path = path
        self._mac = mac
        self._lock = threading.Lock()
        self._digests: dict[Identity, str] | None = None  # read on first use

    def get(self, identity: Identity) -> str | None:
        """The digest remembered for a file of this identity (`identity_of`); None: hash it."""
        with self._lock:
            return self._loaded().get(identity)

    def put(self, identity: Identity, path: Path, digest: str) -> None:
        """Remember `digest` for the file, if its identity is still the one taken before hashing it."""
        try:
            if identity_of(path) != identity:
                return  # it changed while being hashed: the digest may be of neither version
        except OSError:
            return
        with self._lock:
            digests = self._loaded()
            if digests.get(identity) == digest:
                return
            digests.pop(identity, None)
            digests[identity] = digest
            while len(digests) > MAX_FILES:
                digests.pop(next(iter(digests)))
            self._save(digests)

    def _loaded(self) -> dict[Identity, str]:
        """(Under the lock.)"""
        if self._digests is None:
            self._digests = self._read()
        return self._digests

    def _read(self) -> dict[Identity, str]:
        try:
            document = json.loads(self.path.read_bytes())
            body = document["digests"]
            if not isinstance(body, dict) or document["mac"] != self._mac(_canonical(body)):
                raise ValueError("its seal does not match")
            return {str(k): str(v) for k, v in body.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.debug("digest memo %s ignored: %s", self.path, exc)
            return {}

    def _save(self, digests: dict[Identity, str]) -> None:
        """Write the memo whole, atomically (best effort: an unwritable memo only costs hashing)."""
        document = {"digests": digests, "mac": self._mac(_canonical(digests))}
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it names the user's files
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps(document))
            os.replace(temp, self.path)
        except OSError as exc:
            log.debug("digest memo %s not written: %s", self.path, exc)
            with contextlib.suppress(OSError):  # the memo is only a speed-up: a stray temp file is harmless
                temp.unlink(missing_ok=True)


def _canonical(digests: dict[Identity, str]) -> bytes:
    return json.dumps(digests, sort_keys=True, separators=(",", ":")).encode()
