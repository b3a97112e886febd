"""`astrid capsule test DIR [PYTEST ARGS]`, run as a user runs it: the capsule's own tests against it,
served in the real sandbox (builds through the shared cache)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.files import clean_copy
from tests.support.paths import FIXTURES
from tests.support.processes import run_astrid as astrid

pytestmark = pytest.mark.slow


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """`astrid capsule new demo`, as scaffolded: app.py and tests/test_app.py."""
    assert astrid("capsule", "new", "demo", cwd=tmp_path).returncode == 0
    return tmp_path / "demo"


def test_a_new_capsule_passes_its_own_test_out_of_the_box(demo: Path):
    result = astrid("capsule", "test", "demo", cwd=demo.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
    # the build left tests/ out: no byte of it in the component, and its content hash does not see it
    assert b"test_hello_greets_whoever_reads_it" not in (demo / "demo.wasm").read_bytes()


def test_a_wrong_test_fails_with_pytests_status_and_diff(demo: Path):
    test = demo / "tests" / "test_app.py"
    test.write_text(test.read_text().replace('"Hello, alice!"', '"Goodbye, alice!"'))
    result = astrid("capsule", "test", "demo", cwd=demo.parent)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 2 passed" in result.stdout
    assert "AssertionError: assert 'Hello, alice!' == 'Goodbye, alice!'" in result.stdout
    assert "FAILED demo/tests/test_app.py::test_hello_greets_whoever_reads_it" in result.stdout


def test_pytest_args_pass_through(demo: Path):
    result = astrid("capsule", "test", "demo", "-k", "listed", "-q", cwd=demo.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 2 deselected" in result.stdout
    nothing = astrid("capsule", "test", "demo", "-k", "no_such_test", cwd=demo.parent)
    assert nothing.returncode == 5  # pytest's "no tests collected"
    one = astrid("capsule", "test", "demo", "demo/tests/test_app.py::test_hello_is_listed", "-q", cwd=demo.parent)
    assert one.returncode == 0 and "1 passed in" in one.stdout, one.stdout + one.stderr


def test_a_capsule_without_tests_is_told_where_they_go(demo: Path):
    (demo / "tests" / "test_app.py").unlink()
    result = astrid("capsule", "test", "demo", cwd=demo.parent)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: demo: no tests/test_*.py to run: write one there "
        "(`astrid capsule new NAME` writes tests/test_app.py beside the capsule it makes)"
    ]
    elsewhere = astrid("capsule", "test", ".", cwd=demo.parent)
    assert elsewhere.returncode == 1 and "no Capsule.toml here: give the capsule folder" in elsewhere.stderr


def test_a_build_failure_is_its_one_line_for_each_test(demo: Path):
    app = demo / "app.py"
    app.write_text(app.read_text().replace("def hello(ctx):", "def hello(ctx)"))
    result = astrid("capsule", "test", "demo", "-q", cwd=demo.parent)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 errors" in result.stdout
    assert len(re.findall(r"^E? *demo/app.py:\d+: expected ':'$", result.stdout, re.MULTILINE)) == 3, result.stdout
    assert "During handling" not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


# A capsule's tests as an author writes them: a file granted from tmp_path, kv and the capsule's log, a
# loopback HTTP server, a template's completion and a failed read expected with its broker message.
KIT_TESTS = """
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest

from astrid.host.testkit import RequestFailed


def test_a_file_from_tmp_path(capsule, tmp_path):
    (tmp_path / "note.txt").write_text("hello from tmp_path")
    capsule.grant_files(tmp_path)
    assert capsule.read("astrid://kitted/note", principal="bob").text == "hello from tmp_path"


def test_the_grant_ended_with_the_test(capsule):
    with pytest.raises(RequestFailed, match="^capsule_error: handler note raised NotGranted: "):
        capsule.read("astrid://kitted/note")


def test_kv_and_the_capsules_log(capsule, caplog):
    capsule.grant_kv()
    assert capsule.read("astrid://kitted/visits", principal="zoe").text == "1"
    assert "[kitted] visit 1 by zoe" in caplog.text


def test_http_to_loopback(capsule):
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"hi")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        capsule.grant_http(f"http://127.0.0.1:{port}")
        assert capsule.read(f"astrid://kitted/fetch/{port}").text == "hi"
    finally:
        server.shutdown()


def test_completion(capsule):
    assert capsule.complete("astrid://kitted/colors/{name}", "name", "b").values == ["blue"]
"""


def test_an_authors_tests_use_grants_and_expect_failures(tmp_path: Path):
    folder = clean_copy(FIXTURES / "kitted", tmp_path / "kitted")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_kit.py").write_text(KIT_TESTS)
    result = astrid("capsule", "test", str(folder), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout


def test_without_pytest_it_says_how_to_install_it(demo: Path):
    # this Python with pytest unimportable, as where astrid-py was installed without it
    blocked = "import sys; sys.modules['pytest'] = None; from astrid.cli.main import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", blocked, "capsule", "test", "demo"], cwd=demo.parent, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: `astrid capsule test` runs pytest, which astrid's Python cannot import: "
        f"run `{sys.executable} -m pip install 'pytest<10,>=8'`"
    ]


def test_the_plugin_without_a_capsule_folder_says_how_to_run_it(demo: Path):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "astrid.host.testkit.plugin", "-q", "-p", "no:cacheprovider", "demo"],
        cwd=demo.parent,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "3 errors" in result.stdout
    told = "the capsule fixture serves the folder --astrid-capsule names: run `astrid capsule test DIR`"
    assert told in result.stdout
