"""Real capsules served by a real kernel.

The builds (`built_docs`, `built_introspect`, `built_faulty`) are the
session fixtures of tests/conftest.py: clean copies built through
`astrid.host.build.build_capsule`, so the build and compile caches make every
run after the first cheap.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from astrid.host.kernel.kernel import Kernel, KernelConfig


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
