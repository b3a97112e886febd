"""`http`: outbound HTTP to the hosts the operator allows (docs/capabilities.md).

Asked with `http = ["api.example.com", "http://127.0.0.1:8765"]` and granted
with `astrid capsule grant NAME http:api.example.com` (or
`http:http://127.0.0.1:8765`): one spelling with one meaning for both,
`[http://]HOST[:PORT]`. No scheme is HTTPS, in the manifest as in the grant,
so the grant `capsule list -v` prints for an entry is the one that serves
it; an entry without a port takes a grant of any port. A request goes only
to a granted scheme, host and port, through `HttpGateway`
(`capabilities/http.py`: the address checks, redirects, limits).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from astrid.host.capabilities.capability import Call, Calls, Capability, HostSettings, Served
from astrid.host.capabilities.http import DEFAULT_PORTS, HttpGateway, HttpGrant, asks_for, parse_http_grant
from astrid.host.tuning import KERNEL_TUNING

SHAPES = "http:HOST[:PORT] (http:http://HOST[:PORT] for plain http)"
_OTHER_SCHEME = {"https": "http", "http": "https"}


class Http(Capability[tuple[str, ...], tuple[HttpGrant, ...]]):
    name = "http"
    interface = "astrid:http/host@1.0.0"
    asks_like = 'http = ["api.example.com"]'
    grants_like = SHAPES
    revokes_like = "http:HOST[:PORT]"
    nothing_asked: tuple[str, ...] = ()
    nothing_granted: tuple[HttpGrant, ...] = ()
    in_every_metadata = True
    cases_with_text = frozenset(
        {
            "capability-denied",
            "address-denied",
            "invalid-request",
            "dns-error",
            "connection-error",
            "tls-error",
            "unknown",
        }
    )
    cases_without_text = frozenset({"timeout", "body-too-large", "too-many-redirects"})

    def ask(self, value: object) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
            raise ValueError('http must be a list of hosts, e.g. ["api.example.com", "http://127.0.0.1:8765"]')
        for entry in value:
            try:
                parse_http_grant(entry)
            except ValueError:
                raise ValueError(
                    f"host {entry!r} must be [http://]HOST[:PORT]: a host name or address, maybe with a port "
                    "and http:// for plain HTTP (no path)"
                ) from None
        return tuple(value)

    def ask_json(self, ask: tuple[str, ...]) -> list[str]:
        return sorted(set(ask))

    def ask_specs(self, ask: tuple[str, ...]) -> list[str]:
        return [f"http:{entry}" for entry in self.ask_json(ask)]

    def covers(self, ask: tuple[str, ...], other: tuple[str, ...]) -> bool:
        return set(other) <= set(ask)

    def granted(self, current: tuple[HttpGrant, ...], spec: str) -> tuple[tuple[HttpGrant, ...], str]:
        grant = _grant(spec)
        return tuple(g for g in current if g != grant) + (grant,), f"http:{grant.text()}"

    def revoked(self, current: tuple[HttpGrant, ...], spec: str) -> tuple[HttpGrant, ...]:
        grant = _grant(spec)
        return tuple(g for g in current if g != grant)

    def grant_json(self, grant: tuple[HttpGrant, ...]) -> list[str]:
        return [each.text() for each in grant]

    def grant_from_json(self, value: object) -> tuple[HttpGrant, ...]:
        if not isinstance(value, list) or not all(isinstance(text, str) for text in value):
            raise ValueError("must be a list of hosts")
        return tuple(parse_http_grant(text) for text in value)

    def grant_specs(self, grant: tuple[HttpGrant, ...]) -> list[str]:
        return [f"http:{each.text()}" for each in grant]

    def usable(self, granted: tuple[HttpGrant, ...], asked: tuple[str, ...]) -> tuple[HttpGrant, ...]:
        return tuple(grant for grant in granted if any(covered(entry, grant) for entry in asked))

    def explain(self, capsule: str, asked: tuple[str, ...], granted: tuple[HttpGrant, ...]) -> list[str]:
        lines = []
        for entry in asked:
            reaching = [grant.text() for grant in granted if covered(entry, grant)]
            if reaching:
                lines.append(f"http {entry}: granted: {', '.join(reaching)}")
                continue
            line = f"http {entry}: not granted (astrid capsule grant {capsule} http:{entry})"
            other = [g.text() for g in granted if covered(entry, replace(g, scheme=_OTHER_SCHEME[g.scheme]))]
            if other:  # the other scheme is granted: the manifest must say which one the capsule fetches
                scheme = parse_http_grant(entry).scheme
                line += f"; {', '.join(other)} is granted, but this entry asks for {scheme}"
                if scheme == "https":
                    line += " (an entry without http:// is https; write http:// in Capsule.toml for plain http)"
            lines.append(line)
        return lines

    def serve(self, settings: HostSettings) -> ServedHttp:
        return ServedHttp()

    def traced(self, op: str, args: tuple[Any, ...]) -> dict[str, Any]:
        """A fetch's method, scheme, host and port (never the path, the query or a header)."""
        if not args:
            return {}
        try:
            parts = urlsplit(str(args[0].url))
            attributes: dict[str, Any] = {
                "http.request.method": str(args[0].method)[:16],
                "url.scheme": parts.scheme[:16],
            }
            if parts.hostname:
                attributes["server.address"] = parts.hostname[:253]
            if parts.port is not None:
                attributes["server.port"] = parts.port
            return attributes
        except (ValueError, AttributeError):
            return {}

    def traced_result(self, value: Any) -> dict[str, Any]:
        status = getattr(value, "status", None)
        return {"http.response.status_code": status} if isinstance(status, int) else {}


