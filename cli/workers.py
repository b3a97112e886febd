"""`--workers N|auto`: how many capsule-host processes `astrid mcp serve` starts (host/serving/workers.py)."""

from __future__ import annotations

import os

import click


class WorkersType(click.ParamType):
    """`--workers N` (at least 1) or `auto` (the cores this process may run on)."""

    name = "N|auto"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif str(value).strip().lower() == "auto":
            return core_count()
        else:
            try:
                number = int(str(value))
            except ValueError:
                self.fail(f"{value!r}: give a number of capsule-host processes, or auto (one per core)", param, ctx)
        if number < 1:
            self.fail(f"{number}: at least 1 (or auto: one per core)", param, ctx)
        return number


def core_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # the cores this process may use (containers, taskset)
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
