"""A host capability as a plug-in, as Spin's factors are: how a manifest asks for it, how the operator
grants it, and how a sandbox gets it.

    class Kv(Capability[bool, bool]):
        name = "kv"                          # `[capabilities] kv = true`, `astrid capsule grant NAME kv`
        interface = "astrid:kv/host@1.0.0"   # the WIT interface the kernel links for it
        ...

Each capability is one class (`plugins/`), found through one registry
(`registry.CAPABILITIES`); the manifest, the grants file, an artifact's
metadata and the kernel's linker iterate it, so adding a capability is one
module, its WIT package and its SDK wrapper. A capability never imports the
kernel: the kernel hands it a `Calls` when it links, and every host call
then reaches the capability's function with a `Call`: who calls (the
capsule, the verified principal), what its manifest asks and what of that the
operator granted, and the time left. Whatever the function raises becomes
the interface's `error-code` (`CapabilityError` names the case), never a
trap.

A capsule only asks; the operator grants (`astrid capsule grant`, an
owner-only file); a call gets the intersection (`usable`), for the
principal of the call being handled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

AskT = TypeVar("AskT")
GrantT = TypeVar("GrantT")


@dataclass(frozen=True)
class Call:
    """One host call of a capability, as the kernel sees it."""

    capsule: str  # the calling capsule's name
    principal: str | None  # the verified principal of the message it handles; None: not verified
    asked: Any  # what its manifest asks of this capability
    granted: Any  # what of that the operator granted (`Capability.usable`)
    remaining_s: float  # the time left of the guest call
    # fs: records the files a resource read touched, (root, path, kind); None outside a read
    touched: Callable[[str, str, str], None] | None = None


HostFunction = Callable[..., Any]


class Calls(Protocol):
    """What the kernel lends a capability to link its functions."""

    def func(self, capability: Capability[Any, Any], op: str, serve: Callable[..., Any]) -> HostFunction:
        """The host function for `serve(call, *args)`: never raises into the guest (a failure is the
        capability's `error-code`), traced and counted as `capability.<name>.<op>`."""
        ...

    def record(self, **fields: Any) -> Any:
        """A WIT record value."""
        ...


@dataclass(frozen=True)
class HostSettings:
    """Where the host keeps a capability's state (the kernel's configuration)."""

    kv_path: Path
    kv_factory: Callable[[], Any] | None = None  # None: the SQLite file at kv_path (else: shared state on NATS)


class Served(ABC):
    """A capability served by one kernel: its host functions, and the state they share."""

    @abstractmethod
    def link(self, root: Any, calls: Calls) -> None:
        """Add the capability's interface and its functions to a Linker's root instance."""

    def prepare(self) -> None:  # noqa: B027 - most capabilities need nothing ahead
        """Get ready ahead of the first call (outside any guest's time bound), when that takes time."""

    def close(self) -> None:  # noqa: B027 - most capabilities open nothing that outlives a call
        """Release what the functions opened (connections, files)."""


class Capability(ABC, Generic[AskT, GrantT]):
    name: str  # the `[capabilities]` key, the grants file's key, a grant spec's prefix
    interface: str  # the WIT interface the kernel links
    asks_like: str  # how a manifest asks for it, for errors: 'fs = ["notes"]'
    grants_like: str  # how the operator grants it: "fs:MOUNT=PATH"
    revokes_like: str  # ... and takes it back: "fs:MOUNT"
    nothing_asked: AskT
    nothing_granted: GrantT
    # its WIT error-code: the cases that carry a string, and those that do not
    cases_with_text: frozenset[str]
    cases_without_text: frozenset[str]
    # metadata.json (format 1) records fs, kv and http even when nothing is asked; a capability added
    # since records only what is asked, so artifacts signed before it keep their exact bytes
    in_every_metadata: bool = False

    # -- the manifest's ask -----------------------------------------------------------

    @abstractmethod
    def ask(self, value: object) -> AskT:
        """The manifest's value, checked; ValueError naming the fix."""

    @abstractmethod
    def ask_json(self, ask: AskT) -> Any:
        """The ask as the manifest writes it (and an artifact's metadata.json records it), canonical."""

    @abstractmethod
    def ask_specs(self, ask: AskT) -> list[str]:
        """The ask as grants are written, for a summary (`fs:notes`)."""

    @abstractmethod
    def covers(self, ask: AskT, other: AskT) -> bool:
        """Does `ask` ask for everything `other` does?"""

    # -- the operator's grant ------------------------------------------------------------

    def takes(self, spec: str) -> bool:
        """Is `spec` (`kv`, `fs:notes=~/notes`) a grant of this capability?"""
        return spec == self.name or spec.startswith(self.name + ":")

    @abstractmethod
    def granted(self, current: GrantT, spec: str) -> tuple[GrantT, str]:
        """`current` with `spec` added, and `spec` canonical; ValueError naming the shapes."""

    @abstractmethod
    def revoked(self, current: GrantT, spec: str) -> GrantT:
        """`current` without `spec`; ValueError naming the shapes."""

    @abstractmethod
    def grant_json(self, grant: GrantT) -> Any:
        """The grant as the grants file keeps it."""

    @abstractmethod
    def grant_from_json(self, value: object) -> GrantT:
        """The grants file's value, checked; ValueError naming what is malformed."""

    @abstractmethod
    def grant_specs(self, grant: GrantT) -> list[str]:
        """The grant as the operator would type it, one spec each."""

    @abstractmethod
    def usable(self, granted: GrantT, asked: AskT) -> GrantT:
        """What a capsule may use: the grant narrowed to what its manifest asks."""

    @abstractmethod
    def explain(self, capsule: str, asked: AskT, granted: GrantT) -> list[str]:
        """`capsule list -v`: each thing asked, one line, granted (to what) or not (and the command that
        grants it)."""

    # -- serving -------------------------------------------------------------------------

    @abstractmethod
    def serve(self, settings: HostSettings) -> Served:
        """This capability's functions and state for one kernel."""

    def traced(self, op: str, args: tuple[Any, ...]) -> dict[str, Any]:
        """What a call's span may say of its arguments (never a path, a key or a body)."""
        return {}

    def traced_result(self, value: Any) -> dict[str, Any]:
        """What a call's span may say of its result."""
        return {}


class Switch(Capability[bool, bool]):
    """A capability that is on or off: asked `NAME = true`, granted and revoked as `NAME` (kv is one)."""

    nothing_asked = False
    nothing_granted = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name is not None:
            cls.asks_like = cls.__dict__.get("asks_like", f"{name} = true")
            cls.grants_like = cls.revokes_like = name

    def ask(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"{self.name} must be true or false")
        return value

    def ask_json(self, ask: bool) -> bool:
        return ask

    def ask_specs(self, ask: bool) -> list[str]:
        return [self.name] if ask else []

    def covers(self, ask: bool, other: bool) -> bool:
        return ask or not other

    def granted(self, current: bool, spec: str) -> tuple[bool, str]:
        if spec != self.name:
            raise ValueError(f"write {self.name}")
        return True, self.name

    def revoked(self, current: bool, spec: str) -> bool:
        if spec != self.name:
            raise ValueError(f"write {self.name}")
        return False

    def grant_json(self, grant: bool) -> bool:
        return grant

    def grant_from_json(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value

    def grant_specs(self, grant: bool) -> list[str]:
        return [self.name] if grant else []

    def usable(self, granted: bool, asked: bool) -> bool:
        return granted and asked

    def explain(self, capsule: str, asked: bool, granted: bool) -> list[str]:
        if not asked:
            return []
        state = "granted" if granted else f"not granted (astrid capsule grant {capsule} {self.name})"
        return [f"{self.name}: {state}"]
