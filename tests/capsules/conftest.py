"""Real capsules, built once per session with componentize-py (content-hash cached), served by a real kernel.

Builds copy the capsule's source into a temporary folder first (a clean
checkout: no stale .wasm) and go through `astrid.host.build.build_capsule`,
so the build cache (`ASTRID_BUILD_CACHE_DIR`) and the compile cache
(`ASTRID_CACHE_DIR`) make every run after the first cheap.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR, SDK_DIR
from astrid.host.build import BuildResult, build_capsule
from astrid.host.kernel.kernel import Kernel, KernelConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# The guest SDK is plain Python: the fast tests import it on the host too.
if str(SDK_DIR) not in sys.path:
    sys.path.insert(0, str(SDK_DIR))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds real components with componentize-py (cached by content hash)")


def clean_copy(source: Path, parent: Path) -> Path:
    """`source` as a fresh checkout would have it: no build outputs, no bytecode."""
    target = parent / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.wasm", "*.cwasm", "__pycache__", ".*"))
    return target


@dataclass
class Built:
    folder: Path
    result: BuildResult


def build_clean(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    folder = clean_copy(source, tmp_path_factory.mktemp(source.name))
    return Built(folder, build_capsule(folder))


@pytest.fixture(scope="session")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(CAPSULES_DIR / "docs", tmp_path_factory)


@pytest.fixture(scope="session")
def built_introspect(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(CAPSULES_DIR / "introspect", tmp_path_factory)


@pytest.fixture(scope="session")
def built_faulty(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(FIXTURES / "faulty", tmp_path_factory)


@pytest.fixture(scope="module")
def kernel_for() -> Iterator:
    kernels: list[Kernel] = []

    def make(*folders: Path) -> Kernel:
        kernel = Kernel(KernelConfig(capsule_paths=list(folders)))
        report = kernel.start()
        assert all(r.ok for r in report), report
        kernels.append(kernel)
        return kernel

    yield make
    for kernel in kernels:
        kernel.close()
