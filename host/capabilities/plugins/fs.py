"""`fs`: read-only files beneath the folders the operator grants (docs/capabilities.md).

Asked with `fs = ["notes"]` (mount names: the first segment of every path the
capsule reads), granted with `astrid capsule grant NAME fs:notes=~/notes`. A
granted folder may hold `{principal}` (each user their own folder). Reads go
through `MountedFiles` (`capabilities/fs.py`: beneath the mount, no symlink
out, capped), loaded only once a capsule reads a file; a read's files are
recorded (`Call.touched`) so a change to one updates the resource.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from astrid.host.capabilities.capability import Call, Calls, Capability, HostSettings, Served

PRINCIPAL_PLACEHOLDER = "{principal}"
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # a mount name (the manifest's grammar)

Mounts = tuple[tuple[str, str], ...]  # (mount, folder: absolute, maybe holding {principal}), sorted


class Fs(Capability[tuple[str, ...], Mounts]):
    name = "fs"
    interface = "astrid:fs/host@1.0.0"
    asks_like = 'fs = ["notes"]'
    grants_like = "fs:MOUNT=PATH"
    revokes_like = "fs:MOUNT"
    nothing_asked: tuple[str, ...] = ()
    nothing_granted: Mounts = ()
    in_every_metadata = True
    cases_with_text = frozenset({"capability-denied", "invalid-path", "unknown"})
    cases_without_text = frozenset(
        {"boundary-escape", "not-found", "access", "is-directory", "not-directory", "too-large"}
    )

    def ask(self, value: object) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(mount, str) for mount in value):
            raise ValueError('fs must be a list of mount names, e.g. ["notes"]')
        for mount in value:
            if not _NAME.fullmatch(mount):
                raise ValueError(f"mount {mount!r} must be 1-64 characters of [a-z0-9_-], starting with a letter/digit")
        return tuple(value)

    def ask_json(self, ask: tuple[str, ...]) -> list[str]:
        return sorted(set(ask))

    def ask_specs(self, ask: tuple[str, ...]) -> list[str]:
        return [f"fs:{mount}" for mount in self.ask_json(ask)]

    def covers(self, ask: tuple[str, ...], other: tuple[str, ...]) -> bool:
        return set(other) <= set(ask)

    def granted(self, current: Mounts, spec: str) -> tuple[Mounts, str]:
        mount, eq, path = spec.removeprefix("fs:").partition("=")
        if not spec.startswith("fs:") or not eq or not path:
            raise ValueError("write fs:MOUNT=PATH, e.g. fs:notes=~/notes")
        _check_mount(mount)
        folder = _folder(path)
        mounts = {**dict(current), mount: folder}
        return tuple(sorted(mounts.items())), f"fs:{mount}={folder}"

    def revoked(self, current: Mounts, spec: str) -> Mounts:
        mount = spec.removeprefix("fs:").partition("=")[0]
        if not spec.startswith("fs:") or not mount:
            raise ValueError("write fs:MOUNT")
        return tuple((m, p) for m, p in current if m != mount)

    def grant_json(self, grant: Mounts) -> dict[str, str]:
        return dict(grant)

    def grant_from_json(self, value: object) -> Mounts:
        if not isinstance(value, dict) or not all(
            isinstance(m, str) and _NAME.fullmatch(m) and isinstance(p, str) and os.path.isabs(p)
            for m, p in value.items()
        ):
            raise ValueError("must map mount names to absolute paths")
        return tuple(sorted(value.items()))

    def grant_specs(self, grant: Mounts) -> list[str]:
        return [f"fs:{mount}={path}" for mount, path in grant]

    def usable(self, granted: Mounts, asked: tuple[str, ...]) -> Mounts:
        return tuple((mount, path) for mount, path in granted if mount in asked)

    def explain(self, capsule: str, asked: tuple[str, ...], granted: Mounts) -> list[str]:
        folders = dict(granted)
        return [
            f"fs {mount}: granted: {folders[mount]}"
            if mount in folders
            else f"fs {mount}: not granted (astrid capsule grant {capsule} fs:{mount}=PATH)"
            for mount in asked
        ]

    def serve(self, settings: HostSettings) -> ServedFs:
        return ServedFs()


FS = Fs()


def mount_folder(template: str, principal: str | None) -> Path | None:
    """The folder of a granted mount for `principal`; None when the path needs a
    principal and there is none, or the name cannot be one folder name."""
    if PRINCIPAL_PLACEHOLDER not in template:
        return Path(template)
    if principal is None or principal in (".", "..") or any(c in principal for c in "/\\\0"):
        return None
    return Path(template.replace(PRINCIPAL_PLACEHOLDER, principal))


def _check_mount(mount: str) -> None:
    if not _NAME.fullmatch(mount):
        raise ValueError(f"the mount name {mount!r} must be 1-64 characters of [a-z0-9_-]")


def _folder(path: str) -> str:
    """The mount's folder as an absolute path (relative to where the command runs)."""
    if "\0" in path:
        raise ValueError("the path holds a NUL character")
    braces = path.replace(PRINCIPAL_PLACEHOLDER, "")
    if "{" in braces or "}" in braces:
        raise ValueError(f"the only placeholder a path may hold is {PRINCIPAL_PLACEHOLDER}")
    return os.path.abspath(os.path.expanduser(path))


class ServedFs(Served):
    def link(self, root: Any, calls: Calls) -> None:
        def entry(found: Any, *, with_name: bool = True) -> Any:
            fields = {"kind": found.kind, "size": found.size, "modified_ms": found.modified_ms}
            return calls.record(name=found.name, **fields) if with_name else calls.record(**fields)

        with root.add_instance(FS.interface) as fs:
            fs.add_func("read", calls.func(FS, "read", lambda call, path: _files(call).read(path)))
            fs.add_func("list", calls.func(FS, "list", lambda call, path: [entry(e) for e in _files(call).list(path)]))
            fs.add_func(
                "stat", calls.func(FS, "stat", lambda call, path: entry(_files(call).stat(path), with_name=False))
            )


def _files(call: Call) -> Any:
    mounts: dict[str, Path] = {}
    for mount, template in call.granted:
        folder = mount_folder(template, call.principal)
        if folder is not None:
            mounts[mount] = folder
    from astrid.host.capabilities.fs import MountedFiles  # here: only a capsule that reads files loads it

    return MountedFiles(call.capsule, mounts, asked=call.asked, on_touch=call.touched)
