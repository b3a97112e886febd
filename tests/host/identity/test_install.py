"""Installing: no silent downgrade (against the install now and the memory of the highest one), and a lock
entry that must describe the artifact fetched for it (its signer, name, version, component)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from astrid.host.identity.artifact import pack_capsule
from astrid.host.identity.errors import Downgrade, LockError, UnsignedArtifact
from astrid.host.identity.install import (
    Fetched,
    fetch,
    fetch_locked,
    install,
    plan_install,
    release_of,
    remove_installed,
)
from astrid.host.identity.keys import SigningKey
from astrid.host.identity.lockfile import LockFile
from astrid.host.identity.signing import sign_artifact
from astrid.host.identity.trust import TrustStore
from astrid.host.identity.versions import VersionMemory
from tests.host.identity.conftest import MANIFEST, make_capsule


class Home:
    """A capsule home with its lock file and version memory, installing artifact bytes as the CLI does."""

    def __init__(self, tmp_path: Path, trust: TrustStore) -> None:
        self.root = tmp_path
        self.home = tmp_path / "home"
        self.trust = trust
        self.lock = LockFile(tmp_path / "config" / "capsules.lock")
        self.versions = VersionMemory(tmp_path / "config" / "capsule-versions.json")

    def fetched(self, data: bytes, name: str) -> Fetched:
        path = self.root / "artifacts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return fetch(str(path))

    def plan(self, data: bytes, name: str = "a.capsule", **options):
        return plan_install(self.fetched(data, name), self.trust, self.home, self.versions, **options)

    def install(self, data: bytes, name: str = "a.capsule", **options) -> Path:
        return install(self.plan(data, name, **options), self.trust, self.lock, self.versions)

    def version(self) -> str:
        return (self.home / "notes" / "Capsule.toml").read_text().split('version = "')[1].split('"')[0]


@pytest.fixture
def releases(tmp_path_factory: pytest.TempPathFactory, component: bytes, alice: SigningKey):
    """`releases(version, extra="")`: notes VERSION signed by alice (`extra`: more manifest lines, other bytes)."""
    made: dict[tuple[str, str], bytes] = {}

    def release(version: str, extra: str = "", key: SigningKey = alice) -> bytes:
        if (version, extra) not in made:
            manifest = MANIFEST.replace('version = "1.2.0"', f'version = "{version}"\ndescription = "{extra}"', 1)
            folder = make_capsule(tmp_path_factory.mktemp("release") / "notes", component, manifest)
            made[version, extra] = pack_capsule(folder)
        return sign_artifact(made[version, extra], key)

    return release


@pytest.fixture
def home(tmp_path: Path, trusted: TrustStore) -> Home:
    return Home(tmp_path, trusted)


def test_an_upgrade_installs_and_an_older_release_is_refused_naming_both_versions(home, releases):
    home.install(releases("1.1.0"))
    with pytest.raises(Downgrade, match=r"notes 1\.0\.0 is older than notes 1\.1\.0, installed now.*--allow-downgrade"):
        home.plan(releases("1.0.0"))
    assert home.version() == "1.1.0"
    home.install(releases("1.2.0"))
    assert home.version() == "1.2.0"
    assert home.versions.highest("acme", "notes").version == "1.2.0"


def test_removing_the_capsule_does_not_forget_its_highest_version(home, releases):
    home.install(releases("1.1.0"))
    remove_installed(home.home, "notes", home.lock)
    with pytest.raises(Downgrade, match=r"older than notes 1\.1\.0, the highest of publisher acme installed here"):
        home.plan(releases("1.0.0"))
    assert not (home.home / "notes").exists()


def test_allow_downgrade_installs_it_says_why_and_keeps_the_highest_mark(home, releases):
    home.install(releases("1.1.0"))
    plan = home.plan(releases("1.0.0"), allow_downgrade=True)
    assert plan.downgrade == "notes 1.0.0 is older than notes 1.1.0, installed now"
    assert any(line.startswith("DOWNGRADE   notes 1.0.0 is older") for line in plan.summary())
    install(plan, home.trust, home.lock, home.versions)
    assert home.version() == "1.0.0" and home.lock.get("notes").version == "1.0.0"
    assert home.versions.highest("acme", "notes").version == "1.1.0"
    with pytest.raises(Downgrade):  # reinstalling the older one is still a downgrade against the memory
        home.plan(releases("1.0.0"), "again.capsule")


def test_the_same_version_is_a_reinstall_only_with_the_same_bytes(home, releases):
    home.install(releases("1.1.0"))
    assert home.plan(releases("1.1.0"), "again.capsule").downgrade is None
    with pytest.raises(Downgrade, match=r"notes 1\.1\.0 has other bytes .* may be a replay"):
        home.plan(releases("1.1.0", extra="rebuilt"))


def test_a_version_that_cannot_be_ordered_is_refused(home, releases):
    home.install(releases("1.1.0"))
    with pytest.raises(Downgrade, match="'nightly' cannot be ordered against '1.1.0'"):
        home.plan(releases("nightly"))


def test_a_rotated_key_of_the_same_publisher_keeps_the_history(home, releases, mallory: SigningKey):
    home.install(releases("1.1.0"))
    remove_installed(home.home, "notes", home.lock)
    home.trust.add(mallory.public, "acme", another_key=True)  # acme's new key
    with pytest.raises(Downgrade, match="publisher acme"):
        home.plan(releases("1.0.0", key=mallory))


def test_unsigned_installs_are_neither_checked_nor_remembered(home, releases, packed: bytes):
    home.install(packed, allow_unsigned=True)  # notes 1.2.0, unsigned
    remove_installed(home.home, "notes", home.lock)
    assert home.versions.highest("acme", "notes") is None and not home.versions.path.exists()
    home.install(releases("1.0.0"))  # the signed history starts here


def test_a_locked_entry_must_describe_the_artifact_fetched_for_it(home, releases, mallory: SigningKey):
    home.install(releases("1.1.0"))
    entry = home.lock.get("notes")
    fetched = fetch_locked(entry)
    checks = {
        "signing key": replace(entry, key=mallory.public.fingerprint),
        "name": replace(entry, name="other"),
        "version": replace(entry, version="9.9.9"),
        "component": replace(entry, component="sha256:" + "0" * 64),
    }
    for what, edited in checks.items():
        with pytest.raises(LockError, match=f"the lock file pins {what} .* holds {what}"):
            plan_install(fetched, home.trust, home.home, home.versions, locked=edited)
    assert plan_install(fetched, home.trust, home.home, home.versions, locked=entry).downgrade is None


def test_a_locked_unsigned_entry_needs_allow_unsigned(home, packed: bytes):
    home.install(packed, allow_unsigned=True)
    entry = home.lock.get("notes")
    assert entry.key is None
    remove_installed(home.home, "notes", home.lock)
    with pytest.raises(LockError, match="--allow-unsigned"):
        fetch_locked(entry)
    fetched = fetch_locked(entry, allow_unsigned=True)
    with pytest.raises(UnsignedArtifact):  # and verification refuses it too, whatever the lock says
        plan_install(fetched, home.trust, home.home, home.versions, locked=entry)
    assert plan_install(fetched, home.trust, home.home, home.versions, allow_unsigned=True, locked=entry)


def test_a_locked_entry_whose_version_went_back_is_refused(home, releases):
    home.install(releases("1.0.0"), "old.capsule")
    old = home.lock.get("notes")
    home.install(releases("1.1.0"), "new.capsule")
    remove_installed(home.home, "notes", home.lock)
    fetched = fetch_locked(old)
    with pytest.raises(Downgrade, match=r"notes 1\.0\.0 is older than notes 1\.1\.0"):
        plan_install(fetched, home.trust, home.home, home.versions, locked=old)
    plan = plan_install(fetched, home.trust, home.home, home.versions, locked=old, allow_downgrade=True)
    assert plan.downgrade is not None and release_of(plan.capsule).version == "1.0.0"
