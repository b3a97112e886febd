"""`astrid capsule test DIR [PYTEST ARGS]`: pytest on a capsule's tests/test_*.py, with the kit's plugin.

pytest is imported only when the tests run, so the CLI can say how to install it when it is missing.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from astrid.host.capsule.discovery import TESTS_FOLDER

PLUGIN = "astrid.host.testkit.plugin"
CAPSULE_OPTION = "--astrid-capsule"  # the plugin's option: the capsule folder the `capsule` fixture serves
TEST_FILES = "test_*.py"


def capsule_tests(folder: Path) -> list[Path]:
    """The test files pytest collects in `folder`'s tests/ folder."""
    return sorted((Path(folder) / TESTS_FOLDER).glob(TEST_FILES))


def pytest_install_command() -> str | None:
    """The command that installs pytest into this Python when it cannot import it; None when it can."""
    if importable("pytest"):
        return None
    try:  # the range astrid-py depends on, as its metadata says
        pin = next((r for r in requires("astrid-py") or [] if re.split(r"[\s<>=!~;\[]", r)[0] == "pytest"), "pytest")
    except PackageNotFoundError:
        pin = "pytest"
    return f"{sys.executable} -m pip install '{pin}'"


def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def run_capsule_tests(folder: Path, pytest_args: Sequence[str]) -> int:
    """Run `folder`'s tests with pytest (`pytest_args` passed on: -k, -x, -q, ...); pytest's exit status."""
    import pytest

    folder = Path(folder).resolve()
    args = ["--rootdir", str(folder), "-p", PLUGIN, f"{CAPSULE_OPTION}={folder}"]
    # a test file or node id among the arguments picks the tests; else the whole tests/ folder runs
    named = any("::" in arg or arg.endswith(".py") for arg in pytest_args if not arg.startswith("-"))
    return int(pytest.main([*args, *([] if named else [str(folder / TESTS_FOLDER)]), *pytest_args]))
