"""The host side of the capability interfaces (`astrid:fs`, `astrid:kv`, `astrid:http`, ...), linked into
every capsule: each registered capability (`capabilities/registry.py`) links its own functions.

A call is served only when the capsule's manifest asks for the capability and
the operator granted it (`Capability.usable`), for the principal of the call
being handled: this module builds each call's `Call` (who calls, what it
asks, what it may use, the time left) and hands it to the capability.
Everything else is a `capability-denied` naming the fix, never a trap: like
`abi.HostAbi`, nothing here raises into the guest (an exception in a host
callback traps the guest), so every failure becomes the interface's
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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmtime.component import Variant

from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.capability import Call, Capability, HostSettings, Served
from astrid.host.capabilities.grants import GrantStore
from astrid.host.capabilities.registry import capabilities
from astrid.host.contract.topics import READ_REQUEST_TOPIC
from astrid.host.kernel.file_tracking import ReadKey, ReadTracker
from astrid.host.kernel.routing import requested_uri
from astrid.host.kernel.wit_values import record
from astrid.host.telemetry import metrics, tracing

if TYPE_CHECKING:
    from astrid.host.kernel.sandbox import Instance

log = logging.getLogger("astrid.capsule")


def error_value(capability: Capability[Any, Any], exc: BaseException) -> Variant:
    """The interface's `error-code` value for a failure (any exception: never raise into the guest)."""
    if isinstance(exc, CapabilityError):
        if exc.code in capability.cases_with_text:
            return Variant(exc.code, exc.detail or exc.code)
        if exc.code in capability.cases_without_text:
            return Variant(exc.code)
        return Variant("unknown", str(exc))
    log.warning("%s host call failed: %s: %s", capability.interface, type(exc).__name__, exc)
    return Variant("unknown", type(exc).__name__)


class CapabilityAbi:
    """Serves every registered capability's interface; `instance_of(store)` finds the calling sandbox."""

    def __init__(
        self,
        grants: GrantStore,
        kv_path: Path,
        instance_of: Callable[[Any], Instance],
        kv_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.grants = grants
        self._instance_of = instance_of
        self.reads = ReadTracker()  # what each resource read looked at through fs
        settings = HostSettings(kv_path, kv_factory)
        self._served: list[Served] = [capability.serve(settings) for capability in capabilities()]

    def link(self, root: Any) -> None:
        """Add every capability's interface to a Linker's root instance."""
        for served in self._served:
            served.link(root, self)

    def prepare(self) -> None:
        """Let each capability get ready ahead of the first call (a shared kv store opened once)."""
        for served in self._served:
            served.prepare()

    def close(self) -> None:
        for served in self._served:
            served.close()

    # -- what a capability links through (`capability.Calls`) -------------------------------

    def record(self, **fields: Any) -> Any:
        return record(**fields)

    def func(self, capability: Capability[Any, Any], op: str, serve: Callable[..., Any]) -> Callable[..., Any]:
        def host_func(store: Any, *args: Any) -> Any:
            if tracing.on or metrics.on:
                return self._observed(capability, op, serve, store, args)
            try:
                return serve(self._call(capability, self._instance_of(store)), *args)
            except BaseException as exc:  # never raise into the guest
                return error_value(capability, exc)

        return host_func

    def _observed(
        self, capability: Capability[Any, Any], op: str, serve: Callable[..., Any], store: Any, args: tuple[Any, ...]
    ) -> Any:
        """A capability call as a span (kind, operation, outcome, and what the capability lets it say)
        and a count by kind and outcome. Never raises into the guest."""
        kind = capability.name
        try:
            with tracing.span(f"capability.{kind}.{op}", record_exception=False) as span:
                instance = self._instance_of(store)
                if span:
                    span.set_attributes(
                        {
                            "astrid.capability.kind": kind,
                            "astrid.capability.op": op,
                            "astrid.capsule": instance.capsule.name,
                            **capability.traced(op, args),
                        }
                    )
                try:
                    value = serve(self._call(capability, instance), *args)
                except BaseException as exc:
                    value = error_value(capability, exc)
                    outcome = value.tag if isinstance(value, Variant) else "unknown"
                    if outcome != "not-found":  # an absent key or file is an answer, not a failure
                        tracing.fail(span, outcome)
                else:
                    outcome = "ok"
                    if span:
                        span.set_attributes(capability.traced_result(value))
                if span:
                    span.set_attribute("astrid.capability.outcome", outcome)
            metrics.capability(kind, outcome)
            return value
        except BaseException as exc:  # the instrumentation itself: never raise into the guest
            return error_value(capability, exc)

    # -- who calls, and what it may use ---------------------------------------------------

    def _call(self, capability: Capability[Any, Any], instance: Instance) -> Call:
        capsule = instance.capsule
        asked = capsule.manifest.capabilities.of(capability)
        granted = self.grants.for_capsule(capsule.name, capsule.grant_identity).of(capability)
        return Call(
            capsule=capsule.name,
            principal=_principal(instance),
            asked=asked,
            granted=capability.usable(granted, asked),
            remaining_s=instance.remaining_call_time(),
            touched=self._touch(instance),
        )

    def _touch(self, instance: Instance) -> Callable[[str, str, str], None] | None:
        """What records this call's file use: only while it serves a read, for a verified principal."""
        call = instance.current
        if call is None or call.message.topic != READ_REQUEST_TOPIC or not call.message.principal.is_verified:
            return None
        uri = requested_uri(call.message)
        if uri is None:
            return None
        key = ReadKey(instance.capsule.source_id, call.message.principal, uri)
        token = (id(call), call.deadline)
        return lambda root, path, kind: self.reads.record(key, token, path, kind, root=root)


def _principal(instance: Instance) -> str | None:
    """The verified principal of the call being handled (per-principal state needs one)."""
    call = instance.current
    principal = call.message.principal if call is not None else instance.principal
    return principal.name if principal.is_verified else None
