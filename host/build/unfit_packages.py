"""Packages that cannot work in a capsule, and why: the build refuses them by name.

A capsule has no sockets, no processes and no files (docs/capsules.md, "What
Python can do in a capsule"). A package whose whole job is one of those
installs and even imports, then fails at its first call; the build refuses
its pin instead, with the reason and what a capsule uses in its place, and a
missing-module hint never suggests pinning it.

The table names well-known distributions only: a package that uses sockets
for a corner of what it does still builds, and its call fails in the guest
with the sandbox's own PermissionError.
"""

from __future__ import annotations

_NETWORK = (
    "it reaches the network through sockets, and a capsule has none: call ctx.http after the operator grants http"
)
_SERVER = (
    "it talks to its server through sockets, and a capsule has none: keep state with ctx.kv, "
    "or reach an HTTP API with ctx.http"
)
_PROCESSES = "it runs programs, and a capsule cannot start processes"

# distribution (PEP 503 normalized) -> (its import name, why it cannot work)
UNFIT: dict[str, tuple[str, str]] = {
    "requests": ("requests", _NETWORK),
    "urllib3": ("urllib3", _NETWORK),
    "httpx": ("httpx", _NETWORK),
    "httpcore": ("httpcore", _NETWORK),
    "httplib2": ("httplib2", _NETWORK),
    "aiohttp": ("aiohttp", _NETWORK),
    "websockets": ("websockets", _NETWORK),
    "websocket-client": ("websocket", _NETWORK),
    "paramiko": ("paramiko", _NETWORK),
    "redis": ("redis", _SERVER),
    "pymongo": ("pymongo", _SERVER),
    "pymysql": ("pymysql", _SERVER),
    "pg8000": ("pg8000", _SERVER),
    "psycopg": ("psycopg", _SERVER),
    "sh": ("sh", _PROCESSES),
    "pexpect": ("pexpect", _PROCESSES),
    "plumbum": ("plumbum", _PROCESSES),
}
_BY_MODULE = {module: (distribution, why) for distribution, (module, why) in UNFIT.items()}


def unfit_distribution(key: str) -> str | None:
    """Why the distribution `key` (normalized) cannot work in a capsule; None when it may."""
    entry = UNFIT.get(key)
    return entry[1] if entry is not None else None


def unfit_module(module: str) -> tuple[str, str] | None:
    """(distribution, why) for a top-level import name whose package cannot work in a capsule."""
    return _BY_MODULE.get(module)
