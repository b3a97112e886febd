"""The hostile capsules: one componentize-py build, copied under many names and modes.

`tests/fixtures/hostile/app.py` is written straight against the generated
bindings (no SDK to protect it). It is built once per content hash of app.py,
the WIT and componentize-py; every hostile capsule is a copy of that folder
with another name and `[config] mode`, so they share the one component (and
one compile-cache entry) and differ only in their source-id.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from astrid.host.build.python_toolchain import componentize_py_version
from astrid.host.capsule.provenance import source_id_for
from astrid.host.toolpaths import componentize_py
from astrid.wit import CAPSULE_WORLD, WIT_DIR
from tests.support.capsules import build_cache_dir
from tests.support.paths import FIXTURES

HOSTILE = FIXTURES / "hostile"
HOSTILE_WAT = HOSTILE / "wat"
BUILD_TIMEOUT_S = 900


def hostile_wasm_path(*, stub_wasi: bool = True) -> Path:
    """The hostile component, built once per content hash of app.py, the WIT and componentize-py.

    `stub_wasi` (the default): built as capsules were before the host linked WASI (no WASI
    imports at all), which must keep loading; False: linked to the host's WASI, as today's are."""
    digest = hashlib.sha256()
    for path in sorted([HOSTILE / "app.py", *WIT_DIR.rglob("*.wit")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(componentize_py_version().encode())
    flags = ["-s"] if stub_wasi else []
    cached = build_cache_dir() / f"hostile{'' if stub_wasi else '-wasi'}-{digest.hexdigest()[:32]}.wasm"
    if not cached.exists():
        tmp = cached.with_name(f"{cached.name}.{uuid.uuid4().hex}.tmp")
        subprocess.run(
            [componentize_py(), "-d", str(WIT_DIR), "-w", CAPSULE_WORLD, "componentize", *flags,
             "-p", str(HOSTILE), "app", "-o", str(tmp)],
            check=True, capture_output=True, timeout=BUILD_TIMEOUT_S, cwd=str(HOSTILE),
        )  # fmt: skip
        os.replace(tmp, cached)
    return cached


def hostile_manifest(name: str, mode: str, capabilities: str = "", **config: str | int) -> str:
    """The hostile manifest for `name` in `mode`; `capabilities` is the body of a [capabilities] table."""
    text = (HOSTILE / "Capsule.toml").read_text(encoding="utf-8")
    text = text.replace('name = "hostile"', f'name = "{name}"', 1).replace('id = "hostile"', f'id = "{name}"', 1)
    settings = {"mode": mode, "base": f"astrid://{name}/", "suffix": name, **config}
    head, _, _ = text.partition("[config]")
    lines = [
        f"{key} = {value!r}" if isinstance(value, int) else f'{key} = "{value}"' for key, value in settings.items()
    ]
    asked = f"[capabilities]\n{capabilities}\n\n" if capabilities else ""
    return head + asked + "[config]\n" + "\n".join(lines) + "\n"


def make_hostile(parent: Path, name: str, mode: str, wasm: Path, capabilities: str = "", **config: str | int) -> Path:
    """A copy of the hostile capsule named `name` running `mode` (asking for `capabilities`)."""
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(hostile_manifest(name, mode, capabilities, **config), encoding="utf-8")
    shutil.copy(HOSTILE / "app.py", folder / "app.py")  # for the reader; the component is what runs
    shutil.copy(wasm, folder / "hostile.wasm")
    return folder


def hostile_source_id(name: str, wasm: Path) -> str:
    return source_id_for(name, hashlib.sha256(wasm.read_bytes()).hexdigest())


def name_sorting(wasm: Path, prefix: str, *, before: str | None = None, after: str | None = None) -> str:
    """A capsule name `prefix-N` whose source-id sorts before/after the given source-id."""
    for n in range(1000):
        name = f"{prefix}-{n}"
        sid = hostile_source_id(name, wasm)
        if (before is None or sid < before) and (after is None or sid > after):
            return name
    raise AssertionError("no such name")
