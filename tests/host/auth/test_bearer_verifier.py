"""`BearerVerifier`: astrid's principal sources behind the MCP SDK's `TokenVerifier`."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from mcp.server.auth.provider import AccessToken, TokenVerifier

from astrid.host.auth.principal import BearerIdentity
from astrid.host.auth.tokens import TokenStore
from astrid.host.errors import TokenError
from astrid.host.mcp.auth import BearerVerifier

pytestmark = pytest.mark.anyio


class Source:
    """A `PrincipalSource` that records the thread it ran in."""

    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.threads: list[threading.Thread] = []

    def principal_for(self, token: str) -> str | None:
        self.threads.append(threading.current_thread())
        return self.answer if token == "good" else None


class ExpiringSource(Source):
    def identity_for(self, token: str) -> BearerIdentity | None:
        return BearerIdentity("carol", expires_at=2_000_000_000) if token == "good" else None


class FailingSource:
    def __init__(self) -> None:
        self.calls = 0

    def principal_for(self, token: str) -> str | None:
        self.calls += 1
        raise TokenError("the token file /x/tokens.json is corrupt (...): fix it")


def as_token_verifier(verifier: TokenVerifier) -> TokenVerifier:
    return verifier  # mypy checks the protocol here


async def test_a_good_token_becomes_an_access_token_for_its_principal() -> None:
    source = Source("alice")
    access = await as_token_verifier(BearerVerifier(source)).verify_token("good")
    assert access == AccessToken(token="good", client_id="alice", subject="alice", scopes=[])
    assert source.threads and source.threads[0] is not threading.main_thread()  # off the event loop


async def test_an_unknown_token_is_none() -> None:
    assert await BearerVerifier(Source("alice")).verify_token("bad") is None


async def test_an_identity_source_sets_the_expiry() -> None:
    access = await BearerVerifier(ExpiringSource("ignored")).verify_token("good")
    assert access is not None
    assert (access.client_id, access.subject, access.expires_at) == ("carol", "carol", 2_000_000_000)


async def test_the_resource_is_stamped_when_given() -> None:
    access = await BearerVerifier(Source("alice"), resource="https://astrid.example/mcp").verify_token("good")
    assert access is not None and access.resource == "https://astrid.example/mcp"


@pytest.mark.parametrize("principal", ["", " alice", "ali\nce", "x" * 129])
async def test_a_principal_that_breaks_the_grammar_is_refused_and_logged(
    principal: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="astrid.host.mcp.auth"):
        assert await BearerVerifier(Source(principal)).verify_token("good") is None
    assert "principal name is not valid" in caplog.text
    assert "good" not in caplog.text  # the token is never logged


async def test_a_failing_source_refuses_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    source = FailingSource()
    verifier = BearerVerifier(source)
    with caplog.at_level(logging.ERROR, logger="astrid.host.mcp.auth"):
        for _ in range(3):
            assert await verifier.verify_token("good") is None
    assert source.calls == 3
    assert caplog.text.count("corrupt") == 1


async def test_static_token_verifier_over_the_token_file(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    token = store.add("alice")
    verifier = BearerVerifier(store)
    access = await verifier.verify_token(token)
    assert access is not None and access.client_id == access.subject == "alice"
    store.revoke("alice")
    assert await verifier.verify_token(token) is None
