"""The host ABI as the SDK sees it: a thin adapter over componentize-py's bindings.

`WitHost` exists only inside a componentize-py build (it imports the generated
`wit_world`). Everything else in the SDK talks to a host through the small
duck-typed surface below, so the SDK logic stays testable on its own.
"""

from __future__ import annotations

from componentize_py_types import Err
from wit_world.imports import astrid_fs_host as fs_host
from wit_world.imports import astrid_http_host as http_host
from wit_world.imports import astrid_ipc_host as ipc
from wit_world.imports import astrid_kv_host as kv_host
from wit_world.imports import astrid_sys_host as sys_host

from astrid_sdk._errors import HostError, capability_error

MAX_LOG_CHARS = 4096  # what the host keeps of one log message
MAX_CONFIG_KEYS_KEPT = 256  # config values kept per sandbox (a capsule asking for made-up keys grows nothing)
LEVELS = {
    "trace": sys_host.LogLevel.TRACE,
    "debug": sys_host.LogLevel.DEBUG,
    "info": sys_host.LogLevel.INFO,
    "warn": sys_host.LogLevel.WARN,
    "warning": sys_host.LogLevel.WARN,
    "error": sys_host.LogLevel.ERROR,
}


def _code(value: object) -> tuple[str, str]:
    # ErrorCode_CapabilityDenied -> "capability-denied"; Unknown carries a string.
    name = type(value).__name__.split("_", 1)[-1]
    kebab = "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")
    return kebab, str(getattr(value, "value", "") or "")


def _attribution(value: object) -> tuple[str, str | None]:
    if isinstance(value, ipc.PrincipalAttribution_Verified):
        return "verified", value.value
    if isinstance(value, ipc.PrincipalAttribution_Claimed):
        return "claimed", value.value
    return "system", None


class Caller:
    __slots__ = ("attribution", "principal", "source_id", "timestamp")

    def __init__(self, attribution: str, principal: str | None, source_id: str, timestamp: str) -> None:
        self.attribution = attribution
        self.principal = principal
        self.source_id = source_id
        self.timestamp = timestamp


class Delivered:
    __slots__ = ("topic", "payload", "source_id", "attribution", "principal", "timestamp")

    def __init__(self, message) -> None:
        self.topic = message.topic
        self.payload = message.payload
        self.source_id = message.source_id
        self.attribution, self.principal = _attribution(message.principal)
        self.timestamp = message.timestamp


class WitSubscription:
    def __init__(self, handle) -> None:
        self._handle = handle

    def recv(self, timeout_ms: int) -> list[Delivered]:
        try:
            envelope = self._handle.recv(max(0, int(timeout_ms)))
        except Err as err:
            code, detail = _code(err.value)
            if code == "timeout":
                return []
            raise HostError(code, detail) from None
        return [Delivered(m) for m in envelope.messages]

    def poll(self) -> list[Delivered]:
        try:
            envelope = self._handle.poll()
        except Err as err:
            raise HostError(*_code(err.value)) from None
        return [Delivered(m) for m in envelope.messages]

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.__exit__(None, None, None)


class WitHost:
    """The real host, through the generated bindings."""

    def __init__(self) -> None:
        # A capsule's [config] cannot change while its sandbox lives (a changed Capsule.toml
        # replaces the capsule and its sandboxes), so each key is asked of the host once.
        self._config: dict[str, str | None] = {}

    def caller(self) -> Caller | None:
        try:
            context = sys_host.get_caller()
        except Err:
            return None
        attribution, name = _attribution(context.attribution)
        return Caller(attribution, name, context.source_id, context.timestamp)

    def publish(self, topic: str, payload: str) -> None:
        try:
            ipc.publish(topic, payload)
        except Err as err:
            raise HostError(*_code(err.value)) from None

    def subscribe(self, pattern: str) -> WitSubscription:
        try:
            return WitSubscription(ipc.subscribe(pattern))
        except Err as err:
            raise HostError(*_code(err.value)) from None

    def log(self, level: str, message: str) -> None:
        # The host keeps the first MAX_LOG_CHARS of a message: send no more, and valid UTF-8 only.
        text = message[:MAX_LOG_CHARS]
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
        sys_host.log(LEVELS.get(level, sys_host.LogLevel.INFO), text)

    def config(self, key: str) -> str | None:
        try:
            return self._config[key]
        except KeyError:
            pass
        try:
            value = sys_host.get_config(key)
        except Err:
            value = None
        if len(self._config) < MAX_CONFIG_KEYS_KEPT:
            self._config[key] = value
        return value

    def clock_ms(self) -> int:
        return sys_host.clock_ms()

    # -- the capabilities: every refusal becomes a HostError subclass ----------------

    def fs_read(self, path: str) -> bytes:
        return _granted(lambda: fs_host.read(path))

    def fs_list(self, path: str) -> list:
        entries = _granted(lambda: fs_host.list(path))
        return [(e.name, e.kind.name.lower(), e.size, e.modified_ms) for e in entries]

    def fs_stat(self, path: str) -> tuple:
        found = _granted(lambda: fs_host.stat(path))
        return found.kind.name.lower(), found.size, found.modified_ms

    def kv_get(self, key: str) -> bytes | None:
        try:
            return kv_host.get(key)
        except Err as err:
            code, detail = _code(err.value)
            if code == "not-found":
                return None
            raise capability_error(code, detail) from None

    def kv_set(self, key: str, value: bytes) -> None:
        _granted(lambda: kv_host.set(key, value))

    def kv_delete(self, key: str) -> None:
        _granted(lambda: kv_host.delete(key))

    def kv_keys(self, prefix: str) -> list:
        return _granted(lambda: kv_host.list_keys(prefix))

    def http_fetch(self, method: str, url: str, headers: list, body: bytes | None) -> tuple:
        request = http_host.Request(
            method=method,
            url=url,
            headers=[http_host.Header(name=str(name), value=str(value)) for name, value in headers],
            body=body,
        )
        response = _granted(lambda: http_host.fetch(request))
        return response.status, [(h.name, h.value) for h in response.headers], response.body


def _granted(call):
    """Run a capability call; its `error-code` becomes the matching HostError subclass."""
    try:
        return call()
    except Err as err:
        raise capability_error(*_code(err.value)) from None
