"""Build a capsule folder into a WebAssembly component.

    validate Capsule.toml -> compile every .py (syntax errors as file:line)
    -> install requirements.txt (pinned, pure Python) into an isolated site
    -> content hash -> componentize-py (unless the build cache holds it)
    -> compile it and check Capsule.toml against what it declares (asked in
       the sandbox) -> record its static describe (asked in the sandbox)
    -> write the manifest's [[component]] file (or OUT)

The entry module of a Python capsule is `app` (the file `app.py` at the top
of the capsule folder); it must define `WitWorld` (`WitWorld = capsule.world()`
with the guest SDK). componentize-py builds it against the world
`resource-capsule` with `--stub-wasi`, with the capsule folder and the guest
SDK on the guest's module path.

Builds are hermetic: the guest sees the standard library, the SDK, the
capsule folder and the packages its `requirements.txt` pins (installed into
an isolated folder of the build cache, see `requirements.py`), never the
host's site-packages (componentize-py gets that folder as VIRTUAL_ENV, so it
never asks a `python3` on PATH for its site-packages).

Nothing of the capsule's code runs on the host's Python: componentize-py
runs app.py inside its own WebAssembly runtime, and Capsule.toml is then
checked against what the BUILT component declares, asked of it in the
kernel's sandbox (`code_check.py`), on every build, from the build cache or
not; a mismatch fails the build with the lines to add or remove, and nothing
is written. The build then asks it, the same way, for the describe and
templates replies it gives every principal (the reserved action
`astrid.static`) and keeps them beside its compile-cache entry, sealed
(`kernel/static_replies.py`): served, a capsule with nothing dynamic answers
describe without a guest call.

Builds are cached by content hash: sha256 over the capsule's files, the SDK's
files, the WIT files, the installed packages, the componentize-py version and
the build flags. The cache lives in `ASTRID_BUILD_CACHE_DIR` (default: the
user cache dir + `builds`), so rebuilding an unchanged capsule is a file copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TypeVar

import platformdirs

from astrid.capsules import SDK_DIR
from astrid.host.build.code_check import check_manifest, mismatch_message, read_built
from astrid.host.build.requirements import (
    REQUIREMENTS_FILE,
    Site,
    install_site,
    read_requirements,
    site_packages_of,
)
from astrid.host.errors import BuildError, CapsuleLoadError
from astrid.host.kernel.loader import stale_component
from astrid.host.kernel.manifest import MANIFEST_NAME, Manifest, ManifestError, load_manifest
from astrid.host.settings import BUILD_CACHE_ENV, path_setting
from astrid.wit import CAPSULE_WORLD, WIT_DIR

ENTRY_MODULE = "app"
COMPONENTIZE_FLAGS = ("--stub-wasi",)
# What else a build's result depends on: its isolated site (bump when the build's inputs change
# in a way the content hash does not see, e.g. the manifest check).
ISOLATION = "isolated-site-1 manifest-check-1"
# Environment variables that would let the host's Python reach into the build.
_HOST_PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PIPENV_ACTIVE", "CONDA_PREFIX")
# Folders and files never part of a capsule's source.
_SKIP_DIRS = {"__pycache__", "node_modules"}
_SKIP_SUFFIXES = {".wasm", ".cwasm", ".pyc", ".pyo", ".tmp"}

T = TypeVar("T")
Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class BuildResult:
    name: str
    output: Path
    size: int
    seconds: float
    cached: bool  # served from the build cache (no componentize-py run)
    content_hash: str
    precompiled: Path | None  # the compile-cache entry, when precompiling ran
    warnings: tuple[str, ...] = ()  # what the build noticed but did not refuse (one sentence each)
    static: tuple[str, ...] = ()  # the requests ("describe", "templates") the host answers without calling it


def default_build_cache_dir() -> Path:
    return path_setting(BUILD_CACHE_ENV, Path(platformdirs.user_cache_dir("astrid")) / "builds")


@lru_cache(maxsize=1)
def componentize_py_version() -> str:
    try:
        return version("componentize-py")
    except PackageNotFoundError:  # a componentize-py from PATH: ask it
        from astrid.host.toolpaths import componentize_py

        result = subprocess.run([componentize_py(), "--version"], capture_output=True, text=True, check=False)
        return result.stdout.strip() or "unknown"


def source_files(folder: Path, exclude: tuple[Path, ...] = ()) -> Iterator[Path]:
    """Every file of a capsule's source, sorted; skips caches, hidden entries and build outputs."""
    excluded = {p.resolve() for p in exclude}
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in sorted(files):
            path = Path(root) / name
            if name.startswith(".") or path.suffix in _SKIP_SUFFIXES or path.resolve() in excluded:
                continue
            yield path


