"""End-to-end: a real MCP client (ClientSession over stdio) spawning `astrid mcp serve`.

The builds are in tests/e2e/builds.py, the client session in
tests/support/stdio.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from tests.e2e.builds import MUTABLE_VARIANTS, TEST_CAPSULES, Capsules, build, write_variant
from tests.support.capsules import BUNDLED
from tests.support.files import clean_copy


@pytest.fixture(scope="session")
def capsules(tmp_path_factory: pytest.TempPathFactory) -> Capsules:
    """Every capsule the e2e tests use, built (bundled: docs, introspect)."""
    root = tmp_path_factory.mktemp("e2e-capsules")
    built = Capsules(root)
    for name in BUNDLED:
        built.folders[name] = clean_copy(CAPSULES_DIR / name, root / name)
    for name in ("probe", "clash-a", "clash-b", "pythonic"):
        built.folders[name] = clean_copy(TEST_CAPSULES / name, root / name)
    for variant in MUTABLE_VARIANTS:
        folder = clean_copy(TEST_CAPSULES / "mutable", root / f"mutable-{variant}" / "mutable")
        write_variant(folder, variant)
        built.folders[f"mutable-{variant}"] = folder
    # Warm the build cache for every variant: a rebuild during a test is then
    # the real `astrid capsule build`, served from the cache in well under a second.
    with ThreadPoolExecutor(max_workers=max(1, min(4, (os.cpu_count() or 2)))) as pool:
        list(pool.map(build, built.folders.values()))
    return built


@pytest.fixture
def stderr_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "server-stderr.log"
    yield path
    if os.environ.get("ASTRID_E2E_SHOW_STDERR") and path.exists():
        sys.stderr.write(path.read_text())
