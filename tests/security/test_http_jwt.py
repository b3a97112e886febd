"""`astrid mcp serve --http --jwks ...`: OIDC access tokens over real HTTP.

A genuine token is served as its `sub`; an expired one, one for another
audience or from another issuer gets 401 and runs no capsule; the server
publishes protected-resource metadata naming the issuer, and its 401 points
there, as the MCP authorization spec asks.
"""

from __future__ import annotations

import json
import time

import anyio
import httpx2
import pytest

from tests.support.http import HttpServer, http_server, http_session, text_of
from tests.support.jsonrpc import initialize_request
from tests.support.jwks import AUDIENCE, ISSUER, Issuer, KeyKind, serve_jwks

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = initialize_request("t")


@pytest.fixture
def issuer():
    with serve_jwks() as issuer:
        yield issuer


@pytest.fixture
def served(built_introspect, capsule_home, tmp_path, issuer: Issuer):
    extra = ("--jwks", issuer.url, "--issuer", ISSUER, "--audience", AUDIENCE)
    with http_server(
        built_introspect.folder, capsule_home=capsule_home, token_dir=tmp_path, extra=extra, verbose=True
    ) as s:
        yield s


async def test_a_genuine_token_is_served_as_its_subject(served: HttpServer, issuer: Issuer):
    kinds: tuple[tuple[KeyKind, str], ...] = (("rsa", "alice"), ("ec", "bob"))
    for kind, subject in kinds:
        token = issuer.mint(issuer.claims(sub=subject), key=kind)
        with anyio.fail_after(30):
            async with http_session(served.url, token) as session:
                whoami = await session.read_resource("astrid://whoami")
        assert json.loads(text_of(whoami))["principal"] == subject


@pytest.mark.parametrize(
    "overrides",
    [
        {"exp": int(time.time()) - 3600},
        {"aud": "https://someone-else.test/mcp"},
        {"iss": "https://evil.test"},
    ],
    ids=["expired", "wrong-audience", "wrong-issuer"],
)
async def test_a_token_that_is_not_for_us_gets_401_and_runs_no_capsule(served: HttpServer, issuer: Issuer, overrides):
    token = issuer.mint(issuer.claims(**overrides))
    async with httpx2.AsyncClient(timeout=10) as http:
        answer = await http.post(served.url, headers={**ACCEPT, "Authorization": f"Bearer {token}"}, json=INITIALIZE)
    assert answer.status_code == 401
    assert "resource_metadata=" in answer.headers["www-authenticate"]
    assert "resource.read " not in served.log() and "describe for" not in served.log()


async def test_the_protected_resource_metadata_names_the_issuer(served: HttpServer):
    base = served.url.removesuffix("/mcp")
    async with httpx2.AsyncClient(timeout=10) as http:
        answer = await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")
    assert answer.status_code == 200
    metadata = answer.json()
    assert metadata["resource"] == served.url
    assert [server.rstrip("/") for server in metadata["authorization_servers"]] == [ISSUER]
