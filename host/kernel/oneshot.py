"""One call into a capsule on its own: the build's manifest check, `astrid capsule list -v`, static describes.

    outcome = call_once(folder, "astrid.facts")   # a CallOutcome (sandbox.py)
    outcome = call_loaded(capsule, "astrid.static", engine=engine)   # a capsule already loaded

The component runs in the kernel's sandbox exactly as when it is served: no
WASI, the host ABI only, bounded in wall time and memory (`Limits`), one Store
that is closed afterwards. But it runs alone and with nothing: on a bus of its
own with no other participant, as a participant that may publish and
subscribe nothing, with no grants (an empty grants file) and a scratch
key-value store, as the system principal. Nothing it does reaches anyone, and
it reads nothing of the operator's. Its log lines, and a failed call, go to
the debug level: the caller reports the outcome.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from astrid.host.bus import InMemoryBus, Message, Participant, Principal
from astrid.host.bus.memory import now_iso
from astrid.host.capabilities.grants import GrantStore
from astrid.host.kernel.abi import HostAbi
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.engine import WasmEngine
from astrid.host.kernel.loader import LoadedCapsule, load_capsule
from astrid.host.kernel.sandbox import CallOutcome, SandboxPool
from astrid.host.limits import DEFAULT_LIMITS, Limits

SENDER = "astrid-oneshot"  # the source-id the capsule sees as the message's sender


def call_once(
    folder: Path,
    handler: str,
    payload: str = "",
    *,
    component: Path | None = None,
    cache: CompileCache | None = None,
    limits: Limits = DEFAULT_LIMITS,
    principal: Principal | None = None,
) -> CallOutcome:
    """`astrid-hook-trigger(handler, payload)` once, in a throwaway sandbox of the capsule in `folder`.

    `component` is the file to load instead of the manifest's (a build's
    output before it is put in place). Raises CapsuleLoadError when the
    capsule does not load; every other failure is the outcome's status.
    """
    cache = cache if cache is not None else CompileCache()
    capsule = load_capsule(folder, cache, component=component)
    return call_loaded(capsule, handler, payload, engine=cache.wasm_engine, limits=limits, principal=principal)


def call_loaded(
    capsule: LoadedCapsule,
    handler: str,
    payload: str = "",
    *,
    engine: WasmEngine,
    limits: Limits = DEFAULT_LIMITS,
    principal: Principal | None = None,
) -> CallOutcome:
    """`call_once` for a capsule already loaded (compiled for `engine`): the kernel's static replies."""
    caller = principal if principal is not None else Principal.system()
    with tempfile.TemporaryDirectory(prefix="astrid-oneshot-") as scratch:
        bus = InMemoryBus(max_payload_bytes=limits.bus_message_bytes)
        grants = GrantStore(Path(scratch) / "grants.json")  # never written: no grants
        abi = HostAbi(
            engine.engine,
            bus,
            grants,
            Path(scratch) / "kv.sqlite3",
            quiet=True,
            memory_limit_bytes=limits.capsule_memory_bytes,
        )
        pool = SandboxPool(engine, abi, limits, max_instances=1, quiet=True)
        alone = Participant(source_id=capsule.source_id, name=capsule.name)  # no publish or subscribe rights
        # The message has no topic of its own: the handler's name stands in (the guest never sees it).
        message = Message(handler, payload, SENDER, caller, now_iso(), 0)
        try:
            return pool.invoke(capsule, alone, message, handler)
        finally:
            pool.close()
            abi.capabilities.close()
            bus.close()