def _sdk_files() -> list[Path]:
    return sorted(p for p in SDK_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def _wit_files() -> list[Path]:
    return sorted(WIT_DIR.rglob("*.wit"))


def content_hash(folder: Path, exclude: tuple[Path, ...] = (), site: str | None = None) -> str:
    """sha256 over everything a build depends on; `site` is the tree hash of the installed requirements."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(label.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)

    for path in source_files(folder, exclude):
        add("capsule/" + path.relative_to(folder).as_posix(), path.read_bytes())
    for path in _sdk_files():
        add("sdk/" + path.relative_to(SDK_DIR).as_posix(), path.read_bytes())
    for path in _wit_files():
        add("wit/" + path.relative_to(WIT_DIR).as_posix(), path.read_bytes())
    if site is not None:
        add("site", site.encode())
    add("componentize-py", componentize_py_version().encode())
    add("flags", " ".join((CAPSULE_WORLD, ENTRY_MODULE, *COMPONENTIZE_FLAGS)).encode())
    add("isolation", ISOLATION.encode())
    return digest.hexdigest()


def check_syntax(folder: Path) -> None:
    """Compile every .py of the capsule (without writing bytecode); SyntaxError -> `file:line: message`."""
    for path in source_files(folder):
        if path.suffix != ".py":
            continue
        try:
            source = path.read_bytes()
        except OSError as exc:
            raise BuildError(f"{_show(path)}: cannot read: {exc.strerror or exc}") from None
        try:
            compile(source, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            line = f":{exc.lineno}" if exc.lineno else ""
            raise BuildError(f"{_show(path)}{line}: {exc.msg}") from None
        except ValueError as exc:  # e.g. null bytes
            raise BuildError(f"{_show(path)}: {exc}") from None


def _show(path: Path) -> str:
    """`path` relative to the working directory when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


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
    phase starts ("requirements": pip installs requirements.txt;
    "componentize": componentize-py runs; "compile": wasmtime compiles it
    into the compile cache; "check": Capsule.toml is checked against the
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
    entry = folder / f"{ENTRY_MODULE}.py"
    if not entry.is_file():
        raise BuildError(
            f"{_show(entry)}: not found (a Python capsule's entry module is {ENTRY_MODULE}.py; "
            "it must define WitWorld = capsule.world())"
        )
    check_syntax(folder)

    cache = Path(cache_dir) if cache_dir is not None else default_build_cache_dir()
    requirements = read_requirements(folder)
    site = install_site(requirements, cache, progress) if requirements is not None else None
    digest = content_hash(folder, exclude=(target,), site=site.tree_sha256 if site is not None else None)
    cached_wasm = cache / f"{digest}.wasm"
    cached = cached_wasm.is_file()
    if not cached:
        _componentize(folder, manifest, cache, cached_wasm, progress, site, exclude=(target,))
    # The check runs the component: compiled first (a compile-cache hit when it was before). It runs on
    # every build, from the build cache or not (Capsule.toml may have changed), and nothing of it is kept.
    _precompile(cached_wasm, progress, shown=target)
    warnings = _check_code(folder, manifest, cached_wasm, progress if not cached else None)
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


def _check_code(folder: Path, manifest: Manifest, built: Path, progress: Progress | None) -> list[str]:
    """Capsule.toml against what the built component declares: BuildError on a mismatch, else the warnings.

    The component is asked in the kernel's sandbox (`read_built`). One that
    fails to answer is not checked (with a warning); one written without the
    SDK has nothing to check.
    """
    reading = _with_ticks("check", lambda: read_built(folder, built), progress)
    if reading.status == "failed":
        why = f"asking the built component what it declares failed: {reading.detail}"
        return [f"{MANIFEST_NAME} was not checked against {ENTRY_MODULE}.py ({why})"]
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


def _precompile(target: Path, progress: Progress | None, shown: Path | None = None) -> Path | None:
    """Compile `target` into the compile cache (a hit when it is there); `shown` names it in an error."""
    from astrid.host.kernel.compile_cache import CompileCache

    cache = CompileCache()
    try:
        if cache.entry_for(target).exists():
            return cache.precompile(target)
        return _with_ticks("compile", lambda: cache.precompile(target), progress)
    except Exception as exc:
        where = _show(shown if shown is not None else target)
        raise BuildError(f"{where}: built, but wasmtime cannot compile it: {_last_line(str(exc))}") from None


def _componentize(
    folder: Path,
    manifest: Manifest,
    cache: Path,
    cached_wasm: Path,
    progress: Progress | None,
    site: Site | None = None,
    exclude: tuple[Path, ...] = (),
) -> None:
    from astrid.host.toolpaths import componentize_py

    try:
        cache.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    except OSError as exc:
        raise BuildError(
            f"cannot use the build cache at {cache}: {exc.strerror or exc} (set {BUILD_CACHE_ENV})"
        ) from None
    try:
        wasm = scratch / f"{manifest.name}.wasm"
        guest, sdk, site_root = _stage(folder, exclude, site, scratch)
        command = [
            componentize_py(),
            "-d", str(WIT_DIR),
            "-w", CAPSULE_WORLD,
            "componentize",
            *COMPONENTIZE_FLAGS,
            "-p", str(guest),
            "-p", str(sdk),
            ENTRY_MODULE,
            "-o", str(wasm),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in _HOST_PYTHON_ENV}
        # componentize-py adds $VIRTUAL_ENV's site-packages to the guest's path; without it, it would ask
        # pipenv or the `python3` on PATH for theirs. The isolated site is the only one it may see.
        env.update({"RUST_BACKTRACE": "0", "PYTHONDONTWRITEBYTECODE": "1", "VIRTUAL_ENV": str(site_root)})
        output = _run(command, env, scratch, progress)
        if output[0] != 0 or not wasm.is_file():
            raise BuildError(_explain_failure(output[1], folder, site))
        os.replace(wasm, cached_wasm)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _stage(folder: Path, exclude: tuple[Path, ...], site: Site | None, scratch: Path) -> tuple[Path, Path, Path]:
    """Private copies of what the guest sees while componentize-py builds it: (capsule, SDK, site root).

    componentize-py runs app.py's top level inside WebAssembly, but with its
    module folders mounted writable (`/0`, `/1`, `/2`): given the folders
    themselves, a capsule's import-time code could write into its own folder,
    into the SDK every later build uses, or into a cached site other capsules
    share (and CPython leaves `__pycache__` in them). So it gets copies of
    exactly what the content hash covers, deleted with the scratch folder.
    """
    guest = scratch / "capsule"
    for path in source_files(folder, exclude):
        copy = guest / path.relative_to(folder)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    sdk = scratch / "sdk"
    for path in _sdk_files():
        copy = sdk / path.relative_to(SDK_DIR)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    site_root = scratch / "site"
    if site is not None:
        shutil.copytree(site.root, site_root, symlinks=True)
    else:  # nothing pinned: an empty site, so componentize-py looks nowhere else
        site_packages_of(site_root).mkdir(parents=True)
    return guest, sdk, site_root


def _with_ticks(phase: str, function: Callable[[], T], progress: Progress | None) -> T:
    """Run `function` in a worker thread, reporting progress from this one."""
    if progress is None:
        return function()
    outcome: list = []

    def work() -> None:
        try:
            outcome.append((True, function()))
        except BaseException as exc:
            outcome.append((False, exc))

    started = time.perf_counter()
    progress(phase, 0.0)
    worker = threading.Thread(target=work, name=f"astrid-{phase}", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.25)
        if worker.is_alive():
            progress(phase, time.perf_counter() - started)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _run(command: list[str], env: dict[str, str], cwd: Path, progress: Progress | None) -> tuple[int, str]:
    started = time.perf_counter()
    if progress is not None:
        progress("componentize", 0.0)
    try:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        raise BuildError(f"cannot run componentize-py: {exc.strerror or exc} (reinstall astrid-py)") from None
    chunks: list[bytes] = []
    output = process.stdout
    assert output is not None  # stdout=PIPE
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: output.read(65536), b"")), daemon=True)
    reader.start()
    try:
        while True:
            try:
                process.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                if progress is not None:
                    progress("componentize", time.perf_counter() - started)
    except BaseException:
        process.kill()
        process.wait()
        raise
    reader.join()
    return process.returncode, b"".join(chunks).decode("utf-8", "replace")


