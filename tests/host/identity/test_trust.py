"""The trust store: trusted publishers' keys, and URI namespaces bound to the first publisher that installs them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from astrid.host.identity.errors import NamespaceTaken, TrustError
from astrid.host.identity.keys import KeyStore, PublicKey, SigningKey
from astrid.host.identity.trust import TrustStore, default_trust_file
from astrid.host.settings import CONFIG_DIR_ENV


@pytest.fixture
def acme(trust: TrustStore, alice: SigningKey) -> str:
    trust.add(alice.public, "acme")
    return alice.public.fingerprint


@pytest.fixture
def evil(trust: TrustStore, mallory: SigningKey) -> str:
    trust.add(mallory.public, "evil")
    return mallory.public.fingerprint


def test_add_list_remove(trust: TrustStore, alice: SigningKey) -> None:
    added = trust.add(alice.public.text, "acme")
    assert added.new and added.key == alice.public
    assert stat.S_IMODE(os.stat(trust.path).st_mode) == 0o600
    assert trust.publisher_of(alice.public.fingerprint) == "acme"
    [publisher] = trust.publishers()
    assert (publisher.name, publisher.keys, publisher.trusted) == ("acme", (alice.public,), True)
    assert json.loads(trust.path.read_text())["publishers"] == {"acme": {"keys": [alice.public.text]}}
    assert not trust.add(alice.public.text, "acme").new  # the same key again: nothing changes
    removed = trust.remove("acme")
    assert removed.keys == (alice.public,)
    assert trust.publishers() == [] and trust.publisher_of(alice.public.fingerprint) is None


def test_refusals_are_one_line(trust: TrustStore, alice: SigningKey, mallory: SigningKey) -> None:
    trust.add(alice.public, "acme")
    cases = [
        (lambda: trust.add(alice.public, "other"), "already trusted as publisher 'acme'"),
        (lambda: trust.add("ed25519:AAAA", "other"), "is not a public key"),
        (lambda: trust.add(mallory.public, "Not A Name"), "publisher name 'Not A Name'"),
        (lambda: trust.add(mallory.public, "acme"), "already trusted with key .* --another-key"),
        (lambda: trust.remove("nobody"), "no publisher named 'nobody'"),
        (lambda: trust.remove("acme", key="zz"), "at least 8 hex digits"),
        (lambda: trust.remove("acme", key="00000000"), "no key matching"),
    ]
    for call, message in cases:
        with pytest.raises(TrustError, match=message) as caught:
            call()
        assert "\n" not in str(caught.value)
    assert [p.name for p in trust.publishers()] == ["acme"]


def test_another_key_for_a_publisher_then_the_old_one_removed(
    trust: TrustStore, alice: SigningKey, mallory: SigningKey
) -> None:
    trust.add(alice.public, "acme")
    trust.claim(["astrid://notes/"], alice.public.fingerprint)
    trust.add(mallory.public, "acme", another_key=True)  # a rotated key: same publisher, same namespaces
    assert trust.publisher_of(mallory.public.fingerprint) == "acme"
    trust.remove("acme", key=alice.public.fingerprint[:10])
    assert trust.trusted(alice.public.fingerprint) is None
    assert trust.owner_of("astrid://notes/a") == "acme"
    trust.check_claim(["astrid://notes/"], mallory.public.fingerprint)


def test_the_first_trusted_publisher_to_claim_a_namespace_owns_it(trust: TrustStore, acme: str, evil: str) -> None:
    assert trust.claim(["astrid://notes/"], acme, capsule="notes") == ("astrid://notes/",)
    assert trust.claim(["astrid://notes/", "astrid://notes/more/"], acme) == ("astrid://notes/more/",)  # its own
    for namespace in ["astrid://notes/", "astrid://notes/private/"]:  # the same one, one inside it
        with pytest.raises(NamespaceTaken) as caught:
            trust.claim([namespace], evil, capsule="fake")
        assert (caught.value.owner, caught.value.held) == ("acme", "astrid://notes/")
        assert "publisher 'acme'" in str(caught.value) and "astrid trust remove acme --release" in str(caught.value)
    trust.claim(["astrid://other/"], evil)  # a different namespace is free
    assert trust.owner_of("astrid://other/x") == "evil"


def test_a_namespace_around_one_taken_is_refused_too(trust: TrustStore, acme: str, evil: str) -> None:
    trust.claim(["astrid://notes/private/"], acme)
    with pytest.raises(NamespaceTaken, match="namespace astrid://notes/ holds astrid://notes/private/") as caught:
        trust.claim(["astrid://notes/"], evil)
    assert caught.value.owner == "acme"


def test_a_claim_is_all_or_nothing(trust: TrustStore, acme: str, evil: str) -> None:
    trust.claim(["astrid://notes/"], acme)
    with pytest.raises(NamespaceTaken):
        trust.claim(["astrid://free/", "astrid://notes/"], evil)
    assert trust.owner_of("astrid://free/x") is None


def test_owner_of_matches_by_longest_prefix(trust: TrustStore, acme: str) -> None:
    trust.claim(["astrid://notes/", "astrid://notes/deep/"], acme)
    assert trust.owner_of("astrid://notes/") == "acme"
    assert trust.owner_of("astrid://notes/deep/x") == "acme"
    assert trust.owner_of("astrid://notesx/a") is None  # a prefix counts on a segment boundary only
    assert trust.owner_of("astrid://note") is None
    assert [c.namespace for c in trust.namespaces()] == ["astrid://notes/", "astrid://notes/deep/"]


def test_unsigned_capsules_own_nothing(trust: TrustStore, acme: str) -> None:
    trust.check_claim(["astrid://free/"], None)
    trust.claim(["astrid://notes/"], acme)
    with pytest.raises(NamespaceTaken, match="an unsigned capsule cannot claim it"):
        trust.check_claim(["astrid://notes/sub/"], None)
    with pytest.raises(TrustError, match="is not trusted"):
        trust.claim(["astrid://x/"], "0" * 64)


def test_remove_keeps_namespaces_reserved_until_release(
    trust: TrustStore, acme: str, evil: str, alice: SigningKey
) -> None:
    trust.claim(["astrid://notes/"], acme, capsule="notes")
    removed = trust.remove("acme")
    assert removed.reserved == ("astrid://notes/",) and removed.released == ()
    with pytest.raises(NamespaceTaken, match="publisher 'acme'"):
        trust.claim(["astrid://notes/"], evil)
    [reserved, _] = trust.publishers()
    assert (reserved.name, reserved.trusted, reserved.namespaces) == ("acme", False, ("astrid://notes/",))
    assert trust.add(alice.public, "acme").reserved == ("astrid://notes/",)  # trusting again gives them back
    trust.remove("acme", release=True)
    assert trust.claim(["astrid://notes/"], evil) == ("astrid://notes/",)


def test_release_alone_for_a_removed_publisher(trust: TrustStore, acme: str) -> None:
    trust.claim(["astrid://notes/"], acme)
    trust.remove("acme")
    removed = trust.remove("acme", release=True)
    assert removed.keys == () and removed.released == ("astrid://notes/",)
    assert trust.namespaces() == []


def test_a_corrupt_or_loose_trust_file_is_refused(trust: TrustStore, acme: str) -> None:
    os.chmod(trust.path, 0o644)
    with pytest.raises(TrustError, match="open to other users"):
        TrustStore(trust.path).publishers()
    os.chmod(trust.path, 0o600)
    trust.path.write_text('{"version": 1, "publishers": {"acme": {"keys": ["ed25519:x"]}}}')
    with pytest.raises(TrustError, match=r"trust file .* is corrupt .*astrid trust add"):
        TrustStore(trust.path).publishers()


def test_two_stores_on_one_file_see_each_other(trust: TrustStore, alice: SigningKey, tmp_path: Path) -> None:
    other = TrustStore(trust.path)
    assert other.publishers() == []
    trust.add(alice.public, "acme")
    assert [p.name for p in other.publishers()] == ["acme"]


def test_the_trust_file_is_in_the_config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path))
    assert default_trust_file() == tmp_path / "trust.json"


def test_a_key_of_a_publisher_is_refused_for_another_even_after_keys_rotate(tmp_path: Path, trust: TrustStore) -> None:
    keys = KeyStore(tmp_path / "keys")
    first, second = keys.new("one"), keys.new("two")
    trust.add(first, "acme")
    trust.add(second, "acme", another_key=True)
    with pytest.raises(TrustError, match="already trusted as publisher 'acme'"):
        trust.add(PublicKey.parse(second.text), "other")
