"""No silent downgrade: the highest version of each publisher's capsule installed here, and the rule against it.

An old release stays validly signed forever, so whoever can hand the operator
an artifact (a file, a registry tag they can move, a lock file entry) could
otherwise put an older, perhaps vulnerable, release back in place, and the
grants bound to the capsule's identity would carry over to the older code.
So install compares the new release with the one installed now and with the
highest one ever installed here, remembered in an owner-only file that
`astrid capsule remove` does not touch:

    {"version": 1,
     "publishers": {"acme": {"notes": {"version": "1.1.0",
                                       "component": "sha256:<hex>", "manifest": "sha256:<hex>"}}}}

Keyed by the publisher's name in the trust store (not by its key, so a
rotated key keeps the history) and the capsule's name. Unsigned installs
have no publisher and are not remembered: nothing ties one unsigned artifact
to another, and whoever could replay an old one could as well write a new
one with a higher version.

The rule (`reason_to_refuse`): versions are ordered by semantic-versioning
precedence (MAJOR.MINOR.PATCH, a pre-release below its release, build
metadata ignored). A lower version is refused; so is a version that cannot be
ordered against the one before (not MAJOR.MINOR.PATCH: fail closed); the same
version is a reinstall only with the same bytes (component and Capsule.toml),
else it is refused as a possible replay (a publisher bumps the version for
every release). `--allow-downgrade` lets any of these through, loudly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from astrid.host.identity.errors import Downgrade, VersionError
from astrid.host.identity.keys import name_problem
from astrid.host.owner_file import OwnerOnlyFile
from astrid.host.settings import config_dir

FILE_VERSION = 1
ALLOW = "--allow-downgrade"

_NUMBER = r"0|[1-9][0-9]*"
_IDENTIFIERS = r"[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*"
_SEMVER = re.compile(rf"({_NUMBER})\.({_NUMBER})\.({_NUMBER})(?:-({_IDENTIFIERS}))?(?:\+{_IDENTIFIERS})?")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

# A version's precedence: (major, minor, patch, pre-release), the pre-release as (0, identifiers) or (1,) for none.
Precedence = tuple[int, int, int, tuple[Any, ...]]


def default_versions_file() -> Path:
    """`$ASTRID_CONFIG_DIR/capsule-versions.json` (Linux `~/.config/astrid/capsule-versions.json`)."""
    return config_dir() / "capsule-versions.json"


# -- ordering ---------------------------------------------------------------------------------------


def precedence(version: str) -> Precedence | None:
    """The semantic-versioning precedence of `version`, or None when it is not MAJOR.MINOR.PATCH[-PRE][+BUILD]."""
    match = _SEMVER.fullmatch(version)
    if match is None:
        return None
    major, minor, patch, pre = match.groups()
    if pre is None:
        return int(major), int(minor), int(patch), (1,)  # a release ranks above its pre-releases
    ranked: list[tuple[int, int, str]] = []
    for identifier in pre.split("."):
        if identifier.isdigit():
            if len(identifier) > 1 and identifier[0] == "0":
                return None  # semver forbids leading zeros in numeric identifiers
            ranked.append((0, int(identifier), ""))  # numeric identifiers rank below alphanumeric ones
        else:
            ranked.append((1, 0, identifier))
    return int(major), int(minor), int(patch), (0, tuple(ranked))


def compare_versions(new: str, old: str) -> int | None:
    """-1, 0 or 1 as `new` ranks below, equal to or above `old`; None when either is not a semantic version."""
    a, b = precedence(new), precedence(old)
    if a is None or b is None:
        return 0 if new == old else None
    return (a > b) - (a < b)


# -- the rule ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """One release of a capsule, as install compares it: its version and the bytes that run."""

    version: str
    component: str | None  # sha256:<hex>; None: unknown (a damaged install), never "the same bytes"
    manifest: str | None  # sha256:<hex> of its Capsule.toml

    def same_bytes(self, other: Release) -> bool:
        return self.component is not None and (self.component, self.manifest) == (other.component, other.manifest)


def reason_to_refuse(name: str, new: Release, before: Release, where: str) -> str | None:
    """Why `new` may not replace `before` (`where` says which one that is, e.g. "installed now"), or None."""
    order = compare_versions(new.version, before.version)
    if order is None:
        return (
            f"{name} version {new.version!r} cannot be ordered against {before.version!r}, {where} "
            "(versions are compared as MAJOR.MINOR.PATCH[-PRE])"
        )
    if order < 0:
        return f"{name} {new.version} is older than {name} {before.version}, {where}"
    if order == 0 and not new.same_bytes(before):
        return (
            f"{name} {new.version} has other bytes than the {name} {before.version} {where} "
            f"(component {_short(new.component)}, was {_short(before.component)}); a publisher bumps the version "
            "for every release, so this may be a replay"
        )
    return None


def refused(reason: str) -> Downgrade:
    return Downgrade(f"{reason}: not installed; install it anyway with {ALLOW} if you mean to")


def _short(digest: str | None) -> str:
    return digest.removeprefix("sha256:")[:16] if digest else "unknown"


# -- the memory -------------------------------------------------------------------------------------


class VersionMemory:
    """The highest release of each (publisher, capsule) installed here: an `OwnerOnlyFile` at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: OwnerOnlyFile[dict[str, dict[str, Release]]] = OwnerOnlyFile(
            self.path,
            noun="capsule version file",
            stakes=f"which older capsule versions install without {ALLOW}",
            error=VersionError,
            parse=_parse,
            empty={},
        )

    def highest(self, publisher: str, name: str) -> Release | None:
        return self._file.current().get(publisher, {}).get(name)

    def reason_to_refuse(self, publisher: str, name: str, new: Release) -> str | None:
        """Why `new` may not be installed, given the highest release of `name` by `publisher` installed here."""
        before = self.highest(publisher, name)
        return None if before is None else reason_to_refuse(name, new, before, self._where(publisher))

    def remember(self, publisher: str, name: str, new: Release, *, allow_downgrade: bool) -> None:
        """Check `new` again (under the file's lock, so a concurrent install cannot slip between) and keep it
        as the mark when it is higher. A release let through by `allow_downgrade` replaces the mark only when
        the two cannot be ordered or are the same version: the operator approved it last."""
        with self._changing() as releases:
            mine = releases.setdefault(publisher, {})
            before = mine.get(name)
            if before is not None:
                reason = reason_to_refuse(name, new, before, self._where(publisher))
                if reason is not None and not allow_downgrade:
                    raise refused(reason)
                if compare_versions(new.version, before.version) == -1:
                    return  # an allowed downgrade: the higher one stays the mark
            mine[name] = new

    def _where(self, publisher: str) -> str:
        return f"the highest of publisher {publisher} installed here before (remembered in {self.path})"

    @contextmanager
    def _changing(self) -> Iterator[dict[str, dict[str, Release]]]:
        with self._file.rewriting() as current:
            releases = {publisher: dict(names) for publisher, names in current.items()}
            yield releases
            if releases != current:
                self._file.write_json(_document(releases))


