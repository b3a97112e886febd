"""`kv`: durable key-value state, one namespace per (verified principal, capsule) (docs/capabilities.md).

Asked with `kv = true`, granted with `astrid capsule grant NAME kv`. The store
is the SQLite file of `HostSettings.kv_path` (`capabilities/kv.py`), or
shared state on NATS JetStream (`kv_nats.py`) when the composition root hands
a factory. Opened once, at the first call that needs it (sqlite3 loads only
then).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from astrid.host.capabilities.capability import Call, Calls, HostSettings, Served, Switch
from astrid.host.capabilities.errors import CapabilityError

log = logging.getLogger("astrid.capsule")


class Kv(Switch):
    name = "kv"
    interface = "astrid:kv/host@1.0.0"
    in_every_metadata = True
    cases_with_text = frozenset({"capability-denied", "invalid-key", "unknown"})
    cases_without_text = frozenset({"not-found", "too-large", "quota"})

    def serve(self, settings: HostSettings) -> ServedKv:
        return ServedKv(settings)


KV = Kv()


class ServedKv(Served):
    def __init__(self, settings: HostSettings) -> None:
        self.settings = settings
        self._store: Any = None  # a KvStore, or the factory's (same namespace interface)
        self._lock = threading.Lock()

    def link(self, root: Any, calls: Calls) -> None:
        with root.add_instance(KV.interface) as kv:
            kv.add_func("get", calls.func(KV, "get", lambda call, key: _found(self._namespace(call).get(key))))
            kv.add_func("set", calls.func(KV, "set", lambda call, key, value: self._namespace(call).set(key, value)))
            kv.add_func("delete", calls.func(KV, "delete", lambda call, key: self._namespace(call).delete(key)))
            kv.add_func(
                "list-keys", calls.func(KV, "list-keys", lambda call, prefix: self._namespace(call).list_keys(prefix))
            )

    def prepare(self) -> None:
        """Open the shared store ahead of the first call (a NATS bucket is found or made once, outside
        any guest's time bound); a store that cannot be used is said once, here."""
        store = self.store()
        prepare = getattr(store, "prepare", None)  # the SQLite file needs nothing ahead
        if prepare is None:
            return
        try:
            prepare()
        except CapabilityError as exc:
            log.warning("kv state is not available yet: %s", exc.detail or exc.code)

    def store(self) -> Any:
        with self._lock:
            if self._store is None:
                from astrid.host.capabilities.kv import KvStore  # here: sqlite3 loads only once a capsule uses kv

                factory = self.settings.kv_factory
                self._store = factory() if factory is not None else KvStore(self.settings.kv_path)
            return self._store

    def close(self) -> None:
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()

    def _namespace(self, call: Call) -> Any:
        if not call.granted:
            raise CapabilityError("capability-denied", _denied(call))
        if call.principal is None:
            raise CapabilityError("capability-denied", "kv state is per principal: this call has no verified principal")
        return self.store().namespace(call.principal, call.capsule)


def _denied(call: Call) -> str:
    """Why kv is refused, and the fix: ask for it in the manifest, or grant it."""
    if not call.asked:
        return f"{call.capsule} does not ask for kv: add `kv = true` to [capabilities] in its Capsule.toml"
    return f"no kv grant for {call.capsule}: the operator runs `astrid capsule grant {call.capsule} kv`"


def _found(value: bytes | None) -> bytes:
    if value is None:
        raise CapabilityError("not-found")
    return value
