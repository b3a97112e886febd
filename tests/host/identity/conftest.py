"""A tiny built capsule (a WAT component, built in milliseconds), keys, a trust store, and artifacts of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from astrid.host.identity.artifact import pack_capsule
from astrid.host.identity.keys import KeyStore, SigningKey
from astrid.host.identity.signing import sign_artifact
from astrid.host.identity.trust import TrustStore
from tests.support.paths import FIXTURES
from tests.support.wat import build_wat

MANIFEST = """\
[package]
name = "notes"
version = "1.2.0"
namespaces = ["astrid://notes/", "astrid://notes-extra/"]

[[component]]
id = "notes"
file = "notes.wasm"

[subscribe]
"resource.v1.request.read" = { wit = "x", handler = "read" }

[publish]
"resource.v1.response.read.*" = "x"

[capabilities]
fs = ["notes"]
kv = true
http = ["api.example.com"]
"""


@pytest.fixture(scope="session")
def component(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real component (tests/fixtures/wat/probe.wat) importing astrid:ipc and astrid:sys."""
    out = tmp_path_factory.mktemp("wat") / "probe.wasm"
    return build_wat(FIXTURES / "wat" / "probe.wat", out).read_bytes()


def make_capsule(folder: Path, component: bytes, manifest: str = MANIFEST) -> Path:
    folder.mkdir(parents=True)
    (folder / "Capsule.toml").write_text(manifest)
    (folder / "notes.wasm").write_bytes(component)
    return folder


@pytest.fixture
def capsule(tmp_path: Path, component: bytes) -> Path:
    """A built capsule folder: Capsule.toml + notes.wasm."""
    return make_capsule(tmp_path / "notes", component)


@pytest.fixture(scope="session")
def packed(tmp_path_factory: pytest.TempPathFactory, component: bytes) -> bytes:
    """The unsigned artifact of the capsule above (packed once)."""
    return pack_capsule(make_capsule(tmp_path_factory.mktemp("packed") / "notes", component))


@pytest.fixture(scope="session")
def session_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyStore:
    keys = KeyStore(tmp_path_factory.mktemp("config") / "keys")
    keys.new("alice")
    keys.new("mallory")
    return keys


@pytest.fixture(scope="session")
def alice(session_keys: KeyStore) -> SigningKey:
    return session_keys.load("alice")


@pytest.fixture(scope="session")
def mallory(session_keys: KeyStore) -> SigningKey:
    return session_keys.load("mallory")


@pytest.fixture(scope="session")
def signed(packed: bytes, alice: SigningKey) -> bytes:
    """The artifact, signed by alice's key."""
    return sign_artifact(packed, alice)


@pytest.fixture
def trust(tmp_path: Path) -> TrustStore:
    """An empty trust store of this test's own."""
    return TrustStore(tmp_path / "config" / "trust.json")


@pytest.fixture
def trusted(trust: TrustStore, alice: SigningKey) -> TrustStore:
    """The trust store with alice's key trusted as publisher `acme`."""
    trust.add(alice.public, "acme")
    return trust
