"""Installing a capsule artifact into the capsule home: fetch, verify, show, then write.

    fetched = fetch("oci://127.0.0.1:5000/notes:1.0")       # or a .capsule file
    plan = plan_install(fetched, trust, home)                # verified in memory; nothing written yet
    plan.summary()                                           # what the operator approves
    install(plan, trust, lock)                               # namespaces bound, files written, lock recorded

Nothing is unpacked before the signature, the digests and the namespaces
check out (`verify_artifact`). A capsule replaces an installed one of the same
name only when both come from the same publisher key: anything else (a local
folder, another publisher) must be removed first, by the operator.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from astrid.host.identity.artifact import read_file, sha256
from astrid.host.identity.errors import ArtifactError, IdentityError, LockError
from astrid.host.identity.lockfile import Locked, LockFile
from astrid.host.identity.oci import pull
from astrid.host.identity.signing import VerifiedArtifact, VerifiedCapsule, verify_artifact
from astrid.host.identity.trust import TrustStore
from astrid.host.kernel.manifest import MANIFEST_NAME, ManifestError, load_manifest
from astrid.host.kernel.provenance import IDENTITY_FILE

OCI = "oci://"


@dataclass(frozen=True)
class Fetched:
    data: bytes
    source: str  # what the lock records: a file's absolute path, or an OCI reference pinned by digest
    artifact_digest: str  # sha256:<hex> of `data`


def fetch(source: str, *, plain_http: bool = False) -> Fetched:
    """The artifact bytes at `source` (a file, `oci://…:TAG` or `oci://…@sha256:…`), in memory."""
    if source.startswith(OCI):
        pulled = pull(source, plain_http=plain_http)
        return Fetched(pulled.data, str(pulled.ref), pulled.artifact_digest)
    path = Path(source).expanduser()
    data = read_file(path)
    return Fetched(data, str(path.resolve()), f"sha256:{sha256(data)}")


@dataclass(frozen=True)
class Plan:
    verified: VerifiedArtifact
    fetched: Fetched
    target: Path  # the capsule's folder in the capsule home
    replaces: str | None  # the version it upgrades (same publisher key), or None: a new install

    @property
    def capsule(self) -> VerifiedCapsule:
        return self.verified.capsule

    def summary(self) -> list[str]:
        """What the operator approves: who, what, and everything the capsule asks for."""
        capsule = self.capsule
        asks = capsule.capabilities.specs() or ["none"]
        lines = [
            f"capsule     {capsule.name} {capsule.version}" + (f" (replaces {self.replaces})" if self.replaces else ""),
            f"publisher   {_publisher(capsule)}",
            f"digest      {self.fetched.artifact_digest} (component {capsule.digest})",
            f"source      {self.fetched.source}",
            f"namespaces  {', '.join(capsule.namespaces) or 'none'}",
            f"asks for    {', '.join(asks)} (nothing is usable until `astrid capsule grant`)",
            f"publishes   {', '.join(capsule.publish) or 'nothing'}",
            f"subscribes  {', '.join(capsule.subscribe) or 'nothing'}",
            f"installs to {self.target}",
        ]
        if capsule.signed and not capsule.namespaces:
            lines.append("note        it claims no namespace, so as a signed capsule it can serve no resource")
        return lines


def _publisher(capsule: VerifiedCapsule) -> str:
    if capsule.key_fingerprint is None:
        return "UNSIGNED: nobody vouches for this code"
    return f"{capsule.publisher} (key {capsule.key_fingerprint[:16]})"


def plan_install(fetched: Fetched, trust: TrustStore, home: Path, *, allow_unsigned: bool = False) -> Plan:
    """Verify `fetched` (in memory) and decide where it goes; raises an `IdentityError` naming the cause."""
    verified = verify_artifact(fetched.data, trust, allow_unsigned=allow_unsigned, source=fetched.source)
    capsule = verified.capsule
    target = Path(home) / capsule.name
    replaces = None
    if target.exists() or target.is_symlink():
        replaces = _replaceable(target, capsule)
    return Plan(verified, fetched, target, replaces)


def _replaceable(target: Path, capsule: VerifiedCapsule) -> str:
    """The installed version an upgrade replaces; refuses anything not from the same key."""
    remove = f"remove it first (`astrid capsule remove {capsule.name}`) if you mean to replace it"
    try:
        manifest = load_manifest(target)
    except ManifestError:
        raise ArtifactError(f"{target} exists and is not an installed capsule: {remove}") from None
    installed_key = _installed_key(target)
    if installed_key is None:
        raise ArtifactError(f"a capsule named {capsule.name} in {target} is local and unsigned: {remove}")
    if installed_key != capsule.key_fingerprint:
        raise ArtifactError(
            f"{capsule.name} in {target} was installed from another publisher key ({installed_key[:16]}): {remove}"
        )
    return manifest.package.version


def _installed_key(folder: Path) -> str | None:
    import json

    try:
        document = json.loads((folder / IDENTITY_FILE).read_bytes())
        signature = document.get("signature") or {}
        signatures = signature.get("signatures") or [{}]
        key = signatures[0].get("keyid")
    except (OSError, ValueError, AttributeError, IndexError):
        return None
    return key if isinstance(key, str) else None


def install(plan: Plan, trust: TrustStore, lock: LockFile) -> Path:
    """Bind the namespaces, write the capsule into its folder (replacing an upgrade in one rename), record it."""
    capsule = plan.capsule
    if capsule.key_fingerprint is not None and capsule.namespaces:
        trust.claim(capsule.namespaces, capsule.key_fingerprint, capsule=capsule.name)
    staged = plan.target.with_name(f".{plan.target.name}.{secrets.token_hex(6)}.new")
    plan.verified.install(staged)
    old = None
    if plan.replaces is not None:
        old = plan.target.with_name(f".{plan.target.name}.{secrets.token_hex(6)}.old")
        os.rename(plan.target, old)
    try:
        os.rename(staged, plan.target)
    except OSError as exc:
        if old is not None:
            os.rename(old, plan.target)
        shutil.rmtree(staged, ignore_errors=True)
        raise ArtifactError(f"cannot install into {plan.target}: {exc.strerror or exc}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    lock.record(
        Locked(
            name=capsule.name,
            version=capsule.version,
            artifact=plan.fetched.artifact_digest,
            component=capsule.digest,
            publisher=capsule.publisher,
            key=capsule.key_fingerprint,
            source=plan.fetched.source,
        )
    )
    return plan.target


def fetch_locked(entry: Locked, *, plain_http: bool = False) -> Fetched:
    """The locked artifact from its source, refused unless its bytes have the locked digest."""
    fetched = fetch(entry.source, plain_http=plain_http)
    if fetched.artifact_digest != entry.artifact:
        raise LockError(
            f"{entry.name}: {entry.source} now holds other bytes ({fetched.artifact_digest}) than the lock file "
            f"pins ({entry.artifact}); nothing installed. Install the new ones on purpose with "
            f"`astrid capsule install SOURCE`, or restore the locked artifact"
        )
    return fetched


def installed_component(folder: Path) -> str | None:
    """`sha256:<hex>` of the component an install put in `folder` (from its identity.json), if any."""
    import json

    try:
        document = json.loads((folder / IDENTITY_FILE).read_bytes())
        return f"sha256:{document['metadata']['component']['sha256']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_installed(home: Path, name: str, lock: LockFile) -> Path:
    """Take capsule `name` out of the capsule home and the lock file (its namespaces stay its publisher's)."""
    folder = Path(home) / name
    if not (folder / MANIFEST_NAME).is_file():
        raise IdentityError(f"no capsule named {name} in {home} (`astrid capsule list` shows what is installed)")
    trash = folder.with_name(f".{name}.{secrets.token_hex(6)}.removed")
    os.rename(folder, trash)  # gone from the capsule home in one step, then deleted
    shutil.rmtree(trash, ignore_errors=True)
    lock.forget(name)
    return folder
