"""The JavaScript/TypeScript toolchain: a capsule folder with `app.ts` (or `app.js`), built by componentize-js.

    stage the sources, the TS SDK and the WIT in a scratch folder
    -> esbuild bundles the entry with the SDK (`@astrid/sdk`) into one ES module, `astrid:*` left as imports
    -> componentize-js builds the component against the world `resource-capsule`

Both tools are the npm packages pinned in `toolchains/js/package-lock.json`, installed there by
`make js-toolchain`, else into the user's build cache on the first TS build (`js_install.py`; or
`$ASTRID_JS_TOOLCHAIN`), and run by its `build.mjs` on the `node` on PATH.
The component imports the astrid:* interfaces and the WASI the host serves deny-by-default
(`kernel/wasi.py`): clocks, random and stdio are on, so `Date.now()`, `Math.random()` and
`console.log()` work; its http and fetch features are off (a capsule reaches the network with
ctx.http), and so is ahead-of-time compilation (weval downloads a binary at run time). The build
appends a table from the bundle's lines to the author's `file:line`, which the SDK uses to point a
read error or a manifest mismatch at the author's code.

The `dependencies` of the capsule's `package.json` are installed with `npm install --ignore-scripts`
and bundled (`npm_deps.py`); an import of a Node built-in is refused, naming the package.

The content hash covers the capsule's files, its installed dependencies, the SDK's files, the WIT
files, the pinned tools (the lock file and build.mjs) and the flags.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from astrid.capsules import CAPSULES_DIR
from astrid.host.build import npm_deps
from astrid.host.build.js_install import ready_toolchain
from astrid.host.build.skills import SKILLS_FOLDER, read_skills
from astrid.host.build.steps import ContentDigest, Progress, last_line, run_tool, scratch_folder, shown, source_files
from astrid.host.capsule.manifest import Manifest
from astrid.host.errors import BuildError
from astrid.wit import CAPSULE_WORLD, WIT_DIR

ENTRIES = ("app.ts", "app.js")
SDK_TS_DIR = CAPSULES_DIR / "sdk-ts"
FLAGS = "esbuild-esm-es2022 disable:http,fetch-event table-1 deps-1"
TIMEOUT_S = 600.0
_PHASE = re.compile(r"^phase: (\w+)$", re.MULTILINE)


def _sdk_files() -> list[Path]:
    return sorted(p for p in SDK_TS_DIR.rglob("*") if p.is_file() and "node_modules" not in p.parts)


def _module_files(folder: Path) -> list[Path]:
    """The installed npm dependencies the build sees: none unless package.json declares some."""
    return npm_deps.module_files(folder) if npm_deps.dependencies(folder) else []


def content_hash(folder: Path, exclude: tuple[Path, ...], tools: Path) -> str:
    """sha256 over everything a build depends on."""
    digest = ContentDigest()
    digest.add_files("capsule/", folder, source_files(folder, exclude))
    digest.add_files("modules/", folder, _module_files(folder))
    digest.add_files("sdk/", SDK_TS_DIR, _sdk_files())
    digest.add_files("wit/", WIT_DIR, sorted(WIT_DIR.rglob("*.wit")))
    digest.add_files("tools/", tools, [tools / "package-lock.json", tools / "build.mjs"])
    digest.add("flags", f"{CAPSULE_WORLD} {FLAGS}".encode())
    return digest.hexdigest()


class JsToolchain:
    language = "typescript"
    entry = ENTRIES[0]

    def _entry(self, folder: Path) -> Path | None:
        return next((Path(folder) / e for e in ENTRIES if (Path(folder) / e).is_file()), None)

    def detects(self, folder: Path) -> bool:
        return self._entry(folder) is not None

    def language_of(self, folder: Path) -> str:
        """ "TypeScript" for an app.ts, "JavaScript" for an app.js (`language` names the toolchain)."""
        entry = self._entry(folder)
        return "JavaScript" if entry is not None and entry.suffix == ".js" else "TypeScript"

    def missing(self, folder: Path) -> str:
        return (
            f"{shown(Path(folder) / ENTRIES[0])} (or app.js): not found (a TypeScript capsule's entry; "
            "start one with `astrid capsule new NAME --lang ts`)"
        )

    def prepare(
        self, folder: Path, manifest: Manifest, *, exclude: tuple[Path, ...], cache: Path, progress: Progress | None
    ) -> JsBuild:
        entry = self._entry(folder)
        if entry is None:
            raise BuildError(self.missing(folder))
        if read_skills(Path(folder), exclude):  # checked, then refused rather than left out unsaid
            raise BuildError(
                f"{shown(Path(folder) / SKILLS_FOLDER)}: TypeScript and JavaScript capsules do not serve skills yet "
                "(docs/skills.md): serve them from a Python capsule, or move the folder out"
            )
        tools = ready_toolchain(cache, progress)
        npm_deps.install(Path(folder), progress)
        return JsBuild(Path(folder), entry, manifest, exclude, tools, content_hash(Path(folder), exclude, tools))


JS = JsToolchain()


@dataclass(frozen=True)
class JsBuild:
    folder: Path
    entry: Path
    manifest: Manifest
    exclude: tuple[Path, ...]
    tools: Path
    content_hash: str

    def componentize(self, out: Path, cache: Path, progress: Progress | None) -> None:
        with scratch_folder(cache, "build-") as scratch:
            self._stage(scratch)
            wasm = scratch / "out.wasm"
            # componentize-js reads the WIT through a WASI sandbox that sees only its working folder: so
            # every path is relative to the scratch folder.
            command = [
                "node", str(self.tools / "build.mjs"),
                f"capsule/{self.entry.name}", "sdk/src/index.ts", "wit", CAPSULE_WORLD, "out.wasm",
            ]  # fmt: skip
            env = {**os.environ, "NODE_OPTIONS": ""}
            code, output = run_tool(
                command,
                env=env,
                cwd=scratch,
                name="componentize-js",
                progress=progress,
                phase="componentize-js",
                timeout_s=TIMEOUT_S,
            )
            if code != 0 or not wasm.is_file():
                raise BuildError(explain_failure(output, self.folder))
            os.replace(wasm, out)

    def _stage(self, scratch: Path) -> None:
        """Private copies of exactly what the content hash covers."""
        sources = [*source_files(self.folder, self.exclude), *_module_files(self.folder)]
        for root, files in ((self.folder, sources), (SDK_TS_DIR, _sdk_files())):
            target = scratch / ("capsule" if root == self.folder else "sdk")
            for path in files:
                copy = target / path.relative_to(root)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
        shutil.copytree(WIT_DIR, scratch / "wit", ignore=shutil.ignore_patterns("*.py", "__pycache__"))


def explain_failure(output: str, folder: Path) -> str:
    """One line from build.mjs's output: `app.ts:LINE: message` for the author's code, else the cause."""
    lines = [line for line in output.splitlines() if line.strip() and not _PHASE.fullmatch(line.strip())]
    cause = last_line("\n".join(lines)) or "componentize-js failed without a message"
    if cause.startswith("capsule/"):  # the staged copy: name the author's file
        path, _, rest = cause.partition(":")
        return f"{shown(folder / path.removeprefix('capsule/'))}:{rest}"
    return cause
