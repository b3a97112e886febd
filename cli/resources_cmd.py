"""`astrid resources ...`: list, read, templates and complete as an MCP client would, without one.

Runs the same kernel, broker and front doors in-process as `astrid mcp serve`
(`astrid.host.runtime.Runtime`), so what you see here is what a client
gets (before the MCP reshape).
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from astrid.cli.errors import UserError
from astrid.cli.main import resources
from astrid.cli.mcp_cmd import capsules_option, make_runtime, principal_option
from astrid.cli.output import counted

if TYPE_CHECKING:
    from astrid.host.contract.outcomes import FailureCode


def _hint(code: FailureCode) -> str:
    """What to do about a failed read, when there is something to do."""
    from astrid.host.contract import outcomes  # lazy: keeps `astrid --help` quick

    failure = outcomes.FailureCode
    return {
        failure.NOT_FOUND: "check the uri against `astrid resources list`",
        failure.DENIED: "the read was refused by the broker's gate",
        failure.TIMEOUT: "a capsule did not answer within the read window",
        failure.OVER_LIMIT: "the contents are over a read limit",
        failure.CAPSULE_ERROR: "the capsule failed to serve it; run with -v for its log",
    }.get(code, "")


# What a capsule logs while a read runs (its own lines, and the kernel's line when a call
# fails). Without -v it is held back: a failed read is then one line, the error, which
# says what went wrong (its log is what -v shows); a read that succeeds prints it after.
_HELD_LOGGERS = ("astrid.capsule", "astrid.host.kernel.sandbox")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class _HeldLogs(logging.Filter):
    """Keeps the records of the loggers it filters (at most `CLI_TUNING.held_log_records`)
    instead of letting them out."""

    def __init__(self) -> None:
        from astrid.host.tuning import CLI_TUNING  # lazy: keeps `astrid --help` quick

        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.max_held = CLI_TUNING.held_log_records

    def filter(self, record: logging.LogRecord) -> bool:
        if len(self.records) < self.max_held:
            self.records.append(record)
        return False

    def release(self) -> None:
        """Let the held records out, in order (after the filter is gone)."""
        records, self.records = self.records, []
        for record in records:
            logging.getLogger(record.name).handle(record)


@contextmanager
def _held_capsule_logs() -> Iterator[_HeldLogs | None]:
    """Hold the capsules' log lines while the block runs; None (nothing held) with -v."""
    if logging.getLogger(_HELD_LOGGERS[0]).isEnabledFor(logging.INFO):
        yield None  # -v: every line as it happens
        return
    held = _HeldLogs()
    loggers = [logging.getLogger(name) for name in _HELD_LOGGERS]
    for logger in loggers:
        logger.addFilter(held)
    try:
        yield held
    finally:
        for logger in loggers:
            logger.removeFilter(held)


def _one_line(text: str) -> str:
    """A capsule's message as one line for the terminal: line breaks as spaces, control characters escaped."""
    flat = re.sub(r"\s*[\r\n]+\s*", " ", text.strip())
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", flat)


def _started(capsule_dirs: tuple[Path, ...], principal: str | None):
    from astrid.host.errors import BackendNotReady

    runtime = make_runtime(capsule_dirs, principal)
    try:
        runtime.start(background=False)
    except BackendNotReady as exc:
        runtime.close()
        raise UserError(f"capsules could not be loaded: {exc}") from None
    for failure in runtime.status.failures:
        click.echo(f"warning: capsule {failure.folder} not loaded: {failure.error}", err=True)
    return runtime


def _call(fn, *args):
    from astrid.host.errors import BrokerUnavailable

    try:
        return fn(*args)
    except BrokerUnavailable as exc:
        raise UserError(f"the broker did not answer: {exc}") from None


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [
        max(len(headers[i]), *(len(r[i]) for r in rows)) if rows else len(headers[i]) for i in range(len(headers))
    ]
    widths[-1] = 0  # the last column is not padded
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def _capsule_record(owner) -> dict | None:
    """Who serves a resource, for `resources list --json`."""
    if owner is None:
        return None
    provenance = owner.provenance
    signed = provenance is not None and provenance.signed
    return {
        "name": owner.name,
        "publisher": provenance.publisher if signed else None,
        "key": provenance.key_fingerprint if signed else None,
        "signed": signed,
        "digest": owner.digest,
        "namespaces": list(provenance.namespaces) if provenance is not None else [],
    }


@resources.command("list")
@capsules_option
@principal_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array for scripts: the bus records, each with the `capsule` serving it "
    "(name, publisher or null for local, unsigned; component digest; namespaces).",
)
def resources_list(capsule_dirs: tuple[Path, ...], principal: str | None, as_json: bool) -> None:
    """List the resources a principal sees."""
    with _started(capsule_dirs, principal) as runtime:
        listed = _call(runtime.list_resources)
        if as_json:
            owners = runtime.owners()
            records = [{**r.to_wire(), "capsule": _capsule_record(owners.get(r.uri))} for r in listed]
            click.echo(json.dumps(records, indent=2, ensure_ascii=False))
            return
        if not listed:
            loaded = counted(len(runtime.status.capsules), "capsule")
            click.echo(f"no resources for {runtime.principal!r} ({loaded} loaded)")
            return
        rows = [
            [r.uri, r.name, r.mime_type or "-", str(r.size) if r.size is not None else "-", r.title or ""]
            for r in listed
        ]
        click.echo(_table(rows, ["URI", "NAME", "MIME", "SIZE", "TITLE"]))


