"""`astrid capsule dev DIR`: one capsule folder served from its sources, an edit live without a build.

    dev = DevFolder.prepare(config, folder, progress)   # the runner built (cached) and compiled; config set
    ... serve `config` as `astrid mcp serve` does (stdio or HTTP)

The runtime is the one `astrid mcp serve` runs, with two changes in its
config: the kernel serves the folder from `DevFolder.sources` (the last
version whose sources passed the runner, `build/dev_sources.py`) instead of
from a component, and the folder is polled every `DEV_TUNING.interval_s`.
The reload path is hot reload's (`runtime.watch_folders`); the kernel asks
`sources` for the folder's version on every reload, and this module reads and
checks the folder again only when its files changed (`watch.tree_signature`).

A version that fails (a syntax error, an import that raises, a manifest that
does not match the code) is one line on stderr, `file:line` first; the last
good version keeps serving. Dev capsules are labelled as such wherever a
capsule is named (`LoadResult.dev`, `CapsuleSummary.dev`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from astrid.host.build.builder import default_build_cache_dir
from astrid.host.build.dev_runner import dev_runner
from astrid.host.build.dev_sources import check_dev_sources, read_dev_sources
from astrid.host.build.steps import Progress, with_ticks
from astrid.host.capsule.sources import DevSources
from astrid.host.errors import BuildError, CapsuleLoadError
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.runtime import RuntimeConfig
from astrid.host.tuning import DEV_TUNING
from astrid.host.watch import TreeSignature, events, tree_signature

log = logging.getLogger(__name__)


class DevFolder:
    """The version of one capsule folder dev mode serves: the last one whose sources passed the runner."""

    def __init__(self, folder: Path, runner: Path, build_cache: Path, cache: CompileCache) -> None:
        self.folder = Path(folder).resolve()
        self.runner = runner
        self.build_cache = build_cache
        self.cache = cache
        self._lock = threading.Lock()
        self._signature: TreeSignature | None = None
        self._accepted: DevSources | None = None
        self._failure = "not read yet"
        self.accepted_at = 0.0  # time.monotonic() when the version served now was accepted

    @classmethod
    def prepare(cls, config: RuntimeConfig, folder: Path, progress: Progress | None = None) -> DevFolder:
        """Build the runner (once per SDK and toolchain: cached), compile it (cached) and point `config` at
        the folder's sources. BuildError when the runner cannot be built or compiled."""
        build_cache = default_build_cache_dir()
        runner = dev_runner(build_cache, progress)
        cache = CompileCache(config.cache_dir)
        try:
            if not cache.entry_for(runner).exists():
                with_ticks("compile", lambda: cache.precompile(runner), progress)
        except Exception as exc:  # any wasmtime failure, said in one line
            raise BuildError(f"the dev runner {runner} does not compile: {exc}") from None
        dev = cls(folder, runner, build_cache, cache)
        config.capsule_paths = [dev.folder]
        config.dev_sources = dev.sources
        config.folder_poll_s = DEV_TUNING.interval_s
        return dev

    def sources(self, folder: Path) -> DevSources | None:
        """The kernel's question: the sources `folder` is served from (None: not this dev folder), or
        CapsuleLoadError when no version of it has passed yet (and why the last one failed)."""
        if Path(folder).resolve() != self.folder:
            return None
        with self._lock:
            signature = tree_signature([self.folder])
            if signature != self._signature:
                self._signature = signature
                self._refresh()
            if self._accepted is None:
                raise CapsuleLoadError(self._failure)
            return self._accepted

    def _refresh(self) -> None:
        """Read the folder; check a new version in the runner; keep it, or say why not (one line)."""
        accepted = self._accepted
        try:
            candidate = read_dev_sources(self.folder, self.runner, self.build_cache)
            if accepted is not None and candidate.digest == accepted.digest:
                return
            warnings = check_dev_sources(candidate, self.cache)
        except CapsuleLoadError as exc:
            self._failure = str(exc)
            if accepted is not None:  # without one, the kernel reports the failure as a load failure
                events.warning(
                    "dev: %s: %s (still serving the last good version)",
                    accepted.manifest.name,
                    exc,
                    extra={"event": "dev_rejected", "fields": {"capsule": accepted.manifest.name}},
                )
            return
        self._accepted, self._failure = candidate, ""
        self.accepted_at = time.monotonic()
        for warning in warnings:
            events.warning("dev: %s: %s", candidate.manifest.name, warning)
