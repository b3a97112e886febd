"""Forged, stale and misdirected JWT access tokens: each must be refused, with one log line saying why.

Every test here is an attack that succeeds against a verifier without the
matching defence: one that skips `exp`, `aud` or `iss`, trusts the token's own
`alg` (`none`, or HS256 keyed with the public key), takes a key the JWKS does
not list, or lets any claim value become a principal. The JWKS side is
attacked too: a server that is down or hangs must not hang requests, a flood of
made-up key ids must not make the verifier hammer the issuer, and a JWKS URL
anyone on the path could answer is refused at start-up.

The refusal line is checked for its reason, and for never echoing the token or
a claim value (which the attacker chose: a newline in it would forge log lines).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from astrid.host.auth import oidc
from astrid.host.auth.oidc import MAX_TOKEN_CHARS, JwtVerifier
from astrid.host.errors import AuthConfigError
from astrid.host.log_throttle import LogThrottles
from tests.support.jwks import AUDIENCE, ISSUER, Issuer, forge, serve_jwks, unused_loopback_url

LOGGER = "astrid.host.auth.oidc"


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with serve_jwks() as running:
        yield running


def verifier_for(issuer: Issuer, **options: Any) -> JwtVerifier:
    return JwtVerifier(issuer.url, ISSUER, AUDIENCE, **options)


def assert_refused(
    verifier: JwtVerifier, token: str, caplog: pytest.LogCaptureFixture, reason: str, *secrets: str
) -> None:
    """The token is refused, with exactly one one-line warning that holds `reason` and none of `secrets`."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert verifier.principal_for(token) is None
    lines = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert len(lines) == 1, lines
    assert reason in lines[0]
    assert "\n" not in lines[0]
    for secret in (token, *secrets):
        assert secret not in lines[0]


# -- the claims ----------------------------------------------------------------------------------


def test_an_expired_token_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = issuer.mint(issuer.claims(exp=int(time.time()) - 120))
    assert_refused(verifier_for(issuer), token, caplog, "expired")


def test_a_token_for_another_audience_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = issuer.mint(issuer.claims(aud="https://other-service.test"))
    assert_refused(verifier_for(issuer), token, caplog, "wrong audience")


def test_a_token_from_another_issuer_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = issuer.mint(issuer.claims(iss="https://evil.test"))
    assert_refused(verifier_for(issuer), token, caplog, "wrong issuer")


@pytest.mark.parametrize("claim", ["exp", "aud", "iss"])
def test_a_token_without_a_required_claim_is_refused(
    issuer: Issuer, caplog: pytest.LogCaptureFixture, claim: str
) -> None:
    claims = issuer.claims()
    del claims[claim]
    assert_refused(verifier_for(issuer), issuer.mint(claims), caplog, f"required claim '{claim}' is missing")


def test_a_token_not_yet_valid_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = issuer.mint(issuer.claims(nbf=int(time.time()) + 600))
    assert_refused(verifier_for(issuer), token, caplog, "not yet valid")


