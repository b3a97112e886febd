"""The host side of `astrid:ipc` and `astrid:sys`, linked into every capsule
(with `capability_abi`'s fs, kv and http, `wasi`'s deny-by-default WASI and `dev`'s sources beside them).

One Linker serves every Store; each import finds the calling instance by its
Store context. Host imports never raise into the guest: an exception in a
host callback traps the guest and is re-raised on some other thread (the
parked exception is module-global in wasmtime-py), so every failure becomes an
`error-code` (ipc) or an `err` string (sys).

The store registry (`store_key`, `bind_store`, `component_of`) maps a Store to
the component instantiated in it, for `fastpath`'s per-component signature
cache; it is module-global because the host-call trampoline is too. The
required `wasmtime_patches` (and the optional `fastpath`) are installed before
the Linker gets its functions: `add_func` binds the trampoline in place then.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmtime.component import Component, Linker, Record, ResourceAny, ResourceHost, ResourceType, Variant

from astrid.host.bus import Bus, BusError, IpcErrorCode, Message, Principal, Subscription
from astrid.host.capabilities.grants import GrantStore
from astrid.host.capsule.manifest import HOST_CONFIG_PREFIX
from astrid.host.kernel import fastpath, wasmtime_patches
from astrid.host.kernel.capability_abi import CapabilityAbi
from astrid.host.kernel.dev import DevSourcesAbi
from astrid.host.kernel.wasi import WasiHost
from astrid.host.kernel.wit_values import record
from astrid.host.limits import DEFAULT_LIMITS, MIB

if TYPE_CHECKING:
    from astrid.host.kernel.sandbox import Instance

log = logging.getLogger("astrid.capsule")

SUBSCRIPTION_TYPE = 0xA5_7D01
MAX_SUBSCRIPTIONS = 128
POLL_BATCH = 256
# The host's own get-config key (a manifest cannot set it): the sandbox's memory limit, which a
# guest that ran out names ("exceeded N MiB").
MEMORY_LIMIT_KEY = HOST_CONFIG_PREFIX + "memory-limit-mib"
RECV_CAP_S = 60.0
PUBLISHES_PER_CALL = 256
PUBLISH_BYTES_PER_CALL = 8 << 20  # what one call may put in subscriber queues
LOG_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
# A capsule's log (the `log` import; the SDK sends print() and sys.stdout/stderr through it).
LOG_MESSAGE_CHARS = 4096  # what one log call keeps
LOG_LINES_PER_CALL = 512  # per guest call: then one note, and the rest of the call's log is dropped
LOG_CHARS_PER_CALL = 256 * 1024
# A guest's text goes to the operator's terminal: no control character may act on it
# (a newline forging a log line, an escape sequence): each is shown escaped.
_UNPRINTABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x09}
_UNPRINTABLE.update({0x0A: "\\n", 0x0D: "\\r"})


def printable(text: str) -> str:
    """`text` with every control character but tab escaped (`\\n`, `\\x1b`)."""
    return text.translate(_UNPRINTABLE)


class _LogUse:
    """How much one guest call has logged (`call` is the CallContext, or None outside a message)."""

    __slots__ = ("call", "chars", "lines", "over")

    def __init__(self, call: object) -> None:
        self.call = call
        self.lines = 0
        self.chars = 0
        self.over = False


# Store identity -> the Component instantiated in it (between register and release).
_store_components: dict[int, Component] = {}


def store_key(store: Any) -> int:
    """Identity of a Store, the same from a host callback and from outside (the context's address:
    `addressof` reads it in one step, where `ctypes.cast` costs a foreign call on every import)."""
    try:
        return ctypes.addressof(store._context().contents)
    except ValueError:  # a NULL context
        return 0


def bind_store(store: Any, component: Component) -> None:
    _store_components[store_key(store)] = component


def unbind_store(store: Any) -> None:
    _store_components.pop(store_key(store), None)


def component_of(store: Any) -> Component | None:
    """The component instantiated in `store`, or None for a Store the ABI does not know."""
    return _store_components.get(store_key(store))


def attribution(principal: Principal) -> Variant:
    if principal.kind == "system":
        return Variant("system")
    return Variant(principal.kind, principal.name)


def error(code: str, detail: str | None = None) -> Variant:
    """An `astrid:ipc` error-code value (`code` is an `IpcErrorCode`, or a `BusError.code`)."""
    case = str(code)  # the plain case name: wasmtime lowers variants by tag string
    return Variant(case, detail or case) if code == IpcErrorCode.UNKNOWN else Variant(case)


def unexpected(import_name: str, exc: Exception) -> Variant:
    """A host fault inside an import: logged with its traceback (a host bug to find), `unknown` to the guest."""
    log.debug("host import %s failed", import_name, exc_info=exc)
    return error(IpcErrorCode.UNKNOWN, f"{type(exc).__name__}: {exc}")


class HostAbi:
    def __init__(
        self,
        engine: Any,
        bus: Bus,
        grants: GrantStore,
        kv_path: Path,
        *,
        quiet: bool = False,
        kv_factory: Callable[[], Any] | None = None,
        memory_limit_bytes: int = DEFAULT_LIMITS.capsule_memory_bytes,
    ) -> None:
        self.bus = bus
        self.memory_limit_bytes = memory_limit_bytes  # told to a guest that runs out (MEMORY_LIMIT_KEY)
        self.quiet = quiet  # the capsules' log lines at debug level only (a tool's one call: `oneshot`)
        self._instances: dict[int, Instance] = {}
        self._subs: dict[int, tuple[Instance, Subscription]] = {}
        self._reps = itertools.count(1)
        self._lock = threading.Lock()
        self._log_use: dict[int, _LogUse] = {}  # store key -> what its current call has logged
        # Both before add_func, which binds the host-call trampoline they swap.
        wasmtime_patches.install()  # required fixes; refuses an unknown wasmtime
        fastpath.install(component_of)  # optional speed-ups (ASTRID_NO_FASTPATH=1 turns them off)
        self.linker = Linker(engine)
        with self.linker.root() as root:
            with root.add_instance("astrid:ipc/host@1.0.0") as ipc:
                ipc.add_resource("subscription", ResourceType.host(SUBSCRIPTION_TYPE), self._drop_subscription)
                ipc.add_func("publish", self._publish)
                ipc.add_func("subscribe", self._subscribe)
                ipc.add_func("[method]subscription.poll", self._poll)
                ipc.add_func("[method]subscription.recv", self._recv)
            with root.add_instance("astrid:sys/host@1.0.0") as sys_:
                sys_.add_func("get-caller", self._get_caller)
                sys_.add_func("log", self._log)
                sys_.add_func("get-config", self._get_config)
                sys_.add_func("clock-ms", self._clock_ms)
            self.capabilities = CapabilityAbi(grants, kv_path, self._instance, kv_factory)
            self.capabilities.link(root)
            WasiHost(self._log, self._time_left).link(root)
            DevSourcesAbi(lambda store: self._instances.get(store_key(store))).link(root)  # dev capsules only

    # -- instance registry ---------------------------------------------------

    def register(self, instance: Instance) -> None:
        with self._lock:
            self._instances[store_key(instance.store)] = instance
        bind_store(instance.store, instance.capsule.component)

    def release(self, instance: Instance) -> None:
        """Forget an instance and close what it still holds (no destructor runs on close or trap)."""
        unbind_store(instance.store)
        with self._lock:
            self._instances.pop(store_key(instance.store), None)
            self._log_use.pop(store_key(instance.store), None)
            doomed = [rep for rep, (owner, _) in self._subs.items() if owner is instance]
            subscriptions = [self._subs.pop(rep)[1] for rep in doomed]
        for subscription in subscriptions:
            subscription.close()

    def live_subscriptions(self, instance: Instance) -> int:
        with self._lock:
            return sum(1 for owner, _ in self._subs.values() if owner is instance)

    def _instance(self, store: Any) -> Instance:
        return self._instances[store_key(store)]

    def _time_left(self, store: Any) -> float:
        """How long the call running in `store` may still wait (0 outside a call, or for an unknown Store)."""
        instance = self._instances.get(store_key(store))
        return instance.remaining_call_time() if instance is not None else 0.0

    def _own(self, store: Any, handle: ResourceAny) -> Subscription | None:
        host = handle.to_host(store)
        if host.type != SUBSCRIPTION_TYPE:
            return None
        with self._lock:
            entry = self._subs.get(host.rep)
        if entry is None or entry[0] is not self._instance(store):
            return None
        return entry[1]

    # -- astrid:ipc ------------------------------------------------------------

    def _publish(self, store: Any, topic: str, payload: str) -> Variant | None:
        try:
            instance = self._instance(store)
            call = instance.current
            if call is not None:
                call.publishes += 1
                call.published_bytes += len(payload)
                if call.publishes > PUBLISHES_PER_CALL or call.published_bytes > PUBLISH_BYTES_PER_CALL:
                    return error(IpcErrorCode.RATE_LIMITED)
            principal = call.message.principal if call is not None else instance.principal
            self.bus.publish(instance.capsule_participant, topic, payload, principal)
            return None
        except BusError as exc:
            log.debug("publish refused: %s", exc)
            return error(exc.code)
        except Exception as exc:  # never raise into the guest
            return unexpected("publish", exc)

    def _subscribe(self, store: Any, pattern: str) -> Any:
        try:
            instance = self._instance(store)
            if self.live_subscriptions(instance) >= MAX_SUBSCRIPTIONS:
                return error(IpcErrorCode.QUOTA)
            call = instance.current
            scope = call.message.principal if call is not None else instance.principal
            subscription = self.bus.subscribe(instance.capsule_participant, pattern, principal_scope=scope)
            rep = next(self._reps) & 0xFFFFFFFF
            with self._lock:
                self._subs[rep] = (instance, subscription)
            return ResourceHost.own(rep, SUBSCRIPTION_TYPE)
        except BusError as exc:
            return error(exc.code)
        except Exception as exc:
            return unexpected("subscribe", exc)

    def _envelope(self, subscription: Subscription, messages: list[Message]) -> Record:
        dropped, lagged = subscription.take_counters()
        return record(messages=[self._message(m) for m in messages], dropped=dropped, lagged=lagged)

    @staticmethod
    def _message(message: Message) -> Record:
        return record(
            topic=message.topic,
            payload=message.payload,
            source_id=message.source_id,
            principal=attribution(message.principal),
            timestamp=message.timestamp,
        )

    def _poll(self, store: Any, handle: ResourceAny) -> Any:
        try:
            subscription = self._own(store, handle)
            if subscription is None or subscription.closed:
                return error(IpcErrorCode.CLOSED)
            return self._envelope(subscription, subscription.poll(POLL_BATCH))
        except Exception as exc:
            return unexpected("poll", exc)

    def _recv(self, store: Any, handle: ResourceAny, timeout_ms: int) -> Any:
        try:
            subscription = self._own(store, handle)
            if subscription is None or subscription.closed:
                return error(IpcErrorCode.CLOSED)
            # The epoch cannot interrupt a host call: bound the wait by the
            # time the current guest call has left.
            instance = self._instance(store)
            wait_s = min(timeout_ms / 1000.0, RECV_CAP_S, instance.remaining_call_time())
            message = subscription.recv(wait_s)
            if message is None:
                return error(IpcErrorCode.CLOSED) if subscription.closed else error(IpcErrorCode.TIMEOUT)
            return self._envelope(subscription, [message])
        except Exception as exc:
            return unexpected("recv", exc)

    def _drop_subscription(self, store: Any, rep: int) -> None:
        try:
            with self._lock:
                entry = self._subs.pop(rep, None)
            if entry is not None:
                entry[1].close()
        except Exception:  # a raising destructor would trap the guest
            log.exception("subscription destructor failed")

    # -- astrid:sys ------------------------------------------------------------

    def _get_caller(self, store: Any) -> Any:
        try:
            call = self._instance(store).current
            if call is None:
                return "no message is being handled"
            message = call.message
            return record(
                principal=message.principal.name,
                source_id=message.source_id,
                timestamp=message.timestamp,
                attribution=attribution(message.principal),
            )
        except Exception as exc:
            log.debug("host import get-caller failed", exc_info=exc)
            return f"{type(exc).__name__}: {exc}"

    def _log(self, store: Any, level: str, message: str) -> None:
        """A line of the capsule's log, as `[name] message`, at the level it chose.

        Bounded: one message keeps LOG_MESSAGE_CHARS, one guest call logs at
        most LOG_LINES_PER_CALL lines and LOG_CHARS_PER_CALL characters (then
        one note says the rest is dropped). Control characters are escaped.
        """
        try:
            levelno = logging.DEBUG if self.quiet else LOG_LEVELS.get(level, logging.INFO)
            if not log.isEnabledFor(levelno):
                return
            key = store_key(store)
            instance = self._instance(store)
            text = message[:LOG_MESSAGE_CHARS]
            use = self._log_use.get(key)
            if use is None or use.call is not instance.current:
                use = self._log_use[key] = _LogUse(instance.current)
            use.lines += 1
            use.chars += len(text)
            if use.lines > LOG_LINES_PER_CALL or use.chars > LOG_CHARS_PER_CALL:
                if not use.over:
                    use.over = True
                    log.warning(
                        "[%s] more than %d log lines or %d KiB in one call: the rest of this call's log is dropped",
                        instance.capsule.name,
                        LOG_LINES_PER_CALL,
                        LOG_CHARS_PER_CALL // 1024,
                    )
                return
            log.log(levelno, "[%s] %s", instance.capsule.name, printable(text))
        except Exception:  # a capsule's log line is never worth a trap
            log.debug("host import log failed", exc_info=True)

    def _get_config(self, store: Any, key: str) -> Variant:
        try:
            if key == MEMORY_LIMIT_KEY:
                return Variant("ok", str(self.memory_limit_bytes // MIB))
            value = self._instance(store).capsule.manifest.config_value(key)
            if value is None:
                return Variant("err", f"config key {key!r} is not set")
            return Variant("ok", value)
        except Exception as exc:
            log.debug("host import get-config failed", exc_info=exc)
            return Variant("err", f"{type(exc).__name__}: {exc}")

    def _clock_ms(self, store: Any) -> int:
        return int(time.time() * 1000)
