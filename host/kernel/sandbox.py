"""Sandboxes: one wasmtime Store + instance per (capsule, principal).

Instances are created lazily and capped (`max_instances`): at the cap, the
least-recently-used idle instance of any (capsule, principal) is closed first,
never one in use (mid-call, or about to be), and if every instance is in use
the new call waits for one to finish (bounded by a call's wall time). An
evicted principal's next call re-instantiates from the compiled component
(about 1 ms, plus a fresh guest's slower first call). Each
Store has one lock (two threads in one Store abort the process); different
Stores run in parallel. Every call is bounded in wall time (epoch deadline)
and memory (store limits). A trap or timeout discards the instance and the
next call gets a fresh one; a sandbox that keeps failing is quarantined for a
while (per principal: one principal's requests never bench a capsule for the
others). Strikes and quarantine are kept outside the instances, so evicting a
sandbox never clears them.

Every call ends in a `CallOutcome` whose `CallStatus` says how it ended (ok,
timed out, trapped, failed, quarantined); the hook's result and the error are
separate fields, so nothing downstream reads meaning out of a message.
Closing an instance always happens under its Store's lock.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import wasmtime
from wasmtime import Store

from astrid.host.bus import Message, Participant, Principal
from astrid.host.kernel.abi import HostAbi
from astrid.host.kernel.engine import WasmEngine
from astrid.host.kernel.loader import HOOK_EXPORT, LoadedCapsule
from astrid.host.limits import Limits
from astrid.host.telemetry import metrics, tracing
from astrid.host.tuning import KERNEL_TUNING

log = logging.getLogger(__name__)


@dataclass
class CallContext:
    """The message being handled by an instance, for get-caller and publish."""

    message: Message
    deadline: float
    publishes: int = 0
    published_bytes: int = 0


class Instance:
    def __init__(self, capsule: LoadedCapsule, participant: Participant, principal: Principal, store: Store) -> None:
        self.capsule = capsule
        self.capsule_participant = participant
        self.principal = principal
        self.store = store
        self.lock = threading.Lock()
        self.current: CallContext | None = None
        self.hook: wasmtime.component.Func | None = None
        self.dead = False
        self.calls = 0
        self.pins = 0  # callers holding or about to take the lock (under the pool's lock): never evicted while > 0

    def remaining_call_time(self) -> float:
        call = self.current
        return max(0.0, call.deadline - time.monotonic()) if call is not None else 0.0


class CallStatus(enum.Enum):
    OK = "ok"  # the hook returned (its result says what the capsule did)
    TIMED_OUT = "timed out"  # the epoch deadline interrupted the guest
    TRAPPED = "trapped"  # the guest trapped (a panic, an unreachable, a memory limit, ...)
    FAILED = "failed"  # any other error: wasmtime refused the instance or the call, or lowering failed
    QUARANTINED = "quarantined"  # not called: this sandbox failed too often lately


@dataclass
class CallOutcome:
    status: CallStatus
    action: str | None = None  # the hook's result, when OK
    data: str | None = None
    error: str | None = None  # what went wrong, when not OK (logged, and kept as the health's last error)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is CallStatus.OK


@dataclass
class Strikes:
    """Failures of one (capsule, principal) sandbox: quarantine is per principal,
    so one principal's requests can never bench a capsule for the others."""

    consecutive_failures: int = 0
    quarantined_until: float = 0.0


@dataclass
class CapsuleHealth:
    """A capsule's record over all principals (for reports and logs)."""

    quarantined_until: float = 0.0  # the latest quarantine of any of its sandboxes
    failures: int = 0
    timeouts: int = 0
    calls: int = 0
    last_error: str | None = None


@dataclass
class SandboxStats:
    instances_created: int = 0
    instances_evicted: int = 0
    instances_discarded: int = 0
    slot_waits: int = 0  # calls that waited for an instance to become idle (the pool was full of busy ones)
    slot_timeouts: int = 0  # calls refused because no instance became idle in time
    by_capsule: dict[str, CapsuleHealth] = field(default_factory=dict)


class PoolFull(Exception):
    """No instance became idle in time to make room for a new one."""


