"""`astrid key`, `astrid trust` and `astrid capsule pack|sign|verify`, as a publisher and an operator use them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from astrid.cli.main import main
from astrid.host.identity.artifact import read_artifact
from astrid.host.identity.keys import PublicKey
from astrid.host.identity.trust import TrustStore
from astrid.host.settings import CONFIG_DIR_ENV
from astrid.host.toolpaths import tool_path
from tests.support.paths import FIXTURES
from tests.support.wat import build_wat

MANIFEST = """\
[package]
name = "notes"
version = "0.3.0"
namespaces = ["astrid://notes/"]

[[component]]
id = "notes"
file = "notes.wasm"

[publish]
"resource.v1.response.read.*" = "x"

[capabilities]
kv = true
"""


@pytest.fixture(scope="module")
def component(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return build_wat(FIXTURES / "wat" / "probe.wat", tmp_path_factory.mktemp("wat") / "probe.wasm").read_bytes()


@pytest.fixture
def workdir(tmp_path: Path, component: bytes, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A built capsule in ./notes, with a config dir of its own."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "Capsule.toml").write_text(MANIFEST)
    (folder / "notes.wasm").write_bytes(component)
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


class Astrid:
    """`astrid ARGS` in this process (fast), with its exit code and its output."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def astrid(capsys: pytest.CaptureFixture[str]) -> Astrid:
    return Astrid(capsys)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_key_new_prints_the_public_key_on_one_line_and_keeps_the_private_key_0600(
    workdir: Path, astrid: Astrid
) -> None:
    code, out, err = astrid("key", "new", "alice")
    assert code == 0, err
    [line] = out.splitlines()
    public = PublicKey.parse(line)
    assert public.fingerprint in err
    key_file = workdir / "config" / "keys" / "alice.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(key_file.parent).st_mode) == 0o700
    before = key_file.read_bytes()
    code, out, err = astrid("key", "new", "alice")
    assert code == 1 and out == "" and "already exists" in one_error_line(err)
    assert key_file.read_bytes() == before
    code, out, _ = astrid("key", "list")
    assert out == f"alice  {public.short}  {public.text}\n"
    assert astrid("key", "show", "alice")[1] == public.text + "\n"


def test_trust_add_list_remove(workdir: Path, astrid: Astrid) -> None:
    public = astrid("key", "new", "alice")[1].strip()
    other = astrid("key", "new", "bob")[1].strip()
    code, _, err = astrid("trust", "add", public, "--publisher", "acme")
    assert code == 0 and "trusted key" in err and "publisher acme" in err
    trust_file = workdir / "config" / "trust.json"
    assert stat.S_IMODE(os.stat(trust_file).st_mode) == 0o600
    for args, message in [
        (("trust", "add", public, "--publisher", "other"), "already trusted as publisher 'acme'"),
        (("trust", "add", other, "--publisher", "acme"), "--another-key"),
        (("trust", "add", "ed25519:AAAA", "--publisher", "x"), "is not a public key"),
        (("trust", "add", other, "--publisher", "Bad Name"), "publisher name 'Bad Name'"),
        (("trust", "remove", "nobody"), "no publisher named 'nobody'"),
    ]:
        code, _, err = astrid(*args)
        assert code == 1 and message in one_error_line(err), (args, err)
    assert astrid("trust", "add", other, "--publisher", "acme", "--another-key")[0] == 0
    TrustStore(trust_file).claim(["astrid://notes/"], PublicKey.parse(public).fingerprint, capsule="notes")
    code, out, _ = astrid("trust", "list")
    short = PublicKey.parse(public).short
    assert out.splitlines()[0] == "acme"
    assert f"  key {short}  {public}" in out and "  namespace astrid://notes/  (first installed by notes)" in out
    code, _, err = astrid("trust", "remove", "acme")
    assert code == 0 and "no longer trusted" in err and "stay reserved: astrid://notes/" in err
    code, out, _ = astrid("trust", "list")
    assert out.splitlines()[0].startswith("acme (not trusted; its namespaces stay reserved")
    code, _, err = astrid("trust", "remove", "acme", "--release")
    assert code == 0 and "released acme's namespaces: astrid://notes/" in err
    assert astrid("trust", "list")[1] == ""


