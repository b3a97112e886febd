"""Exceptions of the guest SDK (stdlib only; runs inside the wasm guest)."""

from __future__ import annotations


class DefinitionError(ValueError):
    """A resource definition or chunk that breaks the contract (docs/contract.md §3, §7)."""


class NotFound(Exception):
    """Raise from a family handler for a URI this capsule does not serve.

    The SDK then stays silent, as every non-owner does, and the broker answers
    "unknown URI" once every capsule has finished.
    """


class HostError(Exception):
    """A refused host call; `code` is the `error-code` case (e.g. "capability-denied")."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code


class RequestError(Exception):
    """A request to the host or another capsule (`Context.request`) got no usable reply."""
