"""A JS/TS capsule's npm dependencies: installed without running any of their code, then bundled.

The `dependencies` of the capsule's `package.json` (its `devDependencies` never reach the component)
are installed by the build itself, as `npm install` would, into the capsule folder's `node_modules`:

- only when something changed: `node_modules` is missing, or npm's own record of it
  (`node_modules/.package-lock.json`) is older than `package.json` or `package-lock.json`;
- with `--ignore-scripts`, so no package's (nor the capsule's) lifecycle script runs on this machine,
  and with `--git` pointed at the `git` on PATH, so a `.npmrc` in the folder cannot swap in a program
  of its own; a git dependency is refused all the same (npm builds those by running their scripts);
- from whatever registry npm is configured for (a `file:` path needs none).

esbuild then bundles what the capsule imports from them into the component (build.mjs). It refuses an
import of a Node built-in (`fs`, `net`, `child_process`, ...), naming the package, the built-in and why
a capsule has no such thing. Every file under `node_modules` (links followed) is part of the build's
content hash and of the staged copy the tools see.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from astrid.host.build.steps import Progress, last_line, run_tool, shown
from astrid.host.errors import BuildError

PACKAGE_JSON = "package.json"
PACKAGE_LOCK = "package-lock.json"
MODULES = "node_modules"
NPM_RECORD = ".package-lock.json"  # npm writes it into node_modules after each install
INSTALL_TIMEOUT_S = 600.0
# npm's git specs: git+ssh://, git://, github:owner/repo, and the bare owner/repo shorthand.
_GIT_SPEC = re.compile(r"^(git(\+[a-z]+)?:|github:|gitlab:|bitbucket:|gist:|[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(#.*)?$)")


def dependencies(folder: Path) -> dict[str, str]:
    """The `dependencies` of the capsule's package.json (empty without one); a BuildError naming a bad file."""
    path = Path(folder) / PACKAGE_JSON
    if not path.is_file():
        return {}
    try:
        package = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BuildError(f"{shown(path)}: not valid JSON ({exc}): fix it, or remove it") from None
    declared = package.get("dependencies", {}) if isinstance(package, dict) else None
    if not isinstance(declared, dict) or not all(isinstance(v, str) for v in declared.values()):
        raise BuildError(f'{shown(path)}: "dependencies" must map package names to version strings')
    for name, spec in declared.items():
        if _GIT_SPEC.match(spec.strip()):
            raise BuildError(
                f'{shown(path)}: the dependency "{name}": "{spec}" is a git dependency, which npm builds by '
                "running its scripts: depend on a published version or a file: path instead"
            )
    return declared


def install(folder: Path, progress: Progress | None) -> None:
    """`npm install --ignore-scripts` in `folder` when its package.json lists dependencies and
    node_modules is missing or older than the package files."""
    folder = Path(folder)
    if not dependencies(folder) or not _stale(folder):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError(
            f"{shown(folder / PACKAGE_JSON)} lists dependencies, and installing them needs npm on PATH "
            "(it comes with Node.js: https://nodejs.org)"
        )
    git = shutil.which("git") or "git"
    command = [
        npm, "install", "--ignore-scripts", "--omit=dev", "--no-audit", "--no-fund",
        "--no-update-notifier", "--loglevel=error", f"--git={git}",
    ]  # fmt: skip
    env = {**os.environ, "NODE_OPTIONS": "", "npm_config_ignore_scripts": "true"}
    code, output = run_tool(
        command, env=env, cwd=folder, name="npm", progress=progress, phase="npm", timeout_s=INSTALL_TIMEOUT_S
    )
    if code != 0:
        why = last_line("\n".join(line for line in output.splitlines() if "npm error" in line) or output)
        raise BuildError(
            f"npm install of {shown(folder / PACKAGE_JSON)}'s dependencies failed: "
            f"{why.removeprefix('npm error ') or 'no message'}"
        )


def _stale(folder: Path) -> bool:
    record = folder / MODULES / NPM_RECORD
    if not record.is_file():
        return True
    installed = record.stat().st_mtime
    package_files = [folder / PACKAGE_JSON, folder / PACKAGE_LOCK]
    return any(p.is_file() and p.stat().st_mtime > installed for p in package_files)


def module_files(folder: Path) -> list[Path]:
    """Every file under the folder's node_modules, links followed (each folder once), sorted; none
    without one. Hidden entries (npm's records, .bin) are left out: esbuild never bundles them."""
    root = Path(folder) / MODULES
    if not root.is_dir():
        return []
    found: list[Path] = []
    seen: set[str] = set()
    for current, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(current)
        if real in seen:  # a link back to a folder already walked
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            path = Path(current) / name
            if name.startswith("."):
                continue
            if not path.exists():  # npm links a `file:` dependency even when its folder is not there
                raise BuildError(
                    f"{shown(path.parent)}/{name} links to {os.readlink(path)}, which does not exist: "
                    f"fix that dependency's path in {shown(Path(folder) / PACKAGE_JSON)}"
                )
            found.append(path)
    return sorted(found)
