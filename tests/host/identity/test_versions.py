"""No silent downgrade: semantic-version order, the rule, and the owner-only memory of the highest release."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from astrid.host.identity.errors import Downgrade, VersionError
from astrid.host.identity.versions import Release, VersionMemory, compare_versions, reason_to_refuse

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
M = "sha256:" + "c" * 64


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("1.0.0", "1.1.0"),
        ("1.9.0", "1.10.0"),  # numbers, not text
        ("1.0.9", "2.0.0"),
        ("1.0.0-alpha", "1.0.0"),  # a pre-release ranks below its release
        ("1.0.0-alpha", "1.0.0-alpha.1"),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
        ("1.0.0-alpha.beta", "1.0.0-beta"),
        ("1.0.0-beta.2", "1.0.0-beta.11"),
        ("1.0.0-rc.1", "1.0.0"),
    ],
)
def test_versions_are_ordered_by_semantic_versioning_precedence(lower: str, higher: str) -> None:
    assert compare_versions(lower, higher) == -1
    assert compare_versions(higher, lower) == 1


def test_build_metadata_does_not_order_and_what_is_not_semver_cannot_be_ordered() -> None:
    assert compare_versions("1.0.0+build.1", "1.0.0+build.2") == 0
    for odd in ("1.0", "v1.0.0", "01.0.0", "1.0.0-01", "banana", "1.0.0-"):
        assert compare_versions(odd, "1.0.0") is None, odd
    assert compare_versions("banana", "banana") == 0  # the same text is the same version


def test_the_rule_names_both_versions_and_lets_upgrades_and_reinstalls_through() -> None:
    before = Release("1.1.0", A, M)
    assert reason_to_refuse("evil", Release("1.2.0", B, M), before, "installed now") is None
    assert reason_to_refuse("evil", Release("1.1.0", A, M), before, "installed now") is None  # a reinstall
    older = reason_to_refuse("evil", Release("1.0.0", B, M), before, "installed now")
    assert older == "evil 1.0.0 is older than evil 1.1.0, installed now"
    replay = reason_to_refuse("evil", Release("1.1.0", B, M), before, "installed now")
    assert replay is not None and "other bytes" in replay and "replay" in replay
    assert reason_to_refuse("evil", Release("1.1.0", A, B), before, "installed now") is not None  # other manifest
    odd = reason_to_refuse("evil", Release("nightly", B, M), before, "installed now")
    assert odd is not None and "'nightly' cannot be ordered against '1.1.0'" in odd
    unknown = Release("1.1.0", None, None)  # a damaged install: never "the same bytes"
    assert reason_to_refuse("evil", Release("1.1.0", A, M), unknown, "installed now") is not None


def test_the_memory_keeps_the_highest_release_in_an_owner_only_file(tmp_path: Path) -> None:
    memory = VersionMemory(tmp_path / "config" / "capsule-versions.json")
    assert memory.highest("acme", "evil") is None
    memory.remember("acme", "evil", Release("1.1.0", A, M), allow_downgrade=False)
    assert stat.S_IMODE(os.stat(memory.path).st_mode) == 0o600
    with pytest.raises(Downgrade, match=r"evil 1\.0\.0 is older than evil 1\.1\.0.*--allow-downgrade"):
        memory.remember("acme", "evil", Release("1.0.0", B, M), allow_downgrade=False)
    memory.remember("acme", "evil", Release("1.0.0", B, M), allow_downgrade=True)
    assert memory.highest("acme", "evil") == Release("1.1.0", A, M)  # an allowed downgrade keeps the mark
    memory.remember("acme", "other", Release("0.1.0", B, M), allow_downgrade=False)  # names are apart
    memory.remember("mallory", "evil", Release("0.0.1", B, M), allow_downgrade=False)  # and so are publishers
    memory.remember("acme", "evil", Release("2.0.0", B, M), allow_downgrade=False)
    reread = VersionMemory(memory.path)
    assert reread.highest("acme", "evil") == Release("2.0.0", B, M)
    assert reread.highest("mallory", "evil") == Release("0.0.1", B, M)
    reason = reread.reason_to_refuse("acme", "evil", Release("1.1.0", A, M))
    assert reason is not None and str(memory.path) in reason and "publisher acme" in reason


def test_an_allowed_release_that_cannot_be_ordered_becomes_the_mark(tmp_path: Path) -> None:
    memory = VersionMemory(tmp_path / "capsule-versions.json")
    memory.remember("acme", "evil", Release("1.1.0", A, M), allow_downgrade=False)
    memory.remember("acme", "evil", Release("nightly", B, M), allow_downgrade=True)
    assert memory.highest("acme", "evil") == Release("nightly", B, M)
    with pytest.raises(Downgrade):  # and nothing orders against it without the operator saying so
        memory.remember("acme", "evil", Release("9.0.0", A, M), allow_downgrade=False)


@pytest.mark.parametrize(
    "document",
    [
        "not json",
        json.dumps({"version": 2, "publishers": {}}),
        json.dumps({"version": 1, "publishers": {"Not A Name": {}}}),
        json.dumps({"version": 1, "publishers": {"acme": {"evil": {"version": "1.0.0"}}}}),
        json.dumps({"version": 1, "publishers": {"acme": {"evil": {"version": "1", "component": "x", "manifest": M}}}}),
    ],
)
def test_a_corrupt_memory_file_is_one_clear_error(document: str, tmp_path: Path) -> None:
    path = tmp_path / "capsule-versions.json"
    path.write_text(document)
    path.chmod(0o600)
    with pytest.raises(VersionError, match=f"{path}.*delete it"):
        VersionMemory(path).highest("acme", "evil")


def test_a_memory_file_others_may_write_is_refused(tmp_path: Path) -> None:
    memory = VersionMemory(tmp_path / "capsule-versions.json")
    memory.remember("acme", "evil", Release("1.1.0", A, M), allow_downgrade=False)
    memory.path.chmod(0o666)
    with pytest.raises(VersionError, match="chmod 600"):
        memory.highest("acme", "evil")