def _document(releases: dict[str, dict[str, Release]]) -> dict[str, Any]:
    return {
        "version": FILE_VERSION,
        "publishers": {
            publisher: {name: asdict(release) for name, release in sorted(releases[publisher].items())}
            for publisher in sorted(releases)
        },
    }


def _parse(path: Path, raw: bytes) -> dict[str, dict[str, Release]]:
    try:
        return _releases(json.loads(raw))
    except (ValueError, RecursionError) as exc:  # JSON and UTF-8 errors too
        raise VersionError(
            f"the capsule version file {path} is corrupt ({exc}): fix it, or delete it (then astrid forgets which "
            f"versions were installed, and older ones install again without {ALLOW})"
        ) from None


def _releases(document: Any) -> dict[str, dict[str, Release]]:
    if not isinstance(document, dict) or set(document) != {"version", "publishers"}:
        raise ValueError('expected {"version": 1, "publishers": {...}}')
    if document["version"] != FILE_VERSION:
        raise ValueError(f"version {document['version']!r} is not {FILE_VERSION}")
    publishers = document["publishers"]
    if not isinstance(publishers, dict):
        raise ValueError('"publishers" must be an object')
    releases: dict[str, dict[str, Release]] = {}
    for publisher, names in publishers.items():
        if name_problem(publisher) or not isinstance(names, dict):
            raise ValueError(f"publisher {publisher!r} must be a publisher name with an object of capsules")
        releases[publisher] = {name: _release(name, item) for name, item in names.items()}
    return releases


def _release(name: str, item: Any) -> Release:
    if (
        not isinstance(item, dict)
        or set(item) != {"version", "component", "manifest"}
        or not isinstance(item["version"], str)
        or not item["version"]
        or not all(isinstance(item[k], str) and _DIGEST.fullmatch(item[k]) for k in ("component", "manifest"))
    ):
        raise ValueError(
            f'capsule {name!r} must be {{"version": ..., "component": "sha256:…", "manifest": "sha256:…"}}'
        )
    return Release(item["version"], item["component"], item["manifest"])
