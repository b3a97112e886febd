"""Child process: compile one component and write the serialized result.

Run as `python -m astrid.host.kernel.compile_worker IN.wasm OUT`, with a pipe
from the parent on stdin, so the compiler's memory goes away with the process.
IN and OUT are the parent's files: it moves OUT into the cache once this exits
0. When the pipe closes first (the parent died, or was stopped by a second
Ctrl-C) this removes both and exits at once: no compile outlives its server,
and no half-written file stays behind.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

from wasmtime.component import Component

from astrid.host.kernel.engine import WasmEngine


def _exit_when_orphaned(*files: Path) -> None:
    # The fd, not sys.stdin: a read blocked in its buffer's lock aborts the interpreter's exit.
    while os.read(0, 4096):
        pass  # until end of input: nobody waits for this compile any more
    for leftover in files:
        with contextlib.suppress(OSError):
            leftover.unlink()
    os._exit(1)  # the compile runs in wasmtime, which only the process's end stops


def main() -> None:
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    threading.Thread(target=_exit_when_orphaned, args=(source, target), name="astrid-orphan-watch", daemon=True).start()
    engine = WasmEngine()
    component = Component(engine.engine, source.read_bytes())
    target.write_bytes(component.serialize())
    engine.close()


if __name__ == "__main__":
    main()
