"""Ed25519 signing keys: the publisher's private keys and the public keys operators trust.

A public key is written as one copyable line, `ed25519:` and the raw 32-byte
key in unpadded base64url (`ed25519:Xq3...`, 51 characters): `astrid key new`
prints it and `astrid trust add` takes it. Its *fingerprint* (the key id) is
the sha256 of the raw 32 bytes, in hex; `short_fingerprint` is its first 16
hex digits, shown where space matters. The fingerprint is also the DSSE
`keyid` of every signature the key makes.

Private keys live in `$ASTRID_CONFIG_DIR/keys/NAME.key` (PEM, PKCS#8,
unencrypted), mode 0600 in a folder of mode 0700, checked like the other
owner-only files (`astrid.host.owner_file`): a key file others may read, or
in a folder others may write, is refused. A key is never overwritten.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from astrid.host.identity.errors import SigningKeyError
from astrid.host.owner_file import OwnerOnlyFile
from astrid.host.settings import config_dir

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from securesystemslib.signer import CryptoSigner, SSlibKey

PUBLIC_KEY_PREFIX = "ed25519:"
KEY_SUFFIX = ".key"
SHORT_FINGERPRINT = 16
MAX_KEY_FILE_BYTES = 16 * 1024
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


def default_key_dir() -> Path:
    """`$ASTRID_CONFIG_DIR/keys`, else the user config dir's: the private keys of `astrid key new`."""
    return config_dir() / "keys"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a key or a publisher, or None."""
    if not _NAME.fullmatch(name) or ".." in name:
        return "must be 1-64 characters of [a-z0-9._-], starting with a letter or digit"
    return None


def is_fingerprint(text: str) -> bool:
    return bool(_FINGERPRINT.fullmatch(text))


def short_fingerprint(fingerprint: str) -> str:
    return fingerprint[:SHORT_FINGERPRINT]


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key (the raw 32 bytes)."""

    raw: bytes

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """`ed25519:<base64url>` as `astrid key new` prints it; anything else is a one-line error."""
        text = text.strip()
        shape = f"a public key is `{PUBLIC_KEY_PREFIX}` and 43 base64url characters, as `astrid key new` prints it"
        if not text.startswith(PUBLIC_KEY_PREFIX):
            raise SigningKeyError(f"{_clip(text)!r} is not a public key: {shape}")
        body = text[len(PUBLIC_KEY_PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32 or _b64(raw) != body:  # exactly one spelling per key
            raise SigningKeyError(f"{_clip(text)!r} is not a public key: {shape}")
        # here, as every cryptography import of this module: a start that trusts no key never loads it
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(raw)
        except ValueError:
            raise SigningKeyError(f"{_clip(text)!r} is not a valid Ed25519 public key: {shape}") from None
        return cls(raw)

    @property
    def text(self) -> str:
        return PUBLIC_KEY_PREFIX + _b64(self.raw)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def short(self) -> str:
        return short_fingerprint(self.fingerprint)

    def sslib_key(self) -> SSlibKey:
        """This key as securesystemslib verifies with it (key id = our fingerprint)."""
        from securesystemslib.signer import SSlibKey  # here: only signing and verifying load it

        return SSlibKey(self.fingerprint, "ed25519", "ed25519", {"public": self.raw.hex()})

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class SigningKey:
    """A private key from the key store, ready to sign."""

    name: str
    public: PublicKey
    signer: CryptoSigner


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _clip(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _public_of(private: Ed25519PrivateKey) -> PublicKey:
    from cryptography.hazmat.primitives import serialization

    return PublicKey(private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


class KeyStore:
    """The private keys in `folder` (`$ASTRID_CONFIG_DIR/keys`), one `NAME.key` each."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, name: str) -> Path:
        problem = name_problem(name)
        if problem:
            raise SigningKeyError(f"key name {name!r} {problem}")
        return self.folder / f"{name}{KEY_SUFFIX}"

    def _file(self, name: str) -> OwnerOnlyFile[bytes]:
        return OwnerOnlyFile(
            self.path(name),
            noun="signing key file",
            stakes="who can sign capsules as you",
            error=SigningKeyError,
            parse=lambda _path, raw: raw,
            empty=b"",
        )

    def new(self, name: str) -> PublicKey:
        """Make an Ed25519 key pair `name`; its public key. An existing name is refused, never overwritten."""
        file = self._file(name)
        path = file.path
        if path.exists():
            raise SigningKeyError(
                f"a key named {name!r} already exists ({path}); keys are never replaced: pick another name"
            )
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = Ed25519PrivateKey.generate()
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        with file.locked():  # makes the folder (0700) and checks no one else may write to it
            try:
                fd, temp = tempfile.mkstemp(dir=self.folder, prefix=f".{name}.", suffix=".tmp")  # mode 0600
            except OSError as exc:
                raise SigningKeyError(f"cannot write the key file {path}: {exc.strerror or exc}") from None
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(pem)
                    out.flush()
                    os.fsync(out.fileno())
                os.link(temp, path)  # atomic, and fails when the name exists: never an overwrite
            except FileExistsError:
                raise SigningKeyError(
                    f"a key named {name!r} already exists ({path}); keys are never replaced: pick another name"
                ) from None
            except OSError as exc:
                raise SigningKeyError(f"cannot write the key file {path}: {exc.strerror or exc}") from None
            finally:
                Path(temp).unlink(missing_ok=True)
        return _public_of(private)

    def load(self, name: str) -> SigningKey:
        """The key `name`, checked (owner-only file, an Ed25519 PKCS#8 PEM), ready to sign."""
        file = self._file(name)
        _, raw = file.read()
        if raw is None:
            known = ", ".join(self.names()) or "none yet"
            raise SigningKeyError(
                f"no signing key named {name!r} in {self.folder} (keys: {known}); make one with `astrid key new {name}`"
            )
        if len(raw) > MAX_KEY_FILE_BYTES:
            raise SigningKeyError(f"the key file {file.path} is not an Ed25519 key astrid made (too large)")
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        try:
            private = serialization.load_pem_private_key(raw, password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"the key file {file.path} cannot be read as a PEM private key: {exc}") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise SigningKeyError(f"the key file {file.path} holds a {type(private).__name__}, not an Ed25519 key")
        public = _public_of(private)
        from securesystemslib.signer import CryptoSigner

        return SigningKey(name, public, CryptoSigner(private, public.sslib_key()))

    def names(self) -> list[str]:
        try:
            entries = sorted(self.folder.iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SigningKeyError(f"cannot list the key folder {self.folder}: {exc.strerror or exc}") from None
        names = [p.name.removesuffix(KEY_SUFFIX) for p in entries if p.suffix == KEY_SUFFIX and p.is_file()]
        return [n for n in names if name_problem(n) is None]

    def keys(self) -> list[tuple[str, PublicKey]]:
        """Every key's name and public key, by name."""
        return [(name, self.load(name).public) for name in self.names()]
