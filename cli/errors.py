"""User-facing errors: one line naming the cause and the fix, no traceback unless -v."""

from __future__ import annotations

import click


class UserError(click.ClickException):
    """An error the user can fix; printed as `error: <message>`."""

    def show(self, file=None) -> None:
        from astrid.cli.output import error

        error(self.format_message())
