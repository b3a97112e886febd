"""The dev runner (`astrid capsule dev`): one component that serves any Python capsule's sources.

    runner = dev_runner(cache, progress)   # the component file, built once, then from the build cache

componentize-py builds `capsules/runner/` with the guest SDK against the
world `dev-runner` (the capsule world plus `astrid:dev/sources`), once per
runner, SDK, WIT and componentize-py version: the key is a content hash of
all of them, so an edit of a capsule never builds anything. The runner
imports the capsule's modules from the host when its sandbox first runs
(`capsules/runner/astrid_dev_importer.py`). The build is hermetic as a
capsule's is (`python_toolchain.py`): private copies of the sources, an
empty site, no host Python in the environment.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from astrid.capsules import CAPSULES_DIR, SDK_DIR
from astrid.host.build.python_toolchain import _HOST_PYTHON_ENV, componentize_py_version, explain_failure
from astrid.host.build.requirements import site_packages_of
from astrid.host.build.steps import ContentDigest, Progress, run_tool, scratch_folder
from astrid.host.errors import BuildError
from astrid.wit import DEV_RUNNER_WORLD, WIT_DIR

RUNNER_DIR = CAPSULES_DIR / "runner"
RUNNER_MODULE = "astrid_dev_runner"
RUNNER_FORMAT = "astrid-dev-runner-1"  # bump when the build of the runner changes in a way the hash misses


def _files(root: Path, suffix: str) -> list[Path]:
    return sorted(p for p in root.rglob(f"*{suffix}") if "__pycache__" not in p.parts)


def runner_hash() -> str:
    """sha256 over the runner's sources, the SDK, the WIT, componentize-py's version and the world."""
    digest = ContentDigest()
    digest.add("format", RUNNER_FORMAT.encode())
    for label, root, suffix in (("runner", RUNNER_DIR, ".py"), ("sdk", SDK_DIR, ".py"), ("wit", WIT_DIR, ".wit")):
        digest.add_files(f"{label}/", root, _files(root, suffix))
    digest.add("componentize-py", componentize_py_version().encode())
    digest.add("world", f"{DEV_RUNNER_WORLD} {RUNNER_MODULE}".encode())
    return digest.hexdigest()


def runner_path(cache: Path) -> Path:
    return Path(cache) / f"dev-runner-{runner_hash()}.wasm"


def dev_runner(cache: Path, progress: Progress | None = None) -> Path:
    """The runner component in the build cache `cache`: built now (20 s or so) unless it is there."""
    out = runner_path(cache)
    if out.is_file():
        return out
    with scratch_folder(cache, "dev-runner-") as scratch:
        runner, sdk, site = scratch / "runner", scratch / "sdk", scratch / "site"
        for root, copy in ((RUNNER_DIR, runner), (SDK_DIR, sdk)):
            for path in _files(root, ".py"):
                target = copy / path.relative_to(root)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        site_packages_of(site).mkdir(parents=True)  # an empty site: componentize-py looks nowhere else
        wasm = scratch / "dev-runner.wasm"
        from astrid.host.toolpaths import componentize_py

        command = [
            componentize_py(), "-d", str(WIT_DIR), "-w", DEV_RUNNER_WORLD, "componentize",
            "-p", str(runner), "-p", str(sdk), RUNNER_MODULE, "-o", str(wasm),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in _HOST_PYTHON_ENV}
        env.update({"RUST_BACKTRACE": "0", "PYTHONDONTWRITEBYTECODE": "1", "VIRTUAL_ENV": str(site)})
        code, output = run_tool(
            command, env=env, cwd=scratch, name="componentize-py (the dev runner)", progress=progress, phase="runner"
        )
        if code != 0 or not wasm.is_file():
            raise BuildError(f"building the dev runner failed: {explain_failure(output, RUNNER_DIR)}")
        os.replace(wasm, out)
    return out
