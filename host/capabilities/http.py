"""Outbound HTTP for capsules: only to granted hosts, never to the host's own network by surprise.

A grant names a scheme, a host and maybe a port (`HttpGrant`); a request's
URL must match one exactly (no implicit subdomains, the scheme's default port
when the grant names none). Then the gateway resolves the name itself and
refuses loopback, private, link-local and other special-purpose addresses
unless the grant names that very address: a public name cannot be pointed at
an internal service. It connects to the address it checked (the URL is
rewritten to it, with the `Host` header and the TLS server name kept as the
real name), so a second DNS answer cannot swap in another one (DNS
rebinding). Redirects are followed here, each hop checked like the first,
and credentials are dropped when a hop leaves the origin.

The client is `httpx2` (what the `mcp` SDK uses), with no environment proxies
and a fresh connection per hop: a pooled TLS connection verified for one
name must never carry a request for another name on the same address.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx2

from astrid.host.capabilities.errors import CapabilityError

MAX_BODY = 4 << 20
MAX_REDIRECTS = 5
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
DEFAULT_PORTS = {"https": 443, "http": 80}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CREDENTIALS = frozenset({"authorization", "cookie", "proxy-authorization"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*\.?")

Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class HttpGrant:
    scheme: str  # "https" or "http"
    host: str  # a lower-case DNS name, or an IP literal (IPv6 without brackets)
    port: int | None  # None: the scheme's default port only

    def text(self) -> str:
        """The grant as the operator writes it after `http:`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port is not None else ""
        prefix = "http://" if self.scheme == "http" else ""
        return f"{prefix}{host}{port}"

    def allows(self, scheme: str, host: str, port: int) -> bool:
        return scheme == self.scheme and host == self.host and port == (self.port or DEFAULT_PORTS[self.scheme])

    def names_address(self) -> bool:
        return _ip(self.host) is not None


def parse_http_grant(spec: str) -> HttpGrant:
    """`api.example.com`, `api.example.com:8443`, `http://127.0.0.1:8080`, `http://[::1]:8080` -> HttpGrant."""
    text = spec.strip()
    scheme = "https"
    if "://" in text:
        scheme, _, text = text.partition("://")
        scheme = scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise ValueError(f"{spec!r}: the scheme must be http or https")
    if not text or any(c in text for c in "/?#@ \\"):
        raise ValueError(f"{spec!r}: write HOST[:PORT] with no path, query or user")
    host, port = _host_port(text, spec)
    return HttpGrant(scheme, host, port)


def asks_for(entry: str, scheme: str, host: str, port: int) -> bool:
    """Does the manifest's `http` entry ask for this scheme, host and port? The one reading of its
    spelling, as a grant's: the scheme it names (none: https), the host, the port it names (none: any)."""
    asked = parse_http_grant(entry)
    return asked.scheme == scheme and asked.host == host and asked.port in (None, port)


