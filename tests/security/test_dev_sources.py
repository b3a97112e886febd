"""Dev mode's sources interface (`astrid:dev/sources`) reaches no one but a dev capsule's runner.

`astrid capsule dev` links the interface into every sandbox; what a sandbox
can get from it is the `.py` files the host read from that dev capsule's own
folder. A built capsule that imports it (to read whatever dev capsule runs
beside it, or the host's files through it) is refused at load, and the host
reads only the folder's `.py` files, never through a link out of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from astrid.host.capsule.sources import read_sources
from astrid.host.errors import CapsuleLoadError
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.kernel import Kernel, KernelConfig
from astrid.host.kernel.loader import load_capsule
from astrid.wit import DEV_RUNNER_WORLD
from tests.support.paths import FIXTURES
from tests.support.wat import build_wat

MANIFEST = """\
[package]
name = "reader"
version = "0.1.0"

[[component]]
id = "reader"
file = "reader.wasm"

[subscribe]
"probe.read" = { wit = "opaque", handler = "read" }
"""


@pytest.fixture
def reader(tmp_path: Path) -> Path:
    """A built capsule whose component imports astrid:dev/sources (a WAT component of the dev-runner world)."""
    folder = tmp_path / "reader"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST, encoding="utf-8")
    build_wat(FIXTURES / "wat" / "dev_reader.wat", folder / "reader.wasm", world=DEV_RUNNER_WORLD)
    return folder


def test_a_built_capsule_importing_the_dev_sources_is_refused(reader: Path, component_cache_dir: Path) -> None:
    with pytest.raises(CapsuleLoadError, match=r"astrid:dev/sources@1\.0\.0"):
        load_capsule(reader, CompileCache(component_cache_dir))


def test_the_kernel_serves_no_built_capsule_that_imports_them(reader: Path, component_cache_dir: Path) -> None:
    kernel = Kernel(KernelConfig(capsule_paths=[reader], cache_dir=component_cache_dir))
    try:
        report = kernel.start()
        assert [r.ok for r in report] == [False]
        assert "astrid:dev/sources" in (report[0].error or "")
        assert kernel.loaded() == []
    finally:
        kernel.close()


def test_the_host_reads_only_the_folders_own_py_files(tmp_path: Path) -> None:
    folder = tmp_path / "capsule"
    (folder / "pkg").mkdir(parents=True)
    (folder / "app.py").write_text("x = 1\n", encoding="utf-8")
    (folder / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "secret.txt").write_text("not a source\n", encoding="utf-8")
    (folder / ".hidden.py").write_text("hidden = 1\n", encoding="utf-8")
    (folder / ".git").mkdir()
    (folder / ".git" / "hook.py").write_text("hook = 1\n", encoding="utf-8")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "stale.py").write_text("stale = 1\n", encoding="utf-8")
    assert sorted(read_sources(folder)) == ["capsule/app.py", "capsule/pkg/__init__.py"]


def test_a_link_out_of_the_folder_is_refused_by_name(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("password = 'hunter2'\n", encoding="utf-8")
    folder = tmp_path / "capsule"
    folder.mkdir()
    (folder / "app.py").write_text("x = 1\n", encoding="utf-8")
    os.symlink(outside, folder / "stolen.py")
    with pytest.raises(CapsuleLoadError, match=r"stolen\.py: a symbolic link out of"):
        read_sources(folder)


def test_a_folder_link_out_of_the_folder_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "loot.py").write_text("loot = 1\n", encoding="utf-8")
    folder = tmp_path / "capsule"
    folder.mkdir()
    (folder / "app.py").write_text("x = 1\n", encoding="utf-8")
    os.symlink(tmp_path / "elsewhere", folder / "lib")
    with pytest.raises(CapsuleLoadError, match="a symbolic link out of"):
        read_sources(folder)
