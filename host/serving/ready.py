"""Once the capsules are loaded (in the background): start the watchers, then tell whoever prints."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from astrid.host.errors import BackendNotReady
from astrid.host.runtime import Runtime, Status

LOAD_WAIT_S = 3600.0  # a first compile of many capsules on a slow machine: minutes, never an hour


@dataclass(frozen=True)
class Ready:
    status: Status
    principal: str | None  # the one principal served (stdio, HTTP without auth); None: each credential's own
    resources: int | str | None  # how many that principal sees; str: why unknown; None: no one principal
    watching_folders: bool  # a rebuilt capsule is reloaded
    capsules_elsewhere: bool  # `--workers`: this process runs none, it joined the capsule hosts
    skills: tuple[str, ...] = ()  # the SKILL.md URIs that principal sees (docs/skills.md)


def when_ready(
    runtime: Runtime, *, watch: bool, on_ready: Callable[[Ready], None], on_failed: Callable[[str], None]
) -> None:
    """In a thread of its own: wait for the load, start the watchers, then `on_ready`
    (`on_failed` with why when the capsules could not be loaded; nothing once the server is stopping)."""
    threading.Thread(
        target=_after_load, args=(runtime, watch, on_ready, on_failed), name="astrid-ready", daemon=True
    ).start()


def _after_load(
    runtime: Runtime, watch: bool, on_ready: Callable[[Ready], None], on_failed: Callable[[str], None]
) -> None:
    try:
        runtime.wait_ready(LOAD_WAIT_S)
    except BackendNotReady as exc:
        if not runtime.stopping:
            on_failed(str(exc))
        return
    if runtime.stopping:  # stopped while loading: the capsules it cut short are no news
        return
    resources, skills = _listing(runtime) if runtime.principal is not None else (None, ())
    if runtime.closed:  # the client left while we were loading
        return
    runtime.watch_mounts()  # live data: always on; it polls only folders granted as fs mounts
    watching = watch and bool(runtime.config.capsule_paths)
    if watching:
        runtime.watch_folders()
    elsewhere = not runtime.config.capsule_paths and runtime.config.bus_url is not None
    on_ready(Ready(runtime.status, runtime.principal, resources, watching, elsewhere, skills))


def _listing(runtime: Runtime) -> tuple[int | str, tuple[str, ...]]:
    """How many resources the principal sees, and its skills' SKILL.md URIs."""
    from astrid.host.mcp.skills import skill_uris

    try:
        definitions = runtime.list_resources()
    except Exception as exc:  # a banner's count must not take the server down: it says why instead
        return f"unknown ({exc})", ()
    return len(definitions), tuple(skill_uris(list(definitions)))
