"""`astrid capsule ...` commands: new, build, list (grant and revoke: `grant_cmd`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from astrid.cli.errors import UserError
from astrid.cli.grant_cmd import capability_lines, grant_store, grants_option
from astrid.cli.main import capsule

MANIFEST_NAME = "Capsule.toml"


def _human_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size} B"  # pragma: no cover


def _capsule_folders(path: Path) -> list[Path]:
    """`path` itself when it holds Capsule.toml, else its direct subfolders that do."""
    if (path / MANIFEST_NAME).is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"{path}: no such folder")
    found = sorted(child for child in path.iterdir() if (child / MANIFEST_NAME).is_file())
    if not found:
        raise UserError(
            f"{path}: no {MANIFEST_NAME} here or in its subfolders (create one with `astrid capsule new NAME`)"
        )
    return found


@capsule.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "parent",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Create the capsule folder inside PARENT (default: the current folder).",
)
def capsule_new(name: str, parent: Path | None) -> None:
    """Scaffold a new capsule folder NAME (Capsule.toml, app.py, README.md)."""
    from astrid.host.build.scaffold import ScaffoldError, scaffold_capsule

    try:
        folder = scaffold_capsule(name, parent)
    except ScaffoldError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"created {folder}/ (Capsule.toml, app.py, README.md)")
    click.echo(f"next: astrid capsule build {folder}")


class _Progress:
    """An elapsed-seconds line on a TTY; a start and an end line otherwise."""

    LABELS = {"componentize": "building with componentize-py", "compile": "compiling for wasmtime"}

    def __init__(self, name: str) -> None:
        self.name = name
        self.tty = sys.stderr.isatty()
        self.phase: str | None = None
        self.started = 0.0

    def __call__(self, phase: str, elapsed: float) -> None:
        label = self.LABELS.get(phase, phase)
        if phase != self.phase:
            self.finish()
            self.phase = phase
            self.started = time.perf_counter() - elapsed
            if not self.tty:
                click.echo(f"{self.name}: {label}...", err=True)
        if self.tty:
            click.echo(f"\r{self.name}: {label}... {elapsed:4.1f} s\x1b[K", err=True, nl=False)

    def finish(self, failed: bool = False) -> None:
        if self.phase is None:
            return
        label = self.LABELS.get(self.phase, self.phase)
        elapsed = time.perf_counter() - self.started
        end = "failed after" if failed else "done in"
        prefix, suffix = ("\r", "\x1b[K") if self.tty else ("", "")
        click.echo(f"{prefix}{self.name}: {label}... {end} {elapsed:.1f} s{suffix}", err=True)
        self.phase = None


@capsule.command("build")
@click.argument("path", type=click.Path(path_type=Path), default=".")
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the component here instead of the manifest's [[component]] file.",
)
@click.option("--no-precompile", is_flag=True, help="Skip compiling the component into the host's compile cache.")
def capsule_build(path: Path, out: Path | None, no_precompile: bool) -> None:
    """Build the capsule at PATH (or every capsule folder inside PATH) into a WebAssembly component.

    The entry module is app.py; it must define WitWorld (WitWorld = capsule.world()).
    Unchanged capsules come from the build cache (ASTRID_BUILD_CACHE_DIR).
    """
    from astrid.host.build.builder import BuildError, build_capsule

    folders = _capsule_folders(path) if path.is_dir() else [path]
    if out is not None and len(folders) > 1:
        raise UserError(f"{path} holds {len(folders)} capsules: -o works with one capsule folder")
    for folder in folders:
        progress = _Progress(folder.name)
        try:
            result = build_capsule(folder, out, progress=progress, precompile=not no_precompile)
        except BuildError as exc:
            progress.finish(failed=True)
            raise UserError(str(exc)) from None
        except BaseException:
            progress.finish(failed=True)
            raise
        progress.finish()
        how = "unchanged, from the build cache" if result.cached else "built"
        click.echo(f"{result.name}: {how} -> {result.output} ({_human_size(result.size)}) in {result.seconds:.2f} s")


@capsule.command("list")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Also show each capsule's load time, whether it came from the compile cache, "
    "and the capabilities it asks for (bus:request included) against what is granted.",
)
@grants_option
def capsule_list(paths: tuple[Path, ...], verbose: bool, grants_file: Path | None) -> None:
    """Show the capsules found in PATHS (a capsule folder or a parent of many) and whether they load."""
    try:
        from astrid.host.kernel.loader import CapsuleLoadError, discover_capsules, load_capsule
    except ImportError:
        raise UserError("`astrid capsule list` needs the kernel's capsule loader, which this install lacks") from None
    from astrid.host.identity.trust import TrustStore, default_trust_file
    from astrid.host.identity.vetting import vetter
    from astrid.host.kernel.compile_cache import CompileCache
    from astrid.host.kernel.manifest import ManifestError, load_manifest
    from astrid.host.kernel.reserved import bus_asks
    from astrid.host.settings import default_capsule_home

    roots = list(paths) or [Path(".")]
    for root in roots:
        if not root.exists():
            raise UserError(f"{root}: no such file or folder")
    folders = discover_capsules(roots)
    if not folders:
        raise UserError(
            f"no capsules (folders with {MANIFEST_NAME}) in {', '.join(map(str, roots))}; installed capsules "
            f"are in {default_capsule_home()}"
        )
    cache = CompileCache()
    vet = vetter(TrustStore(default_trust_file()))
    failures = 0
    for folder in folders:
        try:
            manifest = load_manifest(folder)
        except ManifestError as exc:
            failures += 1
            click.echo(f"{folder}: does not load: {exc}")
            continue
        header = f"{manifest.name} {manifest.package.version}  ({folder})"
        identity = None
        try:
            loaded = load_capsule(folder, cache, vet)
        except CapsuleLoadError as exc:
            failures += 1
            click.echo(f"{header}\n  status: does not load: {exc}")
        else:
            identity = loaded.grant_identity
            provenance = loaded.provenance
            click.echo(f"{header}\n  status: loads\n  source-id: {loaded.source_id}")
            click.echo(f"  publisher: {provenance.label()}")
            click.echo(f"  digest: sha256:{loaded.wasm_sha256[:16]}")
            click.echo(f"  namespaces: {', '.join(provenance.namespaces) or 'none'}")
            if verbose:
                origin = "compile cache" if loaded.from_cache else "compiled now"
                click.echo(f"  load: {loaded.load_seconds * 1000:.1f} ms ({origin})")
        if verbose:
            granted = grant_store(grants_file).for_capsule(manifest.name, identity)
            bus = bus_asks(manifest.publish, manifest.subscribe)
            for line in capability_lines(manifest.name, manifest.capabilities, granted, bus):
                click.echo(line)
        handlers = manifest.handlers()
        for pattern, handler in sorted(handlers.items()):
            click.echo(f"  handler: {pattern} -> {handler}")
        if not handlers:
            click.echo("  handler: none (it never runs)")
    if failures:
        sys.exit(1)
