"""The one way into the broker: a client bound to one verified principal.

    client = BrokerClient(broker, Principal.verified("alice"))
    client.list_resources()                          # the principal's resources
    read = client.read("astrid://whoami")            # never waits: settled, in flight, or left to a thread
    outcome = read.result()                          # ... or waited for here

What the MCP server and `astrid resources` hold. A client is bound to one
principal when it is made, and a principal that is not verified is refused
then: there is no argument through which a caller could name someone else,
so the confused-deputy property holds by construction. Only the composition
root makes them (`Runtime.client_for`), for the principal a session
authenticated.

The answers are typed values (`contract.outcomes`), trusted: what a capsule
sent was checked where it entered, at the broker. Each request says one line
in the broker's log (`-v`), and a failure of the broker itself is a
`BrokerUnavailable` (lists) or a failed outcome (reads, completions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import TypeVar

from astrid.host.broker.broker import Broker
from astrid.host.broker.read import Read
from astrid.host.bus import BusError, Principal
from astrid.host.contract.outcomes import CompletionOutcome, FailureCode, ReadOutcome
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.errors import BrokerUnavailable
from astrid.host.tuning import BROKER_TUNING

log = logging.getLogger("astrid.host.broker")

_Item = TypeVar("_Item", ResourceDefinition, ResourceTemplate)


class BrokerClient:
    def __init__(self, broker: Broker, principal: Principal) -> None:
        if not principal.is_verified:
            raise ValueError(f"a broker client acts for a verified principal only, not {principal}")
        self._broker = broker
        self.principal = principal

    # -- lists -------------------------------------------------------------------------

    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]:
        """The principal's resources (a describe round when the snapshot is not fresh)."""
        return self._listed("resources.list", "resources", self._broker.listings.listed, refresh)

    def list_resources_now(self) -> list[ResourceDefinition] | None:
        """The list when the snapshot is fresh, without waiting (safe on an event loop); else None."""
        started = time.perf_counter()
        resources = self._broker.listings.listed_if_fresh(self.principal)
        if resources is None:
            return None
        self._said("resources.list", f"{len(resources)} resources", started)
        return list(resources)

    def list_templates(self, *, refresh: bool = False) -> list[ResourceTemplate]:
        return self._listed("resources.templates", "templates", self._broker.listings.templates, refresh)

    def _listed(self, what: str, items: str, listing: Callable[..., tuple[_Item, ...]], refresh: bool) -> list[_Item]:
        started = time.perf_counter()
        try:
            found = listing(self.principal, refresh=refresh)
        except Exception as exc:
            raise BrokerUnavailable(broker_failed(f"list {items}", exc, self.principal)) from None
        self._said(what, f"{len(found)} {items}", started)
        return list(found)

    # -- read --------------------------------------------------------------------------

    def read(self, uri: str) -> Read:
        """The read of `uri`, started without waiting (safe on an event loop): see `read.Read`."""
        started = time.perf_counter()
        principal = self.principal

        def failed(exc: Exception) -> ReadOutcome:
            return ReadOutcome.fail(FailureCode.INTERNAL, broker_failed("read the resource", exc, principal))

        def done(outcome: ReadOutcome) -> None:
            self._said(f"resource.read {uri}", _ended(outcome, f"{len(outcome.contents)} chunks"), started)

        return self._broker.reads.start(principal, uri, failed=failed, done=done)

    # -- completion and subscriptions ------------------------------------------------------

    def complete(
        self, uri_template: str, argument_name: str, argument_value: str, context: dict[str, str] | None = None
    ) -> CompletionOutcome:
        """Values for `argument_name` of `uri_template` that start like `argument_value`."""
        started = time.perf_counter()
        try:
            outcome = self._broker.completions.complete(
                self.principal, uri_template, argument_name, argument_value, context
            )
        except Exception as exc:
            outcome = CompletionOutcome.fail(FailureCode.INTERNAL, broker_failed("complete", exc, self.principal))
        self._said(f"completion.complete {uri_template}", _ended(outcome, f"{len(outcome.values)} values"), started)
        return outcome

    def subscribable(self, uri: str) -> str | None:
        """Who serves `uri` to this principal when it could read it (listed, or a template covers it), else None.

        Asked before a subscription is taken (and again after a capsule-set change): when the principal could
        read it and no read of it by that owner is known, the host starts one on its behalf (`first_reads`),
        so the files it depends on are watched; `learned` waits for it."""
        started = time.perf_counter()
        try:
            owner = self._broker.events.subscribable(self.principal, uri)
            if owner is not None:
                self._broker.first_reads.start(self.principal, uri, owner)
        except Exception as exc:
            raise BrokerUnavailable(broker_failed("check a subscription", exc, self.principal)) from None
        self._said(f"subscribable {uri}", "yes" if owner is not None else "no", started)
        return owner

    def learned(self, uris: Collection[str], timeout_s: float = BROKER_TUNING.first_read_wait_s) -> bool:
        """Wait, at most `timeout_s`, for the first reads `subscribable` started for `uris`; True once none is left."""
        return self._broker.first_reads.wait(self.principal, uris, timeout_s)

    def _said(self, what: str, result: str, started: float) -> None:
        if log.isEnabledFor(logging.INFO):
            elapsed_ms = (time.perf_counter() - started) * 1000
            log.info("%s for %s: %s in %.1f ms", what, self.principal, result, elapsed_ms)


def _ended(outcome: ReadOutcome | CompletionOutcome, success: str) -> str:
    return outcome.error.code.value if outcome.error is not None else success


def broker_failed(what: str, exc: Exception, principal: Principal) -> str:
    """The failure text for a request the broker could not carry out. A refused bus
    (e.g. a NATS server that is down) is said as it is, without a traceback."""
    if isinstance(exc, BusError):
        log.warning("cannot %s for %s: %s", what, principal, exc)
        return f"cannot {what} now: {exc}"
    log.exception("%s for %s failed", what, principal)
    return f"the broker failed to {what}; see its log"
