"""Replaying old releases and editing the lock file, against the real `astrid capsule install` (issue 34).

The findings: with `evil` 1.1.0 installed, the older `evil-1.0.0.capsule`,
validly signed by the same trusted key, installed over it ("replaces 1.1.0")
and the grants bound to (key, name) carried over to the older code; so did
moving a registry tag back. And a hand-edited lock entry with `"key": null`
installed unsigned code with `install --locked`, without `--allow-unsigned`.

Now install refuses a version older than the one installed now or than the
highest one of that publisher ever installed here (remembered in the config
dir, so remove-then-install does not get round it), unless
`--allow-downgrade`; and `install --locked` needs `--allow-unsigned` for an
unsigned entry and refuses an artifact whose signer, name or version is not
the entry's. Every artifact here is real: a WAT component, packed and signed
with a key made by `astrid key new`, installed by the `astrid` command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astrid.host.identity.artifact import pack_capsule, read_artifact, sha256
from astrid.host.identity.keys import KeyStore
from astrid.host.identity.signing import sign_artifact
from tests.e2e.test_publishing import Operator
from tests.support.paths import FIXTURES
from tests.support.registry import registry_server
from tests.support.wat import build_wat

MANIFEST = """\
[package]
name = "{name}"
version = "{version}"

[[component]]
id = "{name}"
file = "{name}.wasm"

