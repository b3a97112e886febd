"""Outbound HTTP under grants: parsing grants, reaching a granted loopback server, redirects, limits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.http import HttpGateway, HttpGrant, parse_http_grant
from tests.host.capabilities.http_server import LoopbackServer, loopback_server


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with loopback_server() as running:
        yield running


def gateway_for(server: LoopbackServer) -> HttpGateway:
    return HttpGateway("fetcher", [parse_http_grant(f"http://127.0.0.1:{server.port}")])


@pytest.mark.parametrize(
    ("spec", "grant", "text"),
    [
        ("api.example.com", HttpGrant("https", "api.example.com", None), "api.example.com"),
        ("API.Example.com:8443", HttpGrant("https", "api.example.com", 8443), "api.example.com:8443"),
        ("https://api.example.com", HttpGrant("https", "api.example.com", None), "api.example.com"),
        ("http://127.0.0.1:8080", HttpGrant("http", "127.0.0.1", 8080), "http://127.0.0.1:8080"),
        ("http://[::1]:8080", HttpGrant("http", "::1", 8080), "http://[::1]:8080"),
    ],
)
def test_grants_parse_to_one_canonical_form(spec: str, grant: HttpGrant, text: str) -> None:
    assert parse_http_grant(spec) == grant
    assert grant.text() == text and parse_http_grant(text) == grant


@pytest.mark.parametrize(
    "spec", ["", "ftp://x", "x/path", "x?q", "user@x", "x:0", "x:70000", "x:port", "under_score.com", "[nothex]:1"]
)
def test_bad_grants_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_http_grant(spec)


def test_a_granted_loopback_server_is_reached(server: LoopbackServer) -> None:
    response = gateway_for(server).fetch("GET", server.base + "/hello?x=1", [("X-Ask", "yes")], None, 10)
    assert response.status == 200 and response.body == b"hello"
    assert ("x-seen-method", "GET") in [(n.lower(), v) for n, v in response.headers]
    method, path, headers, _ = server.seen.requests[-1]
    assert (method, path) == ("GET", "/hello?x=1") and headers["X-Ask"] == "yes"
    assert headers["Host"] == f"127.0.0.1:{server.port}"


def test_post_with_a_body_and_head(server: LoopbackServer) -> None:
    gateway = gateway_for(server)
    assert gateway.fetch("post", server.base + "/echo", [], b"payload", 10).body == b"payload"
    head = gateway.fetch("HEAD", server.base + "/hello", [], None, 10)
    assert head.status == 200 and head.body == b""


def test_a_redirect_within_the_grants_is_followed(server: LoopbackServer) -> None:
    server.redirect_to["/old"] = "/hello"
    response = gateway_for(server).fetch("GET", server.base + "/old", [], None, 10)
    assert response.status == 200 and response.body == b"hello"
    assert [path for _, path, _, _ in server.seen.requests] == ["/old", "/hello"]


def test_too_many_redirects(server: LoopbackServer) -> None:
    for n in range(10):
        server.redirect_to[f"/r{n}"] = f"/r{n + 1}"
    assert _code(lambda: gateway_for(server).fetch("GET", server.base + "/r0", [], None, 10)) == "too-many-redirects"


def test_the_call_budget_bounds_the_request(server: LoopbackServer) -> None:
    assert _code(lambda: gateway_for(server).fetch("GET", server.base + "/slow", [], None, 0.3)) == "timeout"


def test_bad_requests_are_invalid(server: LoopbackServer) -> None:
    gateway = gateway_for(server)
    assert _code(lambda: gateway.fetch("BREW", server.base, [], None, 5)) == "invalid-request"
    assert _code(lambda: gateway.fetch("GET", "not a url", [], None, 5)) == "invalid-request"
    assert _code(lambda: gateway.fetch("GET", "ftp://127.0.0.1/", [], None, 5)) == "invalid-request"


def _code(call) -> str:
    with pytest.raises(CapabilityError) as caught:
        call()
    return caught.value.code


def test_a_refusal_names_the_grant_or_else_the_manifest_line_that_must_come_first(server: LoopbackServer) -> None:
    """No scheme is https in the manifest too: a plain-http fetch it does not ask for is a manifest fix."""
    url = f"http://127.0.0.1:{server.port}/hello"
    asked_http = HttpGateway("weather", [], asked=[f"http://127.0.0.1:{server.port}"])
    with pytest.raises(CapabilityError) as granted_only:
        asked_http.fetch("GET", url, [], None, 2.0)
    assert (granted_only.value.detail or "").endswith(
        f"the operator runs `astrid capsule grant weather http:http://127.0.0.1:{server.port}`"
    )
    asked_https = HttpGateway("weather", [parse_http_grant(f"127.0.0.1:{server.port}")], asked=["127.0.0.1"])
    with pytest.raises(CapabilityError) as manifest_first:
        asked_https.fetch("GET", url, [], None, 2.0)
    assert manifest_first.value.code == "capability-denied"
    assert "Capsule.toml does not ask for it" in (manifest_first.value.detail or "")
    assert f'add "http://127.0.0.1:{server.port}" there' in (manifest_first.value.detail or "")
    assert server.seen.requests == []
