"""The broker as the tests ask it: each job's call for one principal, verified or not.

`BrokerClient` (what the MCP server holds) refuses a principal that is not
verified when it is made; the broker's own checks are what these tests
attack, so they call its jobs directly, and a read is waited for here.
"""

from __future__ import annotations

from astrid.host.broker import Broker
from astrid.host.bus import Principal
from astrid.host.contract.outcomes import CompletionOutcome, FailureCode, ReadOutcome
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate


class Asker:
    def __init__(self, broker: Broker, principal: Principal) -> None:
        self.broker = broker
        self.principal = principal

    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]:
        return list(self.broker.listings.listed(self.principal, refresh=refresh))

    def list_templates(self, *, refresh: bool = False) -> list[ResourceTemplate]:
        return list(self.broker.listings.templates(self.principal, refresh=refresh))

    def read_resource(self, uri: str) -> ReadOutcome:
        read = self.broker.reads.start(self.principal, uri, failed=_internal, done=lambda outcome: None)
        return read.result()

    def complete(
        self, uri_template: str, argument_name: str, argument_value: str, context: dict[str, str] | None = None
    ) -> CompletionOutcome:
        return self.broker.completions.complete(self.principal, uri_template, argument_name, argument_value, context)


def _internal(exc: Exception) -> ReadOutcome:
    return ReadOutcome.fail(FailureCode.INTERNAL, f"the broker failed: {exc}")
