"""What capsule identity refuses, one class per cause a caller may want to tell apart.

All are `IdentityError`s (so `AstridError`s): the CLI prints the message as
one line naming the cause and the fix.
"""

from __future__ import annotations

from astrid.host.errors import IdentityError


class ArtifactError(IdentityError):
    """Not a well-formed capsule artifact, or its parts do not agree (digests, manifest vs metadata)."""


class SignatureError(IdentityError):
    """A signature that is malformed, does not verify, or does not cover these bytes."""


class UnsignedArtifact(SignatureError):
    """The capsule carries no signature and the caller did not allow unsigned capsules."""


class UntrustedKey(SignatureError):
    """Signed by a key the trust store does not hold; `fingerprint` names it."""

    def __init__(self, fingerprint: str, message: str) -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


class SigningKeyError(IdentityError):
    """A signing key that cannot be made, found or read."""


class TrustError(IdentityError):
    """A trust-store change that is refused, or a trust file that cannot be used."""


class NamespaceTaken(TrustError):
    """A URI namespace that another publisher owns (`owner`), equal to, inside or around `namespace`."""

    def __init__(self, namespace: str, owner: str, held: str, message: str) -> None:
        super().__init__(message)
        self.namespace = namespace  # the one asked for
        self.owner = owner  # the publisher that holds `held`
        self.held = held  # the namespace it holds


class LockError(IdentityError):
    """A capsule lock file that cannot be used, or a locked install whose bytes do not match."""


class VersionError(IdentityError):
    """A version memory file (the highest version installed per publisher and capsule) that cannot be used."""


class Downgrade(VersionError):
    """An install refused for its version: older than one installed before, not comparable with it,
    or the same version with other bytes (a replayed release?). `--allow-downgrade` lets it through."""
