"""`Context`: what a handler knows about the call, and what it may do from there.

The verified principal and the call's URI, template variables or completion
arguments; the host services (`ctx.fs`, `ctx.kv`, `ctx.http`, config, log,
clock); `ctx.updated(uri)`, the resource-update announcement (docs/contract/subscriptions.md
§11); and `ctx.request`, a request/response client over the bus with its
correlation ids (`mint_correlation_id`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from astrid_sdk._capabilities import Files, Http, KeyValue
from astrid_sdk._checks import check_uri
from astrid_sdk._encoding import dumps
from astrid_sdk._errors import DefinitionError, HostError, NotGranted, RequestError

if TYPE_CHECKING:
    from astrid_sdk._capsule import Capsule

# astrid-bus:resource-events@1.0.0 (docs/contract/subscriptions.md §11): `ctx.updated(uri)` publishes here.
UPDATED_TOPIC = "resource.v1.event.updated"
UPDATED_WIT = "astrid-bus:resource-events@1.0.0"
REQUEST_TIMEOUT_MS = 1000  # well inside the 2 s call budget and the 2.5 s read window


class Context:
    """What a handler knows about the call: the verified principal and the host services."""

    def __init__(self, capsule: Capsule, host, caller, uri: str | None = None, key: str | None = None) -> None:
        self._capsule = capsule
        self._host = host
        self.principal: str = caller.principal
        self.attribution: str = caller.attribution
        self.source_id: str = caller.source_id  # who sent the request (e.g. the broker)
        self.timestamp: str = caller.timestamp
        self.capsule: str = capsule.name
        self.uri = uri  # the URI being read (None in describe and completion)
        self.key = key  # the part of `uri` after a family's prefix
        self.template: str | None = None  # the uri template being read or completed
        self.params: dict[str, str] = {}  # a template read: the URI's decoded variables
        self.arguments: dict[str, str] = {}  # a completion: the template's variables already given

    @property
    def fs(self) -> Files:
        """Read-only files under the mounts granted to this capsule (docs/capabilities.md)."""
        return Files(self._host)

    @property
    def kv(self) -> KeyValue:
        """This capsule's durable key-value state for the calling principal."""
        return KeyValue(self._host)

    @property
    def http(self) -> Http:
        """Outbound HTTP to the hosts granted to this capsule."""
        return Http(self._host)

    def config(self, key: str) -> str | None:
        """A `[config]` value from Capsule.toml as a string, or None when not set."""
        return self._host.config(key)

    def log(self, message: str, level: str = "info") -> None:
        """A line in the host's log, attributed to this capsule."""
        self._host.log(level, str(message))

    def clock_ms(self) -> int:
        """Host wall-clock milliseconds (the guest has no clock of its own)."""
        return self._host.clock_ms()

    def updated(self, uri: str | None = None) -> None:
        """Tell this principal's clients subscribed to `uri` that it changed (docs/contract/subscriptions.md §11).

        `uri` defaults to the URI being read. Call it once the change is
        made (after `ctx.kv.set`, say): the host drops any kept read of it,
        then clients read it again. It goes to the calling principal's
        subscribers only, and the host forwards it only for a URI this
        capsule serves that principal (it lists it, or its template covers
        it); announcements are rate-limited. Needs one line in Capsule.toml:

            [publish]
            "resource.v1.event.updated" = { wit = "astrid-bus:resource-events@1.0.0" }

        Raises `NotGranted` without that line, `DefinitionError` for a bad
        URI, another `HostError` when the host refuses it.
        """
        target = self.uri if uri is None else uri
        if not isinstance(target, str) or not target:
            raise DefinitionError("updated(): name the URI that changed (no URI is being read here)")
        check_uri(target)
        try:
            self._host.publish(UPDATED_TOPIC, dumps({"uri": target}))
        except HostError as exc:
            if exc.code == "capability-denied":
                raise NotGranted(
                    exc.code,
                    f"{self.capsule} may not announce updates: add "
                    f'"{UPDATED_TOPIC}" = {{ wit = "{UPDATED_WIT}" }} under [publish] in its Capsule.toml',
                ) from None
            raise

    def request(
        self, topic: str, reply_prefix: str, payload: dict | None = None, timeout_ms: int = REQUEST_TIMEOUT_MS
    ) -> dict:
        """Request/response over the bus: the reply to `payload` on `topic`, as a dict.

        Mints a correlation id (host clock + a counter), subscribes to
        `<reply_prefix>.<correlation_id>` first, then publishes
        `{**payload, "correlation_id": ...}` on `topic`. Both topics must be
        declared in Capsule.toml. Raises RequestError on refusal or timeout.
        """
        correlation_id = self._capsule._mint_id(self._host, self.principal)
        body = dict(payload or {})
        body["correlation_id"] = correlation_id
        try:
            subscription = self._host.subscribe(f"{reply_prefix}.{correlation_id}")
        except HostError as exc:
            raise RequestError(f"cannot subscribe to {reply_prefix}.*: {exc} (declare it in [subscribe])") from None
        try:
            try:
                self._host.publish(topic, dumps(body))
            except HostError as exc:
                raise RequestError(f"cannot publish on {topic}: {exc} (declare it in [publish])") from None
            try:
                messages = subscription.recv(timeout_ms)
            except HostError as exc:
                raise RequestError(f"no reply on {reply_prefix}.*: {exc}") from None
        finally:
            subscription.close()
        if not messages:
            raise RequestError(f"no reply to {topic} within {timeout_ms} ms")
        try:
            reply = json.loads(messages[0].payload)
        except ValueError:
            raise RequestError(f"the reply to {topic} is not JSON") from None
        if not isinstance(reply, dict):
            raise RequestError(f"the reply to {topic} is not a JSON object")
        return reply


def mint_correlation_id(reply_suffix: str, clock_ms: int, counter: int, principal: str | None) -> str:
    """A correlation id: host clock + per-instance counter + a principal hash (no randomness)."""
    digest = 2166136261
    for byte in (principal or "").encode("utf-8"):
        digest = ((digest ^ byte) * 16777619) & 0xFFFFFFFF
    return f"{reply_suffix[:32]}-{clock_ms}-{counter}-{digest:08x}"
