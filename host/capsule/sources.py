"""A capsule folder's Python sources as dev mode serves them (`astrid capsule dev`).

    files = read_sources(folder, site_packages)   # {"capsule/app.py": text, "site/pkg/__init__.py": text, ...}
    sources = DevSources(folder, manifest, files, runner)

Dev mode runs one prebuilt runner component for every capsule; the runner
imports the capsule's modules from the host (`astrid:dev/sources`). What it
can get is exactly what `read_sources` read, once per version, into memory:
the `.py` files under the capsule folder and under the isolated site its
`requirements.txt` pins, and nothing else: no other file type, no hidden or
cache folder, no symbolic link that leads out of the folder, at most
`DEV_TUNING` files and bytes. Paths are `capsule/<path>` and `site/<path>`,
relative and `/`-separated, UTF-8 with no control character; a sandbox that
asks for any other path gets nothing (the kernel serves from the dictionary,
never from the disk).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from astrid.host.capsule.manifest import MANIFEST_NAME, Manifest
from astrid.host.errors import CapsuleLoadError
from astrid.host.tuning import DEV_TUNING, DevTuning

CAPSULE_ROOT = "capsule/"
SITE_ROOT = "site/"
SOURCE_SUFFIX = ".py"
SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
SOURCES_FORMAT = "astrid-dev-sources-1"  # in the digest: bump when what it covers changes
# The WIT the dev runner imports the sources through (wit/deps/astrid-dev): the loader refuses it to any
# component but the runner, and `astrid capsule pack` refuses a component that imports it.
DEV_PACKAGE = "astrid:dev@1.0.0"
DEV_SOURCES_IMPORT = "astrid:dev/sources@1.0.0"


@dataclass(frozen=True)
class DevSources:
    """One version of a dev capsule: its manifest, its source files as read, and their digest.

    Fixed while that version is served: every sandbox of it gets these texts,
    whatever the folder holds by then. `runner` is the component that runs
    them (built once per SDK and toolchain, `host/build/dev_runner.py`).
    """

    folder: Path
    manifest: Manifest
    files: Mapping[str, str]
    runner: Path
    manifest_bytes: bytes = b""
    # sha256 over the manifest and every file (path and text): a new one for any edit
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        files = MappingProxyType(dict(self.files))
        object.__setattr__(self, "files", files)
        digest = hashlib.sha256(SOURCES_FORMAT.encode() + b"\0")
        entries: list[tuple[str, bytes]] = [("manifest", self.manifest_bytes)]
        entries += [(path, text.encode("utf-8")) for path, text in sorted(files.items())]
        for label, encoded in entries:
            digest.update(label.encode("utf-8") + b"\0" + len(encoded).to_bytes(8, "big") + encoded)
        object.__setattr__(self, "digest", digest.hexdigest())

    def names(self) -> list[str]:
        return sorted(self.files)


def read_manifest_bytes(folder: Path) -> bytes:
    try:
        return (Path(folder) / MANIFEST_NAME).read_bytes()
    except OSError as exc:
        raise CapsuleLoadError(f"{folder / MANIFEST_NAME}: cannot read: {exc.strerror or exc}") from None


def read_sources(folder: Path, site_packages: Path | None = None, tuning: DevTuning = DEV_TUNING) -> dict[str, str]:
    """The `.py` files of `folder` (as `capsule/...`) and of `site_packages` (as `site/...`), read now.

    CapsuleLoadError, naming the file and the fix, for a file that is too large
    or not UTF-8, a symbolic link that leads out of its folder, or more files
    or bytes than `tuning` allows.
    """
    budget = _Budget(tuning)
    files: dict[str, str] = {}
    _read_tree(Path(folder), CAPSULE_ROOT, files, budget, "the capsule folder")
    if site_packages is not None:
        _read_tree(Path(site_packages), SITE_ROOT, files, budget, "the packages requirements.txt pins")
    return files


class _Budget:
    def __init__(self, tuning: DevTuning) -> None:
        self.tuning = tuning
        self.files = 0
        self.bytes = 0

    def take(self, where: Path, size: int, what: str) -> None:
        tuning = self.tuning
        if size > tuning.max_file_bytes:
            raise CapsuleLoadError(
                f"{where}: {size} bytes, over dev mode's {tuning.max_file_bytes >> 20} MiB per source file "
                "(`astrid capsule build` builds it)"
            )
        self.files += 1
        self.bytes += size
        if self.files > tuning.max_source_files or self.bytes > tuning.max_total_bytes:
            raise CapsuleLoadError(
                f"{what}: more than {tuning.max_source_files} .py files or {tuning.max_total_bytes >> 20} MiB of "
                "them, more than dev mode serves (`astrid capsule build` builds it)"
            )


def _read_tree(root: Path, prefix: str, into: dict[str, str], budget: _Budget, what: str) -> None:
    real_root = root.resolve()
    for current, dirs, names in os.walk(root, followlinks=False):
        here = Path(current)
        kept = []
        for name in sorted(dirs):
            if name.startswith(".") or name in SKIP_DIRS:
                continue
            if (here / name).is_symlink():
                _inside(here / name, real_root, root)  # a link out is named; one inside is reached directly
                continue
            kept.append(name)
        dirs[:] = kept
        for name in sorted(names):
            if name.startswith(".") or not name.endswith(SOURCE_SUFFIX):
                continue
            path = here / name
            relative = path.relative_to(root).as_posix()
            _check_name(path, relative)
            target = _inside(path, real_root, root) if path.is_symlink() else path
            into[prefix + relative] = _read_text(target, path, budget, what)


def _inside(path: Path, real_root: Path, root: Path) -> Path:
    """Where the symbolic link `path` leads, when that is inside `root`; CapsuleLoadError otherwise."""
    target = path.resolve()
    if target != real_root and real_root not in target.parents:
        raise CapsuleLoadError(
            f"{path}: a symbolic link out of {root} (to {target}); dev mode reads only the files inside the "
            "folder: copy it in"
        )
    return target


def _check_name(path: Path, relative: str) -> None:
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        raise CapsuleLoadError(f"{path}: the file name is not UTF-8: rename it") from None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in relative):
        raise CapsuleLoadError(f"{path!r}: a control character in the file name: rename it")


def _read_text(target: Path, shown: Path, budget: _Budget, what: str) -> str:
    """The file's text, read without following a link at its last step (it was checked: `_inside`)."""
    try:
        descriptor = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CapsuleLoadError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(descriptor, "rb") as source:
        status = os.fstat(source.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise CapsuleLoadError(f"{shown}: not a regular file")
        budget.take(shown, status.st_size, what)
        data = source.read(budget.tuning.max_file_bytes + 1)
    if len(data) > budget.tuning.max_file_bytes:  # it grew since the stat
        budget.take(shown, len(data), what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CapsuleLoadError(f"{shown}: not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
