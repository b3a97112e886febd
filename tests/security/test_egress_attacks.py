"""Attacks on `astrid:http` at the host module: reaching what was not granted, SSRF, DNS rebinding.

A hostile capsule picks the URL, the headers and (through DNS it controls)
what a name resolves to. Each attack must be refused, and the loopback
server standing in for an internal service must not be reached.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.http import HttpGateway, parse_http_grant
from tests.host.capabilities.http_server import LoopbackServer, loopback_server


@pytest.fixture
def internal() -> Iterator[LoopbackServer]:
    """An internal service on loopback that no capsule may reach unless granted by address."""
    with loopback_server() as running:
        yield running


def refused(gateway: HttpGateway, url: str, headers=(), code: str | None = None) -> CapabilityError:
    with pytest.raises(CapabilityError) as caught:
        gateway.fetch("GET", url, list(headers), None, 5)
    if code is not None:
        assert caught.value.code == code, caught.value
    return caught.value


def test_a_host_with_no_grant_is_refused_with_the_exact_grant_command(internal: LoopbackServer) -> None:
    gateway = HttpGateway("fetcher", [parse_http_grant("api.example.com")])
    error = refused(gateway, internal.base + "/", code="capability-denied")
    assert f"astrid capsule grant fetcher http:http://127.0.0.1:{internal.port}" in (error.detail or "")
    assert internal.seen.requests == []


def test_the_granted_host_on_another_port_or_scheme_is_refused(internal: LoopbackServer) -> None:
    gateway = HttpGateway("fetcher", [parse_http_grant(f"http://127.0.0.1:{internal.port + 1}")])
    refused(gateway, internal.base + "/", code="capability-denied")
    https_only = HttpGateway("fetcher", [parse_http_grant(f"127.0.0.1:{internal.port}")])
    refused(https_only, internal.base + "/", code="capability-denied")  # an https grant, an http URL
    subdomain = HttpGateway("fetcher", [parse_http_grant("example.com")])
    refused(subdomain, "https://api.example.com/", code="capability-denied")  # no implicit subdomains
    assert internal.seen.requests == []


def test_a_redirect_to_a_host_or_port_not_granted_is_refused(internal: LoopbackServer) -> None:
    internal.redirect_to["/to-other-port"] = f"http://127.0.0.1:{internal.port + 1}/"
    internal.redirect_to["/to-metadata"] = "http://169.254.169.254/latest/meta-data/"
    gateway = HttpGateway("fetcher", [parse_http_grant(f"http://127.0.0.1:{internal.port}")])
    refused(gateway, internal.base + "/to-other-port", code="capability-denied")
    refused(gateway, internal.base + "/to-metadata", code="capability-denied")


def test_a_name_resolving_to_loopback_is_refused_unless_the_address_is_granted(internal: LoopbackServer) -> None:
    by_name = HttpGateway("fetcher", [parse_http_grant(f"http://localhost:{internal.port}")])
    refused(by_name, f"http://localhost:{internal.port}/", code="address-denied")
    assert internal.seen.requests == []
    by_address = HttpGateway("fetcher", [parse_http_grant(f"http://127.0.0.1:{internal.port}")])
    assert by_address.fetch("GET", internal.base + "/", [], None, 5).status == 200


@pytest.mark.parametrize(
    "address", ["10.0.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fe80::1",
                "fd00::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "224.0.0.1"],
)  # fmt: skip
def test_a_granted_name_resolving_to_a_special_address_is_refused(address: str) -> None:
    gateway = HttpGateway("fetcher", [parse_http_grant("api.example.test")], resolve=lambda host, port: [address])
    refused(gateway, "https://api.example.test/", code="address-denied")


def test_one_bad_address_among_good_ones_is_enough_to_refuse() -> None:
    gateway = HttpGateway(
        "fetcher", [parse_http_grant("api.example.test")], resolve=lambda host, port: ["93.184.216.34", "127.0.0.1"]
    )
    refused(gateway, "https://api.example.test/", code="address-denied")


def test_dns_rebinding_cannot_swap_in_loopback_after_the_check(internal: LoopbackServer) -> None:
    # The name is resolved once per hop and the checked address is the one connected to,
    # so a second answer (loopback) is never asked for. A zero budget stops the request
    # right after the check: no packet leaves for the public address.
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["93.184.216.34"] if len(asked) == 1 else ["127.0.0.1"]

    gateway = HttpGateway(
        "fetcher", [parse_http_grant(f"http://rebind.example.test:{internal.port}")], resolve=rebinding
    )
    with pytest.raises(CapabilityError) as caught:
        gateway.fetch("GET", f"http://rebind.example.test:{internal.port}/", [], None, 0)
    assert caught.value.code == "timeout"
    assert asked == ["rebind.example.test"]
    assert internal.seen.requests == []


def test_credentials_do_not_follow_a_redirect_to_another_origin() -> None:
    with loopback_server() as first, loopback_server() as second:
        first.redirect_to["/go"] = second.base + "/landing"
        gateway = HttpGateway(
            "fetcher",
            [parse_http_grant(f"http://127.0.0.1:{first.port}"), parse_http_grant(f"http://127.0.0.1:{second.port}")],
        )
        headers = [("Authorization", "Bearer secret"), ("Cookie", "s=1"), ("X-Keep", "yes")]
        assert gateway.fetch("GET", first.base + "/go", headers, None, 5).status == 200
        assert first.seen.requests[0][2]["Authorization"] == "Bearer secret"
        landed = second.seen.requests[0][2]
        assert "Authorization" not in landed and "Cookie" not in landed and landed["X-Keep"] == "yes"


def test_an_oversized_body_is_refused(internal: LoopbackServer) -> None:
    gateway = HttpGateway("fetcher", [parse_http_grant(f"http://127.0.0.1:{internal.port}")])
    refused(gateway, internal.base + "/big", code="body-too-large")


@pytest.mark.parametrize(
    "headers", [[("X-A", "v\r\nX-Injected: 1")], [("X-A\r\nX-Injected", "1")], [("Bad Name", "v")], [("X", "a\nb")]]
)
def test_header_injection_is_refused(internal: LoopbackServer, headers) -> None:
    gateway = HttpGateway("fetcher", [parse_http_grant(f"http://127.0.0.1:{internal.port}")])
    refused(gateway, internal.base + "/", headers=headers, code="invalid-request")
    assert internal.seen.requests == []


def test_userinfo_in_the_url_is_refused(internal: LoopbackServer) -> None:
    gateway = HttpGateway("fetcher", [parse_http_grant(f"http://127.0.0.1:{internal.port}")])
    refused(gateway, f"http://user:pw@127.0.0.1:{internal.port}/", code="invalid-request")
    refused(gateway, f"http://api.example.com@127.0.0.1:{internal.port}/", code="invalid-request")
