"""A TypeScript capsule's npm dependencies: installed by `astrid capsule build` (npm install
--ignore-scripts), bundled by esbuild, served; a Node built-in refused by name.

The fixtures (tests/fixtures/npm) use `file:` dependencies, so no registry is needed. One
componentize-js build (about 12 s; from the build cache after the first run).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from astrid.host.build.js_install import SHIPPED_DIR
from astrid.host.build.js_toolchain import content_hash
from tests.support.paths import FIXTURES
from tests.support.processes import run_astrid as astrid

pytestmark = pytest.mark.slow

INSTALLING = "installing package.json's dependencies with npm install --ignore-scripts"


@pytest.fixture
def npm(tmp_path: Path) -> Path:
    """A copy of the fixtures: a build writes node_modules and package-lock.json beside the sources."""
    shutil.copytree(FIXTURES / "npm", tmp_path / "npm")
    return tmp_path / "npm"


def test_a_pure_js_dependency_is_installed_bundled_and_served(npm: Path):
    built = astrid("capsule", "build", "shouter", cwd=npm, timeout=600)
    assert built.returncode == 0, built.stderr
    assert INSTALLING in built.stderr and "warning" not in built.stderr, built.stderr
    assert (npm / "shouter" / "node_modules" / "tinylib" / "index.js").is_file()
    read = astrid(
        "resources", "read", "astrid://shouter/hello", "--principal", "alice", "--capsules", "shouter", cwd=npm
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "HELLO ALICE!"
    again = astrid("capsule", "build", "shouter", cwd=npm, timeout=600)
    assert again.returncode == 0 and "from the build cache" in again.stdout, again.stdout + again.stderr
    assert INSTALLING not in again.stderr  # node_modules is newer than package.json: nothing to install


def test_a_changed_dependency_changes_the_build(npm: Path):
    folder = npm / "shouter"
    assert astrid("capsule", "build", "shouter", cwd=npm, timeout=600).returncode == 0
    before = content_hash(folder, (), SHIPPED_DIR)
    library = npm / "tinylib" / "index.js"  # reached through node_modules/tinylib, a link npm made
    library.write_text(library.read_text().replace("'!'", "'!!'"))
    assert content_hash(folder, (), SHIPPED_DIR) != before


def test_a_dependency_importing_a_node_builtin_is_refused_by_name(npm: Path):
    refused = astrid("capsule", "build", "reader", cwd=npm, timeout=600)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        'error: fslib/index.js:2: the npm package fslib imports the Node built-in "fs", which a capsule cannot '
        "use: a capsule has no file system: read files with ctx.fs, after the operator grants fs"
    ), refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_authors_own_import_of_a_node_builtin_is_refused_at_its_line(npm: Path):
    app = npm / "shouter" / "app.ts"
    app.write_text("import { execSync } from 'node:child_process';\n" + app.read_text() + "execSync('true');\n")
    refused = astrid("capsule", "build", "shouter", cwd=npm, timeout=600)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        'error: shouter/app.ts:1: imports the Node built-in "child_process", which a capsule cannot use: '
        "a capsule cannot start processes or threads"
    ), refused.stderr


def test_a_git_dependency_is_refused_before_npm_runs(npm: Path):
    package = npm / "shouter" / "package.json"
    declared = json.loads(package.read_text())
    declared["dependencies"]["left-pad"] = "github:left-pad/left-pad"
    package.write_text(json.dumps(declared))
    refused = astrid("capsule", "build", "shouter", cwd=npm, timeout=600)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith('error: shouter/package.json: the dependency "left-pad"') and "git dependency" in last
    assert not (npm / "shouter" / "node_modules").exists()


def test_a_file_dependency_to_a_missing_folder_is_one_line_naming_it(npm: Path):
    package = npm / "shouter" / "package.json"
    declared = json.loads(package.read_text())
    declared["dependencies"]["nowhere"] = "file:../nowhere"
    package.write_text(json.dumps(declared))
    refused = astrid("capsule", "build", "shouter", cwd=npm, timeout=600)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: shouter/node_modules/nowhere links to ../../nowhere, which does not exist: "
        "fix that dependency's path in shouter/package.json"
    ), refused.stderr
    assert "Traceback" not in refused.stderr
