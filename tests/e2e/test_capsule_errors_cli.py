"""Issue 20, the first hour: what `astrid` prints when a capsule prints, fails or is defined wrong.

The real `astrid` command on real builds (tests/fixtures/printing, the
bundled files capsule, a capsule with a bad definition):

- print() in a handler is no longer a trap: the read answers, and `-v`
  shows the text in the capsule's log;
- a failed read is one line without `-v` (also when the cause is a missing
  grant), and the capsule's log with `-v`;
- errors name capsules by name, the source-id only with `-v`;
- a definition error is one line pointing at the author's decorator, not
  at the SDK.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from astrid.capsules import CAPSULES_DIR
from tests.support.capsules import Built, build_clean
from tests.support.paths import FIXTURES
from tests.support.processes import astrid_exe, server_env
from tests.support.stdio import stdio_session

pytestmark = pytest.mark.slow
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
BUILD_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def printing(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(FIXTURES / "printing", tmp_path_factory.mktemp("printing") / "printing")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_clean(CAPSULES_DIR / "files", tmp_path_factory.mktemp("files") / "files")


def read(uri: str, folder: Path, home: Path, *, verbose: bool = False) -> subprocess.CompletedProcess[str]:
    """`astrid [-v] resources read URI --capsules FOLDER --principal alice`, with an empty capsule home."""
    args = [astrid_exe(), *(["-v"] if verbose else []), "resources", "read", uri, "--capsules", str(folder)]
    return subprocess.run(
        [*args, "--principal", "alice"], capture_output=True, text=True, timeout=120, env=server_env(home)
    )


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- print() --------------------------------------------------------------------------------------


def test_print_in_a_handler_answers_and_v_shows_it(printing, capsule_home):
    result = read("astrid://printing/print", printing.folder, capsule_home, verbose=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "printed\n"
    assert "INFO astrid.capsule: [printing] hello from print, alice" in result.stderr
    quiet = read("astrid://printing/print", printing.folder, capsule_home)
    assert quiet.returncode == 0 and quiet.stdout == "printed\n"
    assert quiet.stderr == ""  # prints are INFO: shown with -v only


def test_a_megabyte_of_print_still_answers(printing, capsule_home):
    result = read("astrid://printing/mega", printing.folder, capsule_home, verbose=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "still serving after 1 MB of output\n"
    assert len([line for line in result.stderr.splitlines() if "output cut" in line]) == 1
    assert len(result.stderr) < 200_000  # bounded, not the megabyte


# -- one line per failed read ----------------------------------------------------------------------


def test_a_handler_error_is_one_line_without_v_and_the_log_with_v(printing, capsule_home):
    result = read("astrid://printing/then-raise", printing.folder, capsule_home)
    assert result.returncode == 1
    [line] = lines(result.stderr)
    assert line.startswith(
        "error: capsule_error: handler then_raise raised RuntimeError: failed after printing (app.py:"
    )
    verbose = read("astrid://printing/then-raise", printing.folder, capsule_home, verbose=True)
    assert verbose.returncode == 1
    assert "INFO astrid.capsule: [printing] printed before the failure" in verbose.stderr
    assert "ERROR astrid.capsule: [printing] read astrid://printing/then-raise" in verbose.stderr
    assert lines(verbose.stderr)[-1] == line


def test_a_missing_grant_is_one_line_naming_the_fix_and_the_author_s_line(files, capsule_home):
    result = read("astrid://files/notes.md", files.folder, capsule_home)
    assert result.returncode == 1
    [line] = lines(result.stderr)
    assert line.startswith("error: capsule_error: handler file raised NotGranted: capability-denied")
    assert "astrid capsule grant files fs:files=PATH" in line
    assert "(app.py:" in line and "_host.py" not in line


def test_a_crashed_capsule_is_named_with_why_and_its_source_id_shown_only_with_v(printing, capsule_home):
    result = read("astrid://printing/trap", printing.folder, capsule_home)
    assert result.returncode == 1
    [line] = lines(result.stderr)
    assert line.startswith(
        "error: capsule_error: capsule printing: handler read failed: exit: a capsule cannot exit its sandbox"
    )
    assert not UUID.search(line)
    verbose = read("astrid://printing/trap", printing.folder, capsule_home, verbose=True)
    assert lines(verbose.stderr)[-1] == line  # the same line, the detail above it
    assert UUID.search(verbose.stderr)  # with -v, the capsule's source-id shows (its load line)
    assert "WARNING astrid.host.kernel.sandbox: capsule printing" in verbose.stderr  # the trap, as a detail


@pytest.mark.anyio
async def test_the_serve_log_has_one_line_per_failed_read(printing, capsule_home, tmp_path):
    async with stdio_session(
        printing.folder, principal="alice", capsule_home=capsule_home, stderr=tmp_path / "serve.log"
    ) as served:
        with anyio.fail_after(60):
            for uri in ("astrid://printing/then-raise", "astrid://printing/trap"):
                with pytest.raises(MCPError):
                    await served.session.read_resource(uri)
            printed = await served.session.read_resource("astrid://printing/print")
    assert printed.contents[0].text == "printed"
    log = served.log()
    assert len([line for line in log.splitlines() if "then-raise" in line]) == 1, log
    assert len([line for line in log.splitlines() if "cannot exit its sandbox" in line]) == 1, log
    assert "hello from print" not in log  # a print is INFO: with -v only
    assert not UUID.search(log), log


# -- definition errors at build time ---------------------------------------------------------------

BAD = {
    "max-age": (
        '@capsule.resource("astrid://bad/fresh", mime_type="text/plain", max_age_s=0)',
        "resource astrid://bad/fresh on fresh(): max_age_s must be more than 0 and at most 86400 seconds, not 0",
    ),
    "duplicate": (
        '@capsule.resource("astrid://bad/ok", mime_type="text/plain")',
        "resource astrid://bad/ok on fresh(): declared twice (first at app.py:6 on ok())",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_definition_is_one_build_error_at_the_author_s_line(tmp_path, case):
    decorator, message = BAD[case]
    folder = tmp_path / "bad"
    folder.mkdir()
    manifest = (FIXTURES / "printing" / "Capsule.toml").read_text().replace("printing", "bad")
    (folder / "Capsule.toml").write_text(manifest)
    app = [
        "from astrid_sdk import Capsule",
        "",
        'capsule = Capsule("bad")',
        "",
        "",
        '@capsule.resource("astrid://bad/ok", mime_type="text/plain")',
        "def ok(ctx):",
        '    return "ok"',
        "",
        "",
        decorator,
        "def fresh(ctx):",
        '    return "fresh"',
        "",
        "",
        "WitWorld = capsule.world()",
    ]
    (folder / "app.py").write_text("\n".join(app) + "\n")
    result = subprocess.run(
        [astrid_exe(), "capsule", "build", "--no-precompile", "bad"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    errors = [line for line in lines(result.stderr) if line.startswith("error:")]
    assert errors == [f"error: bad/app.py:11: {message}"], result.stderr
    assert "astrid_sdk" not in result.stderr and "Traceback" not in result.stderr