def _host_port(text: str, spec: str) -> tuple[str, int | None]:
    port_text = None
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        if tail:
            if not tail.startswith(":"):
                raise ValueError(f"{spec!r}: write [IPv6]:PORT")
            port_text = tail[1:]
        if _ip(host) is None:
            raise ValueError(f"{spec!r}: {host!r} is not an IPv6 address")
    else:
        host, colon, port_text_found = text.partition(":")
        port_text = port_text_found if colon else None
    host = host.lower()
    if _ip(host) is None and not _HOST.fullmatch(host):
        raise ValueError(f"{spec!r}: {host!r} is not a host name or an IP address")
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{spec!r}: the port must be 1-65535")
    return host, int(port_text)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class HttpGateway:
    """One capsule's outbound HTTP under its grants."""

    def __init__(
        self,
        capsule: str,
        grants: Sequence[HttpGrant],
        *,
        resolve: Resolver | None = None,
        asked: Sequence[str] | None = None,
    ) -> None:
        self.capsule = capsule
        self.grants = tuple(grants)
        self.resolve = resolve or _system_resolve
        self.asked = tuple(asked) if asked is not None else None  # the manifest's entries: a refusal names the fix

    def fetch(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes | None, timeout_s: float
    ) -> HttpResponse:
        method = method.upper()
        if method not in METHODS:
            allowed = ", ".join(sorted(METHODS))
            raise CapabilityError("invalid-request", f"method {method[:20]!r} is not one of {allowed}")
        _check_headers(headers)
        if body is not None and len(body) > MAX_BODY:
            raise CapabilityError("invalid-request", f"the request body is over {MAX_BODY} bytes")
        deadline = time.monotonic() + max(0.0, timeout_s)
        sent = list(headers)
        for _ in range(MAX_REDIRECTS + 1):
            target = self._check(url)
            response = self._send(target, method, sent, body, deadline)
            location = response.headers.get("location") if response.status_code in _REDIRECTS else None
            if location is None:
                return self._answer(response, target, deadline)
            response.close()
            next_url = str(httpx2.URL(url).join(location))
            if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
                method, body = ("GET" if method != "HEAD" else "HEAD"), None
            if _origin(next_url) != _origin(url):  # credentials stay with the origin they were meant for
                sent = [(name, value) for name, value in sent if name.lower() not in _CREDENTIALS]
            url = next_url
        raise CapabilityError("too-many-redirects")

    def close(self) -> None:
        """Nothing is kept between requests (a fresh connection per hop)."""

    # -- one hop ---------------------------------------------------------------------

    def _check(self, url: str) -> _Target:
        """The URL's grant and the one address to connect to, or the reason it is refused."""
        try:
            parts = urlsplit(url)
            scheme, host, port = parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
        except ValueError as exc:
            raise CapabilityError("invalid-request", f"bad URL: {exc}") from None
        if scheme not in DEFAULT_PORTS or not host:
            raise CapabilityError("invalid-request", "the URL must be http:// or https:// with a host")
        if parts.username is not None or parts.password is not None:
            raise CapabilityError("invalid-request", "the URL may not carry a user or password")
        port = port or DEFAULT_PORTS[scheme]
        grant = next((g for g in self.grants if g.allows(scheme, host, port)), None)
        if grant is None:
            raise CapabilityError("capability-denied", self._denied(scheme, host, port))
        address = self._address(grant, host, port)
        return _Target(parts, scheme, host, port, address)

    def _address(self, grant: HttpGrant, host: str, port: int) -> str:
        if grant.names_address():
            return host  # the operator named this very address: reach it whatever it is
        try:
            addresses = self.resolve(host, port)
        except OSError as exc:
            raise CapabilityError("dns-error", f"{host}: {exc.strerror or exc}") from None
        if not addresses:
            raise CapabilityError("dns-error", f"{host}: no address")
        for address in addresses:
            problem = _special(address)
            if problem:
                raise CapabilityError(
                    "address-denied",
                    f"{host} resolves to {address}, a {problem} address: only a grant naming that address reaches it",
                )
        return addresses[0]

    def _denied(self, scheme: str, host: str, port: int) -> str:
        wanted = HttpGrant(scheme, host, None if port == DEFAULT_PORTS[scheme] else port).text()
        command = f"astrid capsule grant {self.capsule} http:{wanted}"
        if self.asked is not None and not any(asks_for(entry, scheme, host, port) for entry in self.asked):
            # A grant would not help: the capsule's own manifest must ask first (no scheme there is https).
            asked = ", ".join(f'"{entry}"' for entry in self.asked)
            return (
                f"no http grant for {scheme}://{host}:{port}, and Capsule.toml does not ask for it "
                f'([capabilities] http = [{asked}]; an entry without http:// is https): add "{wanted}" there, '
                f"then the operator runs `{command}`"
            )
        return f"no http grant for {scheme}://{host}:{port}: the operator runs `{command}`"

    def _send(
        self, target: _Target, method: str, headers: list[tuple[str, str]], body: bytes | None, deadline: float
    ) -> httpx2.Response:
        left = deadline - time.monotonic()
        if left <= 0:
            raise CapabilityError("timeout")
        shown_host = f"[{target.address}]" if ":" in target.address else target.address
        netloc = f"{shown_host}:{target.port}"
        address_url = urlunsplit((target.scheme, netloc, target.parts.path or "/", target.parts.query, ""))
        host_header = target.host if target.port == DEFAULT_PORTS[target.scheme] else f"{target.host}:{target.port}"
        request_headers = [(n, v) for n, v in headers if n.lower() != "host"] + [("Host", host_header)]
        client = httpx2.Client(trust_env=False, follow_redirects=False, timeout=left)
        try:
            request = client.build_request(
                method,
                address_url,
                headers=request_headers,
                content=body,
                extensions={"sni_hostname": target.host} if target.scheme == "https" else None,
            )
            return _with_client(client.send(request, stream=True), client)
        except httpx2.TimeoutException:
            client.close()
            raise CapabilityError("timeout") from None
        except httpx2.ConnectError as exc:
            client.close()
            code = "tls-error" if "SSL" in str(exc) or "certificate" in str(exc).lower() else "connection-error"
            raise CapabilityError(code, f"{target.host}: {_short(exc)}") from None
        except httpx2.HTTPError as exc:
            client.close()
            raise CapabilityError("connection-error", f"{target.host}: {_short(exc)}") from None

    def _answer(self, response: httpx2.Response, target: _Target, deadline: float) -> HttpResponse:
        try:
            chunks: list[bytes] = []
            total = 0
            for chunk in response.iter_raw():
                total += len(chunk)
                if total > MAX_BODY:
                    raise CapabilityError("body-too-large")
                if time.monotonic() > deadline:
                    raise CapabilityError("timeout")
                chunks.append(chunk)
            return HttpResponse(response.status_code, list(response.headers.multi_items()), b"".join(chunks))
        except httpx2.TimeoutException:
            raise CapabilityError("timeout") from None
        except httpx2.HTTPError as exc:
            raise CapabilityError("connection-error", f"{target.host}: {_short(exc)}") from None
        finally:
            response.close()


@dataclass(frozen=True)
class _Target:
    parts: SplitResult
    scheme: str
    host: str
    port: int
    address: str


def _with_client(response: httpx2.Response, client: httpx2.Client) -> httpx2.Response:
    """Close the hop's client together with its response."""
    close = response.close

    def close_both() -> None:
        try:
            close()
        finally:
            client.close()

    response.close = close_both  # type: ignore[method-assign]
    return response


def _system_resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def _special(address: str) -> str | None:
    """Why `address` is not a public unicast address (a word), or None when it is one."""
    ip = _ip(address.split("%", 1)[0])
    if ip is None:
        return "malformed"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in ipaddress.ip_network("64:ff9b::/96"):  # NAT64
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return _special(str(embedded))
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_private or (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT):
        return "private"
    if ip.is_unspecified or ip.is_multicast or ip.is_reserved or not ip.is_global:
        return "special-purpose"
    return None


def _check_headers(headers: Sequence[tuple[str, str]]) -> None:
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise CapabilityError("invalid-request", f"header name {name[:40]!r} is not a valid token")
        if any(c in value for c in "\r\n\0"):
            raise CapabilityError("invalid-request", f"the value of header {name!r} holds CR, LF or NUL")


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme, 0)


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
