"""Where the pinned JS/TS toolchain is installed, and its install on first use.

The toolchain is the npm packages pinned in `toolchains/js/package-lock.json` (shipped in the wheel as
`astrid/toolchains/js`) plus its `build.mjs`. Which folder a build uses:

1. `$ASTRID_JS_TOOLCHAIN`, as it is (the operator installed it there);
2. the shipped folder, when `make js-toolchain` installed the packages there (a repository checkout);
3. otherwise a per-user copy in the build cache (`~/.cache/astrid/builds/js-toolchain-<digest>`), named by
   the manifest's content: the first TS build runs `npm ci` there, never anything system-wide. Install
   scripts are not run (only esbuild has one, and its platform binary comes as a plain dependency).

The copy is installed in a scratch folder and renamed into place, so two builds at once never see half an
install (the second one's copy is dropped).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from astrid.capsules import CAPSULES_DIR
from astrid.host.build.steps import ContentDigest, Progress, last_line, run_tool, scratch_folder
from astrid.host.errors import BuildError

TOOLCHAIN_ENV = "ASTRID_JS_TOOLCHAIN"
SHIPPED_DIR = CAPSULES_DIR.parent / "toolchains" / "js"
MANIFEST_FILES = ("package.json", "package-lock.json", "build.mjs")
INSTALL_TIMEOUT_S = 900.0
NPM_CI = ["ci", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts"]


def is_installed(folder: Path) -> bool:
    return (folder / "node_modules" / "@bytecodealliance" / "componentize-js").is_dir()


def user_copy(cache: Path) -> Path:
    """The per-user install in the build cache `cache`, named by the shipped manifest's content."""
    digest = ContentDigest()
    digest.add_files("", SHIPPED_DIR, [SHIPPED_DIR / name for name in MANIFEST_FILES])
    return cache / f"js-toolchain-{digest.hexdigest()[:16]}"


def toolchain_dir(cache: Path) -> Path:
    """The folder a build runs the toolchain from (see the module docstring); it may not be installed yet."""
    configured = os.environ.get(TOOLCHAIN_ENV)
    if configured:
        return Path(configured).expanduser()
    if is_installed(SHIPPED_DIR):
        return SHIPPED_DIR
    return user_copy(cache)


def ready_toolchain(cache: Path, progress: Progress | None) -> Path:
    """The installed toolchain folder: installed into the per-user copy first when needed."""
    if shutil.which("node") is None:
        raise BuildError("building a JS/TS capsule needs Node.js 20+ on PATH: install it (https://nodejs.org)")
    folder = toolchain_dir(cache)
    if is_installed(folder):
        return folder
    if os.environ.get(TOOLCHAIN_ENV):
        raise BuildError(
            f"the JS/TS toolchain is not installed in {folder} (${TOOLCHAIN_ENV}): run `npm ci` there, "
            f"or unset {TOOLCHAIN_ENV} to let astrid install it in its cache"
        )
    _install(folder, cache, progress)
    return folder


def _install(target: Path, cache: Path, progress: Progress | None) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError(
            "the first JS/TS build installs its pinned toolchain with npm, which is not on PATH: "
            "install Node.js 20+ with npm (https://nodejs.org)"
        )
    with scratch_folder(cache, "js-toolchain-install-") as scratch:
        for name in MANIFEST_FILES:
            shutil.copyfile(SHIPPED_DIR / name, scratch / name)
        code, output = run_tool(
            [npm, *NPM_CI],
            env=dict(os.environ),
            cwd=scratch,
            name="npm ci",
            progress=progress,
            phase="js-toolchain",
            timeout_s=INSTALL_TIMEOUT_S,
        )
        if code != 0 or not is_installed(scratch):
            cause = last_line(output) or f"exit code {code}"
            raise BuildError(
                f"installing the JS/TS toolchain into {target} failed ({cause}): check the network "
                "access to the npm registry, then build again"
            )
        try:
            os.rename(scratch, target)
        except OSError:
            if not is_installed(target):  # not another build's install that won the race
                raise BuildError(
                    f"cannot install the JS/TS toolchain into {target}: remove that folder and build again"
                ) from None
