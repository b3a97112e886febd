"""Who a capsule folder is, at load, and which URIs that lets it serve.

`vetter(trust)` is the kernel's `Vet`: before a capsule is compiled, a folder
with `identity.json` (an install) is checked against it and the trust store
(`verify_installed`: a still-trusted key, the files on disk as signed, no
namespace another publisher owns); a folder without one is local and
unsigned, as every capsule under development is, and may claim no namespace
a trusted publisher owns.

`NamespaceAuthority` is the broker's `UriAuthority`: a signed capsule serves
only inside the namespaces it claims (its publisher owns them: install bound
them, load re-checked them); an unsigned capsule, or one the kernel does not
know (on another NATS host), serves only outside every owned namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from astrid.host.identity.trust import TrustStore
from astrid.host.kernel.manifest import load_manifest
from astrid.host.kernel.provenance import IDENTITY_FILE, Provenance, Vet


def vetter(trust: TrustStore) -> Vet:
    def vet(folder: Path) -> Provenance:
        if not (Path(folder) / IDENTITY_FILE).exists():
            namespaces = tuple(load_manifest(folder).package.namespaces)
            trust.check_claim(namespaces, None)  # an unsigned folder owns nothing
            return Provenance(namespaces=namespaces)
        from astrid.host.identity.signing import verify_installed  # here: only an installed capsule loads it

        capsule = verify_installed(folder, trust, allow_unsigned=True)  # installed with --allow-unsigned: no key
        return Provenance(
            publisher=capsule.publisher,
            key_fingerprint=capsule.key_fingerprint,
            namespaces=capsule.namespaces,
            component_sha256=capsule.component_sha256,
        )

    return vet


class NamespaceAuthority:
    def __init__(self, trust: TrustStore, provenance_of: Callable[[str], Provenance | None]) -> None:
        self.trust = trust
        self.provenance_of = provenance_of

    def may_serve(self, source_id: str, uri: str) -> bool:
        provenance = self.provenance_of(source_id)
        if provenance is not None and provenance.signed:
            return any(uri.startswith(namespace) for namespace in provenance.namespaces)
        return self.trust.owner_of(uri) is None

    def may_cover(self, source_id: str, prefix: str) -> bool:
        provenance = self.provenance_of(source_id)
        if provenance is not None and provenance.signed:
            return any(prefix.startswith(namespace) for namespace in provenance.namespaces)
        # A template's URIs are its literal prefix and more: none of them may reach an owned namespace.
        return not any(
            prefix.startswith(claim.namespace) or claim.namespace.startswith(prefix)
            for claim in self.trust.namespaces()
        )
