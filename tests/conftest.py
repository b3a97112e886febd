"""Shared test setup: one content-addressed cache for builds and compiled components, and the shared fixtures.

Builds (componentize-py, ~8 s each) and compiled components (~5 s each) are
cached by content hash under `.cache/` in the work tree, so only the first run
on a machine pays for them. The helpers these fixtures use live in
`tests/support/`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from astrid.capsules import CAPSULES_DIR
from tests.support.capsules import BUNDLED, Built, build_clean
from tests.support.paths import FIXTURES, REPO

CACHE_ROOT = Path(os.environ.get("ASTRID_TEST_CACHE", REPO / ".cache"))
os.environ.setdefault("ASTRID_CACHE_DIR", str(CACHE_ROOT / "components"))
os.environ.setdefault("ASTRID_BUILD_CACHE_DIR", str(CACHE_ROOT / "builds"))
# The user's own grants, tokens and kv state never reach a test (nor a server it starts).
_USER_DIRS = Path(tempfile.mkdtemp(prefix="astrid-test-user-"))
os.environ.setdefault("ASTRID_CONFIG_DIR", str(_USER_DIRS / "config"))
os.environ.setdefault("ASTRID_DATA_DIR", str(_USER_DIRS / "data"))


LOG_TAIL_LINES = 200


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, None]:
    """A failed test shows what its servers logged (every `*.log` in its tmp_path, the tail):
    a timing failure on a CI machine is otherwise a bare TimeoutError."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    tmp_path = funcargs.get("tmp_path")
    if not report.failed or call.when != "call" or not isinstance(tmp_path, Path):
        return
    for log in sorted(tmp_path.rglob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        report.sections.append((f"log {log.relative_to(tmp_path)}", "\n".join(lines)))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def component_cache_dir() -> Path:
    path = Path(os.environ["ASTRID_CACHE_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def capsule_home(tmp_path: Path) -> Path:
    """An empty capsule home, so the user's own capsules never leak into a test."""
    home = tmp_path / "home"
    home.mkdir()
    return home


# -- real capsules, built once per session (content-hash cached) ------------------------------


@pytest.fixture(scope="session")
def bundled_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """The bundled capsules (`BUNDLED`), copied clean and built with `astrid capsule build`'s code path."""
    root = tmp_path_factory.mktemp("bundled")
    return {name: build_clean(CAPSULES_DIR / name, root / name) for name in BUNDLED}


@pytest.fixture(scope="session")
def bundled(bundled_built: dict[str, Built]) -> list[Path]:
    """The built bundled capsules' folders, in `BUNDLED` order (docs first)."""
    return [bundled_built[name].folder for name in BUNDLED]


@pytest.fixture(scope="session")
def built_docs(bundled_built: dict[str, Built]) -> Built:
    return bundled_built["docs"]


@pytest.fixture(scope="session")
def built_introspect(bundled_built: dict[str, Built]) -> Built:
    return bundled_built["introspect"]


@pytest.fixture(scope="session")
def built_files(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """capsules/files: the folder granted as the mount "files", served as resources."""
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("files") / "files")


@pytest.fixture(scope="session")
def built_faulty(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """tests/fixtures/faulty: handlers that raise, return the wrong type or too much."""
    return build_clean(FIXTURES / "faulty", tmp_path_factory.mktemp("faulty") / "faulty")


@pytest.fixture(scope="session")
def built_probe(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """tests/e2e/capsules/probe: a per-principal note, an alice-only resource, a read that never returns."""
    return build_clean(REPO / "tests" / "e2e" / "capsules" / "probe", tmp_path_factory.mktemp("probe") / "probe")


@pytest.fixture(scope="session")
def built_templated(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """tests/e2e/capsules/templated: resource templates ({id}, {+path}) with completion."""
    source = REPO / "tests" / "e2e" / "capsules" / "templated"
    return build_clean(source, tmp_path_factory.mktemp("templated") / "templated")


@pytest.fixture(scope="session")
def dev_runner_built() -> Path:
    """`astrid capsule dev`'s runner, built and compiled into the shared caches (what a first `capsule dev` does)."""
    from astrid.host.build.dev_runner import dev_runner
    from astrid.host.kernel.compile_cache import CompileCache
    from tests.support.capsules import build_cache_dir

    runner = dev_runner(build_cache_dir())
    CompileCache().precompile(runner)
    return runner
