"""`astrid resources ...` commands."""

from __future__ import annotations

from astrid.cli.main import resources
from astrid.cli.errors import UserError


@resources.command("list")
def resources_list() -> None:
    """List the resources a principal sees."""
    raise UserError("`astrid resources list` is not yet available")


@resources.command("read")
def resources_read() -> None:
    """Read one resource."""
    raise UserError("`astrid resources read` is not yet available")
