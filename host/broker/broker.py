"""The broker: a host-native bus participant that gathers and routes resources.

It knows the resource contract and nothing about MCP or wasm. Its jobs, each
a module of its own over one `shared.Shared` state:

- `listings`: a principal's resources and templates (describe and templates
  fan-outs, merged and kept per principal);
- `reads`: who serves a URI, the read broadcast with self-filter, reads kept
  by declared freshness;
- `events`: resource events, and who may subscribe to a URI;
- `first_reads`: a subscribed URI nobody has read yet is read once, for its
  subscriber, so the files it depends on are watched;
- `complete`: completions, answered by the template's owner only.

This class wires them and its two bus bindings: the capsule-set event
(`astrid.v1.capsules_loaded`: the principal's snapshots go stale) and the
resource events. Whoever acts for a principal holds a `client.BrokerClient`,
the one way in: typed calls, no JSON, no bus. What it says names capsules by
name (`names.CapsuleNames`, from the `name_of` the composition root hands
it), the source-id only with -v.

Ending a drain early relies on the bus's `Delivery`: `wait()` returns once
every handler the message reached has finished, and a capsule publishes its
reply while it handles the request, so by then every reply is queued.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from astrid.host.broker.authority import OPEN, UriAuthority
from astrid.host.broker.complete import Completions
from astrid.host.broker.events import Events
from astrid.host.broker.first_reads import FirstReads
from astrid.host.broker.listings import Listings
from astrid.host.broker.names import CapsuleNames, NameOf
from astrid.host.broker.reads import Reads
from astrid.host.broker.shared import BrokerStats, Shared
from astrid.host.bus import Binding, Bus, Message, Participant, Principal
from astrid.host.contract.local_replies import NO_LOCAL_REPLIES, LocalReplies
from astrid.host.contract.topics import BROKER, CAPSULES_LOADED_TOPIC, RESOURCE_EVENTS
from astrid.host.limits import DEFAULT_LIMITS, DEFAULT_SUBSCRIPTION_LIMITS, Limits, SubscriptionLimits

log = logging.getLogger("astrid.host.broker")

MessageHandler = Callable[[Message], None]


class Broker:
    def __init__(
        self,
        bus: Bus,
        *,
        participant: Participant | None = None,
        limits: Limits = DEFAULT_LIMITS,
        authority: UriAuthority = OPEN,
        name_of: NameOf | None = None,
        subscription_limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS,
        local_replies: LocalReplies = NO_LOCAL_REPLIES,
    ) -> None:
        """`authority`: who may serve which URIs (namespaces; OPEN: anyone, anything); `name_of`: a capsule's
        name by source-id, for what it says; `local_replies`: the static replies of the kernel beside it."""
        self.shared = Shared(bus, participant or BROKER.participant(), limits, authority, CapsuleNames(name_of))
        self.local_replies = local_replies
        self.listings = Listings(self.shared, local_replies)
        self.reads = Reads(self.shared, self.listings)
        self.events = Events(self.shared, self.listings, subscription_limits)
        self.completions = Completions(self.shared, self.listings)
        self.first_reads = FirstReads(
            self.reads, self.shared.answered, per_principal=subscription_limits.subscriptions_per_principal
        )
        self._started = False

    @property
    def bus(self) -> Bus:
        return self.shared.bus

    @property
    def participant(self) -> Participant:
        return self.shared.participant

    @property
    def stats(self) -> BrokerStats:
        return self.shared.stats

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> Broker:
        if self._started:
            return self
        me = self.participant
        # Invalidation is quick and must land before anyone lists again: inline.
        invalidation = Binding(me, CAPSULES_LOADED_TOPIC, self._guard(self._on_capsules_loaded), inline=True)
        # Not inline: checking who owns a URI may take a describe round, never in a capsule's thread.
        events = Binding(me, RESOURCE_EVENTS, self._guard(self.events.on_event))
        self.bus.bind_all([invalidation, events])
        self.local_replies.attach(me.source_id)
        self._started = True
        return self

    def close(self) -> None:
        self.first_reads.close()
        if self._started:
            self.local_replies.detach(self.participant.source_id)
            self.bus.unbind_owner(self.participant.source_id)
            self._started = False

    def _guard(self, handler: MessageHandler) -> MessageHandler:
        def run(message: Message) -> None:
            try:
                handler(message)
            except Exception:  # never let one event take the dispatcher thread down
                log.exception("broker failed on %s", message.topic)

        return run

    # -- capsule-set changes -----------------------------------------------------------

    def invalidate(self, principal: Principal | None = None) -> None:
        """A capsule-set change: the describe and templates snapshots go stale together."""
        self.shared.cache.invalidate(principal)

    def _on_capsules_loaded(self, message: Message) -> None:
        principal = message.principal
        if principal.kind in ("verified", "claimed") and principal.name:
            self.invalidate(principal)
            return
        # A system-wide announcement: invalidate the principals it names, or all.
        names: set[str] = set()
        try:
            for capsule in json.loads(message.payload).get("capsules", []):
                if isinstance(capsule, dict) and isinstance(capsule.get("principal"), str):
                    names.add(capsule["principal"])
        except (ValueError, AttributeError):
            names = set()
        if not names:
            self.invalidate(None)
        for name in names:
            self.invalidate(Principal.verified(name))
