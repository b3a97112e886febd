"""Who may serve which URIs: the seam through which URI namespaces reach the broker.

The broker knows source-ids, not publishers. The composition root gives it a
`UriAuthority` that does (docs/publishing.md): a signed capsule serves only
inside the namespaces its publisher owns, an unsigned one only outside every
owned namespace. The broker asks it about every describe entry, every
template and every read reply, and drops what the authority refuses, with an
audit line. Without one, anyone may serve anything (v1's operator trust).
"""

from __future__ import annotations

from typing import Protocol


class UriAuthority(Protocol):
    def may_serve(self, source_id: str, uri: str) -> bool:
        """May the capsule `source_id` answer for `uri`?"""
        ...

    def may_cover(self, source_id: str, prefix: str) -> bool:
        """May it declare a template covering every URI that starts with `prefix`?"""
        ...


class OpenAuthority:
    """Anyone serves anything: no namespaces are owned."""

    def may_serve(self, source_id: str, uri: str) -> bool:
        return True

    def may_cover(self, source_id: str, prefix: str) -> bool:
        return True


OPEN = OpenAuthority()
