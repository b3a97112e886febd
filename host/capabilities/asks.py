"""What a capsule asks for in `[capabilities]`, by capability: `fs = ["notes"]`, `kv = true`, ...

    asks = Asks.parse({"fs": ["notes"], "kv": True})   # the manifest's table, checked by each capability
    asks.of(FS)                                        # ("notes",)
    asks.specs()                                       # ["fs:notes", "kv"]: as grants are written
    asks.as_json()                                     # what an artifact's metadata.json records

Only an ask: the operator's grants decide what a capsule gets (`grants.py`).
Two `Asks` are equal when they record the same JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from astrid.host.capabilities.capability import Capability
from astrid.host.capabilities.registry import capabilities


class Asks:
    def __init__(self, asked: Mapping[str, Any] | None = None) -> None:
        self._asked = dict(asked or {})  # capability name -> its ask (a capability absent: nothing asked)

    @classmethod
    def parse(cls, table: object) -> Asks:
        """The manifest's `[capabilities]` table; ValueError naming the key, the cause and the fix."""
        if isinstance(table, Asks):
            return table
        if not isinstance(table, Mapping):
            raise ValueError('must be a table, e.g. fs = ["notes"] and kv = true under [capabilities]')
        known = {capability.name: capability for capability in capabilities()}
        asked: dict[str, Any] = {}
        for name, value in table.items():
            capability = known.get(name)
            if capability is None:
                choices = ", ".join(f"`{each.asks_like}`" for each in known.values())
                raise ValueError(f"{name}: no such capability; a capsule may ask for {choices}")
            try:
                asked[name] = capability.ask(value)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return cls(asked)

    @classmethod
    def from_json(cls, document: object) -> Asks:
        """What `as_json` wrote (an artifact's metadata); ValueError when it is not that."""
        if not isinstance(document, Mapping):
            raise ValueError("capabilities is not an object")
        return cls.parse(document)

    def of(self, capability: Capability[Any, Any]) -> Any:
        return self._asked.get(capability.name, capability.nothing_asked)

    def as_json(self) -> dict[str, Any]:
        """Each capability's ask, canonical (lists sorted); nothing asked is recorded only for the
        capabilities every metadata.json holds (`Capability.in_every_metadata`)."""
        return {
            capability.name: capability.ask_json(self.of(capability))
            for capability in capabilities()
            if capability.in_every_metadata or capability.name in self._asked
        }

    def specs(self) -> list[str]:
        """As the operator grants them (`fs:MOUNT=PATH` shown as `fs:MOUNT`)."""
        return [spec for capability in capabilities() for spec in capability.ask_specs(self.of(capability))]

    def covers(self, other: Asks) -> bool:
        """Does this ask for everything `other` asks?"""
        return all(capability.covers(self.of(capability), other.of(capability)) for capability in capabilities())

    def __bool__(self) -> bool:
        return bool(self.specs())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Asks) and self.as_json() == other.as_json()

    def __hash__(self) -> int:
        return hash(repr(self.as_json()))

    def __repr__(self) -> str:
        return f"Asks({self.as_json()!r})"


NOTHING_ASKED = Asks()
