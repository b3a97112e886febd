"""The Python toolchain: a capsule folder with `app.py`, built by componentize-py.

    compile every .py (syntax errors as file:line)
    -> install requirements.txt (pinned, pure Python) into an isolated site (`requirements.py`)
    -> content hash -> componentize-py (unless the build cache holds it)

The entry module is `app` (the file `app.py` at the top of the capsule
folder); it must define `WitWorld` (`WitWorld = capsule.world()` with the
guest SDK). componentize-py builds it against the world `resource-capsule`,
with the capsule folder and the guest SDK on the guest's module path; its
WASI imports are served deny-by-default by the host (`host/kernel/wasi.py`).

Builds are hermetic: the guest sees the standard library, the SDK, the
capsule folder and the packages its `requirements.txt` pins (installed into
an isolated folder of the build cache), never the host's site-packages
(componentize-py gets that folder as VIRTUAL_ENV, so it never asks a
`python3` on PATH for its site-packages). Nothing of the capsule's code runs
on the host's Python: componentize-py runs app.py inside its own WebAssembly
runtime, with private copies of what the content hash covers.

The content hash covers the capsule's files, the SDK's files, the WIT files,
the installed packages, the componentize-py version and the build flags.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from astrid.capsules import SDK_DIR
from astrid.host.build.requirements import REQUIREMENTS_FILE, Site, install_site, read_requirements, site_packages_of
from astrid.host.build.skills import INDEX_MODULE, Skill, index_module, read_skills
from astrid.host.build.steps import ContentDigest, Progress, last_line, run_tool, scratch_folder, shown, source_files
from astrid.host.build.unfit_packages import unfit_module
from astrid.host.capsule.manifest import Manifest
from astrid.host.errors import BuildError
from astrid.wit import CAPSULE_WORLD, WIT_DIR

ENTRY_MODULE = "app"
ENTRY_FILE = f"{ENTRY_MODULE}.py"
COMPONENTIZE_FLAGS: tuple[str, ...] = ()  # WASI is linked, deny by default (host/kernel/wasi.py)
# What else a build's result depends on: its isolated site (bump when the build's inputs change
# in a way the content hash does not see, e.g. the manifest check).
ISOLATION = "isolated-site-1 manifest-check-1"
# Environment variables that would let the host's Python reach into the build.
_HOST_PYTHON_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PIPENV_ACTIVE", "CONDA_PREFIX")


@lru_cache(maxsize=1)
def componentize_py_version() -> str:
    try:
        return version("componentize-py")
    except PackageNotFoundError:  # a componentize-py from PATH: ask it
        from astrid.host.toolpaths import componentize_py

        result = subprocess.run([componentize_py(), "--version"], capture_output=True, text=True, check=False)
        return result.stdout.strip() or "unknown"


def _sdk_files() -> list[Path]:
    return sorted(p for p in SDK_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def _wit_files() -> list[Path]:
    return sorted(WIT_DIR.rglob("*.wit"))


def content_hash(
    folder: Path, exclude: tuple[Path, ...] = (), site: str | None = None, skills: tuple[Skill, ...] = ()
) -> str:
    """sha256 over everything a build depends on; `site` is the tree hash of the installed requirements,
    `skills` the capsule's skills (their files are capsule files: this adds the generated index)."""
    digest = ContentDigest()
    if skills:  # only then: a capsule without skills keeps the key it had
        digest.add("skills-index", index_module(list(skills)).encode())
    digest.add_files("capsule/", folder, source_files(folder, exclude))
    digest.add_files("sdk/", SDK_DIR, _sdk_files())
    digest.add_files("wit/", WIT_DIR, _wit_files())
    if site is not None:
        digest.add("site", site.encode())
    digest.add("componentize-py", componentize_py_version().encode())
    digest.add("flags", " ".join((CAPSULE_WORLD, ENTRY_MODULE, *COMPONENTIZE_FLAGS)).encode())
    digest.add("isolation", ISOLATION.encode())
    return digest.hexdigest()


