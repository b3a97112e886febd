"""Where an uncached read's time goes, down to the guest call's phases.

Run: python -m bench.guest_phases [ROUNDS] [--capsule DIR] [--json]

In-process, on the real kernel and the bench capsule, it reads the text and
the blob resource ROUNDS times each through the principal's broker client (no
MCP layer: `bench.profile_glue` measures that) and splits every read with
per-phase timers (perf_counter around wasmtime-py's own steps, not the
guest's millisecond clock):

- `host`: everything outside the guest call: the broker's routing, the bus,
  the capsule worker and pool hand-offs, checking the reply;
- `lower+lift`: the hook call's host-side conversion of the request into
  wasm values and of the result back (`Func.__call__` minus the wasm run);
- `imports`: the host imports the guest called (`ipc.publish`, `get-caller`,
  ...), each timed across wasmtime-py's trampoline, conversions included;
- `guest`: the wasm run minus the imports: CPython-in-wasm itself.

`--direct` also makes each read's hook call on this thread, straight on the
principal's warm sandbox: the call's own cost, without the pool's and the
bus's thread hand-offs, where a loaded machine adds waits for the GIL to the
`guest` and `imports` phases (docs/performance.md, "The guest call, second pass").

It prints the median and p90 per phase, in microseconds, and the number of
host imports per read (`--json`: also the medians as a last JSON line, for
`make bench`). The timers are installed by this tool only; the
server carries none.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wasmtime.component import _func

from astrid.host.broker import BrokerClient
from astrid.host.kernel import sandbox, wasmtime_patches
from astrid.host.kernel.abi import HostAbi
from astrid.host.runtime import Runtime, RuntimeConfig

HERE = Path(__file__).resolve().parent
PRINCIPAL = "bench"
PHASES = ("total", "host", "lower+lift", "imports", "guest")


class PhaseClock:
    """Accumulates, for the read in progress, the time spent in each timed step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.on = False
        self.call = self.wasm = self.imports = 0.0
        self.import_count = 0
        self.bodies: dict[str, float] = {}  # host import name -> its own body's time (no trampoline)

    def reset(self) -> None:
        with self._lock:
            self.call = self.wasm = self.imports = 0.0
            self.import_count = 0
            self.bodies = {}

    def add(self, field: str, seconds: float) -> None:
        if not self.on:
            return
        with self._lock:
            if field.startswith("import:"):
                self.bodies[field[7:]] = self.bodies.get(field[7:], 0.0) + seconds
                return
            setattr(self, field, getattr(self, field) + seconds)
            if field == "imports":
                self.import_count += 1

    def timing(self, field: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.add(field, time.perf_counter() - started)

        return timed


# The host ABI's import bodies, timed by name (bound when the linker is made: wrap before start)
IMPORT_BODIES = ("_publish", "_get_caller", "_log", "_get_config", "_clock_ms", "_poll", "_recv", "_subscribe")


@contextmanager
def installed(clock: PhaseClock) -> Iterator[None]:
    """Wrap the hook call, the wasm run, the host-import trampoline and each import's body in timers."""
    saved = (_func.Func.__call__, _func.enter_wasm, wasmtime_patches.catch_exceptions)
    bodies = {name: getattr(HostAbi, name) for name in IMPORT_BODIES}
    _func.Func.__call__ = clock.timing("call", saved[0])  # type: ignore[method-assign]
    _func.enter_wasm = clock.timing("wasm", saved[1])
    wasmtime_patches.catch_exceptions = clock.timing("imports", saved[2])
    for name, body in bodies.items():
        setattr(HostAbi, name, clock.timing("import:" + name.lstrip("_"), body))
    try:
        yield
    finally:
        _func.Func.__call__, _func.enter_wasm, wasmtime_patches.catch_exceptions = saved  # type: ignore[method-assign]
        for name, body in bodies.items():
            setattr(HostAbi, name, body)


def split(read: Callable[[], object], clock: PhaseClock, rounds: int) -> tuple[dict[str, list[float]], list[int]]:
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    imports: list[int] = []
    clock.on = True
    for _ in range(rounds):
        clock.reset()
        started = time.perf_counter()
        read()
        total = time.perf_counter() - started
        # A wasm run nested in an import (none today) would count twice: the split
        # is exact only while imports do not re-enter wasm.
        phases["total"].append(total)
        phases["host"].append(total - clock.call)
        phases["lower+lift"].append(clock.call - clock.wasm)
        phases["imports"].append(clock.imports)
        phases["guest"].append(clock.wasm - clock.imports)
        imports.append(clock.import_count)
        for name, seconds in clock.bodies.items():
            phases.setdefault("import " + name, []).append(seconds)
    clock.on = False
    return phases, imports


def report(name: str, phases: dict[str, list[float]], imports: list[int]) -> str:
    cells = []
    for phase in [*PHASES, *sorted(p for p in phases if p not in PHASES)]:
        ordered = sorted(phases[phase])
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        cells.append(f"  {phase:18} {statistics.median(ordered) * 1e6:6.0f} ({p90 * 1e6:5.0f})")
    return "\n".join([f"{name}: {statistics.median(imports):.0f} host imports per read", *cells])


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rounds = int(args[0]) if args else 500
    capsule = Path(sys.argv[sys.argv.index("--capsule") + 1]) if "--capsule" in sys.argv else HERE / "capsule"
    clock = PhaseClock()
    with installed(clock):
        run(capsule, rounds, clock, "--json" in sys.argv, "--direct" in sys.argv)


def reader(client: BrokerClient, uri: str) -> Callable[[], object]:
    """One read of `uri`, waited for, as a call `split` can time."""
    return lambda: client.read(uri).result()


@contextmanager
def last_call() -> Iterator[dict[str, Any]]:
    """Records the sandbox and the message of the pool's last hook call (while the block runs)."""
    seen: dict[str, Any] = {}
    stock = sandbox.SandboxPool._call

    def recording(pool: Any, instance: Any, message: Any, handler: str) -> Any:
        seen.update(instance=instance, message=message, handler=handler)
        return stock(pool, instance, message, handler)

    sandbox.SandboxPool._call = recording  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        sandbox.SandboxPool._call = stock  # type: ignore[method-assign]


def direct_caller(client: BrokerClient, uri: str) -> Callable[[], object]:
    """A read's hook call made on this thread, on the sandbox a read of `uri` just used."""
    with last_call() as seen:
        client.read(uri).result()
    instance, message, handler = seen["instance"], seen["message"], seen["handler"]
    payload = message.payload.encode("utf-8")

    def call() -> object:
        with instance.lock:
            instance.current = sandbox.CallContext(message, time.monotonic() + 5)
            instance.store.set_epoch_deadline(1 << 20)  # this tool's calls are not bounded by the engine's ticks
            try:
                return instance.hook(instance.store, handler, payload)
            finally:
                instance.current = None

    return call


def run(capsule: Path, rounds: int, clock: PhaseClock, as_json: bool, direct: bool = False) -> None:
    runtime = Runtime(RuntimeConfig(capsule_paths=[capsule], principal=PRINCIPAL))
    runtime.start(background=False)
    runtime.wait_ready(120)
    try:
        client = runtime.client_for(PRINCIPAL)
        uris = [d.uri for d in client.list_resources()]
        text = next(u for u in uris if "-text-" in u)
        blob = next(u for u in uris if "-blob-" in u)
        for _ in range(50):  # warm the sandbox and every cache on the path
            client.read(text).result(), client.read(blob).result()
        print(f"uncached read, median (p90) in microseconds over {rounds} reads")
        medians: dict[str, dict[str, float]] = {}
        for name, uri in (("text", text), ("blob", blob)):
            phases, imports = split(reader(client, uri), clock, rounds)
            print(report(name, phases, imports))
            medians[name] = {phase: statistics.median(phases[phase]) * 1e6 for phase in PHASES}
        for name, uri in (("text, direct", text), ("blob, direct", blob)) if direct else ():
            call = direct_caller(client, uri)
            for _ in range(50):
                call()
            print(report(name, *split(call, clock, rounds)))
        if as_json:
            print(json.dumps({"columns": list(PHASES), "rows": medians}))
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
