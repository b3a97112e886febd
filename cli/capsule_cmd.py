"""`astrid capsule ...` commands: new, build, dev, list (grant and revoke: `grant_cmd`)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from astrid.cli.errors import UserError
from astrid.cli.grant_cmd import capability_lines, grant_store, grants_option
from astrid.cli.main import capsule
from astrid.cli.output import counted

MANIFEST_NAME = "Capsule.toml"
_SEARCH_SKIP = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


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
        raise UserError(f"{path}: no {MANIFEST_NAME} here or in its subfolders; {_look_deeper(path, 'build')}")
    return found


def _deeper_capsules(path: Path) -> dict[Path, list[str]]:
    """Folders 2..`CLI_TUNING.capsule_search_depth` levels below `path` that hold capsule
    folders: parent -> capsule names.

    Bounded: hidden folders, caches, virtualenvs and build outputs are skipped,
    and at most `CLI_TUNING.capsule_search_max_folders` folders are looked at.
    """
    from astrid.host.tuning import CLI_TUNING  # here: the CLI's start stays light

    found: dict[Path, list[str]] = {}
    level = [path]
    looked = 0
    for depth in range(1, CLI_TUNING.capsule_search_depth + 1):
        below: list[Path] = []
        for folder in level:
            try:
                children = sorted(c for c in folder.iterdir() if c.is_dir() and not c.is_symlink())
            except OSError:
                continue
            for child in children:
                looked += 1
                if looked > CLI_TUNING.capsule_search_max_folders:
                    return found
                if child.name.startswith(".") or child.name in _SEARCH_SKIP or (child / "pyvenv.cfg").exists():
                    continue
                if (child / MANIFEST_NAME).is_file():
                    if depth > 1:
                        found.setdefault(folder, []).append(child.name)
                    continue  # a capsule's own subfolders hold no capsules
                below.append(child)
        level = below
    return found


def _look_deeper(path: Path, command: str) -> str:
    """Where the capsules below `path` are, with the command that uses them; else how to make one."""
    from astrid.host.tuning import CLI_TUNING

    deeper = _deeper_capsules(path)
    if not deeper:
        return (
            f"none within {CLI_TUNING.capsule_search_depth} folder levels below it either "
            "(create a capsule with `astrid capsule new NAME`)"
        )

    def shown(folder: Path, names: list[str]) -> str:
        listed = ", ".join(names[:4]) + (f", +{len(names) - 4}" if len(names) > 4 else "")
        return f"{folder}{'' if str(folder).endswith('/') else '/'} ({listed})"

    # the shallowest folders first, the fullest first among them
    ranked = sorted(deeper.items(), key=lambda item: (len(item[0].parts), -len(item[1]), str(item[0])))
    places = "; ".join(shown(folder, names) for folder, names in ranked[:4])
    rest = len(ranked) - 4
    more = f"; and {counted(rest, 'more folder')}" if rest > 0 else ""
    first = ranked[0][0]
    return f"capsules sit deeper: {places}{more}. Give one of these folders: `astrid capsule {command} {first}`"


@capsule.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "parent",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="PARENT",
    help="Create the capsule folder inside PARENT (default: the current folder).",
)
@click.option(
    "--lang",
    type=click.Choice(["python", "ts", "js"]),
    default="python",
    show_default=True,
    help="The capsule's language: Python (app.py), TypeScript (app.ts) or JavaScript (app.js).",
)
@click.option(
    "--with-skill",
    is_flag=True,
    help="Also scaffold an Agent Skill, skills/using-NAME/SKILL.md, served to MCP clients (Python; docs/skills.md).",
)
def capsule_new(name: str, parent: Path | None, lang: str, with_skill: bool) -> None:
    """Scaffold a new capsule folder NAME (Capsule.toml, app.py, README.md, tests/test_app.py;
    with --lang ts or js: Capsule.toml, app.ts or app.js, package.json)."""
    from astrid.host.build.scaffold import ScaffoldError, scaffold_capsule, skill_name_for

    try:
        folder = scaffold_capsule(name, parent, lang, with_skill=with_skill)
    except ScaffoldError as exc:
        raise UserError(str(exc)) from None
    if lang == "python":
        skill = f", skills/{skill_name_for(name)}/SKILL.md" if with_skill else ""
        click.echo(f"created {folder}/ (Capsule.toml, app.py, README.md, tests/test_app.py{skill})")
        click.echo(f"next: astrid capsule dev {folder} (serves it as you edit), or astrid capsule build {folder}")
    else:
        click.echo(f"created {folder}/ (Capsule.toml, app.{lang}, package.json, tests/test_app.py)")
        click.echo(f"next: astrid capsule build {folder}")
    click.echo(f"then: astrid capsule test {folder} (runs tests/test_app.py against it)")


class _Progress:
    """An elapsed-seconds line on a TTY; a start and an end line otherwise."""

    LABELS = {
        "requirements": "installing requirements.txt with pip",
        "npm": "installing package.json's dependencies with npm install --ignore-scripts",
        "componentize": "building the component with componentize-py",
        "js-toolchain": "installing the pinned JS/TS toolchain with npm ci (first TS build only)",
        "componentize-js": "building the component with esbuild and componentize-js",
        "compile": "compiling for wasmtime",
        "check": "checking Capsule.toml against the component",
        "runner": "building the dev runner with componentize-py (once per astrid version)",
        "precheck": "checking Capsule.toml against app.py in the dev runner",
    }

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
@click.option(
    "--no-precompile",
    is_flag=True,
    help="Kept for scripts: the manifest check runs the component, so the build compiles it into the "
    "compile cache anyway.",
)
def capsule_build(path: Path, out: Path | None, no_precompile: bool) -> None:
    """Build the capsule at PATH (or every capsule folder inside PATH) into a WebAssembly component.

    The entry module is app.py; it must define WitWorld (WitWorld = capsule.world()).
    The build sees the standard library, the guest SDK, the capsule folder and the
    pure-Python packages pinned (name==version) in a requirements.txt beside app.py.
    Capsule.toml is checked against what the built component serves (asked of it in the
    sandbox: nothing of the capsule runs on this Python): a mismatch names the lines to
    add or remove. Unchanged capsules come from the build cache (ASTRID_BUILD_CACHE_DIR).
    """
    from astrid.host.build.builder import BuildError, build_capsule
    from astrid.host.build.skills import SKILLS_FOLDER

    folders = _capsule_folders(path) if path.is_dir() else [path]
    if out is not None and len(folders) > 1:
        raise UserError(f"{path} holds {counted(len(folders), 'capsule')}: -o works with one capsule folder")
    for folder in folders:
        progress = _Progress(folder.resolve().name)
        try:
            result = build_capsule(folder, out, progress=progress, precompile=not no_precompile)
        except BuildError as exc:
            progress.finish(failed=True)
            raise UserError(str(exc)) from None
        except BaseException:
            progress.finish(failed=True)
            raise
        progress.finish()
        for warning in result.warnings:
            click.echo(f"warning: {result.name}: {warning}", err=True)
        how = "unchanged, from the build cache" if result.cached else "built"
        click.echo(f"{result.name}: {how} -> {result.output} ({_human_size(result.size)}) in {result.seconds:.2f} s")
        if (folder / SKILLS_FOLDER).is_dir():  # what it serves of them, asked of the component (docs/skills.md)
            for line in _skill_lines(folder, result.output):
                click.echo(line)


@capsule.command("test", context_settings={"ignore_unknown_options": True})
@click.argument("path", type=click.Path(path_type=Path))
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED, metavar="[PYTEST ARGS]...")
@click.pass_context
def capsule_test(ctx: click.Context, path: Path, pytest_args: tuple[str, ...]) -> None:
    """Run the capsule's tests/test_*.py with pytest, the capsule served in the real sandbox.

    A test takes the `capsule` fixture (no conftest.py needed): capsule.read(uri,
    principal="alice") gives .text, .blob and .mime_type; capsule.list(),
    capsule.templates() and capsule.complete(...) ask as a client does; and
    capsule.grant_files(tmp_path), grant_kv() and grant_http(url) grant for that
    test only, in a grants file of the test run's own. The capsule is built first
    when it changed (unchanged: from the build cache). PYTEST ARGS (-k, -x, -q, ...)
    go to pytest, and the exit status is pytest's.
    """
    from astrid.host.testkit.run import capsule_tests, pytest_install_command, run_capsule_tests

    if not (path / MANIFEST_NAME).is_file():
        raise UserError(f"{path}: no {MANIFEST_NAME} here: give the capsule folder (`astrid capsule test notes`)")
    if not capsule_tests(path):
        raise UserError(
            f"{path}: no tests/test_*.py to run: write one there (`astrid capsule new NAME` writes "
            "tests/test_app.py beside the capsule it makes)"
        )
    install = pytest_install_command()
    if install is not None:
        raise UserError(f"`astrid capsule test` runs pytest, which astrid's Python cannot import: run `{install}`")
    # pytest keeps the log and shows it beside a failed test: this CLI's stderr handler would show it twice
    logging.root.handlers.clear()
    ctx.exit(run_capsule_tests(path, pytest_args))


@capsule.command("dev")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option(
    "--principal",
    metavar="NAME",
    default=None,
    help="Serve as this user (default: the OS user running astrid).",
)
@click.option(
    "--http",
    "http_address",
    metavar="[HOST:]PORT",
    default=None,
    help="Serve streamable HTTP at /mcp on loopback, without auth, instead of stdio (PORT 0 picks a free one).",
)
def capsule_dev(path: Path, principal: str | None, http_address: str | None) -> None:
    """Serve the capsule at PATH from its sources, as `astrid mcp serve` serves a build, live on every save.

    No build: one prebuilt runner component (built once per astrid version, cached)
    imports the capsule's .py files and the packages requirements.txt pins from the
    host when a sandbox starts, in the same sandbox, limits, grants and principal rules
    as a built capsule. An edit of a .py file, requirements.txt or Capsule.toml is
    served within a second or two; a syntax error, a failing import or a manifest that
    does not match the code is shown with file:line, and the last good version keeps
    serving. Dev mode is for writing a capsule: `astrid capsule build` makes what you
    pack, sign and install.
    """
    from astrid.cli.connect_hint import dev_config_command
    from astrid.cli.mcp_cmd import BusOptions, _serve_stdio
    from astrid.cli.observe import Observability

    folder = path.resolve()
    if not (folder / MANIFEST_NAME).is_file():
        raise UserError(
            f"{path}: no {MANIFEST_NAME} here; dev mode serves one capsule folder "
            "(create one with `astrid capsule new NAME`)"
        )
    _dev_serves_python(path, folder)
    observing = Observability(False, None, False, "text", service="astrid")

    def prepare(config) -> str:
        from astrid.host.build.builder import BuildError
        from astrid.host.serving.dev import DevFolder

        progress = _Progress(folder.name)
        try:
            DevFolder.prepare(config, folder, progress)
        except BuildError as exc:
            progress.finish(failed=True)
            raise UserError(str(exc)) from None
        progress.finish()
        return f"dev mode: {folder}, served from its sources, not a build; it cannot be packed or signed"

    if http_address is None:
        entry = dev_config_command(path, principal)
        _serve_stdio(
            (folder,), principal, True, False, BusOptions(None, None), observing, prepare=prepare, entry_command=entry
        )
        return
    from astrid.cli.http_serve import HttpOptions, serve_http

    options = HttpOptions(address=http_address, no_auth=True, bus=BusOptions(None, None), client_trace="link")
    serve_http((folder,), principal, True, options, observing, prepare=prepare)


def _dev_serves_python(path: Path, folder: Path) -> None:
    """Dev mode's runner is Python's: another language's capsule is told the loop it has today."""
    from astrid.host.build.python_toolchain import PYTHON
    from astrid.host.build.toolchain import toolchains

    if PYTHON.detects(folder):
        return
    other = next((toolchain for toolchain in toolchains() if toolchain.detects(folder)), None)
    if other is not None:
        raise UserError(
            f"{path}: dev mode serves Python capsules, and this one is {other.language_of(folder)}: build it with "
            f"`astrid capsule build {path}` while `astrid mcp serve --capsules {path}` runs (each build is reloaded)"
        )


