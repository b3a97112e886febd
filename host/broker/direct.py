"""The front doors as calls: what the MCP server holds for one verified principal.

    client = BrokerClient(broker.front_doors, Principal.verified("alice"))
    client.list_resources()                  # the same doors the bus front doors use,
    client.read_resource("astrid://whoami")  # typed values in and out: no JSON, no bus

A client is bound to one principal when it is made, and a principal that is
not verified is refused then: there is no argument through which a caller
could name someone else, so the confused-deputy property holds by
construction, not by a gate on a topic. Only the composition root makes
them (`Runtime.client_for`), for the principal a session authenticated; it
is the trusted ingress, so reads and completions pass the gate.

The replies are the same models `FrontDoorClient` returns over the bus, made
with `model_construct`: what the broker returns was checked where it entered
(a capsule's reply, at the broker), and is not validated again here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from astrid.host.broker.frontdoor import FrontDoors, broker_failed
from astrid.host.broker.read_cache import max_age_of
from astrid.host.broker.read_reply import ReadOutcome
from astrid.host.broker.started_read import StartedRead
from astrid.host.bus import Principal
from astrid.host.contract.frontdoor import CompletionReply, FailureCode, ReadResourceReply
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.errors import BrokerUnavailable

log = logging.getLogger("astrid.host.broker")


class BrokerClient:
    def __init__(self, doors: FrontDoors, principal: Principal) -> None:
        if not principal.is_verified:
            raise ValueError(f"a broker client acts for a verified principal only, not {principal}")
        self._doors = doors
        self.principal = principal

    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]:
        try:
            return list(self._doors.listed(self.principal, refresh=refresh))
        except Exception as exc:
            raise BrokerUnavailable(broker_failed("list resources", exc, self.principal)) from None

    def list_resources_now(self) -> list[ResourceDefinition] | None:
        """The list when the snapshot is fresh, without waiting (safe on an event loop); else None."""
        resources = self._doors.listed_now(self.principal)
        return None if resources is None else list(resources)

    def read_resource_now(self, uri: str) -> ReadResourceReply | None:
        """The read when a declared-fresh copy is kept, without waiting (safe on an event loop); else None."""
        outcome = self._doors.kept_read(self.principal, uri, trusted=True, asker="the MCP server")
        return None if outcome is None else _read_reply(uri, outcome)

    def read_resource(self, uri: str) -> ReadResourceReply:
        outcome = self._doors.read(self.principal, uri, trusted=True, asker="the MCP server")
        return _read_reply(uri, outcome)

    def start_read(self, uri: str) -> PendingRead | None:
        """`read_resource` started without waiting (safe on an event loop) when the broker can; else None."""
        try:
            started = self._doors.start_read(self.principal, uri, trusted=True, asker="the MCP server")
        except Exception:  # the blocking read meets it again, and reports it
            log.debug("a read could not start without waiting", exc_info=True)
            return None
        return None if started is None else PendingRead(started, uri, self.principal)

    def subscribable(self, uri: str) -> str | None:
        """Who serves `uri` to this principal when it could read it (listed, or a template covers it), else None."""
        try:
            return self._doors.subscribable(self.principal, uri, trusted=True, asker="the MCP server")
        except Exception as exc:
            raise BrokerUnavailable(broker_failed("check a subscription", exc, self.principal)) from None

    def list_templates(self, *, refresh: bool = False) -> list[ResourceTemplate]:
        try:
            return list(self._doors.templates(self.principal, refresh=refresh))
        except Exception:
            raise BrokerUnavailable("the broker failed to list templates; see its log") from None

    def complete(
        self, uri_template: str, argument_name: str, argument_value: str, context: dict[str, str] | None = None
    ) -> CompletionReply:
        outcome = self._doors.complete(
            self.principal,
            uri_template,
            argument_name,
            argument_value,
            dict(context or {}),
            trusted=True,
            asker="the MCP server",
        )
        if outcome.error is not None:
            return CompletionReply.model_construct(req_id="", error=outcome.error)
        return CompletionReply.model_construct(
            req_id="", values=list(outcome.values), total=outcome.total, has_more=outcome.has_more, error=None
        )


class PendingRead:
    """A `StartedRead` as the MCP server takes it: replies in, a broker failure as the blocking
    read reports it."""

    def __init__(self, started: StartedRead, uri: str, principal: Principal) -> None:
        self._started = started
        self._uri = uri
        self._principal = principal
        self.wait_s = started.wait_s
        self.notify = started.notify
        self.close = started.close

    def reply(self) -> ReadResourceReply | None:
        """Once `wait_s` said over: the reply, or None when `finish` (on a thread) gives it."""
        return self._replied(self._started.outcome)

    def finish(self) -> ReadResourceReply:
        reply = self._replied(self._started.finish)
        assert reply is not None
        return reply

    def _replied(self, step: Callable[[], ReadOutcome | None]) -> ReadResourceReply | None:
        try:
            outcome = step()
        except Exception as exc:
            outcome = ReadOutcome.fail(FailureCode.INTERNAL, broker_failed("read the resource", exc, self._principal))
        return None if outcome is None else _read_reply(self._uri, outcome)


def _read_reply(uri: str, outcome: ReadOutcome) -> ReadResourceReply:
    return ReadResourceReply.model_construct(
        req_id="",
        uri=uri,
        contents=list(outcome.contents),
        error=outcome.error,
        max_age_s=max_age_of(outcome),
    )
