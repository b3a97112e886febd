"""Installing a capsule artifact into the capsule home: fetch, verify, show, then write.

    fetched = fetch("oci://127.0.0.1:5000/notes:1.0")       # or a .capsule file
    plan = plan_install(fetched, trust, home, versions)      # verified in memory; nothing written yet
    plan.summary()                                           # what the operator approves
    install(plan, trust, lock, versions)                     # namespaces, version memory, files, lock written

Nothing is unpacked before the signature, the digests and the namespaces
check out (`verify_artifact`). A capsule replaces an installed one of the same
name only when both come from the same publisher key: anything else (a local
folder, another publisher) must be removed first, by the operator.

No silent downgrade (`host/identity/versions.py`): a signed capsule older than
the one installed now, or than the highest one of its publisher ever installed
here, or the same version with other bytes, is refused unless the caller
allows it (`allow_downgrade`, `--allow-downgrade`), and the plan then says so.

`install --locked` (`fetch_locked`, then `plan_install(..., locked=entry)`)
runs nothing the lock entry does not describe: an unsigned entry needs
`allow_unsigned` like any unsigned artifact, and the artifact fetched must be
signed by the entry's key and carry its name, version and component.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from astrid.host.capsule.manifest import MANIFEST_NAME, ManifestError, load_manifest
from astrid.host.capsule.provenance import IDENTITY_FILE
from astrid.host.identity.artifact import read_file, sha256
from astrid.host.identity.errors import ArtifactError, IdentityError, LockError
from astrid.host.identity.keys import short_fingerprint
from astrid.host.identity.lockfile import Locked, LockFile
from astrid.host.identity.oci import pull
from astrid.host.identity.signing import VerifiedArtifact, VerifiedCapsule, verify_artifact
from astrid.host.identity.trust import TrustStore
from astrid.host.identity.versions import Release, VersionMemory, reason_to_refuse, refused

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
    replaces: str | None  # the version installed now that it replaces (same publisher key), or None: a new install
    allow_downgrade: bool = False  # the caller lets an older version (or other bytes of the same one) through
    downgrade: str | None = None  # why it is not an upgrade, when allow_downgrade let it through: shown loudly

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
        if self.downgrade is not None:
            lines.insert(1, f"DOWNGRADE   {self.downgrade} (let through by --allow-downgrade)")
        if capsule.signed and not capsule.namespaces:
            lines.append("note        it claims no namespace, so as a signed capsule it can serve no resource")
        return lines


def _publisher(capsule: VerifiedCapsule) -> str:
    if capsule.key_fingerprint is None:
        return "UNSIGNED: nobody vouches for this code"
    return f"{capsule.publisher} (key {capsule.key_fingerprint[:16]})"


def plan_install(
    fetched: Fetched,
    trust: TrustStore,
    home: Path,
    versions: VersionMemory,
    *,
    allow_unsigned: bool = False,
    allow_downgrade: bool = False,
    locked: Locked | None = None,
) -> Plan:
    """Verify `fetched` (in memory), check it against the lock entry it was fetched for (`locked`) and against
    the versions installed before, and decide where it goes; raises an `IdentityError` naming the cause."""
    verified = verify_artifact(fetched.data, trust, allow_unsigned=allow_unsigned, source=fetched.source)
    capsule = verified.capsule
    if locked is not None:
        check_locked(locked, capsule, fetched.source)
    target = Path(home) / capsule.name
    replaces = None
    if target.exists() or target.is_symlink():
        replaces = _replaceable(target, capsule)
    downgrade = _downgrade(capsule, target if replaces is not None else None, versions)
    if downgrade is not None and not allow_downgrade:
        raise refused(downgrade)
    return Plan(verified, fetched, target, replaces, allow_downgrade, downgrade)


def release_of(capsule: VerifiedCapsule) -> Release:
    return Release(capsule.version, capsule.digest, f"sha256:{capsule.manifest_sha256}")


def _downgrade(capsule: VerifiedCapsule, installed: Path | None, versions: VersionMemory) -> str | None:
    """Why `capsule` is not an upgrade of the one `installed` now (same key) nor of the highest release of its
    publisher installed here before; None when it is (or when it is unsigned: no publisher, nothing to compare)."""
    if capsule.publisher is None:
        return None
    new = release_of(capsule)
    if installed is not None:
        now = _installed_release(installed)
        reason = reason_to_refuse(capsule.name, new, now, "installed now") if now else None
        if reason is not None:
            return reason
    return versions.reason_to_refuse(capsule.publisher, capsule.name, new)


def check_locked(entry: Locked, capsule: VerifiedCapsule, source: str) -> None:
    """The artifact fetched for lock entry `entry` is the capsule the entry describes: signed by its key
    (or unsigned when the entry says so), with its name, version and component. A lock file is a record
    of installs, not a way around them."""
    for what, pinned, found in (
        ("signing key", _key_text(entry.key), _key_text(capsule.key_fingerprint)),
        ("name", entry.name, capsule.name),
        ("version", entry.version, capsule.version),
        ("component", entry.component, capsule.digest),
    ):
        if pinned != found:
            raise LockError(
                f"{entry.name}: the lock file pins {what} {pinned}, but {source} holds {what} {found}; nothing "
                f"installed. Restore the lock entry, or install the artifact on purpose with "
                f"`astrid capsule install {source}`"
            )


def _key_text(fingerprint: str | None) -> str:
    return short_fingerprint(fingerprint) if fingerprint else "none (unsigned)"


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
    try:
        document = _identity(folder)
        signature = document.get("signature") or {}
        signatures = signature.get("signatures") or [{}]
        key = signatures[0].get("keyid")
    except (OSError, ValueError, AttributeError, IndexError, TypeError):
        return None
    return key if isinstance(key, str) else None


def install(plan: Plan, trust: TrustStore, lock: LockFile, versions: VersionMemory) -> Path:
    """Bind the namespaces, remember the version, write the capsule into its folder (replacing an upgrade in
    one rename), record it in the lock file."""
    capsule = plan.capsule
    if capsule.key_fingerprint is not None and capsule.namespaces:
        trust.claim(capsule.namespaces, capsule.key_fingerprint, capsule=capsule.name)
    if capsule.publisher is not None:  # before the files: a crash between never leaves a newer capsule unremembered
        versions.remember(capsule.publisher, capsule.name, release_of(capsule), allow_downgrade=plan.allow_downgrade)
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


def fetch_locked(entry: Locked, *, allow_unsigned: bool = False, plain_http: bool = False) -> Fetched:
    """The locked artifact from its source, refused unless its bytes have the locked digest; an entry
    pinning an unsigned artifact is refused before anything is fetched unless `allow_unsigned`."""
    if entry.key is None and not allow_unsigned:
        raise LockError(
            f'{entry.name}: the lock file pins an unsigned artifact ("key": null), which installs only with '
            "--allow-unsigned, as any unsigned artifact does; nothing installed"
        )
    fetched = fetch(entry.source, plain_http=plain_http)
    if fetched.artifact_digest != entry.artifact:
        raise LockError(
            f"{entry.name}: {entry.source} now holds other bytes ({fetched.artifact_digest}) than the lock file "
            f"pins ({entry.artifact}); nothing installed. Install the new ones on purpose with "
            f"`astrid capsule install SOURCE`, or restore the locked artifact"
        )
    return fetched


def installed_as_locked(folder: Path, entry: Locked) -> bool:
    """Whether `folder` holds what `entry` pins: its version and component, signed by its key (or unsigned).
    The component alone is not enough: two versions may share it and differ in their Capsule.toml."""
    release = _installed_release(folder)
    return (
        release is not None
        and (release.version, release.component) == (entry.version, entry.component)
        and _installed_key(folder) == entry.key
    )


def _installed_release(folder: Path) -> Release | None:
    """The release an install put in `folder`, from its identity.json (digests None when it is damaged)."""
    try:
        metadata = _identity(folder)["metadata"]
        version = metadata["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(version, str):
        return None

    def digest(part: str) -> str | None:
        try:
            return f"sha256:{metadata[part]['sha256']}"
        except (KeyError, TypeError):
            return None

    return Release(version, digest("component"), digest("manifest"))


def _identity(folder: Path) -> dict:
    """The identity.json an install wrote into `folder` (OSError, ValueError or TypeError when it cannot be read)."""
    import json

    document = json.loads((folder / IDENTITY_FILE).read_bytes())
    if not isinstance(document, dict):
        raise TypeError("identity.json is not an object")
    return document


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
