"""Static bearer tokens: one per principal, kept as digests in a file only its owner can touch.

`astrid mcp token add NAME` makes a random token (256 bits), prints it once
and keeps only its SHA-256 digest, with the principal name and the creation
time. A server started with the token file checks a presented token against
every digest in constant time (`hmac.compare_digest`, no early exit), so
neither a stolen file nor the response timing gives a token away.

The server re-reads the file when it changes on disk (inode, size, mtime,
ctime, mode, owner), so `astrid mcp token revoke` takes effect on the next
request without a restart; while it is unchanged a check costs one `stat`.

The file is JSON (`{"version": 1, "tokens": [{"name", "sha256", "created"}]}`)
and an `OwnerOnlyFile` (`host/owner_file.py`): written atomically with mode
0600, changes from two processes serialised by a lock, and refused (a
`TokenError` naming the fix, never a traceback) when someone other than its
owner could read or replace it, since whoever writes it can let themselves
in. A missing file means no tokens; a corrupt
one is refused, never guessed at.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from astrid.host.auth.principal import principal_problem
from astrid.host.errors import TokenError
from astrid.host.owner_file import OwnerOnlyFile

TOKEN_BYTES = 32  # 256 bits of randomness per token
TOKEN_MAX = 1024  # a longer bearer string is not one of ours: refused without hashing it
FILE_VERSION = 1
_HEX = frozenset("0123456789abcdef")


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


class TokenStore:
    """The token file at `path`: add, list and revoke tokens, and find the principal of a presented token."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: OwnerOnlyFile[tuple[_Stored, ...]] = OwnerOnlyFile(
            self.path, noun="token file", stakes="who may log in", error=TokenError, parse=_parse, empty=()
        )

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
        return self._file.current()

    @contextmanager
    def _changing(self) -> Iterator[builtins.list[_Stored]]:
        """A fresh copy of the entries to change in place; written back atomically unless the block raises."""
        with self._file.rewriting() as current:
            entries = builtins.list(current)
            yield entries
            if entries != builtins.list(current):
                self._file.write_json({"version": FILE_VERSION, "tokens": [entry.as_json() for entry in entries]})


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


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
