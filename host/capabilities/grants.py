"""What the operator granted each capsule: the grants file.

A capsule's manifest only asks (`[capabilities]`); the operator grants with
`astrid capsule grant NAME SPEC` and takes back with `astrid capsule revoke
NAME SPEC`. A capability is usable only when it is both asked for and
granted (`usable`), so neither side alone widens what a capsule can reach.

Specs, as the operator types them:

    fs:MOUNT=PATH      the folder PATH is the capsule's read-only mount MOUNT;
                       PATH may hold `{principal}`, one folder per principal
    kv                 durable key-value state, one namespace per principal
    http:HOST[:PORT]   outbound https to HOST (`http:http://HOST[:PORT]` for
                       plain http); an IP literal here also allows that
                       loopback or private address
    bus:request        ask other capsules over the bus: publish the requests
                       and hear the replies its `[publish]` and `[subscribe]`
                       declare (`astrid.host.kernel.reserved`); without it a
                       capsule can only serve

The file (`$ASTRID_CONFIG_DIR/grants.json`) is keyed by capsule name, and
each entry is bound to one capsule's identity (`kernel.provenance`: its
publisher's key and name when signed, its folder when local):
`{"version": 1, "capsules": {"files": {"identity": "folder:/home/me/caps/files",
"fs": {"files": "/home/me/notes"}, "kv": true, "http": ["api.example.com"],
"bus": ["request"]}}}`. A capsule with the same name and another identity
gets none of them. An entry with no identity (a grant made before grants were
bound, or to a capsule not found when granting) is bound by the first capsule
of that name the kernel loads (`adopt`). It is an `OwnerOnlyFile`: whoever
writes it decides what capsules may touch. A running server re-reads it when
it changes, so a grant or a revoke needs no restart.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from astrid.host.capabilities.http import HttpGrant, parse_http_grant
from astrid.host.errors import GrantError
from astrid.host.owner_file import OwnerOnlyFile

FILE_VERSION = 1
PRINCIPAL_PLACEHOLDER = "{principal}"
BUS_REQUEST = "bus:request"
# The file keeps bus rights as a list (`"bus": ["request"]`), so another one can join it.
_BUS_RIGHTS = frozenset({"request"})
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # a capsule or mount name (the manifest's grammar)


@dataclass(frozen=True)
class CapsuleGrants:
    """One capsule's grants. `fs` maps a mount name to its folder (maybe holding `{principal}`)."""

    fs: tuple[tuple[str, str], ...] = ()
    kv: bool = False
    http: tuple[HttpGrant, ...] = ()
    bus_request: bool = False  # may ask other capsules over the bus
    identity: str | None = None  # the capsule these belong to (`Provenance.grant_key`); None: not bound yet

    @property
    def mounts(self) -> dict[str, str]:
        return dict(self.fs)

    def specs(self) -> list[str]:
        """Every grant as the operator would type it."""
        return (
            [f"fs:{mount}={path}" for mount, path in self.fs]
            + (["kv"] if self.kv else [])
            + [f"http:{grant.text()}" for grant in self.http]
            + ([BUS_REQUEST] if self.bus_request else [])
        )

    def empty(self) -> bool:
        return not (self.fs or self.kv or self.http or self.bus_request)

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.identity is not None:
            document["identity"] = self.identity
        if self.fs:
            document["fs"] = dict(self.fs)
        if self.kv:
            document["kv"] = True
        if self.http:
            document["http"] = [grant.text() for grant in self.http]
        if self.bus_request:
            document["bus"] = ["request"]
        return document


NO_GRANTS = CapsuleGrants()


def grant_command(capsule: str, spec: str) -> str:
    """The exact command that grants `spec` to `capsule` (for error texts)."""
    return f"astrid capsule grant {capsule} {spec}"


def check_spec(spec: str) -> None:
    """Raise `GrantError` naming the shapes when `spec` is not a grant spec."""
    _with_grant(NO_GRANTS, spec)


def usable(
    granted: CapsuleGrants, *, fs: Iterable[str], kv: bool, http: Iterable[str], bus_request: bool = False
) -> CapsuleGrants:
    """What a capsule may use: its grants narrowed to what its manifest asks for.

    `bus_request` is asked for by declaring requests or replies in `[publish]`
    or `[subscribe]` (`astrid.host.kernel.reserved.bus_asks`), not in `[capabilities]`."""
    asked_mounts = set(fs)
    asked_hosts = list(http)
    return CapsuleGrants(
        fs=tuple((mount, path) for mount, path in granted.fs if mount in asked_mounts),
        kv=granted.kv and kv,
        http=tuple(grant for grant in granted.http if any(covers(asked, grant) for asked in asked_hosts)),
        bus_request=granted.bus_request and bus_request,
    )


