"""The WIT contract resolves with wasm-tools, and the capsule world builds a component."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from astrid.host.toolpaths import wasm_tools
from astrid.wit import CAPSULE_WORLD, DEV_RUNNER_WORLD, WIT_DIR

EXPECTED_PACKAGES = {
    "astrid-bus:types@1.0.0",
    "astrid-bus:resource@1.0.0",
    "astrid-bus:resource-template@1.0.0",
    "astrid-bus:resource-events@1.0.0",
    "astrid:ipc@1.0.0",
    "astrid:sys@1.0.0",
    "astrid:fs@1.0.0",
    "astrid:kv@1.0.0",
    "astrid:http@1.0.0",
    "astrid:guest@1.0.0",
    "astrid:capsule@1.0.0",
    "astrid:dev@1.0.0",
}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([wasm_tools(), *args], capture_output=True, text=True, check=False)


def test_every_package_resolves() -> None:
    result = run("component", "wit", "--json", str(WIT_DIR))
    assert result.returncode == 0, result.stderr
    names = {package["name"] for package in json.loads(result.stdout)["packages"]}
    assert names == EXPECTED_PACKAGES


@pytest.mark.parametrize("wit_file", sorted(WIT_DIR.glob("deps/*/*.wit")), ids=lambda p: p.parent.name)
def test_each_dependency_is_valid_as_a_root_package(wit_file: Path, tmp_path: Path) -> None:
    # The file resolves on its own as the root package, with the others as deps.
    root = tmp_path / "wit"
    (root / "deps").mkdir(parents=True)
    shutil.copy(wit_file, root / wit_file.name)
    for other in WIT_DIR.glob("deps/*"):
        if other != wit_file.parent:
            shutil.copytree(other, root / "deps" / other.name)
    result = run("component", "wit", str(root))
    assert result.returncode == 0, result.stderr


def test_resource_package_has_no_describe_request_record() -> None:
    # WIT forbids empty records: the describe request payload is `{}` (docs/contract/interface.md §4).
    result = run("component", "wit", "--json", str(WIT_DIR))
    types = json.loads(result.stdout)["types"]
    assert "describe-request" not in {t["name"] for t in types}


def test_dummy_component_of_capsule_world_validates(tmp_path: Path) -> None:
    core = tmp_path / "dummy.core.wasm"
    component = tmp_path / "dummy.wasm"
    embed = run("component", "embed", "--dummy", "--world", CAPSULE_WORLD, str(WIT_DIR), "-o", str(core))
    assert embed.returncode == 0, embed.stderr
    new = run("component", "new", str(core), "-o", str(component))
    assert new.returncode == 0, new.stderr
    validate = run("validate", str(component))
    assert validate.returncode == 0, validate.stderr
    printed = run("component", "wit", str(component))
    assert "import astrid:ipc/host@1.0.0;" in printed.stdout
    assert "import astrid:sys/host@1.0.0;" in printed.stdout
    assert "export astrid-hook-trigger" in printed.stdout
    assert "wasi:" not in printed.stdout


def test_dev_runner_world_is_the_capsule_world_plus_sources(tmp_path: Path) -> None:
    core = tmp_path / "runner.core.wasm"
    component = tmp_path / "runner.wasm"
    embed = run("component", "embed", "--dummy", "--world", DEV_RUNNER_WORLD, str(WIT_DIR), "-o", str(core))
    assert embed.returncode == 0, embed.stderr
    assert run("component", "new", str(core), "-o", str(component)).returncode == 0
    printed = run("component", "wit", str(component)).stdout
    assert "import astrid:dev/sources@1.0.0;" in printed
    assert "import astrid:ipc/host@1.0.0;" in printed
    assert "export astrid-hook-trigger" in printed
