"""A TypeScript capsule beside a Python one: both scaffolds (`astrid capsule new --lang python|ts`), measured alike.

Run: python -m bench.ts_capsule [READS] [PRINCIPALS] -> one JSON line.
For each language: the build from empty caches (`astrid capsule build`, wasmtime compile included), the
component's size, then in a fresh process: the wasmtime compile alone from an empty cache (cold), a
kernel's start to its first read with that cache (warm start), the median of READS reads by one
principal, and the private memory (USS) each of PRINCIPALS more principals adds: one read each makes
its own (capsule, principal) sandbox.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.driver import python_command

LANGUAGES = ("python", "ts")  # `astrid capsule new --lang`, and the result's keys
BUILD_TIMEOUT_S = 900


def astrid_exe() -> str:
    return str(Path(sys.executable).parent / "astrid")


def build(root: Path, key: str) -> dict:
    """Scaffold and build `scaffold<key>` from empty caches; the wall time and the component's size."""
    name = f"scaffold{key}"
    env = {
        **os.environ,
        "ASTRID_BUILD_CACHE_DIR": str(root / f"builds-{key}"),
        "ASTRID_CACHE_DIR": str(root / f"components-{key}"),
    }
    new = [astrid_exe(), "capsule", "new", name, "--lang", key]
    subprocess.run(new, cwd=root, env=env, check=True, capture_output=True)
    started = time.perf_counter()
    done = subprocess.run(
        [astrid_exe(), "capsule", "build", name],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"bench: building the {key} scaffold failed:\n{done.stderr[-2000:]}")
    return {"build_s": seconds, "component_mb": (root / name / f"{name}.wasm").stat().st_size / 1e6}


def measure(folder: Path, cache: Path, reads: int, principals: int) -> dict:
    """In this (fresh) process: cold compile, warm start to the first read, read latency, USS per sandbox."""
    from astrid.host.bus import Principal
    from astrid.host.kernel.compile_cache import CompileCache
    from astrid.host.kernel.kernel import Kernel, KernelConfig

    wasm = folder / f"{folder.name}.wasm"
    cold = CompileCache(cache).load(wasm)
    assert not cold.from_cache, "the compile cache was not empty"
    read = json.dumps({"uri": f"astrid://{folder.name}/hello", "correlation_id": "x"})

    started = time.perf_counter()
    kernel = Kernel(KernelConfig(capsule_paths=[folder], cache_dir=cache))
    kernel.start()
    client = kernel.attach_host("bench", publish=["resource.v1.request.*"], subscribe=["resource.v1.response.*"])

    def request(principal: Principal) -> float:
        sent = time.perf_counter()
        if not kernel.bus.publish(client, "resource.v1.request.read", read, principal).wait(60):
            raise SystemExit(f"bench: a read for {principal} was not delivered in 60 s")
        return time.perf_counter() - sent

    request(Principal.verified("p0"))
    warm_start = time.perf_counter() - started
    latencies = [request(Principal.verified("p0")) for _ in range(reads)]
    process = psutil.Process()
    before = process.memory_full_info().uss
    for n in range(1, principals + 1):
        for _ in range(3):  # a few reads: a guest's heap grows on first use
            request(Principal.verified(f"p{n}"))
    after = process.memory_full_info().uss
    kernel.close()
    return {
        "compile_cold_s": cold.seconds,
        "warm_start_first_read_ms": warm_start * 1000,
        "read_median_ms": statistics.median(latencies) * 1000,
        "uss_per_sandbox_mib": (after - before) / principals / 2**20,
    }


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        folder, cache, reads, principals = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(measure(folder, cache, reads, principals)))
        return
    reads = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    principals = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    results: dict = {"reads": reads, "principals": principals}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for key in LANGUAGES:
            print(f"bench: the {key} scaffold: build, compile, start, reads ...", file=sys.stderr, flush=True)
            entry = build(root, key)
            folder, cache = root / f"scaffold{key}", root / f"cold-{key}"
            args = ("-m", "bench.ts_capsule", "--measure", str(folder), str(cache), str(reads), str(principals))
            done = subprocess.run(python_command(*args), capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"bench: measuring the {key} scaffold failed:\n{done.stderr[-2000:]}")
            entry.update(json.loads(done.stdout.strip().splitlines()[-1]))
            results[key] = entry
    print(json.dumps(results))


if __name__ == "__main__":
    main()