[capabilities]
kv = true
"""


@pytest.fixture(scope="module")
def component(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return build_wat(FIXTURES / "wat" / "probe.wat", tmp_path_factory.mktemp("wat") / "probe.wasm").read_bytes()


@pytest.fixture
def operator(tmp_path: Path) -> Operator:
    home = tmp_path / "home"
    home.mkdir()
    return Operator(tmp_path / "config", home)


@pytest.fixture
def release(operator: Operator, component: bytes, tmp_path: Path):
    """`release(version, name="evil", key="acme", extra="")`: a new NAME-VERSION artifact file, signed by `key`
    (made with `astrid key new` and trusted as publisher KEY on first use; None: unsigned); `extra` is
    appended to its Capsule.toml (other bytes, same version)."""
    made = 0

    def make(version: str, name: str = "evil", key: str | None = "acme", extra: str = "") -> Path:
        nonlocal made
        made += 1
        folder = tmp_path / "src" / str(made)
        folder.mkdir(parents=True)
        (folder / "Capsule.toml").write_text(MANIFEST.format(name=name, version=version) + extra)
        (folder / f"{name}.wasm").write_bytes(component)
        data = pack_capsule(folder)
        if key is not None:
            if not (operator.config / "keys" / f"{key}.key").exists():
                public = operator("key", "new", key).stdout.strip()
                operator("trust", "add", public, "--publisher", key)
            data = sign_artifact(data, KeyStore(operator.config / "keys").load(key))
        artifact = tmp_path / "artifacts" / str(made) / f"{name}-{version}.capsule"
        artifact.parent.mkdir(parents=True)
        artifact.write_bytes(data)
        return artifact

    return make


def installed_version(operator: Operator, name: str = "evil", home: Path | None = None) -> str | None:
    manifest = (home or operator.home) / name / "Capsule.toml"
    if not manifest.exists():
        return None
    return manifest.read_text().split('version = "')[1].split('"')[0]


def lock_entries(operator: Operator) -> list[dict]:
    return json.loads((operator.config / "capsules.lock").read_text())["capsules"]


def write_lock(operator: Operator, entries: list[dict]) -> None:
    """The lock file as someone edited it by hand (owner-only, as astrid requires of it)."""
    path = operator.config / "capsules.lock"
    path.write_text(json.dumps({"version": 1, "capsules": entries}))
    path.chmod(0o600)


def test_an_older_signed_release_replayed_over_a_newer_install_is_refused(operator, release):
    old, new = release("1.0.0"), release("1.1.0")
    operator("capsule", "install", new, "--yes")
    operator("capsule", "grant", "evil", "kv")  # bound to (acme's key, evil): what an old release would inherit

    line = operator.refused("capsule", "install", old, "--yes")
    assert "evil 1.0.0 is older than evil 1.1.0" in line and "--allow-downgrade" in line
    assert installed_version(operator) == "1.1.0"
    assert [entry["version"] for entry in lock_entries(operator)] == ["1.1.0"]

    allowed = operator("capsule", "install", old, "--yes", "--allow-downgrade")  # the operator's own choice
    assert "WARNING: this is a DOWNGRADE (--allow-downgrade): evil 1.0.0 is older than evil 1.1.0" in allowed.stderr
    assert installed_version(operator) == "1.0.0"


def test_removing_the_capsule_first_does_not_get_round_it(operator, release):
    old, new = release("1.0.0"), release("1.1.0")
    operator("capsule", "install", new, "--yes")
    operator("capsule", "remove", "evil")

    line = operator.refused("capsule", "install", old, "--yes")
    assert "evil 1.0.0 is older than evil 1.1.0, the highest of publisher acme installed here before" in line
    assert "capsule-versions.json" in line
    assert installed_version(operator) is None


def test_the_same_version_with_other_bytes_is_refused_as_a_possible_replay(operator, release):
    first = release("1.1.0")
    operator("capsule", "install", first, "--yes")
    operator("capsule", "install", first, "--yes")  # the same bytes again: a reinstall
    other = release("1.1.0", extra='\n[publish]\n"resource.v1.response.read.*" = "x"\n')  # it also publishes
    line = operator.refused("capsule", "install", other, "--yes")
    assert "evil 1.1.0 has other bytes" in line and "replay" in line and "--allow-downgrade" in line


def test_a_lock_entry_edited_to_go_back_is_refused(operator, release, tmp_path):
    old, new = release("1.0.0"), release("1.1.0")
    operator("capsule", "install", old, "--yes")
    [old_entry] = lock_entries(operator)
    operator("capsule", "install", new, "--yes")
    write_lock(operator, [old_entry])  # the lock now pins the older release again

    for home in (operator.home, tmp_path / "fresh"):  # over the install, and on a fresh capsule home
        line = operator.refused("capsule", "install", "--locked", "--yes", home=home)
        assert "evil 1.0.0 is older than evil 1.1.0" in line and "--allow-downgrade" in line
    assert installed_version(operator) == "1.1.0"
    assert installed_version(operator, home=tmp_path / "fresh") is None


def test_a_hand_edited_unsigned_lock_entry_needs_allow_unsigned(operator, release, tmp_path):
    unsigned = release("6.6.6", name="sneaky", key=None)
    line = operator.refused("capsule", "install", unsigned, "--yes")  # directly: refused
    assert "is not signed" in line

    data = unsigned.read_bytes()
    component = json.loads(read_artifact(data).metadata)["component"]["sha256"]
    entry = {
        "name": "sneaky",
        "version": "6.6.6",
        "artifact": f"sha256:{sha256(data)}",
        "component": f"sha256:{component}",
        "publisher": None,
        "key": None,
        "source": str(unsigned),
    }
    operator.config.mkdir(mode=0o700, exist_ok=True)
    write_lock(operator, [entry])
    line = operator.refused("capsule", "install", "--locked", "--yes")
    assert "sneaky" in line and "unsigned" in line and "--allow-unsigned" in line
    assert installed_version(operator, "sneaky") is None

    allowed = operator("capsule", "install", "--locked", "--yes", "--allow-unsigned")  # said out loud: installed
    assert "UNSIGNED" in allowed.stderr and installed_version(operator, "sneaky") == "6.6.6"


@pytest.mark.parametrize("field", ["key", "name"])
def test_a_lock_entry_that_does_not_describe_its_artifact_is_refused(operator, release, field):
    evil = release("1.0.0")
    operator("capsule", "install", evil, "--yes")
    [entry] = lock_entries(operator)
    operator("capsule", "remove", "evil")
    if field == "key":  # the entry still says acme's key, but points at the same capsule signed by mallory
        other = release("1.0.0", key="mallory")  # mallory: another publisher the operator trusts
        data = other.read_bytes()
        edited = {**entry, "artifact": f"sha256:{sha256(data)}", "source": str(other)}
    else:  # the entry says `notes`, the artifact is `evil`
        edited = {**entry, "name": "notes"}
    write_lock(operator, [edited])

    line = operator.refused("capsule", "install", "--locked", "--yes")
    what = "signing key" if field == "key" else "name"
    assert f"the lock file pins {what}" in line and f"holds {what}" in line
    assert installed_version(operator) is None and installed_version(operator, "notes") is None


def test_a_registry_tag_moved_back_to_an_older_release_is_refused(operator, release, tmp_path):
    old, new = release("1.0.0"), release("1.1.0")
    with registry_server(tmp_path) as registry:
        tag = registry.ref("acme/evil:stable")
        operator("capsule", "push", new, tag)
        operator("capsule", "install", tag, "--yes")
        assert installed_version(operator) == "1.1.0"

        operator("capsule", "push", old, tag)  # whoever can push moves the tag back
        line = operator.refused("capsule", "install", tag, "--yes")
    assert "evil 1.0.0 is older than evil 1.1.0" in line and "--allow-downgrade" in line
    assert installed_version(operator) == "1.1.0"
