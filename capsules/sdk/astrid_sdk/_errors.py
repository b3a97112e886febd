"""Exceptions of the guest SDK (stdlib only; runs inside the wasm guest)."""

from __future__ import annotations


class DefinitionError(ValueError):
    """A resource definition or chunk that breaks the contract.

    The rules: docs/contract/interface.md §3 and docs/contract/limits.md §7.

    Raised by a declaration (`@capsule.resource(...)` and the like, at import
    = build time), it names where the author declared it and what:
    `app.py:12: resource astrid://notes/a on readme(): max_age_s must be ...`
    (`site`, `subject` and `problem` hold the three parts; the first two are
    None for a value checked on its own, such as `Resource(...)`).
    """

    def __init__(self, problem: str = "", *, site: str | None = None, subject: str | None = None) -> None:
        self.problem = problem
        self.site = site
        self.subject = subject
        super().__init__(": ".join(part for part in (site, subject, problem) if part))


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


# -- the capabilities (ctx.fs, ctx.kv, ctx.http): a HostError subclass per kind of refusal --------


class NotGranted(HostError):
    """The capsule may not use this: its Capsule.toml does not ask for it, or the operator did
    not grant it (`capability-denied`; the message names the fix)."""


class Denied(HostError):
    """Refused for safety: a path that leaves its mount (`boundary-escape`), a file the host may
    not open (`access`), an address the grant does not name (`address-denied`)."""


class FileNotFound(HostError, NotFound):
    """`ctx.fs`: no such file or folder. Also a `NotFound`: left uncaught in a handler, the URI
    being read is simply not served."""


class TooLarge(HostError):
    """Over a cap: a file over 8 MiB, a folder over 4096 entries, a kv value over 1 MiB or a
    listing over 1024 keys, an HTTP body over 4 MiB."""


class QuotaExceeded(HostError):
    """`ctx.kv`: this principal's namespace for this capsule is full (keys or bytes)."""


class InvalidArgument(HostError):
    """A path, key or request the host refuses as malformed (`invalid-path`, `invalid-key`,
    `invalid-request`)."""


_BY_CODE: dict[str, type[HostError]] = {
    "capability-denied": NotGranted,
    "boundary-escape": Denied,
    "access": Denied,
    "address-denied": Denied,
    "not-found": FileNotFound,
    "too-large": TooLarge,
    "body-too-large": TooLarge,
    "quota": QuotaExceeded,
    "invalid-path": InvalidArgument,
    "invalid-key": InvalidArgument,
    "invalid-request": InvalidArgument,
}


def capability_error(code: str, detail: str = "") -> HostError:
    """The exception for a capability's `error-code` case."""
    return _BY_CODE.get(code, HostError)(code, detail)