def check_syntax(folder: Path) -> None:
    """Compile every .py of the capsule (without writing bytecode); SyntaxError -> `file:line: message`."""
    for path in source_files(folder):
        if path.suffix != ".py":
            continue
        try:
            source = path.read_bytes()
        except OSError as exc:
            raise BuildError(f"{shown(path)}: cannot read: {exc.strerror or exc}") from None
        try:
            compile(source, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            line = f":{exc.lineno}" if exc.lineno else ""
            raise BuildError(f"{shown(path)}{line}: {exc.msg}") from None
        except ValueError as exc:  # e.g. null bytes
            raise BuildError(f"{shown(path)}: {exc}") from None


class PythonToolchain:
    language = "python"
    entry = ENTRY_FILE

    def language_of(self, folder: Path) -> str:
        return "Python"

    def detects(self, folder: Path) -> bool:
        return (Path(folder) / ENTRY_FILE).is_file()

    def missing(self, folder: Path) -> str:
        return (
            f"{shown(Path(folder) / ENTRY_FILE)}: not found (a Python capsule's entry module is {ENTRY_FILE}; "
            "it must define WitWorld = capsule.world())"
        )

    def prepare(
        self, folder: Path, manifest: Manifest, *, exclude: tuple[Path, ...], cache: Path, progress: Progress | None
    ) -> PythonBuild:
        check_syntax(folder)
        skills = tuple(read_skills(folder, exclude))  # checked before anything slow runs
        requirements = read_requirements(folder)
        site = install_site(requirements, cache, progress) if requirements is not None else None
        digest = content_hash(
            folder, exclude=exclude, site=site.tree_sha256 if site is not None else None, skills=skills
        )
        return PythonBuild(folder, manifest, exclude, site, digest, skills)


PYTHON = PythonToolchain()


@dataclass(frozen=True)
class PythonBuild:
    folder: Path
    manifest: Manifest
    exclude: tuple[Path, ...]
    site: Site | None
    content_hash: str
    skills: tuple[Skill, ...] = ()

    def componentize(self, out: Path, cache: Path, progress: Progress | None) -> None:
        from astrid.host.toolpaths import componentize_py

        with scratch_folder(cache, "build-") as scratch:
            wasm = scratch / f"{self.manifest.name}.wasm"
            guest, sdk, site_root = self._stage(scratch)
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
            code, output = run_tool(
                command, env=env, cwd=scratch, name="componentize-py", progress=progress, phase="componentize"
            )
            if code != 0 or not wasm.is_file():
                raise BuildError(explain_failure(output, self.folder, self.site))
            os.replace(wasm, out)

    def _stage(self, scratch: Path) -> tuple[Path, Path, Path]:
        """Private copies of what the guest sees while componentize-py builds it: (capsule, SDK, site root).

        componentize-py runs app.py's top level inside WebAssembly, but with its
        module folders mounted writable (`/0`, `/1`, `/2`): given the folders
        themselves, a capsule's import-time code could write into its own folder,
        into the SDK every later build uses, or into a cached site other capsules
        share (and CPython leaves `__pycache__` in them). So it gets copies of
        exactly what the content hash covers, deleted with the scratch folder.
        """
        guest = scratch / "capsule"
        for path in source_files(self.folder, self.exclude):
            copy = guest / path.relative_to(self.folder)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
        if self.skills:  # the SDK serves them from this index and the copied files (host/build/skills.py)
            (guest / f"{INDEX_MODULE}.py").write_text(index_module(list(self.skills)), encoding="utf-8")
        sdk = scratch / "sdk"
        for path in _sdk_files():
            copy = sdk / path.relative_to(SDK_DIR)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
        site_root = scratch / "site"
        if self.site is not None:
            shutil.copytree(self.site.root, site_root, symlinks=True)
        else:  # nothing pinned: an empty site, so componentize-py looks nowhere else
            site_packages_of(site_root).mkdir(parents=True)
        return guest, sdk, site_root


_GUEST_FILE = re.compile(r'File "/(\d+)/([^"]+)", line (\d+)')
# A definition error the guest SDK located itself: `app.py:12: resource astrid://x/y on y(): ...`.
_SDK_LOCATED = re.compile(r"(?:[\w.]+\.)?DefinitionError: (?P<file>[^\s:]+\.py):(?P<rest>\d+: .+)")
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def explain_failure(output: str, folder: Path, site: Site | None = None) -> str:
    """One line from componentize-py's output: the cause, pointing at the file when it can."""
    text = output.split("\nStack backtrace:", 1)[0]
    head, _, caused = text.partition("\nCaused by:")
    cause = last_line(caused) if caused.strip() else last_line(head)
    cause = cause.removeprefix("AssertionError: ")
    located = _SDK_LOCATED.fullmatch(cause)
    if located:  # the author's declaration, not the SDK line that checked it
        return f"{shown(folder / located['file'])}:{located['rest']}"
    where = ""
    frames = _GUEST_FILE.findall(head)
    if frames:
        # the deepest frame of the author's code or a pinned package, not the SDK's guard that raised
        index, relative, line = next((f for f in reversed(frames) if f[0] != "1"), frames[-1])
        roots = {"0": folder, "1": SDK_DIR, "2": site.site_packages if site is not None else None}
        root = roots.get(index)
        where = f"{shown(root / relative) if root else relative}:{line}: "
    elif "WitWorld" in cause:
        where = f"{shown(folder / ENTRY_FILE)}: "
        cause += " (end app.py with `WitWorld = capsule.world()`)"
    elif "failed to resolve directory" in cause or "parsing WIT" in cause:
        cause += f" (the WIT in {WIT_DIR} does not parse: run `wasm-tools component wit {WIT_DIR}`)"
    missing = _MISSING_MODULE.search(cause)
    if missing:
        cause += _missing_module_hint(missing.group(1))
    return f"{where}{cause}" if cause else "componentize-py failed without a message"


def _missing_module_hint(module: str) -> str:
    """Why a module the host may well have is missing from the build, and the line that adds it."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return " (the WebAssembly guest's standard library has no such module)"
    unfit = unfit_module(top)
    if unfit is not None:  # never hint in a pin the build would refuse
        distribution, why = unfit
        return f" ({distribution} cannot work in a capsule: {why})"
    from importlib.metadata import packages_distributions

    pin = f"{top}==<version>"
    for distribution in packages_distributions().get(top, [])[:1]:
        try:
            pin = f"{distribution}=={version(distribution)}"
        except PackageNotFoundError:  # the hint keeps its `<version>` placeholder
            break
    return (
        " (a build sees only the standard library, the SDK, the capsule folder and the pure-Python packages "
        f"pinned in {REQUIREMENTS_FILE} beside app.py: add `{pin}` there)"
    )
