"""A capsule folder's sources for dev mode, read and checked in the dev runner before they are served.

    sources = read_dev_sources(folder, runner, build_cache)   # its manifest, pinned site and .py files, read now
    warnings = check_dev_sources(sources, compile_cache)       # the runner imports them in a throwaway sandbox

`check_dev_sources` is the gate a version passes before `astrid capsule dev`
serves it, and the first step of `astrid capsule build` (a manifest that
does not match the code fails in about a second, before componentize-py
runs): the runner imports the app from these sources in the kernel's
sandbox (`kernel/oneshot.py`: alone, no grants, the system principal) and
answers `astrid.facts`, which is checked against Capsule.toml as a build's
component is (`code_check.py`). A syntax error or a failing import comes
back as `app.py:3: SyntaxError: ...`: the author's file and line.
"""

from __future__ import annotations

from pathlib import Path

from astrid.host.build.code_check import FACTS_ACTION, check_manifest, mismatch_message, parse_facts
from astrid.host.build.requirements import install_site, read_requirements
from astrid.host.build.steps import Progress
from astrid.host.capsule.manifest import ManifestError, load_manifest
from astrid.host.capsule.sources import DevSources, read_manifest_bytes, read_sources
from astrid.host.errors import BuildError, CapsuleLoadError
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.dev import load_dev_capsule
from astrid.host.kernel.oneshot import call_loaded


class ManifestMismatch(CapsuleLoadError):
    """Capsule.toml does not match what the code declares (the message names the lines to change)."""


def read_dev_sources(folder: Path, runner: Path, build_cache: Path, progress: Progress | None = None) -> DevSources:
    """The folder as it is now: Capsule.toml, the packages requirements.txt pins (installed into the build
    cache once per file content) and every .py file. CapsuleLoadError in one line naming the file."""
    folder = Path(folder).resolve()
    manifest_bytes = read_manifest_bytes(folder)
    try:
        manifest = load_manifest(folder)
        requirements = read_requirements(folder)
        site = install_site(requirements, build_cache, progress) if requirements is not None else None
    except (ManifestError, BuildError) as exc:
        raise CapsuleLoadError(str(exc)) from None
    files = read_sources(folder, site.site_packages if site is not None else None)
    return DevSources(folder, manifest, files, runner, manifest_bytes)


def check_dev_sources(sources: DevSources, cache: CompileCache) -> list[str]:
    """Import `sources` in the runner and check Capsule.toml against what they declare: the warnings,
    or CapsuleLoadError with why (`app.py:3: SyntaxError: ...`, or the manifest lines to change)."""
    capsule = load_dev_capsule(sources.folder, cache, sources)
    outcome = call_loaded(capsule, FACTS_ACTION, engine=cache.wasm_engine)
    if not outcome.ok:
        raise CapsuleLoadError(f"{outcome.error or outcome.status.value} (asking the app what it declares)")
    data = outcome.data if isinstance(outcome.data, str) else ""
    if outcome.action == "error":  # the runner's reason: the author's file and line first
        raise CapsuleLoadError(data or "the app failed to import")
    try:
        facts = parse_facts(data)
    except ValueError as exc:
        raise CapsuleLoadError(f"the answer to {FACTS_ACTION} is malformed: {exc}") from None
    text = sources.manifest_bytes.decode("utf-8", "replace")
    result = check_manifest(sources.manifest, facts, text)
    if result.errors:
        raise ManifestMismatch(mismatch_message(sources.folder, result.errors))
    return result.warnings
