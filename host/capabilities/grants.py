"""What the operator granted each capsule: the grants file.

A capsule's manifest only asks (`[capabilities]`); the operator grants with
`astrid capsule grant NAME SPEC` and takes back with `astrid capsule revoke
NAME SPEC`. A capability is usable only when it is both asked for and
granted (`usable`), so neither side alone widens what a capsule can reach.

Specs, as the operator types them (each capability's grammar is its plug-in's,
`capabilities/plugins/`; the file's entry holds each under its name):

    fs:MOUNT=PATH      the folder PATH is the capsule's read-only mount MOUNT;
                       PATH may hold `{principal}`, one folder per principal
    kv                 durable key-value state, one namespace per principal
    http:HOST[:PORT]   outbound https to HOST (`http:http://HOST[:PORT]` for
                       plain http); an IP literal here also allows that
                       loopback or private address
    bus:request        ask other capsules over the bus: publish the requests
                       and hear the replies its `[publish]` and `[subscribe]`
                       declare (`astrid.host.contract.bus_asks`); without it a
                       capsule can only serve

The file (`$ASTRID_CONFIG_DIR/grants.json`) is keyed by capsule name, and
each entry is bound to one capsule's identity (`capsule.provenance`: its
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
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from astrid.host.capabilities.asks import Asks
from astrid.host.capabilities.capability import Capability
from astrid.host.capabilities.registry import capabilities, for_spec, named
from astrid.host.errors import GrantError
from astrid.host.owner_file import OwnerOnlyFile

FILE_VERSION = 1
BUS_REQUEST = "bus:request"
# The file keeps bus rights as a list (`"bus": ["request"]`), so another one can join it.
_BUS_RIGHTS = frozenset({"request"})
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # a capsule name (the manifest's grammar)


@dataclass(frozen=True)
class CapsuleGrants:
    """One capsule's grants: each capability's, by name (`of`), and the bus right."""

    granted: tuple[tuple[str, Any], ...] = ()  # (capability name, its grant) for each granted anything
    bus_request: bool = False  # may ask other capsules over the bus
    identity: str | None = None  # the capsule these belong to (`Provenance.grant_key`); None: not bound yet

    def of(self, capability: Capability[Any, Any]) -> Any:
        return dict(self.granted).get(capability.name, capability.nothing_granted)

    def with_grant(self, capability: Capability[Any, Any], grant: Any) -> CapsuleGrants:
        """These grants with `capability`'s replaced by `grant` (nothing granted: left out)."""
        kept = {**dict(self.granted), capability.name: grant}
        order = [each.name for each in capabilities()]
        granted = tuple(
            (name, kept[name])
            for name in sorted(kept, key=lambda name: order.index(name) if name in order else len(order))
            if name in order and kept[name] != named(name).nothing_granted  # type: ignore[union-attr]
        )
        return replace(self, granted=granted)

    def specs(self) -> list[str]:
        """Every grant as the operator would type it."""
        specs = [spec for capability in capabilities() for spec in capability.grant_specs(self.of(capability))]
        return specs + ([BUS_REQUEST] if self.bus_request else [])

    def empty(self) -> bool:
        return not (self.granted or self.bus_request)

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.identity is not None:
            document["identity"] = self.identity
        for name, grant in self.granted:
            capability = named(name)
            if capability is not None:
                document[name] = capability.grant_json(grant)
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


def usable(granted: CapsuleGrants, asked: Asks, *, bus_request: bool = False) -> CapsuleGrants:
    """What a capsule may use: its grants narrowed to what its manifest asks for.

    `bus_request` is asked for by declaring requests or replies in `[publish]`
    or `[subscribe]` (`astrid.host.contract.bus_asks.bus_asks`), not in `[capabilities]`."""
    narrowed = replace(NO_GRANTS, bus_request=granted.bus_request and bus_request)
    for capability in capabilities():
        narrowed = narrowed.with_grant(capability, capability.usable(granted.of(capability), asked.of(capability)))
    return narrowed


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
    if spec == BUS_REQUEST:
        return replace(current, bus_request=True), BUS_REQUEST
    capability = for_spec(spec)
    if capability is None:
        shapes = ", ".join(each.grants_like for each in capabilities())
        raise GrantError(f"grant {spec!r}: write {shapes}, or {BUS_REQUEST}")
    try:
        grant, canonical = capability.granted(current.of(capability), spec)
    except ValueError as exc:
        raise GrantError(f"grant {spec!r}: {exc}") from None
    return current.with_grant(capability, grant), canonical


def _without_grant(current: CapsuleGrants, spec: str) -> CapsuleGrants:
    if spec == "all":
        return replace(NO_GRANTS, identity=current.identity)
    if spec == BUS_REQUEST:
        return replace(current, bus_request=False)
    capability = for_spec(spec)
    if capability is None:
        shapes = ", ".join(each.revokes_like for each in capabilities())
        raise GrantError(f"revoke {spec!r}: write {shapes}, {BUS_REQUEST}, or all")
    try:
        return current.with_grant(capability, capability.revoked(current.of(capability), spec))
    except ValueError as exc:
        raise GrantError(f"revoke {spec!r}: {exc}") from None


# -- the format -----------------------------------------------------------------------------


def _parse_capsule(name: Any, item: Any) -> CapsuleGrants:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"capsule name {name!r} is not a capsule name")
    keys = {"identity", *(capability.name for capability in capabilities()), "bus"}
    if not isinstance(item, dict) or set(item) - keys:
        raise ValueError(f"the grants of {name!r} must be an object with {', '.join(sorted(keys))} only")
    identity = item.get("identity")
    if identity is not None and not (isinstance(identity, str) and identity.startswith(("key:", "folder:"))):
        raise ValueError(f'the "identity" of {name!r} must be "key:FINGERPRINT/NAME" or "folder:PATH"')
    bus = item.get("bus", [])
    if not isinstance(bus, list) or not all(isinstance(right, str) and right in _BUS_RIGHTS for right in bus):
        raise ValueError(f'the "bus" grants of {name!r} must be a list of {sorted(_BUS_RIGHTS)}')
    grants = CapsuleGrants(bus_request="request" in bus, identity=identity)
    for capability in capabilities():
        if capability.name in item:
            try:
                grant = capability.grant_from_json(item[capability.name])
            except ValueError as exc:
                raise ValueError(f'the "{capability.name}" grants of {name!r} are malformed: {exc}') from None
            grants = grants.with_grant(capability, grant)
    return grants


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
