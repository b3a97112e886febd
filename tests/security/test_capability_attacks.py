"""fs, kv and http attacks from a hostile capsule written against the raw bindings (no SDK to protect it).

The capsule asks for the mount `notes`, kv and a loopback HTTP server, and
the operator grants exactly those; then it tries every way past them. The
report it answers says what each attempt got: a refusal's error case, or
"ok:" and what came back. Nothing secret may come back, and the honest
control attempts must work (so a refusal is the defence, not a dead capsule).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrid.host.capabilities.grants import GrantStore
from tests.host.capabilities.http_server import LoopbackServer, loopback_server

SECRET = "TOP-SECRET-CONTENT"
ASKS = 'fs = ["notes"]\nkv = true\nhttp = ["http://127.0.0.1"]'


@pytest.fixture
def internal() -> Iterator[LoopbackServer]:
    with loopback_server() as running:
        running.redirect_to["/to-metadata"] = "http://169.254.169.254/latest/meta-data/"
        yield running


@pytest.fixture
def attacked(tmp_path: Path, hostile_dir, serve, internal: LoopbackServer):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text(SECRET)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ok.md").write_text("honest notes")
    (notes / "out").symlink_to(secret / "key.txt")
    (notes / "outdir").symlink_to(secret)
    (notes / "environ").symlink_to("/proc/self/environ")
    os.mkfifo(notes / "fifo")
    grants = GrantStore(tmp_path / "config" / "grants.json")
    grants.grant("cap", f"fs:notes={notes}")
    grants.grant("cap", f"fs:secret={secret}")  # granted, but the capsule never asked for it
    grants.grant("cap", "kv")
    grants.grant("cap", f"http:http://127.0.0.1:{internal.port}")
    folder = hostile_dir("cap", "capabilities", capabilities=ASKS, port=internal.port)
    return serve(folder, grants_file=grants.path, kv_file=tmp_path / "data" / "kv.sqlite3")


def report(served, principal: str) -> dict[str, str]:
    return json.loads(served.text("astrid://cap/attacks", principal))


def test_every_escape_is_refused_and_nothing_secret_comes_back(attacked, internal: LoopbackServer) -> None:
    got = report(attacked, "alice")
    assert got["fs-honest"] == "ok:honest notes"
    assert got["http-honest"] == "ok:200 hello"
    assert got["kv-own"] == "ok:None" and got["kv-read-back"] == "ok:alice"
    expected = {
        "fs-dotdot": "InvalidPath",
        "fs-absolute": "InvalidPath",
        "fs-symlink-out": "BoundaryEscape",
        "fs-nul": "InvalidPath",
        "fs-fifo": "Access",
        "fs-proc": "BoundaryEscape",
        "fs-long": "InvalidPath",
        "fs-not-asked": "CapabilityDenied",
        "kv-nul-key": "InvalidKey",
        "http-other-port": "CapabilityDenied",
        "http-by-name": "CapabilityDenied",
        "http-redirect-out": "CapabilityDenied",
        "http-metadata": "CapabilityDenied",
    }
    assert {name: got[name] for name in expected} == expected
    assert got["fs-symlinked-folder"] in ("BoundaryEscape", "NotDirectory")
    assert SECRET not in json.dumps(got)
    assert [path for _, path, _, _ in internal.seen.requests] == ["/hello", "/to-metadata"]


def test_kv_keys_never_cross_principals(attacked) -> None:
    assert report(attacked, "bob")["kv-read-back"] == "ok:bob"
    alice = report(attacked, "alice")
    assert alice["kv-read-back"] == "ok:alice" and alice["kv-list"] == "ok:mine"
    assert report(attacked, "bob")["kv-read-back"] == "ok:bob"


def test_without_grants_every_capability_is_denied(tmp_path: Path, hostile_dir, serve, internal) -> None:
    folder = hostile_dir("cap", "capabilities", capabilities=ASKS, port=internal.port)
    served = serve(folder, grants_file=tmp_path / "none.json", kv_file=tmp_path / "kv.sqlite3")
    got = report(served, "alice")
    for name in ("fs-honest", "kv-own", "kv-read-back", "http-honest"):
        assert got[name] == "CapabilityDenied", name
    assert internal.seen.requests == []
    assert not (tmp_path / "kv.sqlite3").exists()  # nothing was even opened
