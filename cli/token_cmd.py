"""`astrid mcp token ...`: the static bearer tokens an HTTP server accepts, one per principal.

A token is shown once, when it is made; the file keeps only its digest
(`astrid.host.auth.tokens`). A running server re-reads the file, so a revoke
needs no restart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from astrid.cli.errors import UserError
from astrid.cli.main import mcp


@mcp.group("token")
def token() -> None:
    """Make, list and revoke the bearer tokens of `astrid mcp serve` over HTTP."""


def tokens_option(function: Callable) -> Callable:
    return click.option(
        "--tokens",
        "token_file",
        type=click.Path(path_type=Path, dir_okay=False),
        metavar="FILE",
        default=None,
        help="The token file (default: $ASTRID_CONFIG_DIR/tokens.json, else the user config dir's).",
    )(function)


def _store(token_file: Path | None):
    from astrid.host.auth.tokens import TokenStore
    from astrid.host.settings import default_token_file

    return TokenStore(token_file.expanduser() if token_file is not None else default_token_file())


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


@token.command("add")
@click.argument("name")
@tokens_option
def token_add(name: str, token_file: Path | None) -> None:
    """Make and print a token for principal NAME.

    It is shown only this once: the token file keeps only its digest.
    """
    store = _store(token_file)
    secret = store.add(name)
    click.echo(secret)
    _say(f"token for principal {name!r} saved in {store.path}; it is shown only this once")
    _say("clients send it in every HTTP request: `Authorization: Bearer <token>`")


@token.command("list")
@tokens_option
def token_list(token_file: Path | None) -> None:
    """List the principals that have a token.

    Each with when its token was made; never a token or its digest.
    """
    store = _store(token_file)
    entries = store.list()
    if not entries:
        _say(f"no tokens in {store.path}: make one with `astrid mcp token add NAME`")
        return
    width = max(len(entry.name) for entry in entries)
    for entry in entries:
        click.echo(f"{entry.name:<{width}}  {entry.created.isoformat()}")


@token.command("revoke")
@click.argument("name")
@tokens_option
def token_revoke(name: str, token_file: Path | None) -> None:
    """Remove the token of principal NAME.

    A running server refuses it from its next request.
    """
    store = _store(token_file)
    if not store.revoke(name):
        raise UserError(f"no token for {name!r} in {store.path}: `astrid mcp token list` shows the names")
    _say(f"revoked the token of {name!r}; a running server refuses it from its next request")
