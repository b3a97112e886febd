"""Who a loaded capsule is: its publisher's key (signed), or its folder (local, unsigned).

The kernel does not check signatures itself: the composition root hands it a
`Vet` (host/identity) that checks a capsule folder against the trust store
before anything of it is compiled or run, and says who it is. Grants and URI
namespaces key on the answer, never on the name a manifest gives itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SHORT = 16  # hex digits of a key fingerprint or digest where space matters
# What an install writes beside Capsule.toml: the signed metadata (host/identity/signing.py).
IDENTITY_FILE = "identity.json"
# Namespace of capsule source-ids: uuid5(ns, "<name>\0<wasm sha256>") (docs/contract/bus.md §2.3).
SOURCE_ID_NAMESPACE = uuid.UUID("6f1d3c1e-5a0b-4b7e-9a52-2d1c0a5e7b31")


def source_id_for(name: str, wasm_sha256: str) -> str:
    """A capsule's source-id: derived from its name and its component's bytes, so a signed claim
    of both (another host's, docs/publishing.md) names exactly one source-id."""
    return str(uuid.uuid5(SOURCE_ID_NAMESPACE, f"{name}\0{wasm_sha256}"))


@dataclass(frozen=True)
class Provenance:
    publisher: str | None = None  # None: local, unsigned
    key_fingerprint: str | None = None
    namespaces: tuple[str, ...] = ()
    component_sha256: str | None = None  # what the signature pins; the loader compares what it loaded
    # The signature record (the DSSE envelope, canonical JSON) a capsule host shows other hosts, which
    # verify it themselves before they let the capsule serve its namespaces; None: unsigned.
    claim: str | None = field(default=None, repr=False, compare=False)

    @property
    def signed(self) -> bool:
        return self.key_fingerprint is not None

    def label(self) -> str:
        """`publisher acme (key 0123456789abcdef)`, or `local, unsigned`."""
        if self.key_fingerprint is None:
            return "local, unsigned"
        return f"publisher {self.publisher} (key {self.key_fingerprint[:SHORT]})"

    def grant_key(self, name: str, folder: Path) -> str:
        """Whom a grant binds to: the publisher's key and the capsule's name, or the capsule's folder."""
        if self.key_fingerprint is not None:
            return f"key:{self.key_fingerprint}/{name}"
        return f"folder:{Path(folder).resolve()}"


LOCAL = Provenance()

# Checks a capsule folder before it is loaded and says who it is; raises an AstridError to refuse it.
Vet = Callable[[Path], Provenance]
