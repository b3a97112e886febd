"""Who a capsule folder is, at load, and which URIs that lets it serve.

`vetter(trust)` is the kernel's `Vet`: before a capsule is compiled, a folder
with `identity.json` (an install) is checked against it and the trust store
(`verify_installed`: a still-trusted key, the files on disk as signed, no
namespace another publisher owns); a folder without one is local and
unsigned, as every capsule under development is, and may claim no namespace
a trusted publisher owns.

`NamespaceAuthority` is the broker's `UriAuthority`: a signed capsule serves
only inside the namespaces it claims (its publisher owns them: install bound
them, load re-checked them); an unsigned capsule serves only outside every
owned namespace.

A capsule on another host (a `--workers` worker, an `astrid host run` over
NATS) is whoever its host's claim proves it is (`ClaimedIdentities`): the host
sends the signature record of each capsule it runs, and this process checks it
against its own trust store (`verify_claim`). A capsule with no claim, or a
claim that does not verify here, is local and unsigned: one trust decision,
whichever process runs the capsule.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from astrid.host.bounded_lru import BoundedLru
from astrid.host.capsule.manifest import load_manifest
from astrid.host.capsule.provenance import IDENTITY_FILE, LOCAL, Provenance, Vet
from astrid.host.identity.trust import TrustStore

log = logging.getLogger(__name__)

# Other hosts' capsules whose claims stay checked (a rebuild is a new source-id; the oldest go first).
MAX_CHECKED_SOURCES = 4096
MAX_CHECKED_CLAIM_BYTES = 32 * 1024 * 1024


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
            claim=capsule.claim,
        )

    return vet


class ClaimedIdentities:
    """Who each capsule is, for the broker: a capsule of this process by its load (`local`), one of
    another host by that host's claims (`claims_of`: the signature records its hosts announce),
    verified here against this process's trust store and remembered until the claims or the trust
    store change."""

    def __init__(
        self,
        trust: TrustStore,
        local: Callable[[str], Provenance | None],
        claims_of: Callable[[str], tuple[str, ...]],
    ) -> None:
        self.trust = trust
        self.local = local
        self.claims_of = claims_of
        # source-id -> (the claims checked, the trust store's signature then, what they proved)
        self._checked: BoundedLru[str, tuple[tuple[str, ...], object, Provenance]] = BoundedLru(
            MAX_CHECKED_SOURCES, MAX_CHECKED_CLAIM_BYTES
        )
        self._lock = threading.Lock()

    def __call__(self, source_id: str) -> Provenance | None:
        found = self.local(source_id)
        if found is not None:
            return found
        claims = self.claims_of(source_id)
        if not claims:
            return None  # no host claims anything for it: unsigned
        epoch = self.trust.signature()
        with self._lock:
            checked = self._checked.get(source_id)
        if checked is not None and checked[0] == claims and checked[1] == epoch:
            return checked[2]
        provenance = self._verify(source_id, claims)
        with self._lock:
            self._checked.put(source_id, (claims, epoch, provenance), sum(len(claim) for claim in claims))
        return provenance

    def _verify(self, source_id: str, claims: tuple[str, ...]) -> Provenance:
        """The provenance all of `claims` prove (replicas announce the same one), else unsigned."""
        from astrid.host.errors import AstridError
        from astrid.host.identity.signing import verify_claim  # here: a process with no remote claims never loads it

        proven: set[Provenance] = set()
        for claim in claims:
            try:
                capsule = verify_claim(claim, source_id, self.trust)
            except AstridError as exc:
                log.warning("capsule %s on another host is served as local, unsigned: %s", source_id, exc)
                return LOCAL
            proven.add(
                Provenance(
                    publisher=capsule.publisher,
                    key_fingerprint=capsule.key_fingerprint,
                    namespaces=capsule.namespaces,
                    component_sha256=capsule.component_sha256,
                )
            )
        if len(proven) != 1:
            log.warning("capsule %s is served as local, unsigned: its hosts claim different identities", source_id)
            return LOCAL
        return proven.pop()


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