@resources.command("read")
@click.argument("uri")
@capsules_option
@principal_option
@click.option("--json", "as_json", is_flag=True, help="Print the chunks as JSON (the bus records) for scripts.")
def resources_read(uri: str, capsule_dirs: tuple[Path, ...], principal: str | None, as_json: bool) -> None:
    """Read one resource: text chunks to stdout, blobs described (use --json for them).

    A failed read is one line on stderr (`error: ...`); `-v` adds the capsule's log.
    """
    with _held_capsule_logs() as held:
        with _started(capsule_dirs, principal) as runtime:
            reply = _call(runtime.read_resource, uri)
    if reply.error is not None:
        hint = _hint(reply.error.code)
        message = _one_line(reply.error.message)
        raise UserError(f"{reply.error.code.value}: {message}" + (f" ({hint})" if hint else ""))
    if held is not None:
        held.release()
    if as_json:
        click.echo(json.dumps([c.to_wire() for c in reply.contents], indent=2, ensure_ascii=False))
        return
    for chunk in reply.contents:
        if len(reply.contents) > 1 or chunk.uri != uri:
            click.echo(f"--- {chunk.uri}" + (f" ({chunk.mime_type})" if chunk.mime_type else ""), err=True)
        if chunk.type == "text":
            click.echo(chunk.text)
        else:
            size = len(base64.b64decode(chunk.blob))
            click.echo(f"[blob {chunk.uri}: {chunk.mime_type or 'unknown type'}, {size} bytes; use --json to get it]")


@resources.command("templates")
@capsules_option
@principal_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array for scripts: the bus records, each with the `capsule` serving it (as `list --json`).",
)
def resources_templates(capsule_dirs: tuple[Path, ...], principal: str | None, as_json: bool) -> None:
    """List the resource templates a principal sees, and the capsule serving each."""
    with _started(capsule_dirs, principal) as runtime:
        listed = _call(runtime.list_templates)
        owners = runtime.template_owners()
        if as_json:
            records = [{**t.to_wire(), "capsule": _capsule_record(owners.get(t.uri_template))} for t in listed]
            click.echo(json.dumps(records, indent=2, ensure_ascii=False))
            return
        if not listed:
            loaded = counted(len(runtime.status.capsules), "capsule")
            click.echo(f"no resource templates for {runtime.principal!r} ({loaded} loaded)")
            return
        rows = [
            [t.uri_template, t.name, t.mime_type or "-", _owner_name(owners.get(t.uri_template)), t.title or ""]
            for t in listed
        ]
        click.echo(_table(rows, ["TEMPLATE", "NAME", "MIME", "CAPSULE", "TITLE"]))


def _owner_name(owner) -> str:
    return owner.name if owner is not None else "-"


def _context(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--context NAME=VALUE` options as a dict (the template's other variables, already given)."""
    context: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise UserError(f"--context {pair!r}: write NAME=VALUE, a variable of the template and its value")
        context[name] = value
    return context


@resources.command("complete")
@click.argument("uri_template")
@click.argument("argument")
@click.argument("prefix", required=False, default="")
@click.option(
    "--context",
    "context_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A value already given for another variable of the template (repeatable), as a client sends it.",
)
@capsules_option
@principal_option
@click.option("--json", "as_json", is_flag=True, help="Print {values, total, has_more} as JSON for scripts.")
def resources_complete(
    uri_template: str,
    argument: str,
    prefix: str,
    context_pairs: tuple[str, ...],
    capsule_dirs: tuple[Path, ...],
    principal: str | None,
    as_json: bool,
) -> None:
    """Ask the capsule serving URI_TEMPLATE to complete its variable ARGUMENT from PREFIX (default: empty).

    Prints the values one per line, as an MCP client's completion/complete gets them.
    """
    context = _context(context_pairs)
    with _held_capsule_logs() as held:
        with _started(capsule_dirs, principal) as runtime:
            outcome = _call(runtime.complete, uri_template, argument, prefix, context)
    if outcome.error is not None:
        hint = _completion_hint(outcome.error.code)
        message = _one_line(outcome.error.message)
        raise UserError(f"{outcome.error.code.value}: {message}" + (f" ({hint})" if hint else ""))
    if held is not None:
        held.release()
    if as_json:
        answer = {"values": list(outcome.values), "total": outcome.total, "has_more": outcome.has_more}
        click.echo(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    for value in outcome.values:
        click.echo(value)
    if outcome.has_more:
        total = f" of {outcome.total}" if outcome.total is not None else ""
        first = counted(len(outcome.values), "value")
        click.echo(f"(the first {first}{total}; type more of {argument} to narrow)", err=True)


def _completion_hint(code: FailureCode) -> str:
    """What to do about a failed completion: the template and its variable come from `resources templates`."""
    from astrid.host.contract import outcomes  # lazy: keeps `astrid --help` quick

    if code in (outcomes.FailureCode.NOT_FOUND, outcomes.FailureCode.INVALID_REQUEST):
        return "check the template and its variable against `astrid resources templates`"
    return _hint(code)
