"""At load: who a capsule folder is (`vetter`), and which URIs that lets it serve (`NamespaceAuthority`);
installing (`install`) and the lock file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astrid.host.capsule.provenance import Provenance
from astrid.host.errors import AstridError
from astrid.host.identity.errors import LockError, NamespaceTaken
from astrid.host.identity.install import Fetched, fetch, fetch_locked, install, plan_install, remove_installed
from astrid.host.identity.keys import SigningKey
from astrid.host.identity.lockfile import Locked, LockFile
from astrid.host.identity.trust import TrustStore
from astrid.host.identity.versions import VersionMemory
from astrid.host.identity.vetting import NamespaceAuthority, vetter
from tests.host.identity.conftest import MANIFEST, make_capsule


def _fetched(data: bytes, tmp_path: Path) -> Fetched:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "notes.capsule"
    path.write_bytes(data)
    return fetch(str(path))


def _installed(signed: bytes, trusted: TrustStore, tmp_path: Path) -> Path:
    home, versions = tmp_path / "home", VersionMemory(tmp_path / "versions.json")
    plan = plan_install(_fetched(signed, tmp_path), trusted, home, versions)
    return install(plan, trusted, LockFile(tmp_path / "lock"), versions)


def test_an_installed_capsule_is_its_publisher_and_claims_its_namespaces(signed, trusted, alice, tmp_path):
    folder = _installed(signed, trusted, tmp_path)
    provenance = vetter(trusted)(folder)
    assert provenance.publisher == "acme" and provenance.key_fingerprint == alice.public.fingerprint
    assert provenance.namespaces == ("astrid://notes-extra/", "astrid://notes/")
    assert provenance.grant_key("notes", folder) == f"key:{alice.public.fingerprint}/notes"
    assert trusted.owner_of("astrid://notes/a") == "acme"  # install bound them


def test_a_local_folder_is_unsigned_and_may_claim_no_owned_namespace(signed, trusted, component, tmp_path):
    local = make_capsule(tmp_path / "local", component, MANIFEST.replace('"notes"', '"mine"', 1))
    assert vetter(trusted)(local) == Provenance(namespaces=("astrid://notes/", "astrid://notes-extra/"))
    _installed(signed, trusted, tmp_path)  # acme now owns those namespaces
    with pytest.raises(NamespaceTaken, match="acme"):
        vetter(trusted)(local)


def test_an_installed_capsule_whose_component_changed_or_whose_key_is_gone_does_not_load(
    signed, trusted, alice, tmp_path
):
    folder = _installed(signed, trusted, tmp_path)
    (folder / "notes.wasm").write_bytes((folder / "notes.wasm").read_bytes() + b"\0")
    with pytest.raises(AstridError, match="changed after install"):
        vetter(trusted)(folder)
    other = _installed(signed, trusted, tmp_path / "again")
    trusted.remove("acme")
    with pytest.raises(AstridError, match="astrid trust add"):
        vetter(trusted)(other)


def test_the_authority_confines_signed_capsules_to_their_namespaces_and_keeps_others_out(signed, trusted, tmp_path):
    _installed(signed, trusted, tmp_path)
    acme = Provenance("acme", "f" * 64, ("astrid://notes/",))
    known = {"src-acme": acme, "src-local": Provenance()}
    authority = NamespaceAuthority(trusted, known.get)
    assert authority.may_serve("src-acme", "astrid://notes/today")
    assert not authority.may_serve("src-acme", "astrid://elsewhere/x")
    for source in ("src-local", "src-on-another-host"):
        assert not authority.may_serve(source, "astrid://notes/today")
        assert authority.may_serve(source, "astrid://elsewhere/x")
        assert not authority.may_cover(source, "astrid://")  # a template around an owned namespace
        assert not authority.may_cover(source, "astrid://notes/x/")
        assert authority.may_cover(source, "astrid://elsewhere/")
    assert authority.may_cover("src-acme", "astrid://notes/day/") and not authority.may_cover("src-acme", "astrid://")


def test_an_upgrade_replaces_only_an_install_by_the_same_key(signed, packed, trusted, mallory: SigningKey, tmp_path):
    from astrid.host.identity.signing import sign_artifact

    home, lock, versions = tmp_path / "home", LockFile(tmp_path / "lock"), VersionMemory(tmp_path / "versions.json")
    install(plan_install(_fetched(signed, tmp_path), trusted, home, versions), trusted, lock, versions)
    again = plan_install(_fetched(signed, tmp_path), trusted, home, versions)
    assert again.replaces == "1.2.0" and again.downgrade is None  # the same bytes again: a reinstall
    install(again, trusted, lock, versions)
    trusted.add(mallory.public, "mallory")
    rival = sign_artifact(packed, mallory)
    with pytest.raises(AstridError):  # its namespaces are acme's; and the folder is acme's install
        plan_install(_fetched(rival, tmp_path), trusted, home, versions)
    assert [entry.name for entry in lock.entries()] == ["notes"]
    remove_installed(home, "notes", lock)
    assert not (home / "notes").exists() and lock.entries() == []


def test_the_lock_file_records_installs_and_refuses_other_bytes(signed, packed, trusted, tmp_path):
    lock, versions = LockFile(tmp_path / "lock"), VersionMemory(tmp_path / "versions.json")
    install(plan_install(_fetched(signed, tmp_path), trusted, tmp_path / "home", versions), trusted, lock, versions)
    (entry,) = lock.entries()
    assert entry.publisher == "acme" and entry.artifact.startswith("sha256:") and entry.component.startswith("sha256:")
    assert fetch_locked(entry).data == signed
    Path(entry.source).write_bytes(packed)  # the file now holds other bytes
    with pytest.raises(LockError, match="other bytes"):
        fetch_locked(entry)


@pytest.mark.parametrize(
    "document",
    [
        "not json",
        json.dumps({"version": 9, "capsules": []}),
        json.dumps({"version": 1, "capsules": [{"name": "x"}]}),
        json.dumps(
            {
                "version": 1,
                "capsules": [
                    {
                        "name": "x",
                        "version": "1",
                        "artifact": "md5:0",
                        "component": "sha256:" + "0" * 64,
                        "publisher": None,
                        "key": None,
                        "source": "/x",
                    }
                ],
            }
        ),
    ],
)
def test_a_malformed_lock_file_is_one_clear_error(document, tmp_path):
    path = tmp_path / "capsules.lock"
    path.write_text(document)
    path.chmod(0o600)
    with pytest.raises(LockError, match=str(path)):
        LockFile(path).entries()


def test_a_lock_entry_round_trips(tmp_path):
    lock = LockFile(tmp_path / "capsules.lock")
    entry = Locked("x", "1", "sha256:" + "a" * 64, "sha256:" + "b" * 64, None, None, "oci://h/r@sha256:" + "c" * 64)
    lock.record(entry)
    assert LockFile(tmp_path / "capsules.lock").get("x") == entry
    assert lock.forget("x") and lock.get("x") is None
