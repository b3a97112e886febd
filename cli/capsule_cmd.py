"""`astrid capsule ...` commands."""

from __future__ import annotations

from astrid.cli.main import capsule
from astrid.cli.errors import UserError


@capsule.command("new")
def capsule_new() -> None:
    """Scaffold a new capsule folder."""
    raise UserError("`astrid capsule new` is not yet available")


@capsule.command("build")
def capsule_build() -> None:
    """Build a capsule folder into a WebAssembly component."""
    raise UserError("`astrid capsule build` is not yet available")


@capsule.command("list")
def capsule_list() -> None:
    """Show the capsules found and whether they load."""
    raise UserError("`astrid capsule list` is not yet available")
