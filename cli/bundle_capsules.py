"""The capsules of an `astrid mcp bundle`: found from what the user names, copied into the bundle's folder.

A CAPSULE is named as elsewhere in astrid: a capsule folder (or its
Capsule.toml, or a folder of capsule folders, as `mcp serve --capsules`
takes), a signed artifact file (`NAME-VERSION.capsule`, as `capsule pack`
writes and `capsule install` takes), or the name of a capsule installed in
the capsule home. Each lands in `capsules/NAME/` of the bundle:

- a local folder as its Capsule.toml and built component only (no sources);
- an artifact verified against the user's trusted publishers, then written
  out as `capsule install` writes it (with identity.json, so the bundle's
  server verifies it again at every load);
- an installed capsule as installed (verified here first when signed).

A signed capsule's publisher key and namespaces go into the bundle too
(`Publisher`), so the bundle's server can verify it without the user's trust
store.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from astrid.cli.errors import UserError
from astrid.cli.trust_options import trust_store

MANIFEST = "Capsule.toml"
ARTIFACT_SUFFIX = ".capsule"


@dataclass(frozen=True)
class Publisher:
    """Who signed a bundled capsule: the key the bundle's server trusts, and the namespaces it claims."""

    name: str
    key: str  # the public key as `astrid trust add` takes it
    fingerprint: str
    namespaces: tuple[str, ...]


@dataclass
class BundledCapsule:
    name: str
    version: str
    description: str
    folder: Path  # its folder inside the bundle
    asks: object  # astrid.host.capabilities.asks.Asks: what its manifest asks for
    publisher: Publisher | None = None  # None: unsigned (a local folder)
    source: str = ""  # what the user named, for messages

    def signer_text(self) -> str:
        if self.publisher is None:
            return "unsigned, local"
        return f"signed by {self.publisher.name}, key {self.publisher.fingerprint[:16]}"


@dataclass
class Collected:
    capsules: list[BundledCapsule] = field(default_factory=list)

    def add(self, capsule: BundledCapsule) -> None:
        for other in self.capsules:
            if other.name == capsule.name:
                raise UserError(
                    f"two capsules are named {capsule.name} ({other.source} and {capsule.source}): "
                    "a bundle serves one capsule of each name, so leave one out"
                )
        self.capsules.append(capsule)


def collect(sources: tuple[str, ...], target: Path, trust_file: Path | None, say) -> list[BundledCapsule]:
    """Copy every named capsule into `target` (`capsules/` of the bundle being made)."""
    collected = Collected()
    for source in sources:
        path = Path(source).expanduser()
        if path.is_file() and path.suffix == ARTIFACT_SUFFIX:
            collected.add(_from_artifact(path, source, target, trust_file, say))
        elif path.is_file() and path.name == MANIFEST:
            collected.add(_from_folder(path.parent, source, target, trust_file, say))
        elif path.is_dir():
            for folder in _capsule_folders(path, source):
                collected.add(_from_folder(folder, source, target, trust_file, say))
        elif path.exists():
            raise UserError(
                f"{source}: not a capsule: give a capsule folder, a signed artifact ({ARTIFACT_SUFFIX} file) "
                "or the name of an installed capsule"
            )
        elif "/" in source or "\\" in source or source.endswith(ARTIFACT_SUFFIX):
            raise UserError(f"{source}: no such file or folder")
        else:
            collected.add(_installed(source, target, trust_file, say))
    if not collected.capsules:
        raise UserError("no capsule to bundle: name at least one (a folder, a .capsule file or an installed name)")
    return collected.capsules


def _capsule_folders(path: Path, source: str) -> list[Path]:
    if (path / MANIFEST).is_file():
        return [path]
    folders = sorted(child for child in path.iterdir() if (child / MANIFEST).is_file())
    if not folders:
        raise UserError(
            f"{source}: no capsule there (no {MANIFEST} in it nor in its subfolders); "
            f"create one with `astrid capsule new NAME`"
        )
    return folders


def _manifest(folder: Path, source: str):
    from astrid.host.capsule.manifest import ManifestError, load_manifest

    try:
        return load_manifest(folder)
    except ManifestError as exc:
        raise UserError(f"{source}: {exc}") from None


