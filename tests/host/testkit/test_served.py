"""`ServedCapsule`: a real capsule built through the cache and served by a `Runtime` in this process,
asked and granted as a test in `astrid capsule test` asks and grants."""

from __future__ import annotations

import os
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.errors import GrantError, RequestFailed
from astrid.host.testkit import ServedCapsule
from tests.support.files import clean_copy
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> Iterator[ServedCapsule]:
    folder = clean_copy(FIXTURES / "kitted", tmp_path_factory.mktemp("kitted") / "kitted")
    capsule = ServedCapsule.start(folder, state_dir)
    yield capsule
    capsule.close()


@pytest.fixture
def capsule(served: ServedCapsule) -> Iterator[ServedCapsule]:
    yield served
    served.revoke_grants()  # as the plugin's fixture does after each test


def test_a_granted_folder_is_read(capsule: ServedCapsule, tmp_path: Path):
    (tmp_path / "note.txt").write_text("from the test's folder")
    assert capsule.grant_files(tmp_path) == f"fs:files={tmp_path}"
    result = capsule.read("astrid://kitted/note", principal="alice")
    assert (result.text, result.mime_type) == ("from the test's folder", "text/plain")
    assert [chunk.uri for chunk in result.contents] == ["astrid://kitted/note"]


def test_a_folder_per_principal(capsule: ServedCapsule, tmp_path: Path):
    for name in ("alice", "bob"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "note.txt").write_text(f"{name}'s own")
    capsule.grant_files(f"{tmp_path}/{{principal}}")  # one grant, one folder per principal
    assert capsule.read("astrid://kitted/note", principal="alice").text == "alice's own"
    assert capsule.read("astrid://kitted/note", principal="bob").text == "bob's own"
    with pytest.raises(RequestFailed, match="capsule_error"):
        capsule.read("astrid://kitted/note", principal="carol")  # no folder of hers


def test_a_failed_read_raises_the_brokers_code_and_message(capsule: ServedCapsule):
    with pytest.raises(RequestFailed) as failed:
        capsule.read("astrid://kitted/note")  # no fs grant in this test
    assert failed.value.code == "capsule_error"
    assert str(failed.value).startswith("capsule_error: handler note raised NotGranted: ")
    assert "astrid capsule grant kitted fs:files=" in failed.value.message
    with pytest.raises(RequestFailed, match=r"^not_found: "):
        capsule.read("astrid://kitted/colors/purple")


def test_grants_last_one_test_and_stay_out_of_the_users_grants_file(
    capsule: ServedCapsule, tmp_path: Path, state_dir: Path
):
    (tmp_path / "note.txt").write_text("granted")
    capsule.grant_files(tmp_path)
    assert capsule.read("astrid://kitted/note").text == "granted"
    assert str(tmp_path) in (state_dir / "grants.json").read_text()
    users = Path(os.environ["ASTRID_CONFIG_DIR"]) / "grants.json"
    assert not users.exists() or "kitted" not in users.read_text()
    capsule.revoke_grants()
    assert str(tmp_path) not in (state_dir / "grants.json").read_text()
    with pytest.raises(RequestFailed, match="NotGranted"):
        capsule.read("astrid://kitted/note")


def test_kv_state_is_per_principal(capsule: ServedCapsule):
    capsule.grant_kv()
    first = int(capsule.read("astrid://kitted/visits", principal="carol").text)
    assert capsule.read("astrid://kitted/visits", principal="carol").text == str(first + 1)
    assert capsule.read("astrid://kitted/visits", principal="dave").text == "1"


@pytest.fixture
def loopback_url() -> Iterator[str]:
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"hello from {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_to_a_loopback_server_the_test_started(capsule: ServedCapsule, loopback_url: str):
    port = loopback_url.rsplit(":", 1)[1]
    with pytest.raises(RequestFailed, match="capsule_error"):
        capsule.read(f"astrid://kitted/fetch/{port}")
    assert capsule.grant_http(loopback_url + "/any/path") == f"http:{loopback_url}"
    assert capsule.read(f"astrid://kitted/fetch/{port}").text == "hello from /hello"


def test_a_grant_the_manifest_does_not_ask_for_is_refused(capsule: ServedCapsule, tmp_path: Path):
    with pytest.raises(GrantError, match=r"does not ask for http:api.example.com, so the grant would change nothing"):
        capsule.grant_http("https://api.example.com")
    with pytest.raises(GrantError, match=r"does not ask for fs:other="):
        capsule.grant_files(tmp_path, mount="other")


def test_list_templates_and_completion(capsule: ServedCapsule):
    assert {r.uri for r in capsule.list(principal="erin")} == {
        "astrid://kitted/note",
        "astrid://kitted/visits",
        "astrid://kitted/pixel",
    }
    assert {t.uri_template for t in capsule.templates(principal="erin")} == {
        "astrid://kitted/fetch/{port}",
        "astrid://kitted/colors/{name}",
    }
    completion = capsule.complete("astrid://kitted/colors/{name}", "name", "gr", principal="erin")
    assert completion.values == ["green", "grey"]
    with pytest.raises(RequestFailed, match="^not_found: "):
        capsule.complete("astrid://kitted/nothing/{x}", "x", "")


def test_a_blob_reads_as_bytes(capsule: ServedCapsule):
    result = capsule.read("astrid://kitted/pixel")
    assert result.mime_type == "image/png"
    assert result.blob.startswith(b"\x89PNG")
    with pytest.raises(ValueError, match=r"read as a blob \(image/png\), not text: use \.blob"):
        _ = result.text


def test_a_grant_is_announced_so_the_next_list_sees_it(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path):
    # The bundled files capsule lists its mount's files: a list kept from before the grant would miss them.
    folder = clean_copy(CAPSULES_DIR / "files", tmp_path_factory.mktemp("files") / "files")
    served = ServedCapsule.start(folder, tmp_path_factory.mktemp("files-state"))
    try:
        (tmp_path / "today.md").write_text("# Today\n")
        assert served.list(principal="frank") == []
        served.grant_files(tmp_path)
        assert [r.uri for r in served.list(principal="frank")] == ["astrid://files/today.md"]
        served.revoke_grants()
        assert served.list(principal="frank") == []
    finally:
        served.close()
