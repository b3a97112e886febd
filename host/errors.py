"""Every exception astrid raises on purpose, under one base.

A caller that wants "anything astrid refused" catches `AstridError`; the
subclasses say which layer refused and why. Each message names the cause and,
where there is one, the fix: the CLI prints it as one line. Errors that cross
a boundary as data (a bus reply, an `astrid:ipc` error-code, a read failure)
are values, not these.
"""

from __future__ import annotations


class AstridError(Exception):
    """Base of astrid's own exceptions."""


class BusError(AstridError):
    """A refused bus operation; `code` is the `astrid:ipc` error-code case."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class WasmtimeVersionError(AstridError, RuntimeError):
    """The installed wasmtime is not the version astrid's wasmtime patches were written for."""


class McpVersionError(AstridError, RuntimeError):
    """The installed mcp SDK is not the version `host/mcp/sdk_internals.py` was written for."""


class ManifestError(AstridError, ValueError):
    """A `Capsule.toml` that cannot be used (the message says which key, and why)."""


class CapsuleLoadError(AstridError):
    """A capsule folder that could not be loaded (manifest, component or link)."""


class BuildError(AstridError):
    """`astrid capsule build` failed (the message says at which step)."""


class ScaffoldError(AstridError):
    """`astrid capsule new` could not create the capsule folder."""


class BrokerUnavailable(AstridError):
    """The broker did not answer a front-door request (in time, or at all)."""


class BackendNotReady(AstridError):
    """The capsules could not be loaded, or are still loading (the message says which)."""


class RequestFailed(AstridError):
    """A request of the test kit (`capsule.read`, `complete`, ...) the broker answered with a failure, raised
    so a test can expect it: `code` (`not_found`, `capsule_error`, ...) and `message` are the broker's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class AuthConfigError(AstridError, ValueError):
    """An auth setting that cannot be used safely (e.g. a JWKS URL over plain http); the message says the fix."""


class GrantError(AstridError):
    """A grant that cannot be made, or a grants file that cannot be used (the message says the fix)."""


class TokenError(AstridError):
    """A bearer-token file that cannot be used, or a refused token change (the message says which, and the fix)."""


class IdentityError(AstridError):
    """A capsule artifact, signature, signing key or trust entry that cannot be used (the message says the fix)."""


class ServingError(AstridError):
    """A server could not start as asked (an address it cannot listen on, a tool it cannot find)."""