def _code_mismatch(folder: Path, manifest) -> list[str]:
    """Warning lines when Capsule.toml does not match what the built component serves (the build would refuse it).

    Only for a local capsule built from an app.py here (an installed, signed
    one was checked when it was built). The component is asked in the
    sandbox, as the build asks it: nothing of it runs on this Python.
    """
    from astrid.host.build.code_check import check_manifest, read_built
    from astrid.host.build.toolchain import toolchains
    from astrid.host.capsule.provenance import IDENTITY_FILE

    toolchain = next((each for each in toolchains() if each.detects(folder)), None)
    if toolchain is None or (folder / IDENTITY_FILE).exists():
        return []
    reading = read_built(folder)
    if reading.status == "failed":
        why = f"asking the built component what it declares failed: {reading.detail}"
        return [f"  warning: {MANIFEST_NAME} was not checked against {toolchain.entry} ({why})"]
    if reading.facts is None:
        return []
    try:
        text = (folder / MANIFEST_NAME).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    result = check_manifest(manifest, reading.facts, text)
    lines = []
    if result.errors:
        lines.append(f"  warning: {MANIFEST_NAME} does not match what app.py serves (the build refuses it):")
        for problem in result.errors:
            first, *rest = problem.splitlines()
            lines.append(f"    - {first}")
            lines.extend(f"      {line}" for line in rest)
    lines.extend(f"  warning: {warning}" for warning in result.warnings)
    return lines


