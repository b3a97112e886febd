"""Child process: compile one component and write the serialized result.

Run as `python -m astrid.host.kernel.compile_worker IN.wasm OUT.cwasm`, so the
compiler's memory goes away with the process.
"""

from __future__ import annotations

import sys
from pathlib import Path

from wasmtime.component import Component

from astrid.host.kernel.compile_cache import write_atomically
from astrid.host.kernel.engine import WasmEngine


def main() -> None:
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    engine = WasmEngine()
    component = Component(engine.engine, source.read_bytes())
    write_atomically(target, component.serialize())
    engine.close()


if __name__ == "__main__":
    main()
