"""A server's start-up without the cycle collector, and what it made kept out of later collections.

Importing the MCP SDK and the host and loading the capsules make ~90,000
tracked objects that live as long as the process, and a few hundred that are
garbage. Collected as they are made, they cost ~45 ms of a ~0.5 s stdio start:
the collector scans the growing heap again and again (one full collection of
it took ~50 ms here). So `astrid mcp serve` and `astrid host run` start with
the collector off (`quiet_start_up`) and, once they serve, move everything
made so far into the permanent generation before turning it back on
(`serving`): later collections scan only what requests make. The start-up's few hundred garbage objects are
kept (a few KiB): a full collection to free them would cost what was saved.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, TypeVar

Command = TypeVar("Command", bound=Callable[..., Any])


def quiet_start_up(command: Command) -> Command:
    """Run `command` with the cycle collector off until it calls `serving` (or returns)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        was_on = gc.isenabled()
        gc.disable()
        try:
            return command(*args, **kwargs)
        finally:
            if was_on:
                gc.enable()

    return run  # type: ignore[return-value]


def serving() -> None:
    """The start-up is over: what it made is never scanned again, and the collector runs."""
    gc.freeze()
    gc.enable()
