"""`--http-limit NAME=VALUE`: the HTTP front door's limits (`HttpLimits`) changed from the command line."""

from __future__ import annotations

import math
from dataclasses import fields, replace

from astrid.cli.errors import UserError
from astrid.host.limits import HttpLimits

# CLI names (`--http-limit NAME=VALUE`) -> fields
_NAMES = {
    "connections": "connections",
    "connections-per-client": "connections_per_client",
    "header-timeout": "header_timeout_s",
    "body-timeout": "body_timeout_s",
    "keep-alive": "keep_alive_s",
    "sessions": "sessions",
    "sessions-per-principal": "sessions_per_principal",
    "streams-per-principal": "streams_per_principal",
    "requests-per-principal": "requests_per_principal",
    "session-idle": "session_idle_s",
    "credential-check": "credential_check_s",
}
_MAY_BE_ZERO = {"connections_per_client"}


def limit_names() -> str:
    """`name=default, ...` for help texts."""
    defaults = HttpLimits()
    return ", ".join(f"{name}={getattr(defaults, field):g}" for name, field in _NAMES.items())


def with_overrides(base: HttpLimits, overrides: list[str] | tuple[str, ...]) -> HttpLimits:
    """`base` with each `NAME=VALUE` applied; a bad one is an error naming it and the fix."""
    changes: dict[str, int | float] = {}
    kinds = {f.name: f.type for f in fields(HttpLimits)}
    for override in overrides:
        name, sep, text = override.partition("=")
        field = _NAMES.get(name.strip())
        if not sep or field is None:
            raise UserError(f"--http-limit {override!r}: give NAME=VALUE with NAME one of {', '.join(_NAMES)}")
        try:
            value: int | float = int(text) if kinds[field] == "int" else float(text)
        except ValueError:
            raise UserError(f"--http-limit {override!r}: {text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and field not in _MAY_BE_ZERO):
            raise UserError(f"--http-limit {override!r}: must be a positive, finite number")
        changes[field] = value
    return replace(base, **changes)  # type: ignore[arg-type]
