"""Building a TypeScript capsule with npm dependencies runs none of their code (nor the capsule's) natively.

`astrid capsule build` installs package.json's dependencies itself, with `npm install --ignore-scripts`:
the `file:` package `tinylib` (tests/fixtures/npm) and the capsule `shouter` both declare lifecycle
scripts (preinstall, install, postinstall, prepare) that would leave `*_RAN` files. A `.npmrc` in the
capsule folder cannot turn the scripts back on: the build's own flags win over it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.paths import FIXTURES
from tests.support.processes import run_astrid as astrid

pytestmark = pytest.mark.slow


def test_no_lifecycle_script_runs_even_when_the_capsules_npmrc_asks(tmp_path: Path):
    npm = tmp_path / "npm"
    shutil.copytree(FIXTURES / "npm", npm)
    (npm / "shouter" / ".npmrc").write_text("ignore-scripts=false\n")
    built = astrid("capsule", "build", "shouter", cwd=npm, timeout=600)
    assert built.returncode == 0, built.stderr
    assert (npm / "shouter" / "node_modules" / "tinylib").is_dir()  # the control: npm did install it
    assert sorted(p.name for p in npm.rglob("*_RAN")) == []
