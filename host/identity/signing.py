"""Signing capsule artifacts, and checking who a capsule is: before install and again at load.

The signature is a DSSE envelope (`signature.json` in the artifact) whose
payload is an in-toto Statement v1:

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "<capsule name>", "digest": {"sha256": "<sha256 of metadata.json>"}}],
     "predicateType": PREDICATE_TYPE,
     "predicate": <metadata.json, as JSON>}

signed with the publisher's Ed25519 key (DSSE `keyid` = the key's
fingerprint). metadata.json pins the component and the manifest by sha256, so
one signature covers every byte that runs. Envelope and key handling are
securesystemslib's (`Envelope`, `CryptoSigner`, `SSlibKey`).

`verify_artifact(data, trust)` checks, in memory, in this order: the archive
shape (`read_artifact`); the signature, against trusted keys only; that the
signed statement covers this metadata.json; the component's and manifest's
digests; that the metadata states exactly what Capsule.toml says; and that
the publisher may have the namespaces the capsule claims. Install then writes
the files and `identity.json` (the metadata and the envelope) beside
Capsule.toml; `verify_installed(folder, trust)` re-checks that folder against
the trust store as it is at load time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from astrid.host.capsule.manifest import MANIFEST_NAME, Asks, Manifest
from astrid.host.capsule.provenance import IDENTITY_FILE
from astrid.host.identity.artifact import (
    COMPONENT_ENTRY,
    ENTRY_CAPS,
    MANIFEST_ENTRY,
    Artifact,
    ArtifactError,
    Metadata,
    canonical_json,
    check_against_manifest,
    check_component_header,
    parse_manifest_bytes,
    read_artifact,
    sha256,
)
from astrid.host.identity.errors import SignatureError, UnsignedArtifact, UntrustedKey
from astrid.host.identity.keys import PublicKey, SigningKey, is_fingerprint, short_fingerprint
from astrid.host.identity.trust import TrustStore, trust_add_command

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# a name for our predicate (docs/publishing.md describes it), not a page to fetch
PREDICATE_TYPE = "https://astrid-py.invalid/capsule-metadata/v1"
IDENTITY_FORMAT = 1
MAX_IDENTITY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class VerifiedCapsule:
    """Who a capsule is and what it asks for, once its signature and digests checked out."""

    name: str
    version: str
    publisher: str | None  # None: unsigned, and the caller allowed that
    key_fingerprint: str | None
    component_sha256: str
    manifest_sha256: str
    metadata_sha256: str
    namespaces: tuple[str, ...]
    capabilities: Asks
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    imports: tuple[str, ...]
    # The DSSE envelope (canonical JSON) that says so: what a capsule host shows others (`verify_claim`).
    claim: str | None = field(default=None, repr=False, compare=False)

    @property
    def signed(self) -> bool:
        return self.key_fingerprint is not None

    @property
    def digest(self) -> str:
        """The component's digest as OCI and lock files write it: `sha256:<hex>`."""
        return f"sha256:{self.component_sha256}"

    def signer_text(self) -> str:
        if self.key_fingerprint is None:
            return "unsigned"
        return f"publisher {self.publisher} (key {short_fingerprint(self.key_fingerprint)})"


