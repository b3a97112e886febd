"""The wheel, installed with its pinned dependencies into a fresh virtual environment, is a working astrid.

No repository checkout is involved after the build: the commands run from a folder outside the repo, with
the project's own .venv off PATH, so a file the wheel forgot fails here (an editable install hides it).
pip takes the dependencies from its cache (what `make` installed) or the package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.stdio import stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class Installed:
    venv: Path

    @property
    def astrid(self) -> str:
        return str(self.venv / "bin" / "astrid")

    def env(self, root: Path) -> dict[str, str]:
        """The environment of a user of the wheel: no dev .venv on PATH, state under `root`."""
        dev_bin = str(Path(sys.executable).parent)
        path = os.pathsep.join(p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p != dev_bin)
        inherited = {
            k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("OTEL_")
        }
        return {
            **inherited,
            "PATH": path,
            "PYTHONUNBUFFERED": "1",
            "ASTRID_CAPSULE_HOME": str(root / "home"),
            "ASTRID_CONFIG_DIR": str(root / "config"),
            "ASTRID_DATA_DIR": str(root / "data"),
            # an empty build cache: componentize-py really builds from the wheel's SDK and WIT
            "ASTRID_BUILD_CACHE_DIR": str(root / "builds"),
        }

    def run(self, *args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.astrid, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"astrid {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built from this checkout and pip-installed (with its dependencies) into a new venv."""
    root = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(root), str(REPO)], check=True, timeout=PIP_TIMEOUT_S)
    [wheel] = root.glob("astrid_py-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--progress-bar", "off", str(wheel)],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
    )
    assert done.returncode == 0, f"pip install of the wheel failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return Installed(venv)


def test_the_installed_package_is_the_wheels_not_the_checkout(installed: Installed, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", "import astrid.host, astrid.wit; print(astrid.host.__file__)"],
        cwd=tmp_path,
        env=installed.env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.venv)
    # the command under the package's name too (`uvx astrid-py ...`, MCP registry clients)
    same = subprocess.run([str(installed.venv / "bin" / "astrid-py"), "--version"], capture_output=True, text=True)
    assert same.returncode == 0 and "astrid" in same.stdout
    shipped = installed.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    astrid = shipped / "astrid"
    for path in (
        "wit/capsule.wit",
        "capsules/sdk/astrid_sdk/__init__.py",
        "capsules/runner/astrid_dev_runner.py",
        "capsules/sdk-ts/package.json",
        "capsules/sdk-ts/src/index.ts",
        "capsules/templates/app.ts.tmpl",
        "capsules/docs/app.py",
        "capsules/files/Capsule.toml",
        "capsules/introspect/app.py",
        "toolchains/js/package.json",
        "toolchains/js/package-lock.json",
        "toolchains/js/build.mjs",
    ):
        assert (astrid / path).is_file(), f"the wheel lacks astrid/{path}"
    assert not (astrid / "toolchains" / "js" / "node_modules").exists()  # installed on first use, per user


async def test_new_build_and_serve_a_capsule_from_the_wheel_outside_the_repo(
    installed: Installed, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = installed.env(tmp_path)
    installed.run("capsule", "new", "hello", cwd=work, env=env)
    built = installed.run("capsule", "build", "hello", cwd=work, env=env)
    assert (work / "hello" / "hello.wasm").is_file(), built.stderr
    async with stdio_session(
        work / "hello",
        capsule_home=tmp_path / "home",
        stderr=tmp_path / "serve.log",
        principal="alice",
        env=env,
        command=installed.astrid,
        cwd=work,
    ) as served:
        assert await served.uris() == ["astrid://hello/hello"]
        assert await served.text("astrid://hello/hello") == "Hello, alice!"


async def test_a_ts_capsule_from_the_wheel_installs_the_pinned_toolchain_in_the_user_cache(
    installed: Installed, tmp_path: Path
) -> None:
    if shutil.which("npm") is None:
        pytest.fail("this test needs Node.js 20+ and npm on PATH (as `make test` does)")
    work = tmp_path / "work"
    work.mkdir()
    env = installed.env(tmp_path)
    env.pop("ASTRID_JS_TOOLCHAIN", None)
    installed.run("capsule", "new", "greet", "--lang", "ts", cwd=work, env=env)
    try:
        first = installed.run("capsule", "build", "greet", cwd=work, env=env)
        assert "installing the pinned JS/TS toolchain" in first.stderr
        [toolchain] = (tmp_path / "builds").glob("js-toolchain-*")
        assert (toolchain / "node_modules" / "@bytecodealliance" / "componentize-js").is_dir()
        (work / "greet" / "greet.wasm").unlink()
        again = installed.run("capsule", "build", "greet", cwd=work, env=env)
        assert "installing the pinned JS/TS toolchain" not in again.stderr  # once per user and toolchain version
        async with stdio_session(
            work / "greet",
            capsule_home=tmp_path / "home",
            stderr=tmp_path / "serve.log",
            env=env,
            command=installed.astrid,
            cwd=work,
        ) as served:
            assert await served.text("astrid://greet/hello") == "Hello, alice!"
    finally:  # ~400 MB of node_modules: not kept in pytest's tmp folders
        for folder in (tmp_path / "builds").glob("js-toolchain-*"):
            shutil.rmtree(folder, ignore_errors=True)


def test_without_npm_the_first_ts_build_says_what_to_install(installed: Installed, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("this test needs Node.js on PATH (as `make test` does)")
    bin_dir = tmp_path / "bin"  # node, but no npm
    bin_dir.mkdir()
    (bin_dir / "node").symlink_to(node)
    work = tmp_path / "work"
    work.mkdir()
    env = {**installed.env(tmp_path), "PATH": str(bin_dir)}
    env.pop("ASTRID_JS_TOOLCHAIN", None)
    installed.run("capsule", "new", "greet", "--lang", "ts", cwd=work, env=env)
    done = subprocess.run(
        [installed.astrid, "capsule", "build", "greet"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "installs its pinned toolchain with npm, which is not on PATH" in done.stderr
    assert "install Node.js 20+ with npm" in done.stderr
    assert not list((tmp_path / "builds").glob("js-toolchain-*"))  # nothing half-installed