def covers(asked: str, grant: HttpGrant) -> bool:
    """Does `grant` reach the manifest's `http` entry `asked` (`host`, `host:port`, `[v6]:port`)?"""
    host, port = _asked_host(asked)
    default = 443 if grant.scheme == "https" else 80
    return grant.host == host and (port is None or port == (grant.port or default))


def mount_folder(template: str, principal: str | None) -> Path | None:
    """The folder of a granted mount for `principal`; None when the path needs a
    principal and there is none, or the name cannot be one folder name."""
    if PRINCIPAL_PLACEHOLDER not in template:
        return Path(template)
    if principal is None or principal in (".", "..") or any(c in principal for c in "/\\\0"):
        return None
    return Path(template.replace(PRINCIPAL_PLACEHOLDER, principal))


class GrantStore:
    """The grants file at `path`: read it (re-read when it changes), grant and revoke."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: OwnerOnlyFile[dict[str, CapsuleGrants]] = OwnerOnlyFile(
            self.path, noun="grants file", stakes="what capsules may reach", error=GrantError, parse=_parse, empty={}
        )

    def for_capsule(self, name: str, identity: str | None = None) -> CapsuleGrants:
        """Capsule `name`'s grants, if they belong to `identity` (or are not bound yet); None: any identity."""
        granted = self.all().get(name, NO_GRANTS)
        if identity is not None and granted.identity is not None and granted.identity != identity:
            return NO_GRANTS  # a capsule of that name, but not the one the operator granted
        return granted

    def all(self) -> dict[str, CapsuleGrants]:
        """Every capsule's grants as on disk now: one `stat` while the file is unchanged."""
        return self._file.current()

    def grant(self, capsule: str, spec: str, identity: str | None = None) -> str:
        """Add the grant `spec` for `capsule` (bound to `identity` when given); returns it in canonical form."""
        _check_capsule(capsule)
        check_spec(spec)  # a bad spec fails before the file is touched
        with self._changing() as grants:
            current = grants.get(capsule, NO_GRANTS)
            if identity is not None and current.identity not in (None, identity):
                raise GrantError(
                    f"the grants of {capsule} belong to another capsule of that name ({current.identity}): "
                    f"revoke them first (`astrid capsule revoke {capsule} all`) to grant this one"
                )
            updated, canonical = _with_grant(current, spec)
            grants[capsule] = replace(updated, identity=identity or current.identity)
        return canonical

    def adopt(self, capsule: str, identity: str) -> bool:
        """Bind `capsule`'s grants to `identity` if they are bound to nobody yet; True when it did."""
        if self.all().get(capsule, NO_GRANTS).identity is not None or capsule not in self.all():
            return False
        with self._changing() as grants:
            current = grants.get(capsule)
            if current is None or current.identity is not None:
                return False
            grants[capsule] = replace(current, identity=identity)
        return True

    def revoke(self, capsule: str, spec: str) -> bool:
        """Remove `spec` (`fs:MOUNT`, `kv`, `http:HOST[:PORT]`, `bus:request`, `all`); False when it was not granted."""
        _check_capsule(capsule)
        current = self.for_capsule(capsule)
        if _without_grant(current, spec) == current:  # nothing to do: touch no file
            return False
        with self._changing() as grants:
            before = grants.get(capsule, NO_GRANTS)
            after = _without_grant(before, spec)
            if after.empty():
                grants.pop(capsule, None)
            else:
                grants[capsule] = after
        return after != before

    @contextmanager
    def _changing(self) -> Iterator[dict[str, CapsuleGrants]]:
        with self._file.rewriting() as current:
            grants = dict(current)
            yield grants
            if grants != current:
                capsules = {name: grants[name].as_json() for name in sorted(grants)}
                self._file.write_json({"version": FILE_VERSION, "capsules": capsules})


# -- specs --------------------------------------------------------------------------------


