"""The pure core of a describe round: drained replies in, one snapshot out.

No bus here: `merge_round` takes the messages a round drained (in arrival
order) and applies docs/contract.md §5 and §7 in a fixed order:

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

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from astrid.host.bus import Message, Principal
from astrid.host.contract._base import strip_bad_meta
from astrid.host.contract.resource import DescribeResponse, ResourceDefinition
from astrid.host.limits import Limits

log = logging.getLogger("astrid.host.broker")
audit = logging.getLogger("astrid.host.broker.audit")


@dataclass(frozen=True)
class Collision:
    uri: str
    winner: str
    loser: str
    principal: Principal


@dataclass
class RoundResult:
    """What one describe round produced for one principal."""

    principal: Principal
    resources: list[ResourceDefinition] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)  # uri -> source-id
    replied: set[str] = field(default_factory=set)  # source-ids whose reply was accepted
    collisions: list[Collision] = field(default_factory=list)
    dropped_replies: int = 0
    dropped_entries: int = 0
    capped: int = 0

    @property
    def empty_round(self) -> bool:
        """No capsule got an acceptable reply in (a lost race, not "no resources")."""
        return not self.replied


def _entries(payload: str) -> list[object] | str:
    """The raw `resources` array of a reply, or why the reply is unusable."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(data, dict):
        return "not a JSON object"
    resources = data.get("resources")
    if not isinstance(resources, list):
        return "no `resources` array"
    return resources


def merge_round(principal: Principal, messages: Iterable[Message], limits: Limits) -> RoundResult:
    result = RoundResult(principal)
    seen: set[str] = set()
    per_source: dict[str, dict[str, ResourceDefinition]] = {}
    context = {"limits": limits}

    for message in messages:
        if message.principal != principal:
            result.dropped_replies += 1
            log.warning(
                "describe reply from %s dropped: attributed to %s, not to the invoking principal %s",
                message.source_id,
                message.principal,
                principal,
            )
            continue
        source = message.source_id
        if source in seen:
            result.dropped_replies += 1
            log.warning("second describe reply from %s in one round dropped (principal %s)", source, principal)
            continue
        seen.add(source)

        entries = _entries(message.payload)
        if isinstance(entries, str):
            result.dropped_replies += 1
            log.warning("describe reply from %s dropped: %s", source, entries)
            continue
        if len(entries) > limits.resources_per_describe:
            result.dropped_replies += 1
            log.warning(
                "describe reply from %s dropped: %d resources, more than the limit of %d",
                source,
                len(entries),
                limits.resources_per_describe,
            )
            continue

        accepted: dict[str, ResourceDefinition] = {}
        for index, entry in enumerate(entries):
            entry = strip_bad_meta(entry, limits, f"describe reply from {source}, entry {index}")
            try:
                # Validated through DescribeResponse so the reply-level rules and
                # the per-entry limits come from the one model.
                definition = DescribeResponse.model_validate({"resources": [entry]}, context=context).resources[0]
            except ValidationError as exc:
                result.dropped_entries += 1
                log.warning(
                    "describe reply from %s: entry %d dropped: %s",
                    source,
                    index,
                    exc.errors(include_url=False, include_input=False)[0]["msg"] if exc.errors() else exc,
                )
                continue
            if definition.uri in accepted:
                result.dropped_entries += 1
                log.warning("describe reply from %s lists %s twice; the first entry is kept", source, definition.uri)
                continue
            accepted[definition.uri] = definition
        per_source[source] = accepted
        result.replied.add(source)

    # Dedup on uri: visit sources in lexicographic order so the first one wins
    # independently of arrival order.
    chosen: dict[str, ResourceDefinition] = {}
    for source in sorted(per_source):
        for uri, definition in per_source[source].items():
            winner = result.owners.get(uri)
            if winner is None:
                result.owners[uri] = source
                chosen[uri] = definition
                continue
            collision = Collision(uri, winner, source, principal)
            result.collisions.append(collision)
            audit.warning(
                "resource uri collision: uri=%s principal=%s winner=%s loser=%s "
                "(the lexicographically first source-id wins)",
                uri,
                principal,
                winner,
                source,
            )

    ordered = [chosen[uri] for uri in sorted(chosen)]
    cap = limits.resources_per_principal
    if len(ordered) > cap:
        result.capped = len(ordered) - cap
        log.warning(
            "principal %s: %d resources over the cap of %d dropped (the last by uri order)",
            principal,
            result.capped,
            cap,
        )
        for definition in ordered[cap:]:
            result.owners.pop(definition.uri, None)
        ordered = ordered[:cap]
    result.resources = ordered
    return result
