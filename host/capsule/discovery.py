"""Finding capsule folders, and telling a built component older than its source.

discover_capsules([home, "./caps"])   # a folder with Capsule.toml, or the children of a folder of them
stale_component(folder)               # "app.py is newer than notes.wasm ...: rebuild with ...", or None
"""

from __future__ import annotations

import os
from pathlib import Path

from astrid.host.capsule.manifest import MANIFEST_NAME, Manifest, ManifestError, load_manifest
from astrid.host.tuning import KERNEL_TUNING

# Sources whose change means the component must be built again (data files baked in at
# import time are not counted: editing a README must not call for a rebuild).
STALE_SOURCE_SUFFIXES = (".py",)
STALE_SOURCE_NAMES = ("requirements.txt",)
STALE_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
# The capsule's own pytest tests (`astrid capsule test`), beside its source: never built into it,
# so editing a test neither calls for a rebuild nor misses the build cache.
TESTS_FOLDER = "tests"


def discover_capsules(paths: list[Path]) -> list[Path]:
    """Capsule folders under `paths`: a folder with a manifest, or the children of a parent folder."""
    found: list[Path] = []
    for path in paths:
        path = Path(path)
        if (path / MANIFEST_NAME).is_file():
            found.append(path.resolve())
        elif path.is_dir():
            found.extend(child.resolve() for child in sorted(path.iterdir()) if (child / MANIFEST_NAME).is_file())
    unique: list[Path] = []
    for folder in found:
        if folder not in unique:
            unique.append(folder)
    return unique


def stale_component(folder: Path, manifest: Manifest | None = None) -> str | None:
    """Why the built component in `folder` is older than its source, or None.

    The source is every `.py` file of the capsule folder (hidden entries,
    caches and its `tests/` folder skipped) and its `requirements.txt`. None also when it cannot tell:
    no manifest, no component yet, or more than `KERNEL_TUNING.stale_check_max_files` files. A
    one-line message otherwise, naming the newest source file and the fix:

        app.py is newer than notes.wasm (changed after the last build): rebuild with `astrid capsule build notes`
    """
    folder = Path(folder)
    if manifest is None:
        try:
            manifest = load_manifest(folder)
        except ManifestError:
            return None
    wasm = folder / manifest.component_file
    try:
        built = wasm.stat().st_mtime_ns
    except OSError:
        return None
    newest: tuple[int, Path] | None = None
    seen = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in STALE_SKIP_DIRS)
        if root == str(folder):
            dirs[:] = [d for d in dirs if d != TESTS_FOLDER]
        for name in files:
            seen += 1
            if seen > KERNEL_TUNING.stale_check_max_files:
                return None
            if name.startswith(".") or not (name.endswith(STALE_SOURCE_SUFFIXES) or name in STALE_SOURCE_NAMES):
                continue
            path = Path(root) / name
            try:
                changed = path.stat().st_mtime_ns
            except OSError:
                continue
            if changed > built and (newest is None or changed > newest[0]):
                newest = (changed, path)
    if newest is None:
        return None
    source = newest[1].relative_to(folder).as_posix()
    return (
        f"{source} is newer than {manifest.component_file} (changed after the last build): "
        f"rebuild with `astrid capsule build {folder}`"
    )
