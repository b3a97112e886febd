"""The host side of `astrid:fs`, `astrid:kv` and `astrid:http`, linked into every capsule.

Every capsule built by the SDK imports the three interfaces; a call is served
only when the capsule's manifest asks for the capability and the operator
granted it (`capabilities.grants.usable`), for the principal of the call being
handled. Everything else is a `capability-denied` naming the fix, never a
trap: like `abi.HostAbi`, nothing here raises into the guest (an exception in
a host callback traps the guest), so every failure becomes the interface's
`error-code`.

The grants file is read per call (one `stat` while it is unchanged), so a
grant or a revoke applies to the next call without a restart.

Every fs call made while a capsule serves a read (`resource.v1.request.read`)
is recorded in `reads` (`file_tracking.ReadTracker`) under (capsule,
principal, the request's uri): the files a resource read touched, whose
changes update that resource for its subscribers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from wasmtime.component import Variant

from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.grants import CapsuleGrants, GrantStore, grant_command, mount_folder, usable
from astrid.host.capabilities.http import HttpGateway
from astrid.host.contract.topics import READ_REQUEST_TOPIC
from astrid.host.kernel.file_tracking import ReadKey, ReadTracker
from astrid.host.kernel.routing import requested_uri
from astrid.host.kernel.wit_values import record
from astrid.host.telemetry import metrics, tracing
from astrid.host.tuning import KERNEL_TUNING

if TYPE_CHECKING:
    from astrid.host.capabilities.fs import MountedFiles
    from astrid.host.kernel.sandbox import Instance

log = logging.getLogger("astrid.capsule")

FS = "astrid:fs/host@1.0.0"
KV = "astrid:kv/host@1.0.0"
HTTP = "astrid:http/host@1.0.0"

# The error-code cases of each interface: those that carry a string, and those that do not.
_CASES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    FS: (
        frozenset({"capability-denied", "invalid-path", "unknown"}),
        frozenset({"boundary-escape", "not-found", "access", "is-directory", "not-directory", "too-large"}),
    ),
    KV: (frozenset({"capability-denied", "invalid-key", "unknown"}), frozenset({"not-found", "too-large", "quota"})),
    HTTP: (
        frozenset(
            {
                "capability-denied",
                "address-denied",
                "invalid-request",
                "dns-error",
                "connection-error",
                "tls-error",
                "unknown",
            }
        ),
        frozenset({"timeout", "body-too-large", "too-many-redirects"}),
    ),
}
KINDS = {FS: "fs", KV: "kv", HTTP: "http"}


def error_value(interface: str, exc: BaseException) -> Variant:
    """The interface's `error-code` value for a failure (any exception: never raise into the guest)."""
    with_text, plain = _CASES[interface]
    if isinstance(exc, CapabilityError):
        if exc.code in with_text:
            return Variant(exc.code, exc.detail or exc.code)
        if exc.code in plain:
            return Variant(exc.code)
        return Variant("unknown", str(exc))
    log.warning("%s host call failed: %s: %s", interface, type(exc).__name__, exc)
    return Variant("unknown", type(exc).__name__)


