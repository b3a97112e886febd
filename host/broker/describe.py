"""The pure core of a describe round: drained replies in, one snapshot out.

No bus here: `merge_round` takes the messages a round drained (in arrival
order) and applies docs/contract/resources.md §5 and docs/contract/limits.md §7 with the rules every fan-out
shares (`merge.merge`), in a fixed order:

1. drop replies whose envelope principal is not the invoking principal;
2. honour at most one reply per envelope source-id (a second is dropped and
   logged);
3. parse the reply; an over-size reply (more than `resources_per_describe`
   entries) is dropped whole and logged, a bad entry is dropped alone;
4. dedup on `uri`: the lexicographically first source-id wins whatever the
   arrival order, and every collision is written to the audit log;
5. sort by `uri` and cap at `resources_per_principal` (extras dropped, logged).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from astrid.host.broker.authority import OPEN, UriAuthority
from astrid.host.broker.merge import NO_LOCAL, FanOut, LocalEntries, RoundOf, merge
from astrid.host.broker.merge import Collision as Collision  # a describe round's collisions, by their old name
from astrid.host.broker.names import NO_NAMES, CapsuleNames
from astrid.host.bus import Message, Principal
from astrid.host.contract.resource import DescribeResponse, ResourceDefinition
from astrid.host.limits import Limits


class RoundResult(RoundOf[ResourceDefinition]):
    """What one describe round produced for one principal (its `items` are its resources)."""

    @property
    def resources(self) -> list[ResourceDefinition]:
        return self.items


def _one_definition(entry: object, context: dict[str, Any]) -> ResourceDefinition:
    # Through DescribeResponse, so the reply-level rules and the per-entry limits come from the one model.
    return DescribeResponse.model_validate({"resources": [entry]}, context=context).resources[0]


DESCRIBE = FanOut[ResourceDefinition](
    round="describe",
    array="resources",
    key_name="uri",
    listed_twice="lists",
    audit_label="resource uri collision",
    validate=_one_definition,
    key=lambda definition: definition.uri,
    authorized=lambda authority, source, definition: authority.may_serve(source, definition.uri),
    per_reply=lambda limits: limits.resources_per_describe,
    per_principal=lambda limits: limits.resources_per_principal,
)


def merge_round(
    principal: Principal,
    messages: Iterable[Message],
    limits: Limits,
    authority: UriAuthority = OPEN,
    names: CapsuleNames = NO_NAMES,
    local: LocalEntries[ResourceDefinition] = NO_LOCAL,
) -> RoundResult:
    return RoundResult.of(principal, merge(DESCRIBE, principal, messages, limits, authority, names, local))
