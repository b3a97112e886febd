"""Every host capability astrid serves, in one place (`capability.Capability`).

The manifest's `[capabilities]` (`Asks`), the grants file (`grants.py`), an
artifact's metadata and the kernel's linker all iterate `capabilities()`:
adding one is its module in `plugins/`, one line here, its WIT package and
its SDK wrapper. `registered(capability)` adds one for a while (a test's).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from astrid.host.capabilities.capability import Capability
from astrid.host.capabilities.plugins.fs import FS
from astrid.host.capabilities.plugins.http import HTTP
from astrid.host.capabilities.plugins.kv import KV

_REGISTERED: list[Capability[Any, Any]] = [FS, KV, HTTP]


def capabilities() -> tuple[Capability[Any, Any], ...]:
    """The capabilities, in the order they are listed and linked."""
    return tuple(_REGISTERED)


def named(name: str) -> Capability[Any, Any] | None:
    return next((capability for capability in _REGISTERED if capability.name == name), None)


def for_spec(spec: str) -> Capability[Any, Any] | None:
    """The capability a grant spec (`fs:notes=~/notes`, `kv`) names."""
    return next((capability for capability in _REGISTERED if capability.takes(spec)), None)


@contextmanager
def registered(capability: Capability[Any, Any]) -> Iterator[Capability[Any, Any]]:
    """`capability` served beside the others for the block."""
    if named(capability.name) is not None:
        raise ValueError(f"a capability named {capability.name!r} is registered already")
    _REGISTERED.append(capability)
    try:
        yield capability
    finally:
        _REGISTERED.remove(capability)