class CapabilityAbi:
    """Serves the three capability interfaces; `instance_of(store)` finds the calling sandbox."""

    def __init__(
        self,
        grants: GrantStore,
        kv_path: Path,
        instance_of: Callable[[Any], Instance],
        kv_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.grants = grants
        self.kv_path = kv_path
        self.kv_factory = kv_factory  # None: the SQLite file at kv_path (else: shared state on NATS)
        self._instance_of = instance_of
        self._kv: Any = None  # a KvStore, or the factory's (same namespace interface)
        self._gateways: dict[tuple[str, tuple[Any, ...]], HttpGateway] = {}
        self._lock = threading.Lock()
        self.reads = ReadTracker()  # what each resource read looked at through fs

    def link(self, root: Any) -> None:
        """Add the three interfaces to a Linker's root instance."""
        with root.add_instance(FS) as fs:
            fs.add_func("read", self._guarded(FS, "read", lambda i, path: self._files(i).read(path)))
            fs.add_func(
                "list", self._guarded(FS, "list", lambda i, path: [_entry(e) for e in self._files(i).list(path)])
            )
            fs.add_func(
                "stat", self._guarded(FS, "stat", lambda i, path: _entry(self._files(i).stat(path), with_name=False))
            )
        with root.add_instance(KV) as kv:
            kv.add_func("get", self._guarded(KV, "get", lambda i, key: _found(self._namespace(i).get(key))))
            kv.add_func("set", self._guarded(KV, "set", lambda i, key, value: self._namespace(i).set(key, value)))
            kv.add_func("delete", self._guarded(KV, "delete", lambda i, key: self._namespace(i).delete(key)))
            kv.add_func(
                "list-keys", self._guarded(KV, "list-keys", lambda i, prefix: self._namespace(i).list_keys(prefix))
            )
        with root.add_instance(HTTP) as http:
            http.add_func("fetch", self._guarded(HTTP, "fetch", self._fetch))

    def close(self) -> None:
        with self._lock:
            gateways, self._gateways = list(self._gateways.values()), {}
            kv, self._kv = self._kv, None
        for gateway in gateways:
            gateway.close()
        if kv is not None:
            kv.close()

    def _guarded(self, interface: str, op: str, serve: Callable[..., Any]) -> Callable[..., Any]:
        kind = KINDS[interface]

        def host_func(store: Any, *args: Any) -> Any:
            if tracing.on or metrics.on:
                return self._observed(interface, kind, op, serve, store, args)
            try:
                return serve(self._instance_of(store), *args)
            except BaseException as exc:  # never raise into the guest
                return error_value(interface, exc)

        return host_func

    def _observed(
        self, interface: str, kind: str, op: str, serve: Callable[..., Any], store: Any, args: tuple[Any, ...]
    ) -> Any:
        """A capability call as a span (kind, operation, outcome; for http the host, method and status;
        never a path, a key or a body) and a count by kind and outcome. Never raises into the guest."""
        try:
            with tracing.span(f"capability.{kind}.{op}", record_exception=False) as span:
                instance = self._instance_of(store)
                if span:
                    span.set_attributes(
                        {
                            "astrid.capability.kind": kind,
                            "astrid.capability.op": op,
                            "astrid.capsule": instance.capsule.name,
                        }
                    )
                    if interface == HTTP and args:
                        span.set_attributes(_http_request_attributes(args[0]))
                try:
                    value = serve(instance, *args)
                except BaseException as exc:
                    value = error_value(interface, exc)
                    outcome = value.tag if isinstance(value, Variant) else "unknown"
                    if outcome != "not-found":  # an absent key or file is an answer, not a failure
                        tracing.fail(span, outcome)
                else:
                    outcome = "ok"
                    status = getattr(value, "status", None) if interface == HTTP else None
                    if span and isinstance(status, int):
                        span.set_attribute("http.response.status_code", status)
                if span:
                    span.set_attribute("astrid.capability.outcome", outcome)
            metrics.capability(kind, outcome)
            return value
        except BaseException as exc:  # the instrumentation itself: never raise into the guest
            return error_value(interface, exc)

    # -- what the calling capsule may use ---------------------------------------------

    def _usable(self, instance: Instance) -> CapsuleGrants:
        asked = instance.capsule.manifest.capabilities
        granted = self.grants.for_capsule(instance.capsule.name, instance.capsule.grant_identity)
        return usable(granted, fs=asked.fs, kv=asked.kv, http=asked.http)

    @staticmethod
    def _principal(instance: Instance) -> str | None:
        """The verified principal of the call being handled (per-principal state needs one)."""
        call = instance.current
        principal = call.message.principal if call is not None else instance.principal
        return principal.name if principal.is_verified else None

    def _files(self, instance: Instance) -> MountedFiles:
        principal = self._principal(instance)
        mounts: dict[str, Path] = {}
        for mount, template in self._usable(instance).fs:
            folder = mount_folder(template, principal)
            if folder is not None:
                mounts[mount] = folder
        from astrid.host.capabilities.fs import MountedFiles  # here: only a capsule that reads files loads it

        return MountedFiles(
            instance.capsule.name,
            mounts,
            asked=instance.capsule.manifest.capabilities.fs,
            on_touch=self._touch(instance),
        )

    def _touch(self, instance: Instance) -> Callable[[str, str, str], None] | None:
        """What records this call's fs use: only while it serves a read, for a verified principal."""
        call = instance.current
        if call is None or call.message.topic != READ_REQUEST_TOPIC or not call.message.principal.is_verified:
            return None
        uri = requested_uri(call.message)
        if uri is None:
            return None
        key = ReadKey(instance.capsule.source_id, call.message.principal, uri)
        token = (id(call), call.deadline)
        return lambda root, path, kind: self.reads.record(key, token, path, kind, root=root)

    def _namespace(self, instance: Instance) -> Any:
        name = instance.capsule.name
        if not self._usable(instance).kv:
            raise CapabilityError("capability-denied", _kv_denied(instance))
        principal = self._principal(instance)
        if principal is None:
            raise CapabilityError("capability-denied", "kv state is per principal: this call has no verified principal")
        return self._kv_store().namespace(principal, name)

    def prepare_kv(self) -> None:
        """Open the shared kv store ahead of the first call (a NATS bucket is found or made once,
        outside any guest's time bound); a store that cannot be used is said once, here."""
        store = self._kv_store()
        prepare = getattr(store, "prepare", None)  # the SQLite file needs nothing ahead
        if prepare is None:
            return
        try:
            prepare()
        except CapabilityError as exc:
            log.warning("kv state is not available yet: %s", exc.detail or exc.code)

    def _kv_store(self) -> Any:
        with self._lock:
            if self._kv is None:
                from astrid.host.capabilities.kv import KvStore  # here: sqlite3 loads only once a capsule uses kv

                self._kv = self.kv_factory() if self.kv_factory is not None else KvStore(self.kv_path)
            return self._kv

    def _fetch(self, instance: Instance, request: Any) -> Any:
        grants = self._usable(instance).http
        key = (instance.capsule.name, grants)
        with self._lock:
            gateway = self._gateways.get(key)
            if gateway is None:
                if len(self._gateways) >= KERNEL_TUNING.http_gateways_kept:  # grants changed many times: start over
                    for stale in self._gateways.values():
                        stale.close()
                    self._gateways.clear()
                gateway = self._gateways[key] = HttpGateway(instance.capsule.name, grants)
        headers = [(header.name, header.value) for header in request.headers]
        response = gateway.fetch(request.method, request.url, headers, request.body, instance.remaining_call_time())
        return record(
            status=response.status,
            headers=[record(name=name, value=value) for name, value in response.headers],
            body=response.body,
        )


def _http_request_attributes(request: Any) -> dict[str, Any]:
    """A fetch's method, scheme, host and port for its span (never the path, the query or a header)."""
    try:
        parts = urlsplit(str(request.url))
        attributes: dict[str, Any] = {"http.request.method": str(request.method)[:16], "url.scheme": parts.scheme[:16]}
        if parts.hostname:
            attributes["server.address"] = parts.hostname[:253]
        if parts.port is not None:
            attributes["server.port"] = parts.port
        return attributes
    except (ValueError, AttributeError):
        return {}


def _kv_denied(instance: Instance) -> str:
    """Why kv is refused, and the fix: ask for it in the manifest, or grant it."""
    name = instance.capsule.name
    if not instance.capsule.manifest.capabilities.kv:
        return f"{name} does not ask for kv: add `kv = true` to [capabilities] in its Capsule.toml"
    return f"no kv grant for {name}: the operator runs `{grant_command(name, 'kv')}`"


def _found(value: bytes | None) -> bytes:
    if value is None:
        raise CapabilityError("not-found")
    return value


def _entry(entry: Any, *, with_name: bool = True) -> Any:
    fields = {"kind": entry.kind, "size": entry.size, "modified_ms": entry.modified_ms}
    return record(name=entry.name, **fields) if with_name else record(**fields)