HTTP = Http()


def covered(entry: str, grant: HttpGrant) -> bool:
    """Does `grant` reach the manifest's `http` entry (`host`, `host:port`, `http://host:port`, `[v6]:port`)?
    Only a grant of the entry's own scheme does (no scheme: https), of any port when the entry names none."""
    return asks_for(entry, grant.scheme, grant.host, grant.port or DEFAULT_PORTS[grant.scheme])


def _grant(spec: str) -> HttpGrant:
    kind, _, rest = spec.partition(":")
    if kind != "http" or not rest:
        raise ValueError(f"write {SHAPES}")
    return parse_http_grant(rest)


class ServedHttp(Served):
    def __init__(self) -> None:
        self._gateways: dict[tuple[str, tuple[HttpGrant, ...], tuple[str, ...]], HttpGateway] = {}
        self._lock = threading.Lock()

    def link(self, root: Any, calls: Calls) -> None:
        with root.add_instance(HTTP.interface) as http:
            http.add_func("fetch", calls.func(HTTP, "fetch", lambda call, request: self._fetch(call, request, calls)))

    def close(self) -> None:
        with self._lock:
            gateways, self._gateways = list(self._gateways.values()), {}
        for gateway in gateways:
            gateway.close()

    def _fetch(self, call: Call, request: Any, calls: Calls) -> Any:
        key = (call.capsule, call.granted, call.asked)
        with self._lock:
            gateway = self._gateways.get(key)
            if gateway is None:
                if len(self._gateways) >= KERNEL_TUNING.http_gateways_kept:  # grants changed many times: start over
                    for stale in self._gateways.values():
                        stale.close()
                    self._gateways.clear()
                gateway = self._gateways[key] = HttpGateway(call.capsule, call.granted, asked=call.asked)
        headers = [(header.name, header.value) for header in request.headers]
        response = gateway.fetch(request.method, request.url, headers, request.body, call.remaining_s)
        return calls.record(
            status=response.status,
            headers=[calls.record(name=name, value=value) for name, value in response.headers],
            body=response.body,
        )
