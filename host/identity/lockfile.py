"""`capsules.lock`: the exact capsules an operator installed, to install again byte for byte.

    {"version": 1, "capsules": [{"name": "notes", "version": "1.0.0",
      "artifact": "sha256:<the artifact file's digest>", "component": "sha256:<its component's>",
      "publisher": "acme", "key": "<key fingerprint>" (both null: unsigned),
      "source": "oci://host/repo@sha256:<manifest digest>" or "/path/to/notes-1.0.0.capsule"}]}

`astrid capsule install` records every install here; `install --locked`
fetches each entry from its source (an OCI source by its manifest digest,
never by a tag that may have moved) and installs it only when the bytes
fetched have the locked artifact digest. An owner-only file: whoever can
edit it chooses what the next `--locked` install runs, among what install
would accept anyway: an entry is no way around the checks (install.py's
`fetch_locked` and `check_locked`). An unsigned entry (`key` null) needs
`--allow-unsigned`; the artifact fetched must be signed by the entry's key
and carry its name, version and component; and an entry older than the
highest version installed here needs `--allow-downgrade` (versions.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from astrid.host.identity.errors import LockError
from astrid.host.owner_file import OwnerOnlyFile
from astrid.host.settings import config_dir

LOCK_VERSION = 1
_FIELDS = ("name", "version", "artifact", "component", "publisher", "key", "source")


def default_lock_file() -> Path:
    """`$ASTRID_CONFIG_DIR/capsules.lock` (Linux `~/.config/astrid/capsules.lock`)."""
    return config_dir() / "capsules.lock"


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    artifact: str  # sha256:<hex> of the artifact bytes installed
    component: str  # sha256:<hex> of its component
    publisher: str | None
    key: str | None  # the signing key's fingerprint; None: installed unsigned
    source: str  # where --locked fetches it again


class LockFile:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: OwnerOnlyFile[dict[str, Locked]] = OwnerOnlyFile(
            self.path,
            noun="capsule lock file",
            stakes="what `install --locked` runs",
            error=LockError,
            parse=_parse,
            empty={},
        )

    def entries(self) -> list[Locked]:
        return list(self._file.current().values())

    def get(self, name: str) -> Locked | None:
        return self._file.current().get(name)

    def record(self, entry: Locked) -> None:
        with self._changing() as entries:
            entries[entry.name] = entry

    def forget(self, name: str) -> bool:
        with self._changing() as entries:
            return entries.pop(name, None) is not None

    @contextmanager
    def _changing(self) -> Iterator[dict[str, Locked]]:
        with self._file.rewriting() as current:
            entries = dict(current)
            yield entries
            self._file.write_json(_document(entries))


def _document(entries: dict[str, Locked]) -> dict[str, Any]:
    return {"version": LOCK_VERSION, "capsules": [asdict(entries[name]) for name in sorted(entries)]}


def _parse(path: Path, raw: bytes) -> dict[str, Locked]:
    import json

    if not raw.strip():
        return {}
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise LockError(f"{path} is not JSON: fix it or delete it (installs are recorded there again)") from None
    if not isinstance(document, dict) or document.get("version") != LOCK_VERSION:
        raise LockError(f"{path}: not a version {LOCK_VERSION} capsule lock file")
    capsules = document.get("capsules")
    if not isinstance(capsules, list):
        raise LockError(f"{path}: no `capsules` list")
    entries: dict[str, Locked] = {}
    for index, item in enumerate(capsules):
        if not isinstance(item, dict) or set(item) != set(_FIELDS):
            raise LockError(f"{path}: capsule {index} must have exactly the keys {', '.join(_FIELDS)}")
        for key in ("name", "version", "artifact", "component", "source"):
            if not isinstance(item[key], str) or not item[key]:
                raise LockError(f"{path}: capsule {index}: `{key}` must be a non-empty string")
        for key in ("publisher", "key"):
            if item[key] is not None and not isinstance(item[key], str):
                raise LockError(f"{path}: capsule {index}: `{key}` must be a string or null")
        for key in ("artifact", "component"):
            if not _is_digest(item[key]):
                raise LockError(f"{path}: capsule {index}: `{key}` must be sha256:<64 hex digits>")
        entries[item["name"]] = Locked(**{key: item[key] for key in _FIELDS})
    return entries


def _is_digest(text: str) -> bool:
    prefix, _, hex_digits = text.partition(":")
    return prefix == "sha256" and len(hex_digits) == 64 and all(c in "0123456789abcdef" for c in hex_digits)
