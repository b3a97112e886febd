"""The two listings the broker merges by the same rules (host/broker/merge.py),
as a test drives them: describe's resources and the templates round's templates.

A test of a shared rule takes the `kind` fixture and runs once per kind. Keys
are built from a path: a resource's uri is the path, a template's uri_template
is the path with one variable added (a template must have one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from astrid.host.broker import Broker
from astrid.host.bus import Bus, Principal
from astrid.host.limits import Limits
from tests.host.broker.asker import Asker
from tests.host.broker.fakes import FakeCapsule, resource, template

KNOBS = ("delay", "twice", "raw", "silent", "reply_as")  # FakeCapsule's per-round knobs, kind-free


@dataclass(frozen=True)
class Kind:
    array: str  # the reply's array; also FakeCapsule's field and Limits' prefix: "resources"
    round: str  # the round as the logs and FakeCapsule's knobs name it: "describe"
    key_name: str  # the listed entry's key: "uri"
    suffix: str  # turns a path into a key
    entry_of: Callable[..., dict]  # fakes.resource or fakes.template
    calls_field: str  # FakeCapsule's count of rounds it answered
    snapshot: Callable[[Broker, Principal], Any]  # the cached snapshot, with owner_of
    only_fields: dict[str, Any] = field(default_factory=dict)  # fields the other kind has not

    def key(self, path: str) -> str:
        return path + self.suffix

    def entry(self, path: str, name: str | None = None, **extra: Any) -> dict:
        return self.entry_of(self.key(path), name or path.rsplit("/", 1)[-1], **extra)

    def knob(self, name: str) -> str:
        """FakeCapsule's field for a kind-free knob: delay -> describe_delay, raw -> raw_describe."""
        if name in ("raw", "silent"):
            return f"{name}_{self.round}"
        return f"{self.round}_{name.removeprefix('reply_')}"

    def capsule(self, bus: Bus, name: str, entries: dict[str, list[dict]] | None = None, **knobs: Any) -> FakeCapsule:
        """A FakeCapsule listing `entries` (principal -> entries), its KNOBS named kind-free."""
        fields: dict[str, Any] = {self.knob(knob) if knob in KNOBS else knob: value for knob, value in knobs.items()}
        fields[self.array] = entries or {}
        return FakeCapsule(bus, name, **fields)

    def silence(self, capsule: FakeCapsule, silent: bool) -> None:
        setattr(capsule, self.knob("silent"), silent)

    def calls(self, capsule: FakeCapsule) -> int:
        return getattr(capsule, self.calls_field)

    def entries(self, capsule: FakeCapsule) -> dict[str, list[dict]]:
        return getattr(capsule, self.array)

    def items(self, client: Asker) -> list:
        return getattr(client, f"list_{self.array}")()

    def keys_of(self, items: list) -> list[str]:
        return [getattr(item, self.key_name) for item in items]

    def listed(self, client: Asker) -> list[str]:
        """The keys of what `client` lists, in order."""
        return self.keys_of(self.items(client))

    def keys(self, *paths: str) -> list[str]:
        return [self.key(path) for path in paths]

    def limits(self, *, per_reply: int | None = None, per_principal: int | None = None) -> Limits:
        """Limits with this kind's caps set (resources_per_describe, templates_per_principal, ...)."""
        caps = {"describe": per_reply, "principal": per_principal}
        return Limits(**{f"{self.array}_per_{cap}": value for cap, value in caps.items() if value is not None})


RESOURCES = Kind(
    array="resources",
    round="describe",
    key_name="uri",
    suffix="",
    entry_of=resource,
    calls_field="describes",
    snapshot=lambda broker, principal: broker.listings.snapshot(principal),
    only_fields={"size": 42},
)
TEMPLATES = Kind(
    array="templates",
    round="templates",
    key_name="uri_template",
    suffix="/{x}",
    entry_of=template,
    calls_field="template_calls",
    snapshot=lambda broker, principal: broker.listings.template_snapshot(principal),
)
KINDS = (RESOURCES, TEMPLATES)