_GUEST_FILE = re.compile(r'File "/(\d+)/([^"]+)", line (\d+)')
# A definition error the guest SDK located itself: `app.py:12: resource astrid://x/y on y(): ...`.
_SDK_LOCATED = re.compile(r"(?:[\w.]+\.)?DefinitionError: (?P<file>[^\s:]+\.py):(?P<rest>\d+: .+)")


def _explain_failure(output: str, folder: Path, site: Site | None = None) -> str:
    """One line from componentize-py's output: the cause, pointing at the file when it can."""
    text = output.split("\nStack backtrace:", 1)[0]
    head, _, caused = text.partition("\nCaused by:")
    cause = _last_line(caused) if caused.strip() else _last_line(head)
    cause = cause.removeprefix("AssertionError: ")
    located = _SDK_LOCATED.fullmatch(cause)
    if located:  # the author's declaration, not the SDK line that checked it
        return f"{_show(folder / located['file'])}:{located['rest']}"
    where = ""
    frames = _GUEST_FILE.findall(head)
    if frames:
        index, relative, line = frames[-1]
        roots = {"0": folder, "1": SDK_DIR, "2": site.site_packages if site is not None else None}
        root = roots.get(index)
        where = f"{_show(root / relative) if root else relative}:{line}: "
    elif "WitWorld" in cause:
        where = f"{_show(folder / (ENTRY_MODULE + '.py'))}: "
        cause += " (end app.py with `WitWorld = capsule.world()`)"
    elif "failed to resolve directory" in cause or "parsing WIT" in cause:
        cause += f" (the WIT in {WIT_DIR} does not parse: run `wasm-tools component wit {WIT_DIR}`)"
    missing = _MISSING_MODULE.search(cause)
    if missing:
        cause += _missing_module_hint(missing.group(1))
    return f"{where}{cause}" if cause else "componentize-py failed without a message"


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def _missing_module_hint(module: str) -> str:
    """Why a module the host may well have is missing from the build, and the line that adds it."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return " (the WebAssembly guest's standard library has no such module)"
    from importlib.metadata import packages_distributions, version

    pin = f"{top}==<version>"
    for distribution in packages_distributions().get(top, [])[:1]:
        with contextlib.suppress(PackageNotFoundError):  # the hint keeps its `<version>` placeholder
            pin = f"{distribution}=={version(distribution)}"
    return (
        " (a build sees only the standard library, the SDK, the capsule folder and the pure-Python packages "
        f"pinned in {REQUIREMENTS_FILE} beside app.py: add `{pin}` there)"
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