def _skill_lines(folder: Path, component: Path | None = None) -> list[str]:
    """`  skills: <SKILL.md URIs>` of a built SDK capsule (docs/skills.md), asked of it in the sandbox as the
    build asks it; nothing for a capsule without skills or without the SDK."""
    from astrid.host.build.skills import declared_skills

    uris = declared_skills(folder, component)
    return [f"  skills: {', '.join(uris)}"] if uris else []


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
    """Show the capsules found in PATHS (a capsule folder or a parent of many) and whether they load.

    Without PATHS: the capsule home (what `astrid mcp serve` serves); `astrid capsule list .` lists the current folder.
    """
    from astrid.host.capsule.discovery import discover_capsules, stale_component
    from astrid.host.capsule.manifest import ManifestError, load_manifest
    from astrid.host.contract.bus_asks import bus_asks
    from astrid.host.errors import CapsuleLoadError
    from astrid.host.runtime import CapsuleChecker
    from astrid.host.settings import default_capsule_home

    home = default_capsule_home()
    if paths:
        roots = list(paths)
        for root in roots:
            if not root.exists():
                raise UserError(f"{root}: no such file or folder")
        folders = discover_capsules(roots)
        if not folders:
            deeper = f"; {_look_deeper(roots[0], 'list')}" if len(roots) == 1 and roots[0].is_dir() else ""
            raise UserError(
                f"no capsules (folders with {MANIFEST_NAME}) in {', '.join(map(str, roots))}{deeper}; installed "
                f"capsules are in {home}"
            )
    else:  # the capsule home, as `astrid mcp serve` serves it; the current folder is `list .`
        folders = discover_capsules([home]) if home.is_dir() else []
        here = bool(discover_capsules([Path(".")]))
        if not folders:
            if here:
                elsewhere = "; the current folder holds some: `astrid capsule list .`"
            else:
                elsewhere = f", nor in the current folder; {_look_deeper(Path('.'), 'list')}"
            raise UserError(f"no capsules (folders with {MANIFEST_NAME}) in the capsule home {home}{elsewhere}")
        also = "; the current folder's: `astrid capsule list .`" if here else ""
        click.echo(f"listing the capsule home {home} (what `astrid mcp serve` serves{also})")
    checker = CapsuleChecker()  # the compile cache and trust vetter a server uses
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
        loads = False
        try:
            loaded = checker.check(folder)
        except CapsuleLoadError as exc:
            failures += 1
            click.echo(f"{header}\n  status: does not load: {exc}")
        else:
            loads = True
            identity = loaded.grant_identity
            provenance = loaded.provenance
            click.echo(f"{header}\n  status: loads\n  source-id: {loaded.source_id}")
            click.echo(f"  publisher: {provenance.label()}")
            click.echo(f"  digest: sha256:{loaded.wasm_sha256[:16]}")
            click.echo(f"  namespaces: {', '.join(provenance.namespaces) or 'none'}")
            for line in _skill_lines(folder):
                click.echo(line)
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
        stale = stale_component(folder, manifest)
        if stale is not None:
            click.echo(f"  warning: {stale}")
        if verbose and loads:
            for line in _code_mismatch(folder, manifest):
                click.echo(line)
    if failures:
        sys.exit(1)
