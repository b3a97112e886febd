"""Build a capsule folder into a WebAssembly component, whatever its language.

    validate Capsule.toml -> its toolchain checks the sources, fetches what
    they pin and hashes every input (`toolchain.py`; Python: componentize-py)
    -> (Python, not in the build cache) Capsule.toml checked against the
       sources in the dev runner, in about a second (`dev_sources.py`)
    -> componentize (unless the build cache holds that content hash)
    -> compile it and check Capsule.toml against what it declares (asked in
       the sandbox) -> record its static describe (asked in the sandbox)
    -> write the manifest's [[component]] file (or OUT)

Capsule.toml is checked against what the BUILT component declares, asked of
it in the kernel's sandbox (`code_check.py`, the reserved action
`astrid.facts`), on every build, from the build cache or not; a mismatch
fails the build with the lines to add or remove, and nothing is written. The
build then asks it, the same way, for the describe and templates replies it
gives every principal (the reserved action `astrid.static`) and keeps them
beside its compile-cache entry, sealed (`kernel/static_replies.py`): served,
a capsule with nothing dynamic answers describe without a guest call. Both
actions are the language-neutral contract of docs/contract/reserved-actions.md.

Builds are cached by the toolchain's content hash. The cache lives in
`ASTRID_BUILD_CACHE_DIR` (default: the user cache dir + `builds`), so
rebuilding an unchanged capsule is a file copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from astrid.host.build.code_check import check_manifest, mismatch_message, read_built
from astrid.host.build.steps import Progress, last_line, shown, with_ticks
from astrid.host.build.toolchain import toolchain_for
from astrid.host.capsule.discovery import stale_component
from astrid.host.capsule.manifest import MANIFEST_NAME, Manifest, ManifestError, load_manifest
from astrid.host.errors import BuildError, CapsuleLoadError
from astrid.host.settings import BUILD_CACHE_ENV, path_setting

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildResult:
    name: str
    output: Path
    size: int
    seconds: float
    cached: bool  # served from the build cache (no toolchain run)
    content_hash: str
    precompiled: Path | None  # the compile-cache entry, when precompiling ran
    warnings: tuple[str, ...] = ()  # what the build noticed but did not refuse (one sentence each)
    static: tuple[str, ...] = ()  # the requests ("describe", "templates") the host answers without calling it


def default_build_cache_dir() -> Path:
    return path_setting(BUILD_CACHE_ENV, Path(platformdirs.user_cache_dir("astrid")) / "builds")


def output_path(folder: Path, manifest: Manifest, out: Path | None) -> Path:
    return Path(out) if out is not None else folder / manifest.component_file


def build_capsule(
    folder: Path,
    out: Path | None = None,
    *,
    progress: Progress | None = None,
    precompile: bool = True,
    cache_dir: Path | None = None,
) -> BuildResult:
    """Build `folder` into a component at `out` (default: the manifest's [[component]] file).

    `progress(phase, elapsed_seconds)` is called with elapsed 0.0 when a slow
    phase starts ("requirements": pip installs requirements.txt; "runner": the
    dev runner is built, once per astrid version; "precheck": Capsule.toml is
    checked against the sources in it; "componentize": the toolchain builds the
    component; "compile": wasmtime compiles it into the compile cache; "check": Capsule.toml is checked against the
    component, after a fresh build), then about four times a second. The
    manifest check runs the component, so it is compiled into the compile
    cache even with `precompile=False`.
    """
    started = time.perf_counter()
    folder = Path(folder)
    if not folder.is_dir():
        raise BuildError(f"{folder}: not a folder (give the capsule folder holding Capsule.toml)")
    try:
        manifest = load_manifest(folder)
    except ManifestError as exc:
        raise BuildError(str(exc)) from None
    target = output_path(folder, manifest, out)
    toolchain = toolchain_for(folder)
    cache = Path(cache_dir) if cache_dir is not None else default_build_cache_dir()
    prepared = toolchain.prepare(folder, manifest, exclude=(target,), cache=cache, progress=progress)
    digest = prepared.content_hash
    cached_wasm = cache / f"{digest}.wasm"
    cached = cached_wasm.is_file()
    if not cached:
        if toolchain.language == "python":
            _precheck(folder, cache, progress)
        prepared.componentize(cached_wasm, cache, progress)
    # The check runs the component: compiled first (a compile-cache hit when it was before). It runs on
    # every build, from the build cache or not (Capsule.toml may have changed), and nothing of it is kept.
    _precompile(cached_wasm, progress, named=target)
    warnings = _check_code(folder, manifest, cached_wasm, toolchain.entry, progress if not cached else None)
    static = _record_static(folder, cached_wasm)
    _install(cached_wasm, target)
    if out is None:
        _freshen(folder, target)
    precompiled = None
    if precompile:
        precompiled = _precompile(target, progress)
    return BuildResult(
        name=manifest.name,
        output=target,
        size=target.stat().st_size,
        seconds=time.perf_counter() - started,
        cached=cached,
        content_hash=digest,
        precompiled=precompiled,
        warnings=tuple(warnings),
        static=static,
    )


def _check_code(folder: Path, manifest: Manifest, built: Path, entry: str, progress: Progress | None) -> list[str]:
    """Capsule.toml against what the built component declares: BuildError on a mismatch, else the warnings.

    The component is asked in the kernel's sandbox (`read_built`). One that
    fails to answer is not checked (with a warning); one written without the
    SDK has nothing to check.
    """
    reading = with_ticks("check", lambda: read_built(folder, built), progress)
    if reading.status == "failed":
        why = f"asking the built component what it declares failed: {reading.detail}"
        return [f"{MANIFEST_NAME} was not checked against {entry} ({why})"]
    if reading.facts is None:
        return []
    try:
        text = (folder / MANIFEST_NAME).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    result = check_manifest(manifest, reading.facts, text)
    if result.errors:
        raise BuildError(mismatch_message(folder, result.errors))
    return result.warnings


def _precheck(folder: Path, cache: Path, progress: Progress | None) -> None:
    """Capsule.toml against the code before componentize-py runs, asked of the dev runner (`astrid capsule
    dev`'s, built once per astrid version) with the folder's sources: a mismatch fails in about a second
    instead of after the build. Anything else the runner meets (a module it does not carry, an import
    that fails) is left to componentize-py and the check of the built component, which decide."""
    from astrid.host.build.dev_runner import dev_runner
    from astrid.host.build.dev_sources import ManifestMismatch, check_dev_sources, read_dev_sources
    from astrid.host.kernel.compile_cache import CompileCache

    try:
        sources = read_dev_sources(folder, dev_runner(cache, progress), cache)
        compile_cache = CompileCache()
        with_ticks("precheck", lambda: check_dev_sources(sources, compile_cache), progress)
    except ManifestMismatch as exc:
        raise BuildError(str(exc)) from None
    except (CapsuleLoadError, BuildError) as exc:
        log.debug("the manifest pre-check did not run (the build checks the component): %s", exc)


def _record_static(folder: Path, built: Path) -> tuple[str, ...]:
    """Ask the built component, in the sandbox, for the replies every principal gets, and keep them sealed
    beside its compile-cache entry (a cached build finds them there: no call). Best effort: without a
    record the kernel asks once itself. Returns the requests the host will answer for it."""
    from astrid.host.kernel.compile_cache import CompileCache
    from astrid.host.kernel.loader import load_capsule
    from astrid.host.kernel.static_replies import StaticReplyStore
    from astrid.host.limits import DEFAULT_LIMITS

    cache = CompileCache()
    try:
        capsule = load_capsule(folder, cache, component=built)
    except CapsuleLoadError:  # the manifest check said why already
        return ()
    return StaticReplyStore(cache, DEFAULT_LIMITS).replies_for(capsule).answered(capsule.manifest)


def _freshen(folder: Path, target: Path) -> None:
    """An unchanged build copied over an identical file keeps its old time: bump it past the sources'."""
    if stale_component(folder) is not None:
        with contextlib.suppress(OSError):  # a time we cannot set: the next build notices again, nothing is lost
            os.utime(target)


def _install(source: Path, target: Path) -> None:
    """Copy the build into place unless an identical file is already there."""
    if target.is_file() and target.stat().st_size == source.stat().st_size and _same_bytes(source, target):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
    try:
        shutil.copyfile(source, tmp)  # a fresh file: the umask's usual mode
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _same_bytes(a: Path, b: Path) -> bool:
    return hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()


def _precompile(target: Path, progress: Progress | None, named: Path | None = None) -> Path | None:
    """Compile `target` into the compile cache (a hit when it is there); `named` names it in an error."""
    from astrid.host.kernel.compile_cache import CompileCache

    cache = CompileCache()
    try:
        if cache.entry_for(target).exists():
            return cache.precompile(target)
        return with_ticks("compile", lambda: cache.precompile(target), progress)
    except Exception as exc:
        where = shown(named if named is not None else target)
        raise BuildError(f"{where}: built, but wasmtime cannot compile it: {last_line(str(exc))}") from None
