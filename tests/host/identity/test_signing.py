"""Signing artifacts (DSSE + in-toto Statement v1) and verifying them: in memory before install, on disk at load."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope

from astrid.host.capabilities.asks import Asks
from astrid.host.errors import IdentityError
from astrid.host.identity.artifact import Artifact, ArtifactError, Metadata, canonical_json, read_artifact
from astrid.host.identity.errors import NamespaceTaken, SignatureError, UnsignedArtifact, UntrustedKey
from astrid.host.identity.keys import SigningKey
from astrid.host.identity.signing import (
    IDENTITY_FILE,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    VerifiedArtifact,
    sign_artifact,
    statement,
    verify_artifact,
    verify_installed,
)
from astrid.host.identity.trust import TrustStore


def test_a_signed_artifact_verifies_against_the_trusted_key(signed: bytes, trusted: TrustStore, alice) -> None:
    verified = verify_artifact(signed, trusted)
    capsule = verified.capsule
    assert (capsule.name, capsule.version, capsule.publisher) == ("notes", "1.2.0", "acme")
    assert capsule.key_fingerprint == alice.public.fingerprint and capsule.signed
    metadata = Metadata.decode(read_artifact(signed).metadata)
    assert capsule.digest == f"sha256:{metadata.component_sha256}"
    assert capsule.namespaces == ("astrid://notes-extra/", "astrid://notes/")
    assert capsule.capabilities.specs() == ["fs:notes", "kv", "http:api.example.com"]
    assert capsule.publish == ("resource.v1.response.read.*",) and capsule.subscribe == ("resource.v1.request.read",)
    assert "astrid:ipc@1.0.0" in capsule.imports
    assert verified.manifest.name == "notes" and verified.artifact.component == read_artifact(signed).component


def test_the_signature_is_a_dsse_envelope_over_an_in_toto_statement(signed: bytes, alice: SigningKey) -> None:
    read = read_artifact(signed)
    assert read.signature is not None
    envelope = Envelope.from_dict(json.loads(read.signature))
    assert envelope.payload_type == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    envelope.verify([alice.public.sslib_key()], 1)  # any DSSE verifier with the key agrees
    claim = json.loads(envelope.payload)
    assert claim["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert claim["predicateType"] == PREDICATE_TYPE
    metadata = Metadata.decode(read.metadata)
    assert claim == statement(metadata, read.metadata)
    assert claim["subject"][0]["digest"]["sha256"] == hashlib.sha256(read.metadata).hexdigest()
    assert list(envelope.signatures) == [alice.public.fingerprint]


def test_unsigned_is_its_own_error_unless_allowed(packed: bytes, trust: TrustStore) -> None:
    with pytest.raises(UnsignedArtifact, match="is not signed"):
        verify_artifact(packed, trust)
    capsule = verify_artifact(packed, trust, allow_unsigned=True).capsule
    assert capsule.publisher is None and capsule.key_fingerprint is None and not capsule.signed


def test_an_untrusted_key_is_named_with_the_fix(signed: bytes, trust: TrustStore, alice: SigningKey, mallory) -> None:
    trust.add(mallory.public, "someone-else")
    with pytest.raises(UntrustedKey) as caught:
        verify_artifact(signed, trust)
    message = str(caught.value)
    assert caught.value.fingerprint == alice.public.fingerprint
    assert alice.public.fingerprint in message and "astrid trust add PUBKEY --publisher NAME" in message
    with pytest.raises(UntrustedKey):  # unsigned allowed does not mean any signer allowed
        verify_artifact(signed, trust, allow_unsigned=True)


def test_a_flipped_byte_anywhere_is_refused_with_one_line(signed: bytes, trusted: TrustStore) -> None:
    for index in range(len(signed)):
        damaged = bytearray(signed)
        damaged[index] ^= 0xFF
        with pytest.raises(IdentityError) as caught:
            verify_artifact(bytes(damaged), trusted)
        assert "\n" not in str(caught.value)


def repack(signed: bytes, **changes: bytes) -> bytes:
    """The artifact with some entries replaced, framed validly again (what an attacker can do)."""
    read = read_artifact(signed)
    return replace(read, **changes).encode()


def flip(data: bytes, index: int) -> bytes:
    changed = bytearray(data)
    changed[index] ^= 0x01
    return bytes(changed)


def test_a_changed_part_is_refused_naming_it(signed: bytes, trusted: TrustStore) -> None:
    read = read_artifact(signed)
    assert read.signature is not None
    envelope = json.loads(read.signature)
    sig = envelope["signatures"][0]
    other_sig = {**sig, "sig": sig["sig"][:10] + ("A" if sig["sig"][10] != "A" else "B") + sig["sig"][11:]}
    other_payload = dict(envelope, payload=envelope["payload"][:-8] + "AAAAAAA=")
    cases = [
        ({"component": flip(read.component, len(read.component) // 2)}, ArtifactError, "component.wasm does not match"),
        ({"manifest": read.manifest.replace(b"1.2.0", b"1.2.1")}, ArtifactError, "Capsule.toml does not match"),
        ({"metadata": flip(read.metadata, 20)}, SignatureError, "metadata.json is not what was signed"),
        (
            {"signature": canonical_json(dict(envelope, signatures=[other_sig]))},
            SignatureError,
            "by publisher acme .* does not verify",
        ),
        ({"signature": canonical_json(other_payload)}, SignatureError, "malformed|does not verify"),
        ({"signature": read.signature + b" "}, SignatureError, "not in canonical form"),
        ({"signature": b"{}"}, SignatureError, "not a DSSE envelope"),
        (
            {"signature": canonical_json(dict(envelope, signatures=[sig, sig]))},
            SignatureError,
            "exactly one signature",
        ),
    ]
    for change, error, message in cases:
        with pytest.raises(error, match=message) as caught:
            verify_artifact(repack(signed, **change), trusted)
        assert "\n" not in str(caught.value)


def sign_raw(artifact: Artifact, key: SigningKey) -> bytes:
    """Sign whatever metadata the artifact holds, skipping the checks `sign_artifact` makes first."""
    metadata = Metadata.decode(artifact.metadata)
    envelope = Envelope(canonical_json(statement(metadata, artifact.metadata)), PAYLOAD_TYPE, {})
    envelope.sign(key.signer)
    return artifact.with_signature(canonical_json(envelope.to_dict())).encode()


def test_metadata_claiming_less_than_the_manifest_is_refused(packed: bytes, trusted: TrustStore, alice) -> None:
    read = read_artifact(packed)
    metadata = Metadata.decode(read.metadata)
    fewer = replace(metadata, capabilities=Asks.parse({"fs": ["notes"]}))
    lying = Artifact(read.manifest, read.component, fewer.encode())
    with pytest.raises(ArtifactError, match="metadata.json claims less than its Capsule.toml on capabilities"):
        sign_artifact(lying.encode(), alice)  # never signed in the first place
    with pytest.raises(ArtifactError, match=r"claims less than its Capsule.toml on capabilities \(metadata: fs:notes"):
        verify_artifact(sign_raw(lying, alice), trusted)
    for smaller_metadata in [
        replace(metadata, namespaces=("astrid://notes/",)),
        replace(metadata, publish=()),
        replace(metadata, subscribe=()),
    ]:
        smaller = Artifact(read.manifest, read.component, smaller_metadata.encode())
        with pytest.raises(ArtifactError, match="claims less than its Capsule.toml"):
            verify_artifact(sign_raw(smaller, alice), trusted)
    renamed = Artifact(read.manifest, read.component, replace(metadata, name="other").encode())
    with pytest.raises(ArtifactError, match="does not match its Capsule.toml on the name"):
        verify_artifact(sign_raw(renamed, alice), trusted)


def test_signing_again_needs_replace_for_another_key(signed: bytes, alice, mallory, trust: TrustStore) -> None:
    assert sign_artifact(signed, alice) == signed  # Ed25519 signatures are deterministic
    with pytest.raises(SignatureError, match="already signed by key .* add --replace"):
        sign_artifact(signed, mallory)
    trust.add(mallory.public, "mallory")
    assert verify_artifact(sign_artifact(signed, mallory, replace=True), trust).capsule.publisher == "mallory"


def test_namespaces_of_another_publisher_are_refused_before_install(
    signed: bytes, trusted: TrustStore, mallory: SigningKey
) -> None:
    trusted.add(mallory.public, "evil")
    trusted.claim(["astrid://notes/"], mallory.public.fingerprint, capsule="squatter")
    with pytest.raises(NamespaceTaken, match="belongs to publisher 'evil'") as caught:
        verify_artifact(signed, trusted)
    assert caught.value.owner == "evil"


def test_reading_and_verifying_write_nothing(signed: bytes, trusted: TrustStore, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    verify_artifact(signed, trusted)
    with pytest.raises(IdentityError):
        verify_artifact(flip(signed, 100), trusted)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# -- installed folders, at load time ------------------------------------------------------------


@pytest.fixture
def installed(signed: bytes, trusted: TrustStore, tmp_path: Path) -> Path:
    verified: VerifiedArtifact = verify_artifact(signed, trusted)
    trusted.claim(verified.capsule.namespaces, verified.capsule.key_fingerprint or "", capsule="notes")
    return verified.install(tmp_path / "home" / "notes")


def test_install_writes_the_capsule_and_its_identity(installed: Path, trusted: TrustStore, signed: bytes) -> None:
    assert sorted(p.name for p in installed.iterdir()) == ["Capsule.toml", IDENTITY_FILE, "notes.wasm"]
    read = read_artifact(signed)
    assert (installed / "notes.wasm").read_bytes() == read.component
    identity = json.loads((installed / IDENTITY_FILE).read_text())
    assert set(identity) == {"format", "metadata", "signature"}
    assert identity["signature"] == json.loads(read.signature or b"")
    capsule = verify_installed(installed, trusted)
    assert capsule == verify_artifact(signed, trusted).capsule
    assert [p.name for p in installed.parent.iterdir()] == ["notes"]  # no staging folder left
    with pytest.raises(ArtifactError, match="already exists"):
        verify_artifact(signed, trusted).install(installed)


def test_a_file_changed_after_install_is_refused_at_load(installed: Path, trusted: TrustStore) -> None:
    component = installed / "notes.wasm"
    original = component.read_bytes()
    component.write_bytes(flip(original, 40))
    with pytest.raises(ArtifactError, match="notes.wasm is not the file that was signed"):
        verify_installed(installed, trusted)
    component.write_bytes(original)
    manifest = installed / "Capsule.toml"
    manifest.write_text(manifest.read_text().replace("kv = true", "kv = false"))
    with pytest.raises(ArtifactError, match="Capsule.toml is not the file that was signed"):
        verify_installed(installed, trusted)


def test_a_damaged_identity_file_is_refused(installed: Path, trusted: TrustStore) -> None:
    identity = installed / IDENTITY_FILE
    document = json.loads(identity.read_text())
    document["metadata"]["capabilities"]["kv"] = False  # claim less than was signed
    identity.write_text(json.dumps(document))
    with pytest.raises(SignatureError, match="metadata.json is not what was signed"):
        verify_installed(installed, trusted)
    identity.write_text("{")
    with pytest.raises(ArtifactError, match="identity.json is damaged"):
        verify_installed(installed, trusted)


def test_trust_is_checked_again_at_load(
    installed: Path, trusted: TrustStore, alice: SigningKey, mallory: SigningKey
) -> None:
    trusted.remove("acme")
    with pytest.raises(UntrustedKey):
        verify_installed(installed, trusted)
    trusted.remove("acme", release=True)
    trusted.add(mallory.public, "evil")
    trusted.claim(["astrid://notes/"], mallory.public.fingerprint)
    trusted.add(alice.public, "acme")
    with pytest.raises(NamespaceTaken, match="belongs to publisher 'evil'"):
        verify_installed(installed, trusted)


def test_an_unsigned_folder_needs_allow_unsigned(capsule: Path, trust: TrustStore, component: bytes) -> None:
    with pytest.raises(UnsignedArtifact, match="has no identity.json"):
        verify_installed(capsule, trust)
    found = verify_installed(capsule, trust, allow_unsigned=True)
    assert found.publisher is None and found.namespaces == ("astrid://notes-extra/", "astrid://notes/")
    assert found.component_sha256 == hashlib.sha256(component).hexdigest()


def test_an_installed_unsigned_artifact_is_unsigned_at_load(packed: bytes, trust: TrustStore, tmp_path: Path) -> None:
    folder = verify_artifact(packed, trust, allow_unsigned=True).install(tmp_path / "notes")
    assert json.loads((folder / IDENTITY_FILE).read_text())["signature"] is None
    with pytest.raises(UnsignedArtifact):
        verify_installed(folder, trust)
    assert verify_installed(folder, trust, allow_unsigned=True).publisher is None
    os.remove(folder / "notes.wasm")
    with pytest.raises(ArtifactError, match="the component notes.wasm is missing"):
        verify_installed(folder, trust, allow_unsigned=True)


def test_a_component_file_name_that_would_overwrite_the_manifest_is_refused(
    packed: bytes, trusted: TrustStore, alice: SigningKey
) -> None:
    read = read_artifact(packed)
    for name in ["Capsule.toml", "identity.json", "IDENTITY.json/x.wasm"]:
        manifest = read.manifest.replace(b'file = "notes.wasm"', f'file = "{name}"'.encode())
        digest = hashlib.sha256(manifest).hexdigest()
        metadata = replace(Metadata.decode(read.metadata), manifest_sha256=digest, manifest_size=len(manifest))
        artifact = Artifact(manifest, read.component, metadata.encode())
        with pytest.raises(ArtifactError, match="would overwrite Capsule.toml or identity.json"):
            verify_artifact(sign_raw(artifact, alice), trusted)
