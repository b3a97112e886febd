"""`astrid capsule grant|revoke` and `capsule list -v`, run as a user runs them (the real `astrid`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV
from astrid.host.toolpaths import tool_path


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "config"


@pytest.fixture
def astrid(config_dir: Path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, CONFIG_DIR_ENV: str(config_dir)}
        return subprocess.run([tool_path("astrid"), *args], capture_output=True, text=True, timeout=60, env=env)

    return run


def test_grant_and_revoke_write_the_grants_file_in_the_config_dir(astrid, config_dir: Path, tmp_path) -> None:
    result = astrid("capsule", "grant", "files", f"fs:files={tmp_path}", "kv", "http:http://127.0.0.1:8080")
    assert result.returncode == 0, result.stderr
    assert f"granted fs:files={tmp_path} to files" in result.stderr
    grants = GrantStore(config_dir / "grants.json").for_capsule("files")
    assert grants.specs() == [f"fs:files={tmp_path}", "kv", "http:http://127.0.0.1:8080"]
    result = astrid("capsule", "revoke", "files", "kv")
    assert result.returncode == 0 and "revoked kv from files" in result.stderr
    assert GrantStore(config_dir / "grants.json").for_capsule("files").specs() == [
        f"fs:files={tmp_path}",
        "http:http://127.0.0.1:8080",
    ]


def test_a_bad_spec_is_one_line_naming_the_shape(astrid, config_dir: Path) -> None:
    result = astrid("capsule", "grant", "files", "net:example.com")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "fs:MOUNT=PATH, kv, http:HOST[:PORT]" in lines[0] and "bus:request" in lines[0]
    assert not (config_dir / "grants.json").exists()


MANIFEST = """
[package]
name = "reader"
version = "1.0.0"

[[component]]
id = "reader"
file = "reader.wasm"

[capabilities]
fs = ["notes"]
kv = true
http = ["api.example.com"]
"""


def test_list_verbose_shows_asked_against_granted(astrid, tmp_path: Path) -> None:
    folder = tmp_path / "caps" / "reader"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(MANIFEST)
    astrid("capsule", "grant", "reader", f"fs:notes={tmp_path}", "fs:other=/srv", "http:api.example.com")
    result = astrid("capsule", "list", "-v", str(folder))
    out = result.stdout
    assert f"fs notes: granted: {tmp_path}" in out
    assert "kv: not granted (astrid capsule grant reader kv)" in out
    assert "http api.example.com: granted: api.example.com" in out
    assert "granted but not asked for (unused): fs:other=/srv" in out


def test_bus_request_is_granted_and_revoked_from_the_cli(astrid, config_dir: Path) -> None:
    result = astrid("capsule", "grant", "launder", "bus:request")
    assert result.returncode == 0, result.stderr
    assert "granted bus:request to launder" in result.stderr
    assert GrantStore(config_dir / "grants.json").for_capsule("launder").bus_request
    result = astrid("capsule", "revoke", "launder", "bus:request")
    assert result.returncode == 0 and "revoked bus:request from launder" in result.stderr
    assert not GrantStore(config_dir / "grants.json").for_capsule("launder").bus_request
    assert "bus:request" in astrid("capsule", "grant", "--help").stdout


# The finding's manifest: no [capabilities], but it asks the other capsules over the bus.
ASKER = """
[package]
name = "launder"
version = "1.0.0"

[[component]]
id = "launder"
file = "launder.wasm"

[subscribe]
"resource.v1.request.read" = { wit = "astrid-bus:resource@1.0.0", handler = "read" }
"resource.v1.response.read.*" = "opaque"

[publish]
"resource.v1.response.read.*" = "opaque"
"resource.v1.request.read" = "opaque"
"""


def test_list_verbose_names_bus_requests_and_the_grant_command(astrid, tmp_path: Path) -> None:
    folder = tmp_path / "caps" / "launder"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(ASKER)
    out = astrid("capsule", "list", "-v", str(folder)).stdout
    assert "capabilities: none asked for" not in out
    assert (
        "  bus:request (ask other capsules): not granted (astrid capsule grant launder bus:request); "
        "refused until then: publish resource.v1.request.read; "
        "hear other capsules' replies on resource.v1.response.read.*\n"
    ) in out
    astrid("capsule", "grant", "launder", "bus:request")
    out = astrid("capsule", "list", "-v", str(folder)).stdout
    assert "  bus:request (ask other capsules): granted: publish resource.v1.request.read;" in out
    assert "unused" not in out


def test_list_verbose_shows_bus_request_unused_for_a_capsule_that_only_serves(astrid, tmp_path: Path) -> None:
    folder = tmp_path / "caps" / "reader"
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(MANIFEST)
    astrid("capsule", "grant", "reader", "bus:request")
    out = astrid("capsule", "list", "-v", str(folder)).stdout
    assert "bus:request (ask" not in out
    assert "granted but not asked for (unused): bus:request" in out


def test_revoke_takes_capsules_as_grant_does_and_never_from_another_capsule_of_the_name(
    astrid, config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: `capsule revoke` had no --capsules. With it, the grants go only when they are that capsule's."""
    monkeypatch.setenv("ASTRID_CAPSULE_HOME", str(tmp_path / "home"))
    ours, theirs = tmp_path / "ours" / "reader", tmp_path / "theirs" / "reader"
    for folder in (ours, theirs):
        folder.mkdir(parents=True)
        (folder / "Capsule.toml").write_text(MANIFEST)
    assert astrid("capsule", "grant", "reader", "kv", "--capsules", str(ours)).returncode == 0
    store = GrantStore(config_dir / "grants.json")

    other = astrid("capsule", "revoke", "reader", "kv", "--capsules", str(theirs))
    assert other.returncode == 1
    assert other.stderr.startswith("error: the grants of reader belong to another capsule of that name")
    assert len(other.stderr.strip().splitlines()) == 1 and store.for_capsule("reader").specs() == ["kv"]
    nobody = astrid("capsule", "revoke", "nobody", "kv", "--capsules", str(ours))
    assert nobody.returncode == 1 and "no capsule named nobody" in nobody.stderr

    revoked = astrid("capsule", "revoke", "reader", "kv", "--capsules", str(ours))
    assert revoked.returncode == 0, revoked.stderr
    assert f"the grants of reader belong to the capsule at {ours}" in revoked.stderr
    assert "revoked kv from reader" in revoked.stderr and store.for_capsule("reader").specs() == []
    assert "--capsules PATH" in astrid("capsule", "revoke", "--help").stdout
