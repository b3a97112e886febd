"""The describe fan-out alone, in-process: kernel + broker, no MCP, no stdio.

Run: python -m bench.fanout CAPSULE_DIR ROUNDS -> one JSON object.
`first_ms` is the first round on freshly prewarmed sandboxes (every capsule's
first call); `refresh` are later rounds with the snapshot dropped each time.
The MCP server keeps a listed baseline for list_changed, so over stdio a
"first list" after load is usually already a cache hit: this is the honest
cost of a full fan-out.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from astrid.host.kernel.kernel import Kernel
from astrid.host.runtime import Runtime, RuntimeConfig


def main() -> None:
    folder, rounds = Path(sys.argv[1]), int(sys.argv[2])
    runtime = Runtime(RuntimeConfig(capsule_paths=[folder], principal="bench"))
    runtime.start(background=False)
    runtime.wait_ready(120)
    kernel = runtime.kernel
    assert isinstance(kernel, Kernel)  # the real one: the bench reads its sandboxes
    deadline = time.monotonic() + 30
    while kernel.sandboxes.live_instances() < len(kernel.loaded()) and time.monotonic() < deadline:
        time.sleep(0.05)  # prewarming runs in the background: wait for it, bounded
    started = time.perf_counter()
    runtime.list_resources(refresh=True)
    first = time.perf_counter() - started
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        runtime.list_resources(refresh=True)
        samples.append(time.perf_counter() - started)
    print(
        json.dumps(
            {
                "capsules": len(kernel.loaded()),
                "first_ms": first * 1000,
                "refresh_median_ms": statistics.median(samples) * 1000,
            }
        )
    )
    runtime.close()


if __name__ == "__main__":
    main()
