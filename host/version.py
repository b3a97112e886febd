"""The installed astrid-py version, one lookup for every place that reports it."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version


@lru_cache(maxsize=1)
def astrid_version() -> str:
    try:
        return version("astrid-py")
    except PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"
