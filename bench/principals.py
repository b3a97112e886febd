"""Many principals: RSS and first-request latency with P principals x K capsules.

Run: python -m bench.principals CAPSULE_DIR PRINCIPALS MAX_INSTANCES -> one JSON object.
In-process on the real kernel (no MCP, no stdio). Each principal sends one
describe (a fan-out to every capsule: K sandboxes instantiated for it) and one
read (one capsule). With PRINCIPALS x K above MAX_INSTANCES the sandbox pool
evicts least-recently-used sandboxes; `revisit_*` is the first principals
coming back after they were evicted (their sandboxes re-instantiate from the
compiled component, their quarantine state is kept).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import psutil

from astrid.host.bus import Principal
from astrid.host.kernel.kernel import Kernel, KernelConfig

READ = '{"uri":"astrid://bench/00-text-0","correlation_id":"x"}'


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def uss_mib() -> float:
    """Private memory only: RSS also counts, once per sandbox, the pages of the
    shared copy-on-write memory image a guest has read but not written."""
    return psutil.Process().memory_full_info().uss / 2**20


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


def main() -> None:
    folder, principals, cap = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    kernel = Kernel(KernelConfig(capsule_paths=[folder], max_instances=cap))
    kernel.start()
    capsules = len(kernel.loaded())
    client = kernel.attach_host("bench", publish=["resource.v1.request.*"], subscribe=["resource.v1.response.*"])

    def request(topic: str, payload: str, principal: Principal) -> float:
        started = time.perf_counter()
        if not kernel.bus.publish(client, topic, payload, principal).wait(60):
            raise SystemExit(f"{topic} for {principal} not delivered in 60 s")
        return time.perf_counter() - started

    # One principal first: what the process holds before the many arrive.
    request("resource.v1.request.describe", "{}", Principal.verified("warm"))
    idle, idle_uss = rss_mib(), uss_mib()
    describes, reads, peak = [], [], idle
    started = time.perf_counter()
    for n in range(principals):
        principal = Principal.verified(f"p{n}")
        describes.append(request("resource.v1.request.describe", "{}", principal))
        reads.append(request("resource.v1.request.read", READ, principal))
        if n % 50 == 49:
            peak = max(peak, rss_mib())
    elapsed = time.perf_counter() - started
    end, end_uss = rss_mib(), uss_mib()
    peak = max(peak, end)
    live = kernel.sandboxes.live_instances()
    created, evicted = kernel.sandboxes.stats.instances_created, kernel.sandboxes.stats.instances_evicted
    revisits = [request("resource.v1.request.describe", "{}", Principal.verified(f"p{n}")) for n in range(20)]
    warm_again = [request("resource.v1.request.describe", "{}", Principal.verified(f"p{n}")) for n in range(20)]
    added = min(cap, (principals + 1) * capsules) - capsules  # live sandboxes beyond the warm principal's
    print(
        json.dumps(
            {
                "capsules": capsules,
                "principals": principals,
                "max_instances": cap,
                "live_instances": live,
                "instances_created": created,
                "instances_evicted": evicted,
                "rss_idle_mib": idle,
                "rss_end_mib": end,
                "rss_peak_mib": peak,
                "uss_idle_mib": idle_uss,
                "uss_end_mib": end_uss,
                "rss_per_live_sandbox_mib": (end - idle) / max(1, added),
                "uss_per_live_sandbox_mib": (end_uss - idle_uss) / max(1, added),
                "first_describe": summary(describes),
                "first_read": summary(reads),
                "revisit_describe": summary(revisits),
                "warm_describe": summary(warm_again),
                "seconds": elapsed,
            }
        )
    )
    kernel.close()


if __name__ == "__main__":
    main()