def test_pack_sign_verify(workdir: Path, astrid: Astrid) -> None:
    code, out, err = astrid("capsule", "pack", "notes")
    assert code == 0, err
    artifact = workdir / "notes-0.3.0.capsule"
    assert out == f"{artifact.name}\n" and artifact.is_file()
    unsigned = artifact.read_bytes()
    code, _, err = astrid("capsule", "verify", str(artifact))
    assert code == 1 and "is not signed" in one_error_line(err) and "--allow-unsigned" in err
    code, out, _ = astrid("capsule", "verify", str(artifact), "--allow-unsigned")
    assert code == 0 and "signed by: unsigned" in out

    public = astrid("key", "new", "alice")[1].strip()
    code, _, err = astrid("capsule", "sign", str(artifact), "--key", "alice")
    assert code == 0, err
    assert read_artifact(artifact.read_bytes()).signature is not None
    code, _, err = astrid("capsule", "verify", str(artifact))
    line = one_error_line(err)
    assert PublicKey.parse(public).fingerprint in line and "astrid trust add" in line

    astrid("trust", "add", public, "--publisher", "acme")
    code, out, err = astrid("capsule", "verify", str(artifact))
    assert code == 0, err
    assert out.splitlines()[0] == "notes 0.3.0"
    assert f"signed by: publisher acme (key {PublicKey.parse(public).short})" in out
    assert "capabilities: kv" in out and "namespace astrid://notes/: free" in out

    code, out, err = astrid("capsule", "pack", "notes")  # packing again keeps the signed file
    assert code == 0 and "already holds this capsule, signed" in err
    assert read_artifact(artifact.read_bytes()).signature is not None
    assert read_artifact(artifact.read_bytes()).with_signature(None) == read_artifact(unsigned)

    damaged = bytearray(artifact.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    artifact.write_bytes(bytes(damaged))
    code, _, err = astrid("capsule", "verify", str(artifact))
    assert code == 1 and "component.wasm does not match" in one_error_line(err)


def test_pack_errors_are_one_line(workdir: Path, astrid: Astrid) -> None:
    (workdir / "notes" / "notes.wasm").unlink()
    code, _, err = astrid("capsule", "pack", "notes")
    assert code == 1 and "astrid capsule build notes" in one_error_line(err)
    code, _, err = astrid("capsule", "sign", "missing.capsule", "--key", "alice")
    assert code == 1 and one_error_line(err)
    code, _, err = astrid("capsule", "pack", "notes", "-o", str(workdir / "out.capsule"))
    assert code == 1 and not (workdir / "out.capsule").exists()


def test_the_real_astrid_command(workdir: Path) -> None:
    """One round as a user runs it: the installed `astrid`, a fresh process per command."""
    env = {**os.environ, CONFIG_DIR_ENV: str(workdir / "config")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool_path("astrid"), *args], capture_output=True, text=True, timeout=60, env=env, cwd=workdir
        )

    public = run("key", "new", "alice").stdout.strip()
    assert run("capsule", "pack", "notes", "-o", "n.capsule").returncode == 0
    assert run("capsule", "sign", "n.capsule", "--key", "alice").returncode == 0
    assert run("trust", "add", public, "--publisher", "acme").returncode == 0
    verified = run("capsule", "verify", "n.capsule")
    assert verified.returncode == 0 and "signed by: publisher acme" in verified.stdout, verified.stderr
    refused = run("trust", "add", "nonsense", "--publisher", "x")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr


def test_install_refuses_an_older_version_in_one_line_and_allow_downgrade_says_so_loudly(
    workdir: Path, astrid: Astrid, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASTRID_CAPSULE_HOME", str(workdir / "home"))
    public = astrid("key", "new", "alice")[1].strip()
    astrid("trust", "add", public, "--publisher", "acme")
    manifest = workdir / "notes" / "Capsule.toml"
    for version in ("0.3.0", "0.2.0"):
        manifest.write_text(MANIFEST.replace('version = "0.3.0"', f'version = "{version}"'))
        assert astrid("capsule", "pack", "notes", "-o", f"notes-{version}.capsule")[0] == 0
        assert astrid("capsule", "sign", f"notes-{version}.capsule", "--key", "alice")[0] == 0
    code, _, err = astrid("capsule", "install", "notes-0.3.0.capsule", "--yes")
    assert code == 0, err

    code, _, err = astrid("capsule", "install", "notes-0.2.0.capsule", "--yes")
    line = one_error_line(err.replace("astrid: fetching notes-0.2.0.capsule ...\n", ""))
    assert "notes 0.2.0 is older than notes 0.3.0, installed now" in line and "--allow-downgrade" in line

    code, _, err = astrid("capsule", "install", "notes-0.2.0.capsule", "--yes", "--allow-downgrade")
    assert code == 0, err
    assert "  DOWNGRADE   notes 0.2.0 is older than notes 0.3.0, installed now" in err
    assert "astrid: WARNING: this is a DOWNGRADE (--allow-downgrade)" in err
    memory = workdir / "config" / "capsule-versions.json"
    assert stat.S_IMODE(os.stat(memory).st_mode) == 0o600
    assert json.loads(memory.read_text())["publishers"]["acme"]["notes"]["version"] == "0.3.0"


def test_an_unsigned_install_names_the_flag_that_takes_it(
    workdir: Path, astrid: Astrid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: the refusal did not say how to install it anyway."""
    monkeypatch.setenv("ASTRID_CAPSULE_HOME", str(workdir / "home"))
    assert astrid("capsule", "pack", "notes", "-o", "notes.capsule")[0] == 0
    code, _, err = astrid("capsule", "install", "notes.capsule", "--yes")
    line = one_error_line(err.replace("astrid: fetching notes.capsule ...\n", ""))
    assert code == 1 and "notes.capsule is not signed" in line and "--allow-unsigned" in line
    assert not (workdir / "home" / "notes").exists()
    code, _, err = astrid("capsule", "install", "notes.capsule", "--yes", "--allow-unsigned")  # the flag it named
    assert code == 0, err
    assert (workdir / "home" / "notes" / "Capsule.toml").is_file()
