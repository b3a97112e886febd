"""RSS per capsule per extra principal, measured in-process on the real kernel.

Run: python -m bench.rss CAPSULE_DIR PRINCIPALS  -> prints one JSON object.
Each principal's describe instantiates every capsule once for it (its own
Store and memory), so the RSS growth per principal divided by the capsule
count is the cost of one more (capsule, principal) sandbox.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil

from astrid.host.bus import Principal
from astrid.host.kernel.kernel import Kernel, KernelConfig


def rss() -> int:
    return psutil.Process().memory_info().rss


def main() -> None:
    folder, principals = Path(sys.argv[1]), int(sys.argv[2])
    kernel = Kernel(KernelConfig(capsule_paths=[folder]))
    kernel.start()
    capsules = len(kernel.loaded())
    client = kernel.attach_host("bench", publish=["resource.v1.request.*"], subscribe=["resource.v1.response.*"])

    def warm(principal: Principal) -> None:
        for _ in range(3):  # a few calls: the guest heap grows on first use
            kernel.bus.publish(client, "resource.v1.request.describe", "{}", principal).wait(30)
            kernel.bus.publish(
                client, "resource.v1.request.read", '{"uri":"astrid://bench/00-text-0","correlation_id":"x"}', principal
            ).wait(30)

    warm(Principal.verified("p0"))
    before = rss()
    for n in range(1, principals + 1):
        warm(Principal.verified(f"p{n}"))
    after = rss()
    per = (after - before) / principals / capsules
    print(
        json.dumps({"capsules": capsules, "principals": principals, "rss_per_capsule_per_principal_mib": per / 2**20})
    )
    kernel.close()


if __name__ == "__main__":
    main()
