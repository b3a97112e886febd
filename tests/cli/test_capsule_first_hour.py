"""The first hour with `astrid capsule new/build/list`: the traps a new author falls into, run as a user runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.contract import ReadResponse, TextChunk
from astrid.host.kernel.kernel import Kernel, KernelConfig
from tests.support.busclient import ALICE, Client
from tests.support.files import clean_copy
from tests.support.processes import astrid_exe
from tests.support.processes import run_astrid as astrid

IDNA_PIN = "idna==3.10"  # a small pure-Python package on the index


def run(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [astrid_exe(), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env or os.environ.copy()
    )


# -- item 3: small traps ---------------------------------------------------------------------


def test_build_in_a_folder_whose_capsules_sit_deeper_says_where_they_are(tmp_path: Path):
    for name in ("docs", "introspect"):
        clean_copy(CAPSULES_DIR / name, tmp_path / "capsules" / name)
    clean_copy(CAPSULES_DIR / "files", tmp_path / "tests" / "e2e" / "capsules" / "files")
    (tmp_path / ".venv" / "lib" / "hidden").mkdir(parents=True)  # never searched
    (tmp_path / ".venv" / "lib" / "hidden" / "Capsule.toml").write_text("")
    result = astrid("capsule", "build", cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: .: no Capsule.toml here or in its subfolders; capsules sit deeper: ")
    assert "capsules/ (docs, introspect)" in lines[0] and "tests/e2e/capsules/ (files)" in lines[0]
    assert "hidden" not in lines[0]
    assert lines[0].endswith("`astrid capsule build capsules`")


def test_build_where_no_capsule_is_anywhere_says_how_to_make_one(tmp_path: Path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    result = astrid("capsule", "build", cwd=tmp_path)
    assert result.returncode == 1
    assert "none within 4 folder levels below it either" in result.stderr
    assert "astrid capsule new NAME" in result.stderr


def test_new_help_names_the_dir_option_parent():
    result = astrid("capsule", "new", "--help", cwd=Path.cwd())
    assert result.returncode == 0
    assert "--dir PARENT" in result.stdout and "DIRECTORY" not in result.stdout


def test_a_missing_component_table_is_named_with_the_lines_to_add(tmp_path: Path):
    assert astrid("capsule", "new", "notes", cwd=tmp_path).returncode == 0
    manifest = tmp_path / "notes" / "Capsule.toml"
    text = manifest.read_text()
    start = text.index("# The component file")
    end = text.index('file = "notes.wasm"\n') + len('file = "notes.wasm"\n')
    manifest.write_text(text[:start] + text[end:])
    result = astrid("capsule", "build", "notes", cwd=tmp_path)
    assert result.returncode == 1
    assert "Field required" not in result.stderr
    assert result.stderr.startswith("error: notes/Capsule.toml: the [[component]] table is missing")
    assert 'Add these lines: `[[component]]` / `id = "notes"` / `file = "notes.wasm"`' in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # The lines it gives are the fix.
    manifest.write_text(manifest.read_text() + '\n[[component]]\nid = "notes"\nfile = "notes.wasm"\n')
    from astrid.host.capsule.manifest import load_manifest

    assert load_manifest(tmp_path / "notes").component_file == "notes.wasm"


@pytest.fixture(scope="module")
def built_docs_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built copy of the docs capsule (the build and compile caches make it cheap)."""
    from tests.support.capsules import build_clean

    return build_clean(CAPSULES_DIR / "docs", tmp_path_factory.mktemp("stale") / "docs").folder


