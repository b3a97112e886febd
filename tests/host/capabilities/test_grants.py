"""The grants file: specs in, canonical grants out, asked-and-granted narrowing, reloading."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from astrid.host.capabilities.asks import Asks
from astrid.host.capabilities.grants import NO_GRANTS, GrantStore, usable
from astrid.host.capabilities.http import parse_http_grant
from astrid.host.capabilities.plugins.fs import FS, mount_folder
from astrid.host.capabilities.plugins.http import HTTP, covered
from astrid.host.capabilities.plugins.kv import KV
from astrid.host.errors import GrantError


def asks(**table: object) -> Asks:
    return Asks.parse(table)


@pytest.fixture
def store(tmp_path: Path) -> GrantStore:
    return GrantStore(tmp_path / "config" / "grants.json")


def test_a_grant_is_kept_per_capsule_in_canonical_form_in_an_owner_only_file(store: GrantStore, tmp_path) -> None:
    assert store.grant("files", f"fs:notes={tmp_path}/notes") == f"fs:notes={tmp_path}/notes"
    assert store.grant("files", "kv") == "kv"
    assert store.grant("files", "http:API.example.com") == "http:api.example.com"
    grants = store.for_capsule("files")
    assert dict(grants.of(FS)) == {"notes": f"{tmp_path}/notes"} and grants.of(KV)
    assert [g.text() for g in grants.of(HTTP)] == ["api.example.com"]
    assert store.for_capsule("other") == NO_GRANTS
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    document = json.loads(store.path.read_text())
    assert document == {
        "version": 1,
        "capsules": {"files": {"fs": {"notes": f"{tmp_path}/notes"}, "kv": True, "http": ["api.example.com"]}},
    }


def test_a_relative_path_is_made_absolute_and_principal_is_the_only_placeholder(
    store: GrantStore, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert store.grant("files", "fs:notes=notes/{principal}") == f"fs:notes={tmp_path}/notes/{{principal}}"
    with pytest.raises(GrantError, match="only placeholder"):
        store.grant("files", "fs:notes=/x/{user}")


@pytest.mark.parametrize(
    "spec",
    ["fs:notes", "fs:=/x", "fs:../x=/tmp", "fs:Notes=/tmp", "http:", "http:ftp://x", "net:x", "kv:1", ""],
)
def test_a_malformed_spec_is_refused_naming_the_shape(store: GrantStore, spec: str) -> None:
    with pytest.raises(GrantError, match="grant"):
        store.grant("files", spec)
    assert not store.path.exists()  # nothing written


def test_a_bad_capsule_name_is_refused(store: GrantStore) -> None:
    with pytest.raises(GrantError, match="capsule name"):
        store.grant("../x", "kv")


def test_revoke_takes_back_one_grant_or_all(store: GrantStore) -> None:
    store.grant("files", "kv")
    store.grant("files", "fs:notes=/srv/notes")
    store.grant("files", "http:http://127.0.0.1:8080")
    assert store.revoke("files", "http:http://127.0.0.1:8080")
    assert not store.revoke("files", "http:http://127.0.0.1:8080")
    assert store.revoke("files", "fs:notes")
    assert store.for_capsule("files").specs() == ["kv"]
    assert store.revoke("files", "all")
    assert store.for_capsule("files") == NO_GRANTS
    assert json.loads(store.path.read_text())["capsules"] == {}


def test_a_server_sees_another_process_grant_and_revoke_without_restart(tmp_path: Path) -> None:
    path = tmp_path / "grants.json"
    server, operator = GrantStore(path), GrantStore(path)
    assert not server.for_capsule("files").of(KV)
    operator.grant("files", "kv")
    assert server.for_capsule("files").of(KV)
    operator.revoke("files", "kv")
    assert not server.for_capsule("files").of(KV)


def test_a_corrupt_or_loose_file_is_refused_never_guessed_at(store: GrantStore) -> None:
    store.grant("files", "kv")
    store.path.write_text('{"version": 1, "capsules": {"files": {"fs": {"notes": "relative"}}}}')
    with pytest.raises(GrantError, match="corrupt"):
        store.for_capsule("files")
    store.path.write_text('{"version": 1, "capsules": {}}')
    os.chmod(store.path, 0o644)
    with pytest.raises(GrantError, match="chmod 600"):
        store.for_capsule("files")


def test_only_what_is_both_asked_and_granted_is_usable(store: GrantStore) -> None:
    store.grant("files", "fs:notes=/srv/notes")
    store.grant("files", "fs:secrets=/srv/secrets")
    store.grant("files", "kv")
    store.grant("files", "http:api.example.com")
    store.grant("files", "http:evil.example.com")
    granted = store.for_capsule("files")
    got = usable(granted, asks(fs=["notes", "photos"], kv=False, http=["api.example.com"]))
    assert dict(got.of(FS)) == {"notes": "/srv/notes"}
    assert not got.of(KV)
    assert [g.text() for g in got.of(HTTP)] == ["api.example.com"]
    assert usable(NO_GRANTS, asks(fs=["notes"], kv=True, http=["api.example.com"])).empty()


def test_an_asked_port_must_match_the_grant() -> None:
    assert covered("api.example.com", parse_http_grant("api.example.com:8443"))
    assert covered("api.example.com:443", parse_http_grant("api.example.com"))
    assert not covered("api.example.com:8443", parse_http_grant("api.example.com"))
    assert covered("http://127.0.0.1:8080", parse_http_grant("http://127.0.0.1:8080"))
    assert not covered("http://127.0.0.2:8080", parse_http_grant("http://127.0.0.1:8080"))


def test_the_manifest_may_name_the_scheme_in_the_spelling_the_grant_uses() -> None:
    """One spelling for the ask, the grant and the check: `http://HOST:PORT` for plain HTTP."""
    asked = asks(http=["http://127.0.0.1:8765"])
    assert asked.specs() == ["http:http://127.0.0.1:8765"]  # what `capsule list -v` tells the operator to grant
    assert covered("http://127.0.0.1:8765", parse_http_grant("http://127.0.0.1:8765"))
    assert not covered("http://127.0.0.1:8765", parse_http_grant("127.0.0.1:8765"))  # https: not what is asked
    # ... and no scheme is https in the manifest as in the grant: a plain-http grant does not serve it
    assert not covered("127.0.0.1:8765", parse_http_grant("http://127.0.0.1:8765"))
    assert covered("127.0.0.1:8765", parse_http_grant("127.0.0.1:8765"))
    with pytest.raises(ValueError, match="HOST"):
        asks(http=["http://127.0.0.1:8765/path"])


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "a\0b"])
def test_a_principal_that_cannot_be_one_folder_name_gets_no_per_principal_mount(name: str) -> None:
    assert mount_folder("/srv/{principal}/notes", name) is None
    assert mount_folder("/srv/{principal}/notes", None) is None
    assert mount_folder("/srv/{principal}/notes", "alice") == Path("/srv/alice/notes")
    assert mount_folder("/srv/shared", None) == Path("/srv/shared")


def test_bus_request_is_granted_revoked_and_kept_like_the_others(store: GrantStore) -> None:
    assert store.grant("launder", "bus:request") == "bus:request"
    assert store.for_capsule("launder").bus_request
    assert store.for_capsule("launder").specs() == ["bus:request"]
    assert json.loads(store.path.read_text())["capsules"] == {"launder": {"bus": ["request"]}}
    assert not GrantStore(store.path).for_capsule("other").bus_request
    store.grant("launder", "kv")
    assert store.revoke("launder", "bus:request")
    assert not store.revoke("launder", "bus:request")
    assert store.for_capsule("launder").specs() == ["kv"]
    store.grant("launder", "bus:request")
    assert store.revoke("launder", "all") and store.for_capsule("launder") == NO_GRANTS


@pytest.mark.parametrize("spec", ["bus", "bus:", "bus:reply", "bus:request=1"])
def test_a_bus_spec_other_than_bus_request_is_refused(store: GrantStore, spec: str) -> None:
    with pytest.raises(GrantError, match="bus:request"):
        store.grant("launder", spec)
    assert not store.path.exists()


@pytest.mark.parametrize("bus", [["everything"], "request", True])
def test_a_bus_grant_the_host_does_not_know_makes_the_file_corrupt(store: GrantStore, bus: object) -> None:
    store.grant("launder", "kv")
    store.path.write_text(json.dumps({"version": 1, "capsules": {"launder": {"bus": bus}}}))
    with pytest.raises(GrantError, match="corrupt"):
        store.for_capsule("launder")


def test_bus_request_is_usable_only_when_the_manifest_declares_requests_or_replies(store: GrantStore) -> None:
    store.grant("launder", "bus:request")
    granted = store.for_capsule("launder")
    assert usable(granted, asks(), bus_request=True).bus_request
    assert not usable(granted, asks()).bus_request
    assert not usable(NO_GRANTS, asks(), bus_request=True).bus_request


def test_grants_belong_to_the_identity_they_were_made_for(tmp_path: Path) -> None:
    store = GrantStore(tmp_path / "grants.json")
    mine, other = "folder:/srv/capsules/files", "folder:/tmp/files"
    store.grant("files", "kv", mine)
    store.grant("files", "fs:notes=/srv/notes")  # no identity given: the entry keeps its own
    assert store.for_capsule("files", mine).specs() == ["fs:notes=/srv/notes", "kv"]
    assert store.for_capsule("files", other).empty()
    with pytest.raises(GrantError, match="revoke them first"):
        store.grant("files", "kv", other)
    assert store.revoke("files", "all") and store.grant("files", "kv", other) == "kv"
    assert store.for_capsule("files", other).of(KV) and store.for_capsule("files", mine).empty()


def test_unbound_grants_are_adopted_once_by_the_first_capsule_that_claims_them(tmp_path: Path) -> None:
    store = GrantStore(tmp_path / "grants.json")
    store.grant("files", "kv")  # made without an identity (an older file, or no capsule found)
    assert store.for_capsule("files", "folder:/a").of(KV)  # unbound: whoever asks
    assert store.adopt("files", "folder:/a") and not store.adopt("files", "folder:/b")
    assert store.for_capsule("files", "folder:/a").of(KV) and store.for_capsule("files", "folder:/b").empty()
    assert not store.adopt("nobody", "folder:/a")
    assert json.loads((tmp_path / "grants.json").read_text())["capsules"]["files"]["identity"] == "folder:/a"


def test_list_v_says_when_only_a_grant_of_the_other_scheme_is_there() -> None:
    lines = HTTP.explain("weather", ("127.0.0.1:8765",), (parse_http_grant("http://127.0.0.1:8765"),))
    assert lines == [
        "http 127.0.0.1:8765: not granted (astrid capsule grant weather http:127.0.0.1:8765); "
        "http://127.0.0.1:8765 is granted, but this entry asks for https "
        "(an entry without http:// is https; write http:// in Capsule.toml for plain http)"
    ]
    plain = HTTP.explain("weather", ("http://127.0.0.1:8765",), (parse_http_grant("127.0.0.1:8765"),))
    assert plain[0].endswith("; 127.0.0.1:8765 is granted, but this entry asks for http")
