"""Resource events (docs/contract/subscriptions.md §11): who may subscribe to a URI, and which
announcements that a URI changed are handed on.

A capsule announces on `resource.v1.event.updated` that a URI it owns changed
for the principal it runs for (the kernel does the same for a file a read
touched). `Events.announced` checks the announcement (`updates.AnnouncementGate`:
the rate; here: the principal, the payload, and that the announcer owns the
URI for that principal, listed or by its template), drops the principal's
kept reads of the URI first, then hands it, with that principal, to whoever
listens (`listen`: the MCP server, through the composition root).

`subscribable` says whether a principal could read a URI at all (listed for
it, or covered by a template it sees), and who serves it: the MCP server asks
it before it takes a subscription.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from astrid.host.broker.listings import Listings
from astrid.host.broker.shared import Shared
from astrid.host.broker.updates import AnnouncementGate
from astrid.host.bus import Message, Principal
from astrid.host.contract._base import utf8_len
from astrid.host.contract.events import ResourceUpdated
from astrid.host.contract.topics import RESOURCE_UPDATED_TOPIC
from astrid.host.limits import DEFAULT_SUBSCRIPTION_LIMITS, SubscriptionLimits

log = logging.getLogger("astrid.host.broker")

Updated = Callable[[Principal, str], None]  # a checked update: (its principal, the URI); quick, never raising


class Events:
    def __init__(
        self, shared: Shared, listings: Listings, limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS
    ) -> None:
        self.shared = shared
        self.listings = listings
        self.announcements = AnnouncementGate(limits)
        self._listeners: list[Updated] = []
        self._listeners_lock = threading.Lock()

    def listen(self, updated: Updated) -> Callable[[], None]:
        """Hand every checked update to `updated` from now on; returns the call that stops it."""
        with self._listeners_lock:
            self._listeners.append(updated)

        def stop() -> None:
            with self._listeners_lock:
                if updated in self._listeners:
                    self._listeners.remove(updated)

        return stop

    def subscribable(self, principal: Principal, uri: str) -> str | None:
        """Who serves `uri` to `principal` (its listed owner, else the owner of the template
        that covers it), or None when the principal could not read it: not subscribable."""
        if not principal.is_verified or not isinstance(uri, str) or not uri:
            return None
        if utf8_len(uri) > self.shared.limits.uri_bytes:
            return None
        return self.listings.owner_of(principal, uri, cached_only=False)

    def on_event(self, message: Message) -> None:
        if message.topic != RESOURCE_UPDATED_TOPIC:
            log.debug(
                "resource event on %s from %s ignored: not one this broker knows", message.topic, message.source_id
            )
            return
        self.announced(message)

    def announced(self, message: Message) -> bool:
        """Check one `updated` announcement and hand it on; True when it was."""
        shared = self.shared
        principal, source = message.principal, message.source_id
        label = shared.names.label(source)
        if not principal.is_verified:
            log.debug("update announced by %s for %s dropped: not a verified principal", label, principal)
            return False
        if not self.announcements.allow(source, principal, label):
            return False
        try:
            uri = ResourceUpdated.model_validate(message.parsed(), context={"limits": shared.limits}).uri
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            shared.stats.updates_refused += 1
            if self.announcements.refused(source):
                log.warning("capsule %s announced an update that is not an `updated` record: %s", label, exc)
            return False
        if shared.cache.resources.get(principal) is None:
            # Nobody has listed, read or subscribed as this principal: nobody can be told.
            log.debug("update of %s for %s dropped: the principal has no snapshot", uri, principal)
            return False
        if not self._owns(source, principal, uri, label):
            return False
        # First: no kept read of the old content may answer the read this update prompts.
        shared.reads.invalidate_uri(principal, uri)
        with self._listeners_lock:
            listeners = list(self._listeners)
        for updated in listeners:
            updated(principal, uri)
        shared.stats.updates += 1
        log.debug("update of %s for %s announced by %s", uri, principal, label)
        return True

    def _owns(self, source: str, principal: Principal, uri: str, label: str) -> bool:
        """Does `source` serve `uri` to `principal`? Refusals are said once per capsule."""
        owner = self.listings.owner_of(principal, uri, cached_only=True)
        if owner != source and self.listings.may_be_stale(principal):
            owner = self.listings.owner_of(principal, uri, cached_only=False)  # the capsule set moved: ask again
        if owner == source:
            return True
        self.shared.stats.updates_refused += 1
        if self.announcements.refused(source):
            log.warning(
                "capsule %s announced an update of %s for %s, which it does not serve: refused "
                "(said once per capsule; later refusals at debug level)",
                label,
                uri,
                principal,
            )
        else:
            log.debug("update of %s for %s by %s refused: not its owner", uri, principal, label)
        return False
