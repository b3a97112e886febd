"""The JWT verifier accepts what a real OIDC issuer mints, and fetches the issuer's keys no more than it must.

Genuine tokens here come from `tests/support/jwks.py`: an RSA and an EC key
pair whose JWKS a loopback `http.server` serves, counting its requests. The
attacks (tokens that must be refused) are in `tests/security/test_jwt_auth.py`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from astrid.host.auth.oidc import JwtVerifier, Verified, check_jwks_url
from astrid.host.auth.principal import BearerIdentity, IdentitySource, PrincipalSource
from astrid.host.errors import AuthConfigError
from tests.support.jwks import AUDIENCE, ISSUER, Issuer, serve_jwks


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with serve_jwks() as running:
        yield running


def verifier_for(issuer: Issuer, **options: Any) -> JwtVerifier:
    return JwtVerifier(issuer.url, ISSUER, AUDIENCE, **options)


# -- genuine tokens ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["rsa", "ec"])
def test_a_genuine_token_names_its_subject(issuer: Issuer, key: Any) -> None:
    token = issuer.mint(issuer.claims(sub="alice"), key=key)
    assert verifier_for(issuer).principal_for(token) == "alice"


def test_verify_gives_the_expiry_and_the_scopes(issuer: Issuer) -> None:
    claims = issuer.claims(sub="alice", scope="resources:read  resources:list")
    verified = verifier_for(issuer).verify(issuer.mint(claims))
    assert verified == Verified("alice", claims["exp"], ("resources:read", "resources:list"))


def test_a_scp_list_gives_the_scopes(issuer: Issuer) -> None:
    verified = verifier_for(issuer).verify(issuer.mint(issuer.claims(scp=["a", "b"]), key="ec"))
    assert verified is not None and verified.scopes == ("a", "b")


def test_identity_for_gives_principal_and_expiry(issuer: Issuer) -> None:
    claims = issuer.claims(sub="bob")
    verifier = verifier_for(issuer)
    assert verifier.identity_for(issuer.mint(claims)) == BearerIdentity("bob", claims["exp"])
    assert verifier.identity_for("not a token") is None


def test_the_verifier_is_an_identity_source_for_the_http_adapter(issuer: Issuer) -> None:
    verifier = verifier_for(issuer)
    source: IdentitySource = verifier  # mypy checks the shape; isinstance the names
    assert isinstance(source, IdentitySource)
    assert isinstance(verifier, PrincipalSource)


def test_a_custom_principal_claim_names_the_principal(issuer: Issuer) -> None:
    token = issuer.mint(issuer.claims(sub="00u1a2b3c4", email="alice@example.org"))
    assert verifier_for(issuer, principal_claim="email").principal_for(token) == "alice@example.org"


def test_an_audience_list_that_holds_ours_passes(issuer: Issuer) -> None:
    token = issuer.mint(issuer.claims(aud=["https://other.test", AUDIENCE]))
    assert verifier_for(issuer).principal_for(token) == "alice"


def test_a_token_just_expired_passes_within_the_leeway(issuer: Issuer) -> None:
    token = issuer.mint(issuer.claims(exp=int(time.time()) - 10))
    assert verifier_for(issuer).principal_for(token) == "alice"
    assert verifier_for(issuer, leeway=0).principal_for(token) is None


# -- the key cache -------------------------------------------------------------------------------


def test_many_verifications_fetch_the_jwks_once(issuer: Issuer) -> None:
    verifier = verifier_for(issuer)
    tokens = [issuer.mint(issuer.claims(sub=f"user-{n}"), key="rsa" if n % 2 else "ec") for n in range(40)]
    assert [verifier.principal_for(token) for token in tokens] == [f"user-{n}" for n in range(40)]
    assert issuer.requests == 1


def test_building_a_verifier_fetches_nothing(issuer: Issuer) -> None:
    verifier_for(issuer)
    assert issuer.requests == 0


def test_concurrent_first_verifications_share_one_fetch(issuer: Issuer) -> None:
    verifier = verifier_for(issuer)
    token = issuer.mint(issuer.claims())
    results: list[str | None] = []
    threads = [threading.Thread(target=lambda: results.append(verifier.principal_for(token))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == ["alice"] * 8
    assert issuer.requests == 1


def test_a_rotated_key_is_fetched_when_its_kid_first_appears(issuer: Issuer) -> None:
    verifier = verifier_for(issuer)
    assert verifier.principal_for(issuer.mint(issuer.claims(), kid="rsa-1")) == "alice"
    issuer.add_key("rsa", "rsa-2")  # the issuer rotates after the verifier cached the old set
    assert verifier.principal_for(issuer.mint(issuer.claims(sub="bob"), kid="rsa-2")) == "bob"
    assert issuer.requests == 2
    assert verifier.principal_for(issuer.mint(issuer.claims(sub="carol"), kid="rsa-2")) == "carol"
    assert issuer.requests == 2


def test_an_expired_cache_is_fetched_again(issuer: Issuer) -> None:
    verifier = verifier_for(issuer, cache_lifespan=0.2)
    token = issuer.mint(issuer.claims())
    assert verifier.principal_for(token) == "alice"
    time.sleep(0.3)
    assert verifier.principal_for(token) == "alice"
    assert issuer.requests == 2


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://issuer.example.org/.well-known/jwks.json",
        "http://127.0.0.1:8080/jwks.json",
        "http://127.9.9.9/jwks.json",
        "http://[::1]:8080/jwks.json",
        "http://localhost/jwks.json",
    ],
)
def test_https_and_loopback_jwks_urls_are_accepted(url: str) -> None:
    check_jwks_url(url)
    JwtVerifier(url, ISSUER, AUDIENCE)


@pytest.mark.parametrize("field", ["issuer", "audience", "principal_claim"])
def test_an_empty_setting_is_refused_naming_it(field: str) -> None:
    settings: dict[str, Any] = {
        "jwks_url": "https://issuer.example.org/jwks.json",
        "issuer": ISSUER,
        "audience": AUDIENCE,
    }
    with pytest.raises(AuthConfigError, match=field):
        JwtVerifier(**{**settings, field: " "})


def test_a_non_positive_fetch_timeout_is_refused() -> None:
    with pytest.raises(AuthConfigError, match="fetch_timeout"):
        JwtVerifier("https://issuer.example.org/jwks.json", ISSUER, AUDIENCE, fetch_timeout=0)