def test_list_without_paths_lists_the_capsule_home_and_dot_lists_here(tmp_path: Path, built_docs_copy: Path):
    """No PATHS is the capsule home, what `astrid mcp serve` serves (issue 36); `list .` is the current folder."""
    home = tmp_path / "home"
    shutil.copytree(built_docs_copy, home / "docs")
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    env = {**os.environ, "ASTRID_CAPSULE_HOME": str(home)}
    result = run("capsule", "list", cwd=elsewhere, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"listing the capsule home {home} (what `astrid mcp serve` serves)"
    assert "docs 1.0.0" in result.stdout and "status: loads" in result.stdout
    # Capsules here too: still the home, and how to list the ones here.
    clean_copy(CAPSULES_DIR / "introspect", elsewhere / "introspect")
    both = run("capsule", "list", cwd=elsewhere, env=env)
    assert both.stdout.splitlines()[0] == (
        f"listing the capsule home {home} (what `astrid mcp serve` serves; "
        "the current folder's: `astrid capsule list .`)"
    )
    assert "docs 1.0.0" in both.stdout and "introspect 1.0.0" not in both.stdout
    here = run("capsule", "list", ".", cwd=elsewhere, env=env)  # listed (unbuilt here, so it does not load)
    assert "introspect 1.0.0" in here.stdout and "docs 1.0.0" not in here.stdout
    # Capsules here, none in the home: one error saying how to list them.
    no_home = {**env, "ASTRID_CAPSULE_HOME": str(tmp_path / "missing")}
    only_here = run("capsule", "list", cwd=elsewhere, env=no_home)
    assert only_here.returncode == 1
    assert only_here.stderr.strip() == (
        f"error: no capsules (folders with Capsule.toml) in the capsule home {tmp_path / 'missing'}; "
        "the current folder holds some: `astrid capsule list .`"
    )
    # Neither: one error naming both places.
    empty = tmp_path / "empty"
    empty.mkdir()
    none = run("capsule", "list", cwd=empty, env=no_home)
    assert none.returncode == 1
    assert "in the capsule home" in none.stderr and "nor in the current folder" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1


def test_a_component_older_than_its_code_is_flagged_until_rebuilt(tmp_path: Path, built_docs_copy: Path):
    from astrid.host.capsule.discovery import stale_component

    folder = tmp_path / "docs"
    shutil.copytree(built_docs_copy, folder)
    now = time.time()

    def age(path: Path, seconds_ago: float) -> None:
        os.utime(path, (now - seconds_ago, now - seconds_ago))

    for path in folder.rglob("*"):
        age(path, 300)
    age(folder / "docs.wasm", 200)
    assert stale_component(folder) is None
    assert "warning:" not in astrid("capsule", "list", str(folder), cwd=tmp_path).stdout
    age(folder / "app.py", 100)  # edited after the build
    message = stale_component(folder)
    assert message == (
        f"app.py is newer than docs.wasm (changed after the last build): rebuild with `astrid capsule build {folder}`"
    )
    listed = astrid("capsule", "list", str(folder), cwd=tmp_path)
    assert f"  warning: {message}" in listed.stdout
    # Rebuilding (here from the build cache: the bytes did not change) clears it.
    rebuilt = astrid("capsule", "build", str(folder), "--no-precompile", cwd=tmp_path)
    assert rebuilt.returncode == 0 and "from the build cache" in rebuilt.stdout, rebuilt.stderr
    assert stale_component(folder) is None
    # Any .py of the folder counts, and requirements.txt; other files do not.
    age(folder / "app.py", 300)
    age(folder / "docs.wasm", 200)
    for name in ("pages/index.md", "lib/helpers.py", "requirements.txt"):
        path = folder / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("# later\n")
        age(path, 100)
        found = stale_component(folder)
        if name.endswith(".md"):
            assert found is None, found
        else:
            assert found is not None and found.startswith(f"{name} is newer than docs.wasm"), found
        age(path, 300)
    (folder / "docs.wasm").unlink()
    assert stale_component(folder) is None  # nothing built: nothing to compare


@pytest.mark.slow
def test_list_verbose_warns_when_the_manifest_does_not_match_the_code(tmp_path: Path):
    assert astrid("capsule", "new", "demo", cwd=tmp_path).returncode == 0
    app = tmp_path / "demo" / "app.py"
    app.write_text(app.read_text().replace('"astrid://demo/hello"', '"astrid://hello"'))
    manifest = tmp_path / "demo" / "Capsule.toml"
    hint, wider = 'families = ["astrid://demo/"]', 'families = ["astrid://demo/", "astrid://hello"]'
    manifest.write_text(manifest.read_text().replace(hint, wider))
    build = astrid("capsule", "build", "demo", "--no-precompile", cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    manifest.write_text(manifest.read_text().replace(wider, hint))  # the manifest edited after the build
    quiet = astrid("capsule", "list", "demo", cwd=tmp_path)
    assert "does not match" not in quiet.stdout  # only with -v: it asks the component (in the sandbox)
    listed = astrid("capsule", "list", "-v", "demo", cwd=tmp_path)
    out = listed.stdout
    assert "  warning: Capsule.toml does not match what app.py serves (the build refuses it):" in out, out
    assert "    - app.py serves the resource astrid://hello" in out
    assert '          families = ["astrid://demo/", "astrid://hello"]' in out


# -- item 1, end to end: the build refuses what would list and then fail every read -----------


def test_build_refuses_a_resource_outside_the_families_hint(tmp_path: Path):
    assert astrid("capsule", "new", "demo", cwd=tmp_path).returncode == 0
    app = tmp_path / "demo" / "app.py"
    app.write_text(app.read_text().replace('"astrid://demo/hello"', '"astrid://elsewhere/hello"'))
    result = astrid("capsule", "build", "demo", cwd=tmp_path)
    assert result.returncode == 1
    # The check asks the built component, so a fresh build's progress lines come first.
    progress, error_line, rest = result.stderr.partition("error: ")
    assert all(line.startswith("demo: ") for line in progress.splitlines()), progress
    assert (error_line + rest).startswith("error: demo/Capsule.toml does not match what demo/app.py serves:\n")
    assert 'families = ["astrid://demo/", "astrid://elsewhere/"]' in result.stderr
    assert not (tmp_path / "demo" / "demo.wasm").exists()


# -- item 2: hermetic builds ------------------------------------------------------------------


def host_python_env() -> dict[str, str]:
    """The environment of a user whose venv (with idna in it) is active: its python3 first on PATH."""
    venv = Path(sys.prefix)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
        "PYTHONPATH": site,
    }


@pytest.mark.slow
def test_a_package_of_the_host_python_is_not_baked_in_until_it_is_pinned(tmp_path: Path):
    env = host_python_env()
    # The premise: the host's python3 (and this venv) can import idna.
    probe = subprocess.run(["python3", "-c", "import idna"], env=env, capture_output=True, timeout=60)
    assert probe.returncode == 0, probe.stderr

    assert run("capsule", "new", "puny", cwd=tmp_path, env=env).returncode == 0
    app = tmp_path / "puny" / "app.py"
    sdk_import = "from astrid_sdk import Capsule\n"
    # Import time is build time: the punycode codec idna uses is loaded then (a --stub-wasi guest cannot
    # import a module later), so the handler's own call finds it.
    code = app.read_text().replace(sdk_import, 'import idna\n\nidna.alabel("ü")\n' + sdk_import)
    app.write_text(code.replace('return f"{greeting}, {ctx.principal}!"', 'return idna.alabel("bücher").decode()'))

    refused = run("capsule", "build", "puny", "--no-precompile", cwd=tmp_path, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, refused.stderr
    assert errors[0].startswith("error: puny/app.py:"), errors[0]
    assert ": ModuleNotFoundError: No module named 'idna' (" in errors[0]
    assert "pinned in requirements.txt beside app.py: add `idna==" in errors[0]
    assert not (tmp_path / "puny" / "puny.wasm").exists()

    (tmp_path / "puny" / "requirements.txt").write_text(f"# what app.py imports\n{IDNA_PIN}\n")
    built = run("capsule", "build", "puny", cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    again = run("capsule", "build", "puny", "--no-precompile", cwd=tmp_path, env=env)
    assert again.returncode == 0 and "unchanged, from the build cache" in again.stdout, again.stderr
    assert "installing requirements.txt" not in again.stderr  # the site is cached by the file's content

    kernel = Kernel(KernelConfig(capsule_paths=[tmp_path / "puny"]))
    try:
        (report,) = kernel.start()
        assert report.ok, report.error
        reply = ReadResponse.model_validate(Client(kernel).read("astrid://puny/hello", ALICE))
        assert reply.error is None, reply.error
        chunk = reply.contents[0]
        assert isinstance(chunk, TextChunk) and chunk.text == "xn--bcher-kva"
    finally:
        kernel.close()
