"""What every toolchain's build shares: a capsule's source files, a tool run with progress, one-line messages.

for path in source_files(folder): ...              # sorted; no caches, hidden entries or build outputs
code, output = run_tool(command, env=env, cwd=scratch, progress=progress, phase="componentize",
                        name="componentize-py")    # the tool's output, ticked about four times a second
value = with_ticks("compile", work, progress)      # any slow call, ticked from this thread
digest = ContentDigest(); digest.add_files("sdk/", SDK_DIR, files); digest.hexdigest()   # a build's key
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from astrid.host.capsule.discovery import TESTS_FOLDER
from astrid.host.errors import BuildError
from astrid.host.settings import BUILD_CACHE_ENV

T = TypeVar("T")
# progress(phase, elapsed_seconds): 0.0 when a slow phase starts, then about four times a second
Progress = Callable[[str, float], None]

TICK_S = 0.25
# Folders and files never part of a capsule's source.
SKIP_DIRS = {"__pycache__", "node_modules"}
SKIP_SUFFIXES = {".wasm", ".cwasm", ".pyc", ".pyo", ".tmp"}


class ContentDigest:
    """sha256 over labelled inputs, each with its length: no two different sets of inputs hash alike."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()

    def add(self, label: str, data: bytes) -> None:
        self._sha.update(label.encode("utf-8", "surrogateescape") + b"\0")
        self._sha.update(len(data).to_bytes(8, "big"))
        self._sha.update(data)

    def add_files(self, prefix: str, root: Path, paths: Iterable[Path]) -> None:
        """Each file's bytes, labelled `prefix` + its path under `root`."""
        for path in paths:
            self.add(prefix + path.relative_to(root).as_posix(), path.read_bytes())

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


@contextmanager
def scratch_folder(cache: Path, prefix: str) -> Iterator[Path]:
    """A private folder in the build cache `cache` for one build, removed afterwards; a BuildError
    naming the cache (and the setting that moves it) when it cannot be used."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=cache))
    except OSError as exc:
        raise BuildError(
            f"cannot use the build cache at {cache}: {exc.strerror or exc} (set {BUILD_CACHE_ENV})"
        ) from None
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def source_files(folder: Path, exclude: tuple[Path, ...] = ()) -> Iterator[Path]:
    """Every file of a capsule's source, sorted; skips caches, hidden entries, build outputs and the
    capsule's `tests/` folder."""
    excluded = {p.resolve() for p in exclude}
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        if root == str(folder):
            dirs[:] = [d for d in dirs if d != TESTS_FOLDER]
        for name in sorted(files):
            path = Path(root) / name
            if name.startswith(".") or path.suffix in SKIP_SUFFIXES or path.resolve() in excluded:
                continue
            yield path


def shown(path: Path) -> str:
    """`path` relative to the working directory when it is inside it (what a user typed, in a message)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def with_ticks(phase: str, function: Callable[[], T], progress: Progress | None) -> T:
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
        worker.join(TICK_S)
        if worker.is_alive():
            progress(phase, time.perf_counter() - started)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def run_tool(
    command: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    name: str,
    progress: Progress | None = None,
    phase: str | None = None,
    timeout_s: float | None = None,
) -> tuple[int, str]:
    """Run `command` (the tool `name`, for messages) with no stdin: (exit code, stdout and stderr as text).

    `progress(phase, elapsed)` ticks while it runs; past `timeout_s` it is killed and a `BuildError` says
    so. An interrupt (Ctrl-C) kills it too before it goes on."""
    started = time.perf_counter()
    if progress is not None and phase is not None:
        progress(phase, 0.0)
    try:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        raise BuildError(f"cannot run {name}: {exc.strerror or exc} (reinstall astrid-py)") from None
    chunks: list[bytes] = []
    output = process.stdout
    assert output is not None  # stdout=PIPE
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: output.read(65536), b"")), daemon=True)
    reader.start()
    try:
        while True:
            try:
                process.wait(timeout=TICK_S)
                break
            except subprocess.TimeoutExpired:
                elapsed = time.perf_counter() - started
                if timeout_s is not None and elapsed > timeout_s:
                    raise BuildError(f"{name} took longer than {timeout_s:.0f} s") from None
                if progress is not None and phase is not None:
                    progress(phase, elapsed)
    except BaseException:
        process.kill()
        process.wait()
        raise
    reader.join(5)
    return process.returncode, b"".join(chunks).decode("utf-8", "replace")
