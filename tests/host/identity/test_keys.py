"""Signing keys: Ed25519 pairs in owner-only files, public keys as one copyable line, fingerprints."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

import pytest

from astrid.host.identity.errors import SigningKeyError
from astrid.host.identity.keys import KeyStore, PublicKey, default_key_dir
from astrid.host.settings import CONFIG_DIR_ENV


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def keys(tmp_path: Path) -> KeyStore:
    return KeyStore(tmp_path / "config" / "keys")


def test_a_new_key_is_a_0600_file_in_a_0700_folder_and_its_public_key_is_one_line(keys: KeyStore) -> None:
    public = keys.new("alice")
    path = keys.folder / "alice.key"
    assert mode(path) == 0o600 and mode(keys.folder) == 0o700
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    text = public.text
    assert text.startswith("ed25519:") and len(text) == 51 and "\n" not in text
    assert PublicKey.parse(text) == public
    assert public.fingerprint == hashlib.sha256(public.raw).hexdigest()
    assert public.short == public.fingerprint[:16]
    loaded = keys.load("alice")
    assert loaded.public == public
    assert loaded.signer.public_key.keyid == public.fingerprint  # the DSSE keyid is the fingerprint
    assert keys.keys() == [("alice", public)]


def test_an_existing_name_is_refused_and_the_key_kept(keys: KeyStore) -> None:
    keys.new("alice")
    before = (keys.folder / "alice.key").read_bytes()
    with pytest.raises(SigningKeyError, match=r"a key named 'alice' already exists .*never replaced"):
        keys.new("alice")
    assert (keys.folder / "alice.key").read_bytes() == before
    assert [p.name for p in keys.folder.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("name", ["", "Alice", "a/b", "../x", "a..b", "-x", "x" * 65])
def test_a_bad_key_name_is_refused(keys: KeyStore, name: str) -> None:
    with pytest.raises(SigningKeyError, match="key name"):
        keys.new(name)


def test_a_missing_key_names_the_command_that_makes_it(keys: KeyStore) -> None:
    keys.new("alice")
    with pytest.raises(SigningKeyError, match=r"no signing key named 'bob' .*\(keys: alice\).*astrid key new bob"):
        keys.load("bob")


def test_a_key_file_others_may_read_is_refused(keys: KeyStore) -> None:
    keys.new("alice")
    os.chmod(keys.folder / "alice.key", 0o644)
    with pytest.raises(SigningKeyError, match=r"open to other users .*chmod 600"):
        keys.load("alice")


def test_a_key_file_that_is_not_an_ed25519_key_is_refused(keys: KeyStore) -> None:
    keys.new("alice")
    (keys.folder / "alice.key").write_bytes(b"not a key")
    with pytest.raises(SigningKeyError, match="cannot be read as a PEM private key"):
        keys.load("alice")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ed25519:",
        "ssh-ed25519 AAAA",
        "ed25519:" + "A" * 42,  # 31.5 bytes
        "ed25519:" + base64.urlsafe_b64encode(b"\1" * 33).decode().rstrip("="),  # 33 bytes
        "ed25519:" + base64.urlsafe_b64encode(b"\1" * 32).decode(),  # padded: not the one spelling
        "ed25519:" + base64.b64encode(b"\xfb" * 32).decode().rstrip("="),  # + and /: not base64url
    ],
)
def test_a_malformed_public_key_is_one_clear_line(text: str) -> None:
    with pytest.raises(SigningKeyError) as caught:
        PublicKey.parse(text)
    assert "is not a public key" in str(caught.value) and "\n" not in str(caught.value)


def test_the_key_folder_is_in_the_config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path))
    assert default_key_dir() == tmp_path / "keys"
