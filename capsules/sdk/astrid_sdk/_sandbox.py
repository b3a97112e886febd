"""What the sandbox does not offer, as ordinary Python exceptions that say what to use instead.

The host links WASI deny-by-default (host/kernel/wasi.py): clocks, random and
print work; there is no file system, no environment and no network. Left
alone, CPython would say so in its own words (`FileNotFoundError: [Errno 44]`,
`KeyError: 'HOME'`, `No module named 'socket'`). Installed when the SDK is
imported (so at build time, in the component's snapshot), these make each
one name the missing thing and the capsule's way to it:

- `open()` (and `io.open`, `os.open`): `PermissionError` naming `ctx.fs`;
- `os.environ[...]`: a `KeyError` subclass naming `[config]` and
  `ctx.config` (`os.environ.get` and `os.getenv` still return their default);
- the `socket` and `subprocess` modules: importable, but any use raises
  `PermissionError` naming `ctx.http` (a package that uses a socket when it
  is imported fails the build with that message).

The exceptions are raised from the author's line, so the SDK reports them
with its file and line. Stdlib only: this runs inside the wasm guest.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import sys
import types
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

NO_FILES = "a capsule has no file system: read files with ctx.fs, after the operator grants fs to the capsule"
NO_NETWORK = "a capsule has no sockets: reach the network with ctx.http, after the operator grants http"
NO_PROCESSES = "a capsule cannot start processes"
NO_ENVIRONMENT = "a capsule has no environment variables: put settings in Capsule.toml's [config] and read ctx.config"
_MISSING_FILE_ERRNOS = {errno.ENOENT, errno.EBADF, errno.ENOTCAPABLE if hasattr(errno, "ENOTCAPABLE") else errno.EACCES}


class SandboxError(PermissionError):
    """Something a capsule's sandbox does not offer; the message says what to use instead."""


class NoEnvironmentVariable(KeyError):
    """`os.environ[name]` in a capsule: there are none (a KeyError, as code reading the environment expects)."""

    def __str__(self) -> str:
        return f"{self.args[0]!r}: {NO_ENVIRONMENT}" if self.args else NO_ENVIRONMENT


def _refusing_files(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    def opener(file: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(file, *args, **kwargs)
        except OSError as exc:
            if exc.errno not in _MISSING_FILE_ERRNOS or isinstance(file, int):
                raise
            raise SandboxError(f"{name}({file!r}): {NO_FILES}") from None

    opener.__name__ = opener.__qualname__ = name
    opener.__doc__ = original.__doc__
    return opener


class _Environment(MutableMapping[str, str]):
    """An empty environment: reading a missing name says why; what the capsule sets itself stays readable."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        try:
            return self._values[name]
        except KeyError:
            raise NoEnvironmentVariable(name) from None

    def __setitem__(self, name: str, value: str) -> None:
        self._values[name] = value

    def __delitem__(self, name: str) -> None:
        del self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def copy(self) -> dict[str, str]:
        return dict(self._values)


class _Refusing(types.ModuleType):
    """A module that can be imported but not used: any public attribute raises `SandboxError`."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name, f"Not available in a capsule: {reason}.")
        self._reason = reason

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):  # the import system and introspection ask these
            raise AttributeError(attribute)
        raise SandboxError(f"{self.__name__}.{attribute}: {self._reason}")


def install() -> None:
    """Put the guards in place (idempotent)."""
    if getattr(builtins.open, "__module__", None) == __name__:
        return
    builtins.open = io.open = _refusing_files(builtins.open, "open")
    os.open = _refusing_files(os.open, "os.open")
    os.environ = _Environment()  # type: ignore[assignment]  # noqa: B003 (the guest's is empty: only what reading it says changes)
    for module, reason in (("socket", NO_NETWORK), ("_socket", NO_NETWORK), ("subprocess", NO_PROCESSES)):
        if module not in sys.modules or isinstance(sys.modules[module], _Refusing):
            sys.modules[module] = _Refusing(module, reason)


def installed() -> bool:
    return getattr(builtins.open, "__module__", None) == __name__