class SandboxPool:
    def __init__(
        self,
        wasm: WasmEngine,
        abi: HostAbi,
        limits: Limits,
        max_instances: int = KERNEL_TUNING.max_instances,
        *,
        quiet: bool = False,
    ) -> None:
        if max_instances < 1:
            raise ValueError(f"max_instances must be at least 1, not {max_instances}")
        self.quiet = quiet  # failed calls logged at debug level only (a tool's one call: `oneshot`)
        self.wasm = wasm
        self.abi = abi
        self.limits = limits
        self.max_instances = max_instances
        # Least recently used first, over every (capsule, principal) pair.
        self._instances: OrderedDict[tuple[str, Principal], Instance] = OrderedDict()
        # Only sandboxes with failures or a quarantine have strikes; kept across eviction.
        self._strikes: dict[tuple[str, Principal], Strikes] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when an instance is unpinned
        self.stats = SandboxStats()

    # -- instances -------------------------------------------------------------

    def _instance_for(self, capsule: LoadedCapsule, participant: Participant, principal: Principal) -> Instance:
        """The (capsule, principal) instance, pinned: the caller must `_unpin` it when done.

        Creating one at the cap first evicts the least-recently-used idle
        instance; with none idle it waits for one (PoolFull after a call's
        wall time), so the pool never holds more than `max_instances`.
        """
        key = (capsule.source_id, principal)
        evicted: Instance | None = None
        with self._lock:
            instance = self._instances.get(key)
            if instance is not None and not instance.dead:
                self._instances.move_to_end(key)
                instance.pins += 1
                return instance
            if len(self._instances) >= self.max_instances:
                evicted = self._evict_one_locked()
                if evicted is None:
                    self.stats.slot_waits += 1
                    deadline = time.monotonic() + self.limits.call_wall_time_s + 1.0
                    while evicted is None:
                        if not self._idle.wait(max(0.0, deadline - time.monotonic())):
                            self.stats.slot_timeouts += 1
                            raise PoolFull(f"all {self.max_instances} sandboxes stayed busy")
                        current = self._instances.get(key)  # another thread may have made ours meanwhile
                        if current is not None and not current.dead:
                            self._instances.move_to_end(key)
                            current.pins += 1
                            return current
                        if len(self._instances) < self.max_instances:
                            break
                        evicted = self._evict_one_locked()
            instance = Instance(capsule, participant, principal, Store(self.wasm.engine))
            instance.pins = 1
            self._instances[key] = instance
            self.stats.instances_created += 1
        if evicted is not None:
            self._close_removed(evicted)  # idle and out of the pool: its lock is free
        return instance

    def _evict_one_locked(self) -> Instance | None:
        """Take the least-recently-used idle instance out of the pool (the caller holds the pool's lock)."""
        for key, candidate in self._instances.items():
            if candidate.pins or candidate.lock.locked():
                continue  # in use: evict something idle instead
            del self._instances[key]
            self.stats.instances_evicted += 1
            return candidate
        return None

    def _unpin(self, instance: Instance) -> None:
        with self._lock:
            instance.pins -= 1
            if instance.pins == 0:
                self._idle.notify()

    def _instantiate(self, instance: Instance) -> wasmtime.component.Func:
        """Instantiate the capsule in the instance's Store; its hook export, also kept on the instance."""
        store = instance.store
        store.set_limits(memory_size=self.limits.capsule_memory_bytes)
        store.set_epoch_deadline(self.wasm.deadline_ticks(self.limits.call_wall_time_s))
        self.abi.register(instance)
        component_instance = self.abi.linker.instantiate(store, instance.capsule.component)
        hook = component_instance.get_func(store, HOOK_EXPORT)
        if hook is None:
            raise wasmtime.WasmtimeError(f"{HOOK_EXPORT} not exported")
        instance.hook = hook
        return hook

    def _close_removed(self, instance: Instance) -> None:
        """Close an instance already taken out of the pool, once its running call (if any) is over."""
        with instance.lock:
            self._close_locked(instance)

    def _close_locked(self, instance: Instance) -> None:
        """Mark an instance dead, release its host state and close its Store; the caller holds its lock."""
        instance.dead = True
        self.abi.release(instance)
        instance.store.close()

    def _discard_failed(self, instance: Instance) -> None:
        """Take a failed instance out of the pool (counted as discarded) and close it; the caller holds its lock."""
        with self._lock:
            key = (instance.capsule.source_id, instance.principal)
            if self._instances.get(key) is instance:
                del self._instances[key]
                self._idle.notify()  # room for a caller waiting on a full pool
            self.stats.instances_discarded += 1
        self._close_locked(instance)

    def drop_capsule(self, source_id: str) -> None:
        """Close every instance of a capsule (unload or reload)."""
        with self._lock:
            self._strikes = {k: v for k, v in self._strikes.items() if k[0] != source_id}
            doomed = [k for k in self._instances if k[0] == source_id]
            instances = [self._instances.pop(k) for k in doomed]
            self._idle.notify_all()  # room for callers waiting on a full pool
        for instance in instances:
            self._close_removed(instance)

    def quarantined_now(self) -> int:
        """Sandboxes (capsule, principal) in quarantine now."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for strikes in self._strikes.values() if strikes.quarantined_until > now)

    def live_instances(self, source_id: str | None = None) -> int:
        with self._lock:
            return sum(1 for k in self._instances if source_id is None or k[0] == source_id)

    def health(self, capsule_name: str) -> CapsuleHealth:
        with self._lock:
            return self.stats.by_capsule.setdefault(capsule_name, CapsuleHealth())

    def prewarm(self, capsule: LoadedCapsule, participant: Participant, principal: Principal) -> bool:
        """Instantiate the (capsule, principal) sandbox ahead of its first message.

        Only instantiates: no guest code beyond the component's start-up runs
        outside a delivered message. False when instantiation failed.
        """
        try:
            instance = self._instance_for(capsule, participant, principal)
        except PoolFull:
            return False
        try:
            with instance.lock:
                if instance.dead or instance.hook is not None:
                    return not instance.dead
                try:
                    self._instantiate(instance)
                    return True
                except Exception as exc:  # reported like a failed call: the next message retries
                    log.warning("capsule %s (%s) failed to instantiate: %s", capsule.name, principal, trap_reason(exc))
                    self._discard_failed(instance)
                    return False
        finally:
            self._unpin(instance)

    # -- calls -----------------------------------------------------------------

    def invoke(self, capsule: LoadedCapsule, participant: Participant, message: Message, handler: str) -> CallOutcome:
        """Run `astrid-hook-trigger(handler, payload)` for the message's principal (a span and metrics)."""
        if not (tracing.on or metrics.on):  # off: the call as it is, nothing more
            return self._invoke(capsule, participant, message, handler)
        with tracing.span("capsule.call") as span:
            outcome = self._invoke(capsule, participant, message, handler)
            quarantined = outcome.status is CallStatus.QUARANTINED
            metrics.guest_call(capsule.name, outcome.status.value, None if quarantined else outcome.seconds)
            if span:
                span.set_attributes(
                    {
                        "astrid.capsule": capsule.name,
                        "astrid.principal": message.principal.name or str(message.principal),
                        "astrid.handler": handler,
                        "astrid.call.status": outcome.status.value,
                    }
                )
                if not outcome.ok:
                    tracing.fail(span, outcome.status.value, outcome.error)
        return outcome

    def _invoke(self, capsule: LoadedCapsule, participant: Participant, message: Message, handler: str) -> CallOutcome:
        health = self.health(capsule.name)
        key = (capsule.source_id, message.principal)
        with self._lock:
            strikes = self._strikes.get(key)
            quarantined = strikes is not None and strikes.quarantined_until > time.monotonic()
        if quarantined:
            refusal = f"{capsule.name} is quarantined for {message.principal} after repeated failures"
            return CallOutcome(CallStatus.QUARANTINED, error=refusal)
        while True:
            try:
                instance = self._instance_for(capsule, participant, message.principal)
            except PoolFull as exc:  # not the capsule's fault: no strike
                log.warning("capsule %s (%s) not called: %s", capsule.name, message.principal, exc)
                return CallOutcome(CallStatus.FAILED, error=str(exc))
            try:
                outcome = self._call(instance, message, handler)
            finally:
                self._unpin(instance)
            if outcome is not None:
                break
            # None: discarded (another call on it failed) or dropped between lookup and lock: a fresh one
        self._record(capsule, instance, health, key, outcome)
        return outcome

    def _call(self, instance: Instance, message: Message, handler: str) -> CallOutcome | None:
        """One hook call on a pinned instance; None if it was closed before its lock was taken."""
        started = time.perf_counter()
        with instance.lock:
            if instance.dead:
                return None
            deadline = time.monotonic() + self.limits.call_wall_time_s
            instance.current = CallContext(message, deadline)
            try:
                hook = instance.hook
                if hook is None:  # a new sandbox, or one evicted or discarded since: instantiate it first
                    with tracing.span("capsule.instantiate"):
                        hook = self._instantiate(instance)
                    metrics.instantiated(instance.capsule.name)
                instance.store.set_epoch_deadline(self.wasm.deadline_ticks(self.limits.call_wall_time_s))
                if tracing.on:  # the guest's own time, apart from instantiation
                    with tracing.span("capsule.run"):
                        result = hook(instance.store, handler, message.payload.encode("utf-8"))
                else:
                    result = hook(instance.store, handler, message.payload.encode("utf-8"))
                instance.calls += 1
                outcome = CallOutcome(CallStatus.OK, getattr(result, "action", None), getattr(result, "data", None))
            except wasmtime.WasmtimeError as exc:
                status, reason = classify_error(exc)
                outcome = CallOutcome(status, error=reason)
            except Exception as exc:  # lowering errors and the like: still discard to be safe
                outcome = CallOutcome(CallStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            finally:
                instance.current = None
            if not outcome.ok:
                # Still under the Store's lock: no other thread may enter a
                # Store that is being closed (that aborts the process).
                self._discard_failed(instance)
        outcome.seconds = time.perf_counter() - started
        return outcome

    def _record(
        self,
        capsule: LoadedCapsule,
        instance: Instance,
        health: CapsuleHealth,
        key: tuple[str, Principal],
        outcome: CallOutcome,
    ) -> None:
        with self._lock:
            health.calls += 1
            if outcome.ok:
                strikes = self._strikes.get(key)
                if strikes is not None and strikes.quarantined_until <= time.monotonic():
                    del self._strikes[key]  # a clean record again: nothing to keep
                elif strikes is not None:
                    strikes.consecutive_failures = 0
                return
            strikes = self._strikes.setdefault(key, Strikes())
            health.failures += 1
            strikes.consecutive_failures += 1
            health.last_error = outcome.error
            if outcome.status is CallStatus.TIMED_OUT:
                health.timeouts += 1
            quarantine = strikes.consecutive_failures >= KERNEL_TUNING.quarantine_after_failures
            if quarantine:
                strikes.quarantined_until = time.monotonic() + KERNEL_TUNING.quarantine_s
                strikes.consecutive_failures = 0
                health.quarantined_until = max(health.quarantined_until, strikes.quarantined_until)
        if quarantine:
            metrics.quarantined(capsule.name)
            tracing.current().set_attribute("astrid.quarantine.started", True)
        log.log(
            logging.DEBUG if self.quiet else logging.WARNING,
            "capsule %s (%s) failed: %s; instance discarded%s",
            capsule.name,
            instance.principal,
            outcome.error,
            f"; quarantined for {KERNEL_TUNING.quarantine_s:.0f} s" if quarantine else "",
        )

    def close(self) -> None:
        with self._lock:
            instances = list(self._instances.values())
            self._instances.clear()
            self._idle.notify_all()
        for instance in instances:
            self._close_removed(instance)


def classify_error(exc: BaseException) -> tuple[CallStatus, str]:
    """How a wasmtime error ended a call, and its useful line ("timed out (wasm trap: interrupt)", ...).

    A trap's first line says nothing ("error while executing at wasm
    backtrace:"); the reason is on the last "wasm trap:" line.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("wasm trap:"):
            reason = line.removeprefix("wasm trap:").strip()
            if reason == "interrupt":
                return CallStatus.TIMED_OUT, "timed out (wasm trap: interrupt)"
            return CallStatus.TRAPPED, f"trapped ({reason})"
    return CallStatus.FAILED, lines[-1] if lines else type(exc).__name__


def trap_reason(exc: BaseException) -> str:
    """The useful line of a wasmtime error ("timed out (wasm trap: interrupt)", "trapped (...)", ...)."""
    return classify_error(exc)[1]