@pytest.mark.parametrize(
    "name",
    ["a" * 200, "alice\nWARNING forged log line", " alice", "alice\x00", ""],
    ids=["200-chars", "newline", "leading-space", "nul", "empty"],
)
def test_a_principal_that_breaks_the_grammar_is_refused(
    issuer: Issuer, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    token = issuer.mint(issuer.claims(sub=name))
    secrets = (name,) if name.strip() else ()
    assert_refused(verifier_for(issuer), token, caplog, "principal-name grammar", *secrets)


def test_a_token_without_the_principal_claim_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    claims = issuer.claims()
    del claims["sub"]
    assert_refused(verifier_for(issuer), issuer.mint(claims), caplog, "'sub' is missing")
    token = issuer.mint(issuer.claims(sub="alice"))
    assert_refused(verifier_for(issuer, principal_claim="email"), token, caplog, "'email' is missing")


def test_a_principal_claim_that_is_not_a_string_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = issuer.mint(issuer.claims(sub=["alice", "admin"]))
    assert_refused(verifier_for(issuer), token, caplog, "'sub' claim is not a string")
    token = issuer.mint(issuer.claims(email={"name": "alice"}))
    assert_refused(verifier_for(issuer, principal_claim="email"), token, caplog, "'email' is not a string")


# -- the signature and the key -------------------------------------------------------------------


def test_a_token_signed_by_a_key_not_in_the_jwks_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    issuer.add_key("rsa", "rogue", publish=False)
    token = issuer.mint(issuer.claims(), kid="rogue")
    assert_refused(verifier_for(issuer), token, caplog, "unknown key")


def test_a_rogue_key_claiming_a_published_kid_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    issuer.add_key("rsa", "rogue", publish=False)
    token = issuer.mint(issuer.claims(), kid="rogue", headers={"kid": "rsa-1"})
    assert_refused(verifier_for(issuer), token, caplog, "bad signature")


def test_a_tampered_payload_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    header, _, signature = issuer.mint(issuer.claims(sub="alice")).split(".")
    forged_payload = forge({}, issuer.claims(sub="admin")).split(".")[1]
    assert_refused(verifier_for(issuer), f"{header}.{forged_payload}.{signature}", caplog, "bad signature")


def test_alg_none_is_refused_without_fetching_keys(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = forge({"alg": "none", "typ": "JWT", "kid": "rsa-1"}, issuer.claims(sub="admin"))
    assert_refused(verifier_for(issuer), token, caplog, "algorithm not allowed")
    assert issuer.requests == 0


def test_hs256_keyed_with_the_public_key_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    # the classic confusion: a verifier that lets the token pick its algorithm checks this HMAC
    # with the RSA public key (which the attacker fetched from the JWKS) and accepts it
    public_pem = issuer.keys["rsa-1"].public_pem()
    token = forge({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, issuer.claims(sub="admin"), secret=public_pem)
    assert_refused(verifier_for(issuer), token, caplog, "algorithm not allowed")
    assert issuer.requests == 0


def test_a_token_whose_alg_does_not_fit_its_key_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = issuer.mint(issuer.claims(), kid="ec-1", headers={"kid": "rsa-1"})  # ES256 naming the RSA key
    assert_refused(verifier_for(issuer), token, caplog, "not a ES256 key")


@pytest.mark.parametrize(
    "token",
    ["", "garbage", "a.b.c", "x" * (MAX_TOKEN_CHARS + 1)],
    ids=["empty", "one-part", "three-parts", "oversize"],
)
def test_a_malformed_token_is_refused_without_fetching_keys(
    issuer: Issuer, caplog: pytest.LogCaptureFixture, token: str
) -> None:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert verifier_for(issuer).principal_for(token) is None
    assert "access token refused" in caplog.text
    assert issuer.requests == 0


def test_a_token_without_a_kid_is_refused(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    token = forge({"alg": "RS256", "typ": "JWT"}, issuer.claims())
    assert_refused(verifier_for(issuer), token, caplog, "no key id")


def test_made_up_kids_cannot_make_the_verifier_hammer_the_jwks(issuer: Issuer) -> None:
    verifier = verifier_for(issuer)
    assert verifier.principal_for(issuer.mint(issuer.claims())) == "alice"
    issuer.add_key("rsa", "rogue", publish=False)
    for n in range(20):
        token = issuer.mint(issuer.claims(), kid="rogue", headers={"kid": f"made-up-{n}"})
        assert verifier.principal_for(token) is None
    assert issuer.requests == 2  # the first fetch, and one refetch for the first unknown kid (cooldown: 30 s)


# -- the JWKS endpoint ---------------------------------------------------------------------------


def test_a_jwks_server_that_is_down_refuses_quickly(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    verifier = JwtVerifier(unused_loopback_url(), ISSUER, AUDIENCE)
    started = time.monotonic()
    assert_refused(verifier, issuer.mint(issuer.claims()), caplog, "JWKS unreachable")
    assert time.monotonic() - started < 3


def test_a_hanging_jwks_server_refuses_within_the_fetch_timeout(
    issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.stall()
    verifier = verifier_for(issuer, fetch_timeout=0.5)
    token = issuer.mint(issuer.claims())
    started = time.monotonic()
    assert_refused(verifier, token, caplog, "JWKS unreachable")
    assert time.monotonic() - started < 3
    started = time.monotonic()  # right after a failed fetch, requests do not queue behind another one
    assert_refused(verifier, token, caplog, "JWKS unreachable")
    assert time.monotonic() - started < 0.25
    assert issuer.requests == 1


def test_the_default_fetch_timeout_is_bounded(issuer: Issuer) -> None:
    issuer.stall()
    verifier = verifier_for(issuer)
    started = time.monotonic()
    assert verifier.principal_for(issuer.mint(issuer.claims())) is None
    assert time.monotonic() - started < 10


def test_cached_keys_keep_working_while_a_refetch_fails(issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    verifier = verifier_for(issuer, fetch_timeout=0.5)
    genuine = issuer.mint(issuer.claims())
    assert verifier.principal_for(genuine) == "alice"
    issuer.stall()
    issuer.add_key("rsa", "rogue", publish=False)
    assert_refused(verifier, issuer.mint(issuer.claims(), kid="rogue"), caplog, "JWKS unreachable")
    assert verifier.principal_for(genuine) == "alice"  # the fresh cached set still serves, backoff or not


# -- the JWKS URL --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://issuer.example.org/jwks.json",
        "http://127.0.0.1.evil.test/jwks.json",
        "http://localhost.evil.test/jwks.json",
        "http://10.0.0.1/jwks.json",
        "file:///etc/passwd",
        "ftp://issuer.example.org/jwks.json",
        "https:///jwks.json",
        "jwks.json",
    ],
)
def test_a_jwks_url_open_to_tampering_is_refused_at_start(url: str) -> None:
    with pytest.raises(AuthConfigError, match="https"):
        JwtVerifier(url, ISSUER, AUDIENCE)


# -- the log -------------------------------------------------------------------------------------


def test_a_spray_of_bad_tokens_logs_a_line_per_reason_not_a_line_per_token(
    issuer: Issuer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(oidc, "LogThrottles", lambda every_s: LogThrottles(every_s, clock=lambda: now[0]))
    verifier = verifier_for(issuer)
    expired = issuer.mint(issuer.claims(exp=int(time.time()) - 120))

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for n in range(300):
            assert verifier.principal_for(f"not-a-token-{n}") is None
            assert verifier.principal_for(expired) is None
        lines = [record.getMessage() for record in caplog.records if record.name == LOGGER]
        assert len(lines) == 2, lines  # the first of each reason: malformed, expired

        now[0] += oidc.MCP_TUNING.refused_token_line_every_s  # a period later the next line counts what was not said
        caplog.clear()
        assert verifier.principal_for(expired) is None
    [line] = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert "expired" in line and "299 more refused" in line and expired not in line


def test_an_unexpected_error_is_logged_with_its_text_never_the_token(
    issuer: Issuer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(token: str) -> tuple[str, str]:
        raise RuntimeError(f"cannot parse {token}\nWARNING forged line")

    monkeypatch.setattr(oidc, "_screen_header", broken)
    token = issuer.mint(issuer.claims())
    reason = "unexpected RuntimeError while verifying it: 'cannot parse <token>"
    assert_refused(verifier_for(issuer), token, caplog, reason)  # one line, without the token
