"""The pytest plugin of `astrid capsule test`: the `capsule` fixture, serving the folder the command names.

Loaded by the command only (`-p astrid.host.testkit.plugin --astrid-capsule DIR`), so a capsule's tests
need no conftest.py. One capsule is served per test session (built first, when it changed); each test
names its principal on every request and starts with no grants: what it granted is taken back when it
ends. kv state lasts the session (a principal of the test's own is a fresh namespace).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from astrid.host.errors import AstridError
from astrid.host.testkit.run import CAPSULE_OPTION
from astrid.host.testkit.served import ServedCapsule

# The capsule's own log (its print() and ctx.log lines): kept, so pytest shows it beside a failed test.
CAPSULE_LOG = "astrid.capsule"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        CAPSULE_OPTION,
        dest="astrid_capsule",
        metavar="DIR",
        default=None,
        help="the capsule folder the `capsule` fixture serves (`astrid capsule test DIR` sets it)",
    )


@pytest.fixture(scope="session")
def served_capsule(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedCapsule]:
    """The capsule folder of `astrid capsule test DIR`, built and served for the whole session."""
    folder = request.config.getoption("astrid_capsule")
    if folder is None:
        pytest.fail(
            f"the capsule fixture serves the folder {CAPSULE_OPTION} names: run `astrid capsule test DIR`",
            pytrace=False,
        )
    logger = logging.getLogger(CAPSULE_LOG)
    level = logger.level
    if not logger.isEnabledFor(logging.INFO):
        logger.setLevel(logging.INFO)
    try:
        served = _served(
            Path(folder), tmp_path_factory.mktemp("astrid"), _say_phases(request.config, Path(folder).name)
        )
        if isinstance(served, str):  # a build or load failure: its one line, for each test, no traceback
            pytest.fail(served, pytrace=False)
        yield served
        served.close()
    finally:
        logger.setLevel(level)


@pytest.fixture
def capsule(served_capsule: ServedCapsule) -> Iterator[ServedCapsule]:
    """The capsule under test: read, list, templates, complete (each as a principal), grants for this test."""
    yield served_capsule
    served_capsule.revoke_grants()


def _served(folder: Path, state_dir: Path, progress: Callable[[str, float], None]) -> ServedCapsule | str:
    """The capsule served, or the one line that says why it cannot be (failed outside the except: no chain)."""
    try:
        return ServedCapsule.start(folder, state_dir, progress)
    except AstridError as exc:
        return str(exc)


def _say_phases(config: pytest.Config, name: str) -> Callable[[str, float], None]:
    """A build's progress: one line on the terminal as each slow phase starts (a cold build takes seconds)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def progress(phase: str, elapsed: float) -> None:
        if elapsed or reporter is None:
            return
        # the fixture runs with output captured: the line goes to the terminal, past the capture
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            reporter.write_line(f"astrid: building {name} ({phase}; once, then from the build cache)...")

    return progress
