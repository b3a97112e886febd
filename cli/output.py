"""What the CLI itself writes on stderr: `astrid: ...` lines, or one JSON object per line (`--log-format json`).

`use_json()` switches every line a running server writes on stderr to JSON:
the CLI's own (`say`, `error`), the loggers' (the root handler `-v` adds to,
`astrid.events`, `astrid.access`) and uvicorn's (which then installs no
handlers of its own: its lines reach the root logger). See
`astrid.host.telemetry.logs`.
"""

from __future__ import annotations

import logging

import click

LOG_FORMATS = ("text", "json")

# Set once by `use_json()`, read by every line written after it.
json_lines = False


def say(message: str, *, level: str = "info") -> None:
    """An `astrid: MESSAGE` line on stderr (a JSON object with `--log-format json`)."""
    if json_lines:
        from astrid.host.telemetry.logs import say as json_line

        click.echo(json_line(message, level=level), err=True)
    else:
        click.echo(f"astrid: {message}", err=True)


def error(message: str) -> None:
    """An `error: MESSAGE` line on stderr (a JSON object with `--log-format json`)."""
    if json_lines:
        from astrid.host.telemetry.logs import say as json_line

        click.echo(json_line(message, level="error"), err=True)
    else:
        click.echo(f"error: {message}", err=True)


def use_json() -> None:
    """Every line from now on as JSON: the CLI's, and every handler's on the loggers astrid writes to."""
    global json_lines
    from astrid.host.telemetry.logs import JsonFormatter

    json_lines = True
    for logger in (logging.getLogger(), logging.getLogger("astrid.events"), logging.getLogger("astrid.access")):
        for handler in logger.handlers:
            handler.setFormatter(JsonFormatter())


def formatter(text_format: str) -> logging.Formatter:
    """The formatter of a handler added now: JSON after `use_json()`, else `text_format`."""
    if json_lines:
        from astrid.host.telemetry.logs import JsonFormatter

        return JsonFormatter()
    return logging.Formatter(text_format)


def counted(number: float, thing: str, things: str | None = None) -> str:
    """`1 capsule`, `0 capsules`, `2 capsules`: a count and its noun, singular for exactly one only.

    `things` is the plural when it is not `thing` + "s" (`counted(n, "sandbox", "sandboxes")`);
    a float (a metric) is shown rounded, with thousands separators."""
    shown = f"{number:,.0f}" if isinstance(number, float) else str(number)
    return f"{shown} {thing if number == 1 else things or thing + 's'}"
