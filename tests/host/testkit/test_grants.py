"""`KitGrants`: a test's grants, checked against the manifest's asks, in the session's own grants file."""

from __future__ import annotations

from pathlib import Path

import pytest

from astrid.host.capabilities.asks import Asks
from astrid.host.capabilities.grants import GrantStore
from astrid.host.errors import GrantError
from astrid.host.testkit.grants import KitGrants

IDENTITY = "folder:/caps/notes"


def kit(tmp_path: Path, asks: dict, changes: list[str]) -> KitGrants:
    return KitGrants(tmp_path / "grants.json", "notes", IDENTITY, Asks.parse(asks), lambda: changes.append("changed"))


def test_each_grant_is_written_bound_to_the_capsule_and_announced(tmp_path: Path):
    changes: list[str] = []
    grants = kit(tmp_path, {"fs": ["notes"], "kv": True, "http": ["http://127.0.0.1"]}, changes)
    assert grants.files(tmp_path / "data") == f"fs:notes={tmp_path / 'data'}"
    assert grants.kv() == "kv"
    assert grants.http("http://127.0.0.1:8765/some/path?q=1") == "http:http://127.0.0.1:8765"
    stored = GrantStore(tmp_path / "grants.json").for_capsule("notes")
    assert stored.identity == IDENTITY
    assert stored.specs() == [f"fs:notes={tmp_path / 'data'}", "kv", "http:http://127.0.0.1:8765"]
    assert changes == ["changed"] * 3
    grants.clear()
    assert GrantStore(tmp_path / "grants.json").for_capsule("notes").empty()
    assert changes == ["changed"] * 4
    grants.clear()  # nothing left to take back: nothing to announce
    assert changes == ["changed"] * 4


def test_a_folder_per_principal_is_kept_as_given(tmp_path: Path):
    grants = kit(tmp_path, {"fs": ["notes"]}, [])
    assert grants.files(f"{tmp_path}/{{principal}}") == f"fs:notes={tmp_path}/{{principal}}"


@pytest.mark.parametrize(
    ("asks", "grant", "message"),
    [
        ({}, lambda g, p: g.files(p), r"notes's Capsule.toml asks for no fs mount \(grant_files\(path, mount="),
        ({"fs": ["a", "b"]}, lambda g, p: g.files(p), r"asks for the mounts a, b: name one"),
        ({"fs": ["a"]}, lambda g, p: g.files(p, mount="b"), r"does not ask for fs:b=.*like `fs = \[\"notes\"\]`"),
        ({}, lambda g, p: g.kv(), r"does not ask for kv, so the grant would change nothing: .*`kv = true`"),
        ({"http": ["api.example.com"]}, lambda g, p: g.http("https://other.example.com"), r"for http:other.example"),
        ({"http": ["127.0.0.1"]}, lambda g, p: g.http("http://"), r"give a URL such as http://127.0.0.1:8765"),
    ],
)
def test_a_grant_that_would_change_nothing_is_refused_before_it_is_written(tmp_path: Path, asks, grant, message):
    changes: list[str] = []
    with pytest.raises(GrantError, match=message):
        grant(kit(tmp_path, asks, changes), tmp_path)
    assert not (tmp_path / "grants.json").exists()
    assert changes == []