def _check_capsule(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise GrantError(f"capsule name {name!r}: use its [package] name (1-64 characters of [a-z0-9_-])")


def _with_grant(current: CapsuleGrants, spec: str) -> tuple[CapsuleGrants, str]:
    kind, _, rest = spec.partition(":")
    if spec == "kv":
        return replace(current, kv=True), "kv"
    if spec == BUS_REQUEST:
        return replace(current, bus_request=True), BUS_REQUEST
    if kind == "fs":
        mount, eq, path = rest.partition("=")
        if not eq or not path:
            raise GrantError(f"grant {spec!r}: write fs:MOUNT=PATH, e.g. fs:notes=~/notes")
        _check_mount(mount, spec)
        folder = _folder(path, spec)
        mounts = {**current.mounts, mount: folder}
        return replace(current, fs=tuple(sorted(mounts.items()))), f"fs:{mount}={folder}"
    if kind == "http" and rest:
        grant = _http_grant(rest, spec)
        kept = tuple(g for g in current.http if g != grant) + (grant,)
        return replace(current, http=kept), f"http:{grant.text()}"
    shapes = f"fs:MOUNT=PATH, kv, http:HOST[:PORT] (http:http://HOST[:PORT] for http), or {BUS_REQUEST}"
    raise GrantError(f"grant {spec!r}: write {shapes}")


def _without_grant(current: CapsuleGrants, spec: str) -> CapsuleGrants:
    kind, _, rest = spec.partition(":")
    if spec == "all":
        return replace(NO_GRANTS, identity=current.identity)
    if spec == "kv":
        return replace(current, kv=False)
    if spec == BUS_REQUEST:
        return replace(current, bus_request=False)
    if kind == "fs" and rest:
        mount = rest.partition("=")[0]
        return replace(current, fs=tuple((m, p) for m, p in current.fs if m != mount))
    if kind == "http" and rest:
        grant = _http_grant(rest, spec)
        return replace(current, http=tuple(g for g in current.http if g != grant))
    raise GrantError(f"revoke {spec!r}: write fs:MOUNT, kv, http:HOST[:PORT], {BUS_REQUEST}, or all")


def _check_mount(mount: str, spec: str) -> None:
    if not _NAME.fullmatch(mount):
        raise GrantError(f"grant {spec!r}: the mount name {mount!r} must be 1-64 characters of [a-z0-9_-]")


def _folder(path: str, spec: str) -> str:
    """The mount's folder as an absolute path (relative to where the command runs)."""
    if "\0" in path:
        raise GrantError(f"grant {spec!r}: the path holds a NUL character")
    braces = path.replace(PRINCIPAL_PLACEHOLDER, "")
    if "{" in braces or "}" in braces:
        raise GrantError(f"grant {spec!r}: the only placeholder a path may hold is {PRINCIPAL_PLACEHOLDER}")
    return os.path.abspath(os.path.expanduser(path))


def _http_grant(text: str, spec: str) -> HttpGrant:
    try:
        return parse_http_grant(text)
    except ValueError as exc:
        raise GrantError(f"grant {spec!r}: {exc}") from None


def _asked_host(entry: str) -> tuple[str, int | None]:
    """`api.example.com`, `host:8080`, `[::1]:8080` from a manifest's `http` list -> (host, port)."""
    host, port = entry, None
    if entry.startswith("["):
        host, _, tail = entry[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else None
    elif entry.count(":") == 1:
        host, _, digits = entry.partition(":")
        port = int(digits)
    return host.lower(), port


# -- the format -----------------------------------------------------------------------------


def _parse_capsule(name: Any, item: Any) -> CapsuleGrants:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"capsule name {name!r} is not a capsule name")
    if not isinstance(item, dict) or set(item) - {"identity", "fs", "kv", "http", "bus"}:
        raise ValueError(f"the grants of {name!r} must be an object with identity, fs, kv, http and bus only")
    identity = item.get("identity")
    if identity is not None and not (isinstance(identity, str) and identity.startswith(("key:", "folder:"))):
        raise ValueError(f'the "identity" of {name!r} must be "key:FINGERPRINT/NAME" or "folder:PATH"')
    mounts = item.get("fs", {})
    if not isinstance(mounts, dict) or not all(
        isinstance(m, str) and _NAME.fullmatch(m) and isinstance(p, str) and os.path.isabs(p) for m, p in mounts.items()
    ):
        raise ValueError(f'the "fs" grants of {name!r} must map mount names to absolute paths')
    kv = item.get("kv", False)
    hosts = item.get("http", [])
    if not isinstance(kv, bool) or not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ValueError(f'the "kv" or "http" grants of {name!r} are malformed')
    bus = item.get("bus", [])
    if not isinstance(bus, list) or not all(isinstance(right, str) and right in _BUS_RIGHTS for right in bus):
        raise ValueError(f'the "bus" grants of {name!r} must be a list of {sorted(_BUS_RIGHTS)}')
    return CapsuleGrants(
        fs=tuple(sorted(mounts.items())),
        kv=kv,
        http=tuple(parse_http_grant(h) for h in hosts),
        bus_request="request" in bus,
        identity=identity,
    )


def _parse(path: Path, raw: bytes) -> dict[str, CapsuleGrants]:
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("version") != FILE_VERSION:
            raise ValueError(f'expected an object with "version": {FILE_VERSION}')
        capsules = document.get("capsules", {})
        if not isinstance(capsules, dict):
            raise ValueError('expected a "capsules" object')
        return {name: _parse_capsule(name, item) for name, item in capsules.items()}
    except ValueError as exc:  # JSON, UTF-8 and grant-spec errors are ValueErrors too
        raise GrantError(
            f"the grants file {path} is corrupt ({exc}): fix it, or delete it and grant again "
            "with `astrid capsule grant NAME SPEC`"
        ) from None
