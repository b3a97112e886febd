"""Who a capsule on another host is: its host's claim (the signature record of its install), verified
by this process against its own trust store before the capsule may serve a namespace (issue 34).

A claim that does not verify here, for any reason, leaves the capsule local and unsigned: it then
serves nothing inside a trusted publisher's namespace, and a signed capsule never becomes one that
serves outside its namespaces because its host is another process.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging

import pytest

from astrid.host.capsule.provenance import LOCAL, Provenance, source_id_for
from astrid.host.identity.artifact import canonical_json, read_artifact
from astrid.host.identity.keys import SigningKey
from astrid.host.identity.signing import sign_artifact, verify_artifact
from astrid.host.identity.trust import TrustStore
from astrid.host.identity.vetting import ClaimedIdentities, NamespaceAuthority

INSIDE, OUTSIDE = "astrid://notes/diary", "astrid://outside/planted"


@pytest.fixture
def claim(signed: bytes, trusted: TrustStore, alice: SigningKey) -> str:
    """What a capsule host announces for the signed `notes` capsule, once installed (its namespaces bound)."""
    capsule = verify_artifact(signed, trusted).capsule
    trusted.claim(capsule.namespaces, alice.public.fingerprint, capsule="notes")
    assert capsule.signed and capsule.claim is not None
    return capsule.claim


@pytest.fixture
def source_id(component: bytes) -> str:
    return source_id_for("notes", hashlib.sha256(component).hexdigest())


def _identities(trust: TrustStore, claims: dict[str, tuple[str, ...]]) -> ClaimedIdentities:
    """The front end's view: no capsule of its own, the other hosts' claims as given."""
    return ClaimedIdentities(trust, lambda source: None, lambda source: claims.get(source, ()))


def _with_statement(claim: str, change) -> str:
    """`claim` with its signed statement changed by `change` (the signature left as it was)."""
    envelope = json.loads(claim)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    change(statement)
    envelope["payload"] = base64.b64encode(canonical_json(statement)).decode()
    return canonical_json(envelope).decode()


def test_a_signed_capsule_on_another_host_is_its_publisher_and_serves_only_its_namespaces(
    claim, source_id, trusted, alice
):
    identities = _identities(trusted, {source_id: (claim,)})
    provenance = identities(source_id)
    assert provenance is not None and provenance.signed
    assert (provenance.publisher, provenance.key_fingerprint) == ("acme", alice.public.fingerprint)
    assert provenance.namespaces == ("astrid://notes-extra/", "astrid://notes/")
    authority = NamespaceAuthority(trusted, identities)
    assert authority.may_serve(source_id, INSIDE)
    assert not authority.may_serve(source_id, OUTSIDE)  # the hole: an unknown capsule served outside
    assert not authority.may_cover(source_id, "astrid://outside/")


def test_a_capsule_no_host_claims_is_unsigned(source_id, trusted, claim):
    authority = NamespaceAuthority(trusted, _identities(trusted, {}))
    assert not authority.may_serve(source_id, INSIDE)  # acme owns it
    assert authority.may_serve(source_id, OUTSIDE)


def test_a_claim_for_another_capsule_proves_nothing(claim, trusted, component, caplog):
    impostor = source_id_for("notes", hashlib.sha256(component + b"\0").hexdigest())  # other code
    with caplog.at_level(logging.WARNING, "astrid.host.identity.vetting"):
        assert _identities(trusted, {impostor: (claim,)})(impostor) == LOCAL
    assert "served as local, unsigned" in caplog.text and "another capsule" in caplog.text


def test_a_claim_signed_by_a_key_not_trusted_here_proves_nothing(packed, mallory: SigningKey, source_id, trusted):
    forged = read_artifact(sign_artifact(packed, mallory)).signature
    assert forged is not None
    assert _identities(trusted, {source_id: (forged.decode(),)})(source_id) == LOCAL


@pytest.mark.parametrize(
    "change",
    [
        lambda statement: statement["predicate"].update(namespaces=["astrid://"]),  # wider namespaces
        lambda statement: statement["predicate"].update(version="9.9.9"),
        lambda statement: statement.update(predicateType="something/else"),
    ],
    ids=["wider-namespaces", "other-version", "other-statement"],
)
def test_a_changed_claim_proves_nothing(claim, source_id, trusted, change):
    assert _identities(trusted, {source_id: (_with_statement(claim, change),)})(source_id) == LOCAL


@pytest.mark.parametrize("garbage", ["", "{", "[]", '{"payload": 1}', "x" * 100_000])
def test_a_malformed_claim_proves_nothing(source_id, trusted, garbage):
    assert _identities(trusted, {source_id: (garbage,)})(source_id) == LOCAL


def test_a_claim_of_namespaces_another_publisher_owns_here_proves_nothing(claim, source_id, tmp_path, alice, mallory):
    elsewhere = TrustStore(tmp_path / "front-end" / "trust.json")  # the front end's own trust store
    elsewhere.add(alice.public, "acme")
    elsewhere.add(mallory.public, "rival")
    elsewhere.claim(["astrid://notes/"], mallory.public.fingerprint, capsule="rival")
    assert _identities(elsewhere, {source_id: (claim,)})(source_id) == LOCAL


def test_hosts_that_claim_different_identities_for_one_capsule_prove_nothing(claim, source_id, trusted):
    wider = _with_statement(claim, lambda statement: statement["predicate"].update(version="1.2.1"))
    assert _identities(trusted, {source_id: (claim, wider)})(source_id) == LOCAL


def test_a_publisher_no_longer_trusted_here_loses_its_capsules_namespaces_at_once(claim, source_id, trusted):
    identities = _identities(trusted, {source_id: (claim,)})
    assert identities(source_id).signed
    trusted.remove("acme")
    assert identities(source_id) == LOCAL  # checked again: the trust store changed


def test_a_capsule_of_this_process_is_who_its_load_said(claim, source_id, trusted):
    mine = Provenance(publisher="local-check", namespaces=("astrid://x/",))
    identities = ClaimedIdentities(trusted, lambda source: mine, lambda source: (claim,))
    assert identities(source_id) is mine  # the kernel's own answer wins; no claim is consulted
