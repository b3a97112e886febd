"""Static describes, measured: K copies of a capsule with nothing dynamic, listed by fresh principals.

Run: python -m bench.static_fanout [ROUNDS] -> one JSON line per (K, static).

The bundled `introspect` capsule (static resources only) is built (a
build-cache hit after the first time) and copied K times under its own
names. For each K in 1 and 20 and with static describes off (every describe
calls the guest, as before issue 21) and on: the kernel's start, and the
first list of ROUNDS fresh principals (the full fan-out a new user pays: no
snapshot, no sandbox yet), median in ms, with the sandboxes it instantiated.
The copies list the same URIs: the broker's audit lines for those
collisions are silenced (they are the copies' artifact, not the fan-out's).
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from astrid.capsules import CAPSULES_DIR
from astrid.host.broker.broker import Broker
from astrid.host.build import build_capsule
from astrid.host.bus import Principal
from astrid.host.kernel.kernel import Kernel, KernelConfig

SOURCE = CAPSULES_DIR / "introspect"
COUNTS = (1, 20)


def copies(built: Path, root: Path, count: int) -> Path:
    folder = root / f"k{count}"
    for index in range(count):
        target = folder / f"static-{index:02d}"
        shutil.copytree(built, target)
        manifest = (target / "Capsule.toml").read_text()
        (target / "Capsule.toml").write_text(manifest.replace('name = "introspect"', f'name = "static-{index:02d}"'))
    return folder


def measure(folder: Path, static: bool, rounds: int) -> dict:
    started = time.perf_counter()
    kernel = Kernel(KernelConfig(capsule_paths=[folder], static_replies=static))
    kernel.start()
    startup = time.perf_counter() - started
    broker = Broker(kernel.bus, local_replies=kernel.static_directory).start()  # as the runtime wires it
    samples = []
    try:
        for index in range(rounds):
            principal = Principal.verified(f"fresh-{static}-{index}")
            started = time.perf_counter()
            listed = broker.listings.snapshot(principal).resources
            samples.append(time.perf_counter() - started)
            assert listed, "nothing listed"
        return {
            "capsules": len(kernel.loaded()),
            "static": static,
            "startup_ms": round(startup * 1000, 1),
            "fresh_list_median_ms": round(statistics.median(samples) * 1000, 3),
            "sandboxes_instantiated": kernel.sandboxes.stats.instances_created,
            "guest_asked_at_load": kernel.static_replies.stats.asked,
        }
    finally:
        broker.close()
        kernel.close()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    logging.getLogger("astrid.host.broker.audit").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="astrid-static-bench-") as scratch:
        root = Path(scratch)
        built = root / "introspect"
        shutil.copytree(SOURCE, built, ignore=shutil.ignore_patterns("__pycache__", "*.wasm"))
        build_capsule(built)
        for count in COUNTS:
            folder = copies(built, root, count)
            for static in (False, True):
                print(json.dumps(measure(folder, static, rounds)), flush=True)


if __name__ == "__main__":
    main()
