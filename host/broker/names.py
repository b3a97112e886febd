"""Capsules by name in what the broker says: its failures, warnings and audit lines.

The broker knows capsules only by their source-ids (a UUID per build). The
composition root hands it `name_of(source_id) -> name | None` (the kernel
knows the names); the broker never imports the kernel. What a user reads
names the capsule (`notes`); with `-v` (the broker's logger enabled for INFO)
it also shows the source-id (`notes (342ad6a7-…)`). A source-id nobody
knows (another host's capsule, or no lookup) is shown as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

NameOf = Callable[[str], str | None]

_verbose_log = logging.getLogger("astrid.host.broker")


def _no_names(source_id: str) -> str | None:
    return None


class CapsuleNames:
    """`label(source_id)`: how a message names a capsule."""

    def __init__(self, name_of: NameOf | None = None) -> None:
        self._name_of = name_of or _no_names

    def name(self, source_id: str) -> str | None:
        try:
            name = self._name_of(source_id)
        except Exception:  # a lookup must never break a read
            return None
        return name if isinstance(name, str) and name else None

    @staticmethod
    def verbose() -> bool:
        """`-v`: the broker's logger shows INFO."""
        return _verbose_log.isEnabledFor(logging.INFO)

    def label(self, source_id: str, *, with_id: bool = False) -> str:
        """`notes`; `notes (<source-id>)` with -v or `with_id`; the source-id when the name is unknown."""
        name = self.name(source_id)
        if name is None:
            return source_id
        return f"{name} ({source_id})" if with_id or self.verbose() else name

    def labels(self, *source_ids: str) -> list[str]:
        """Labels for capsules named side by side: with their source-ids when two share a name."""
        names = [self.name(source_id) for source_id in source_ids]
        known = [name for name in names if name is not None]
        clash = len(set(known)) < len(known)
        return [self.label(source_id, with_id=clash) for source_id in source_ids]


NO_NAMES = CapsuleNames()