@dataclass(frozen=True)
class VerifiedArtifact:
    """A verified artifact, still only in memory: who it is, its manifest, and its bytes, ready to install."""

    capsule: VerifiedCapsule
    manifest: Manifest
    metadata: Metadata
    artifact: Artifact = field(repr=False)
    envelope: dict[str, Any] | None = field(default=None, repr=False)

    def identity_json(self) -> bytes:
        """The `identity.json` that install writes beside Capsule.toml (`verify_installed` reads it)."""
        document = {"format": IDENTITY_FORMAT, "metadata": self.metadata.as_json(), "signature": self.envelope}
        return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()

    def install(self, folder: Path) -> Path:
        """Write the capsule into `folder`, which must not exist yet: Capsule.toml, the component under
        the manifest's file name, identity.json. Built in a temp folder beside it, then renamed into place."""
        folder = Path(folder)
        if folder.exists():
            raise ArtifactError(f"{folder} already exists: install into a new folder")
        staging = folder.with_name(f".{folder.name}.{secrets.token_hex(6)}.tmp")
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            staging.mkdir()
            files = {
                MANIFEST_NAME: self.artifact.manifest,
                self.manifest.component_file: self.artifact.component,
                IDENTITY_FILE: self.identity_json(),
            }
            for relative, data in files.items():
                target = staging / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "xb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
            os.rename(staging, folder)
        except OSError as exc:
            raise ArtifactError(f"cannot install into {folder}: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return folder


# -- signing ---------------------------------------------------------------------------------------


def statement(metadata: Metadata, metadata_bytes: bytes) -> dict[str, Any]:
    """The in-toto Statement v1 that a signature covers."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": metadata.name, "digest": {"sha256": sha256(metadata_bytes)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": metadata.as_json(),
    }


def sign_artifact(data: bytes, key: SigningKey, *, replace: bool = False, source: str = "the artifact") -> bytes:
    """`data` with its signature by `key` (an artifact holds one); an artifact signed by another key needs
    `replace`. The artifact is checked first (shape, digests, manifest), so a broken one is never signed.
    `source` names the artifact in errors (a file name, a reference)."""
    artifact = read_artifact(data, source)
    metadata, _ = _check_contents(artifact, source)
    if artifact.signature is not None and not replace:
        keyid = _signer_of(artifact.signature)
        if keyid != key.public.fingerprint:  # the same key signs again: the same signature (Ed25519)
            shown = short_fingerprint(keyid) if keyid else "an unreadable key"
            raise SignatureError(
                f"{source} is already signed by key {shown}: add --replace to sign it with {key.name} instead"
            )
    from securesystemslib.dsse import Envelope  # here: a server that verifies nothing never loads it

    envelope = Envelope(canonical_json(statement(metadata, artifact.metadata)), PAYLOAD_TYPE, {})
    envelope.sign(key.signer)
    signed = artifact.with_signature(canonical_json(envelope.to_dict()))
    return signed.encode()


def _signer_of(signature: bytes) -> str | None:
    try:
        return str(json.loads(signature)["signatures"][0]["keyid"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


# -- verifying --------------------------------------------------------------------------------------


def verify_artifact(
    data: bytes, trust: TrustStore, *, allow_unsigned: bool = False, source: str = "the artifact"
) -> VerifiedArtifact:
    """Check the artifact `data` in memory, before anything is written; raises an `IdentityError` naming the
    cause (`UnsignedArtifact`, `UntrustedKey`, `SignatureError`, `ArtifactError`, `NamespaceTaken`).
    `source` names the artifact in errors (a file name, a reference)."""
    artifact = read_artifact(data, source)
    envelope: dict[str, Any] | None = None
    if artifact.signature is not None:
        envelope = _load_envelope(artifact.signature, source)
    signer = _check_signature(envelope, artifact.metadata, trust, source, allow_unsigned)
    metadata, manifest = _check_contents(artifact, source)
    capsule = _verified(metadata, artifact.metadata, signer, envelope)
    trust.check_claim(capsule.namespaces, capsule.key_fingerprint)
    return VerifiedArtifact(capsule, manifest, metadata, artifact, envelope)


def verify_installed(folder: Path, trust: TrustStore, *, allow_unsigned: bool = False) -> VerifiedCapsule:
    """Re-check an installed capsule folder against its identity.json and the trust store as it is now:
    the signature by a still-trusted key, the digests of Capsule.toml and the component on disk, the
    manifest against the metadata, and the namespaces against the claims of other publishers."""
    folder = Path(folder)
    where = f"capsule folder {folder}"
    manifest_bytes = _read_capped(folder / MANIFEST_NAME, ENTRY_CAPS[MANIFEST_ENTRY], where)
    if manifest_bytes is None:
        raise ArtifactError(f"{where}: no {MANIFEST_NAME}")
    manifest = parse_manifest_bytes(manifest_bytes, str(folder / MANIFEST_NAME))
    component_path = folder / manifest.component_file
    identity = _read_capped(folder / IDENTITY_FILE, MAX_IDENTITY_BYTES, where)
    if identity is None:
        if not allow_unsigned:
            raise UnsignedArtifact(
                f"{where} has no {IDENTITY_FILE}, so nothing says who published it: install it from a signed "
                "artifact, or allow unsigned capsules"
            )
        component_sha256, size = _hash_file(component_path, where)
        metadata = replace(
            Metadata.describe(manifest, manifest_bytes, b""), component_sha256=component_sha256, component_size=size
        )
        capsule = _verified(metadata, metadata.encode(), None, None)
        trust.check_claim(capsule.namespaces, None)
        return capsule
    metadata, envelope = _load_identity(identity, where)
    metadata_bytes = metadata.encode()
    signer = _check_signature(envelope, metadata_bytes, trust, where, allow_unsigned)
    if sha256(manifest_bytes) != metadata.manifest_sha256 or len(manifest_bytes) != metadata.manifest_size:
        raise _changed(where, MANIFEST_NAME)
    check_against_manifest(metadata, manifest, where)
    component_sha256, size = _hash_file(component_path, where)
    if component_sha256 != metadata.component_sha256 or size != metadata.component_size:
        raise _changed(where, manifest.component_file)
    capsule = _verified(metadata, metadata_bytes, signer, envelope)
    trust.check_claim(capsule.namespaces, capsule.key_fingerprint)
    return capsule


MAX_CLAIM_BYTES = 64 * 1024  # a claim is one envelope of one metadata.json: a few KB


def verify_claim(claim: str, source_id: str, trust: TrustStore) -> VerifiedCapsule:
    """Check what another host says of the capsule `source_id` it runs: `claim` is the DSSE envelope of
    its install (`VerifiedCapsule.claim`). It must be signed by a key trusted here, its statement must
    hold well-formed metadata, the source-id must be the one of that metadata's name and component
    (so the claim names this capsule and no other), and its namespaces must be free or its publisher's
    here. Raises an `IdentityError` naming the cause; the host's word alone counts for nothing."""
    from astrid.host.capsule.provenance import source_id_for

    where = f"the claim of capsule {source_id}"
    raw = claim.encode("utf-8")
    if len(raw) > MAX_CLAIM_BYTES:
        raise _bad_signature(where, f"it is over {MAX_CLAIM_BYTES} bytes")
    envelope = _load_envelope(raw, where)
    metadata = _claimed_metadata(envelope, where)
    metadata_bytes = metadata.encode()
    signer = _check_signature(envelope, metadata_bytes, trust, where, allow_unsigned=False)
    if source_id_for(metadata.name, metadata.component_sha256) != source_id:
        raise SignatureError(f"{where}: it is the signature of another capsule ({metadata.name} {metadata.version})")
    capsule = _verified(metadata, metadata_bytes, signer, envelope)
    trust.check_claim(capsule.namespaces, capsule.key_fingerprint)
    return capsule


def _claimed_metadata(envelope: dict[str, Any], where: str) -> Metadata:
    """The metadata an envelope's statement carries (its signature is checked after, against it)."""
    payload = _b64(envelope.get("payload") if isinstance(envelope, dict) else None, where, "the payload")
    try:
        statement = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _bad_signature(where, "the signed payload is not JSON") from None
    if not isinstance(statement, dict):
        raise _bad_signature(where, "the signed payload is not an in-toto Statement")
    return Metadata.from_json(statement.get("predicate"))


def _changed(where: str, name: str) -> ArtifactError:
    return ArtifactError(
        f"{where}: {name} is not the file that was signed (changed after install): install the capsule again"
    )


def _verified(
    metadata: Metadata, metadata_bytes: bytes, signer: tuple[str, PublicKey] | None, envelope: dict[str, Any] | None
) -> VerifiedCapsule:
    return VerifiedCapsule(
        name=metadata.name,
        version=metadata.version,
        publisher=signer[0] if signer else None,
        key_fingerprint=signer[1].fingerprint if signer else None,
        component_sha256=metadata.component_sha256,
        manifest_sha256=metadata.manifest_sha256,
        metadata_sha256=sha256(metadata_bytes),
        namespaces=metadata.namespaces,
        capabilities=metadata.capabilities,
        publish=metadata.publish,
        subscribe=metadata.subscribe,
        imports=metadata.imports,
        claim=canonical_json(envelope).decode() if signer is not None and envelope is not None else None,
    )


def _check_contents(artifact: Artifact, where: str) -> tuple[Metadata, Manifest]:
    """metadata.json is well-formed, pins these component and Capsule.toml bytes, and states what the manifest says."""
    metadata = Metadata.decode(artifact.metadata)
    for entry, data, digest, size in (
        (COMPONENT_ENTRY, artifact.component, metadata.component_sha256, metadata.component_size),
        (MANIFEST_ENTRY, artifact.manifest, metadata.manifest_sha256, metadata.manifest_size),
    ):
        if sha256(data) != digest or len(data) != size:
            raise ArtifactError(f"{where}: {entry} does not match its digest in metadata.json (changed or damaged)")
    check_component_header(artifact.component, f"{where}: {COMPONENT_ENTRY}", "re-pack it from a built capsule")
    manifest = parse_manifest_bytes(artifact.manifest, f"{where}: {MANIFEST_ENTRY}")
    first = Path(manifest.component_file).parts[:1]
    if not first or first[0].lower() in {MANIFEST_NAME.lower(), IDENTITY_FILE.lower()}:
        raise ArtifactError(
            f"{where}: the component file {manifest.component_file!r} of its Capsule.toml would overwrite "
            f"{MANIFEST_NAME} or {IDENTITY_FILE}: name it NAME.wasm and pack again"
        )
    check_against_manifest(metadata, manifest, where)
    return metadata, manifest


def _bad_signature(where: str, why: str) -> SignatureError:
    return SignatureError(f"{where}: the signature is malformed ({why}); sign it again with `astrid capsule sign`")


def _load_envelope(raw: bytes, where: str) -> dict[str, Any]:
    try:
        envelope = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _bad_signature(where, "signature.json is not JSON") from None
    if canonical_json(envelope) != raw:
        raise _bad_signature(where, "signature.json is not in canonical form")
    return envelope


def _b64(text: Any, where: str, what: str) -> bytes:
    """Strict standard base64: the one spelling of its bytes (no spare bits, no stray characters)."""
    if not isinstance(text, str):
        raise _bad_signature(where, f"{what} is not a string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _bad_signature(where, f"{what} is not base64") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise _bad_signature(where, f"{what} is not canonical base64")
    return raw


def _check_signature(
    envelope: dict[str, Any] | None, metadata_bytes: bytes, trust: TrustStore, where: str, allow_unsigned: bool
) -> tuple[str, PublicKey] | None:
    """(publisher, key) of a valid signature over `metadata_bytes` by a trusted key; None when unsigned and allowed."""
    if envelope is None:
        if allow_unsigned:
            return None
        raise UnsignedArtifact(
            f"{where} is not signed: ask its publisher for a signed one (`astrid capsule sign`), or take it "
            "unsigned with --allow-unsigned (then nothing says who wrote it)"
        )
    if not isinstance(envelope, dict) or set(envelope) != {"payload", "payloadType", "signatures"}:
        raise _bad_signature(where, "not a DSSE envelope of payload, payloadType and signatures")
    if envelope["payloadType"] != PAYLOAD_TYPE:
        raise _bad_signature(where, f"payloadType is not {PAYLOAD_TYPE}")
    signatures = envelope["signatures"]
    if not isinstance(signatures, list) or len(signatures) != 1:
        raise _bad_signature(where, "it must hold exactly one signature")
    [signature] = signatures
    if not isinstance(signature, dict) or set(signature) != {"keyid", "sig"}:
        raise _bad_signature(where, "a signature is {keyid, sig}")
    keyid = signature["keyid"]
    if not isinstance(keyid, str) or not is_fingerprint(keyid):
        raise _bad_signature(where, "the keyid is not a key fingerprint")
    payload = _b64(envelope["payload"], where, "the payload")
    _b64(signature["sig"], where, "the signature")
    sig = {"keyid": keyid, "sig": signature["sig"]}  # a copy: the library rewrites the dict it reads
    found = trust.trusted(keyid)
    if found is None:
        raise UntrustedKey(
            keyid,
            f"{where} is signed by key {keyid}, which you do not trust: if it is its publisher's key (compare the "
            f"fingerprint with theirs), run `{trust_add_command()}` with their public key",
        )
    publisher, key = found
    from securesystemslib import exceptions as sslib_errors
    from securesystemslib.dsse import Envelope

    try:
        dsse = Envelope.from_dict({"payload": envelope["payload"], "payloadType": PAYLOAD_TYPE, "signatures": [sig]})
        dsse.verify([key.sslib_key()], 1)
    except (sslib_errors.VerificationError, sslib_errors.FormatError, ValueError, KeyError):
        raise SignatureError(
            f"{where}: the signature by publisher {publisher} (key {key.short}) does not verify: it was changed "
            "after signing, or is damaged; get it again"
        ) from None
    _check_statement(payload, metadata_bytes, where)
    return publisher, key


def _check_statement(payload: bytes, metadata_bytes: bytes, where: str) -> None:
    try:
        signed = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _bad_signature(where, "the signed payload is not JSON") from None
    try:
        metadata_json = json.loads(metadata_bytes)
    except ValueError:
        metadata_json = None
    expected_digest = hashlib.sha256(metadata_bytes).hexdigest()
    if (
        not isinstance(signed, dict)
        or signed.get("_type") != STATEMENT_TYPE
        or signed.get("predicateType") != PREDICATE_TYPE
        or set(signed) != {"_type", "subject", "predicateType", "predicate"}
    ):
        raise _bad_signature(where, f"the signed payload is not an in-toto Statement v1 of {PREDICATE_TYPE}")
    subject = signed["subject"]
    name = metadata_json.get("name") if isinstance(metadata_json, dict) else None
    if subject != [{"name": name, "digest": {"sha256": expected_digest}}] or signed["predicate"] != metadata_json:
        raise SignatureError(
            f"{where}: metadata.json is not what was signed (its digest or content differs from the signed "
            "statement): it was changed after signing; get it again"
        )


def _load_identity(raw: bytes, where: str) -> tuple[Metadata, dict[str, Any] | None]:
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        document = None
    if (
        not isinstance(document, dict)
        or set(document) != {"format", "metadata", "signature"}
        or document["format"] != IDENTITY_FORMAT
    ):
        raise ArtifactError(f"{where}: {IDENTITY_FILE} is damaged or not one astrid wrote: install the capsule again")
    envelope = document["signature"]
    if envelope is not None and not isinstance(envelope, dict):
        raise ArtifactError(f"{where}: {IDENTITY_FILE} has a malformed signature: install the capsule again")
    return Metadata.from_json(document["metadata"]), envelope


def _read_capped(path: Path, cap: int, where: str) -> bytes | None:
    try:
        with path.open("rb") as source:
            data = source.read(cap + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ArtifactError(f"{where}: cannot read {path.name}: {exc.strerror or exc}") from None
    if len(data) > cap:
        raise ArtifactError(f"{where}: {path.name} is over its {cap}-byte cap")
    return data


def _hash_file(path: Path, where: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as source:
            while chunk := source.read(1024 * 1024):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise ArtifactError(f"{where}: the component {path.name} is missing: install the capsule again") from None
    except OSError as exc:
        raise ArtifactError(f"{where}: cannot read {path.name}: {exc.strerror or exc}") from None
    return digest.hexdigest(), size
