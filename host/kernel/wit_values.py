"""Building WIT values for wasmtime-py: the one spelling rule the host ABIs share."""

from __future__ import annotations

from typing import Any

from wasmtime.component import Record


def record(**fields: Any) -> Record:
    """A WIT record; keyword names are snake_case, WIT wants kebab-case."""
    value = Record()
    for name, field in fields.items():
        setattr(value, name.replace("_", "-"), field)
    return value