def _from_folder(folder: Path, source: str, target: Path, trust_file: Path | None, say) -> BundledCapsule:
    """A local capsule: its manifest and its built component, checked built and up to date."""
    from astrid.host.capsule.discovery import stale_component
    from astrid.host.capsule.provenance import IDENTITY_FILE

    if (folder / IDENTITY_FILE).exists():  # an installed capsule named by its folder
        return _installed_folder(folder, source, target, trust_file, say)
    manifest = _manifest(folder, source)
    component = folder / manifest.component_file
    if not component.is_file():
        raise UserError(
            f"{source}: capsule {manifest.name} is not built ({manifest.component_file} is missing): "
            f"run `astrid capsule build {folder}` first"
        )
    if why := stale_component(folder, manifest):
        raise UserError(f"{source}: {why}")
    into = target / manifest.name
    (into / manifest.component_file).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / MANIFEST, into / MANIFEST)
    shutil.copyfile(component, into / manifest.component_file)
    say(f"bundling {manifest.name} {manifest.package.version} from {folder} (local, unsigned)")
    return BundledCapsule(
        manifest.name,
        manifest.package.version,
        manifest.package.description or "",
        into,
        manifest.capabilities,
        None,
        source,
    )


def _publisher(verified, trust) -> Publisher | None:
    if verified.key_fingerprint is None:
        return None
    trusted = trust.trusted(verified.key_fingerprint)
    if trusted is None:  # pragma: no cover - verification above needs a trusted key
        raise UserError(f"{verified.name}: its key is not trusted any more")
    name, key = trusted
    return Publisher(name, key.text, verified.key_fingerprint, tuple(verified.namespaces))


def _from_artifact(path: Path, source: str, target: Path, trust_file: Path | None, say) -> BundledCapsule:
    """A signed artifact: verified against the user's trusted publishers, then written out as an install."""
    from astrid.host.errors import AstridError
    from astrid.host.identity.artifact import read_file
    from astrid.host.identity.signing import verify_artifact

    trust = trust_store(trust_file)
    try:
        verified = verify_artifact(read_file(path), trust, source=str(path))
    except AstridError as exc:
        raise UserError(f"{source}: {exc}") from None
    capsule = verified.capsule
    into = target / capsule.name
    if into.exists():
        raise UserError(f"two capsules are named {capsule.name}: a bundle serves one capsule of each name")
    verified.install(into)
    say(f"bundling {capsule.name} {capsule.version} from {path} ({capsule.signer_text()}, verified)")
    return _bundled_installed(into, source, _publisher(capsule, trust))


def _installed(name: str, target: Path, trust_file: Path | None, say) -> BundledCapsule:
    from astrid.host.settings import default_capsule_home

    folder = default_capsule_home() / name
    if not (folder / MANIFEST).is_file():
        raise UserError(
            f"{name}: no such capsule folder, artifact or installed capsule (not in the capsule home "
            f"{default_capsule_home()}): give a folder path, a {ARTIFACT_SUFFIX} file, or install it first"
        )
    return _installed_folder(folder, name, target, trust_file, say)


def _installed_folder(folder: Path, source: str, target: Path, trust_file: Path | None, say) -> BundledCapsule:
    """An installed capsule: verified as a load would verify it, then copied as it is."""
    from astrid.host.errors import AstridError
    from astrid.host.identity.signing import verify_installed

    trust = trust_store(trust_file)
    try:
        verified = verify_installed(folder, trust, allow_unsigned=True)
    except AstridError as exc:
        raise UserError(f"{source}: {exc}") from None
    into = target / verified.name
    if into.exists():
        raise UserError(f"two capsules are named {verified.name}: a bundle serves one capsule of each name")
    shutil.copytree(folder, into, symlinks=False)
    say(f"bundling {verified.name} {verified.version} installed at {folder} ({verified.signer_text()}, verified)")
    return _bundled_installed(into, source, _publisher(verified, trust))


def _bundled_installed(into: Path, source: str, publisher: Publisher | None) -> BundledCapsule:
    manifest = _manifest(into, source)
    return BundledCapsule(
        manifest.name,
        manifest.package.version,
        manifest.package.description or "",
        into,
        manifest.capabilities,
        publisher,
        source,
    )
