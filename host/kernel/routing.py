"""Which messages reach a capsule's handler binding.

Always: a capsule's own messages never re-enter it.
Optionally, a routing hint that keeps the resource contract: a capsule whose
manifest declares `[resources] families = ["astrid://docs/", ...]` can only
own URIs under those prefixes, so a read broadcast for any other URI skips it
(it would have stayed silent anyway). Capsules without the declaration get
every read.
"""

from __future__ import annotations

from collections.abc import Callable

from astrid.host.bus import Message
from astrid.host.contract.topics import READ_REQUEST_TOPIC
from astrid.host.kernel.loader import LoadedCapsule


def requested_uri(message: Message) -> str | None:
    """The read request's uri, from the JSON value the bus already parsed (no second parse)."""
    try:
        data = message.parsed()
    except (ValueError, RecursionError):
        return None
    uri = data.get("uri") if isinstance(data, dict) else None
    return uri if isinstance(uri, str) else None


def accepts_for(capsule: LoadedCapsule, pattern: str) -> Callable[[Message], bool]:
    own = capsule.source_id
    hints = capsule.manifest.resources
    families = tuple(hints.families) if hints is not None and hints.families else ()
    if not families or pattern != READ_REQUEST_TOPIC:
        return lambda message: message.source_id != own

    def accepts(message: Message) -> bool:
        if message.source_id == own:
            return False
        uri = requested_uri(message)
        # An unparsable request still goes through: the capsule decides.
        return uri is None or uri.startswith(families)

    return accepts
