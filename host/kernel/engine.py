"""The one wasmtime Engine, with epoch interruption ticked by a daemon thread.

Every guest call is bounded in wall time by an epoch deadline: the ticker
increments the engine's epoch every `KERNEL_TUNING.epoch_tick_s`, and each
call sets its deadline in ticks before entering the guest (a Store with epochs
on and no deadline traps at once, even while instantiating).

Creating an engine installs the required `wasmtime_patches`, so a wasmtime
they do not know is refused before anything is compiled for it.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import wasmtime

from astrid.host.kernel import wasmtime_patches
from astrid.host.tuning import KERNEL_TUNING

# Anything that changes the compiled code must be in the cache key.
ENGINE_FLAGS = "epoch_interruption=1;cranelift"


class WasmEngine:
    def __init__(self) -> None:
        wasmtime_patches.install()  # raises on a wasmtime version the patches were not written for
        config = wasmtime.Config()
        config.epoch_interruption = True
        self.engine = wasmtime.Engine(config)
        self._ticker = threading.Thread(target=self._tick, name="astrid-epoch", daemon=True)
        self._stop = threading.Event()
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(KERNEL_TUNING.epoch_tick_s):
            self.engine.increment_epoch()

    @staticmethod
    def deadline_ticks(seconds: float) -> int:
        return max(1, math.ceil(seconds / KERNEL_TUNING.epoch_tick_s))

    def close(self) -> None:
        self._stop.set()


def engine_key() -> str:
    """Identifies compiled code: the wasmtime version plus the engine flags."""
    return f"wasmtime-{wasmtime_version()};{ENGINE_FLAGS}"


@lru_cache(maxsize=1)
def wasmtime_version() -> str:
    from importlib.metadata import version

    return version("wasmtime")


_shared: WasmEngine | None = None
_shared_lock = threading.Lock()


def shared_engine() -> WasmEngine:
    """The process-wide engine (components compiled for it can be shared)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WasmEngine()
        return _shared
