"""The pure core of a templates round, and the template routing rule.

No bus here. `merge_templates` takes the messages a templates round drained
(in arrival order) and applies docs/contract.md §9.3 in the order of a
describe round (`describe.merge_round`):

1. drop replies whose envelope principal is not the invoking principal;
2. honour at most one reply per envelope source-id (a second is dropped and
   logged);
3. parse the reply; an over-size reply (more than `templates_per_describe`
   entries) is dropped whole and logged, a bad entry (one that does not
   validate, or whose `uri_template` breaks the URI-template rules) is
   dropped alone; a capsule declaring one `uri_template` twice keeps its
   first entry;
4. dedup on `uri_template`: the lexicographically first source-id wins
   whatever the arrival order, and every collision is written to the audit
   log (logger `astrid.host.broker.audit`) naming both source-ids;
5. sort by `uri_template` and cap at `templates_per_principal` (extras
   dropped, logged).

`pick_template` is the routing rule for a URI nobody lists: among the
templates that match it, the one with the longest literal prefix wins; on a
tie, the lexicographically first source-id (then the first `uri_template`,
so the pick never depends on arrival order).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from astrid.host.bus import Message, Principal
from astrid.host.contract._base import strip_bad_meta
from astrid.host.contract.template import ResourceTemplate, TemplatesResponse
from astrid.host.contract.uri_template import UriTemplate
from astrid.host.limits import Limits

log = logging.getLogger("astrid.host.broker")
audit = logging.getLogger("astrid.host.broker.audit")


@dataclass(frozen=True)
class TemplateCollision:
    uri_template: str
    winner: str
    loser: str
    principal: Principal


@dataclass
class TemplatesResult:
    """What one templates round produced for one principal."""

    principal: Principal
    templates: list[ResourceTemplate] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)  # uri_template -> source-id
    replied: set[str] = field(default_factory=set)  # source-ids whose reply was accepted
    collisions: list[TemplateCollision] = field(default_factory=list)
    dropped_replies: int = 0
    dropped_entries: int = 0
    capped: int = 0

    @property
    def empty_round(self) -> bool:
        """No capsule got an acceptable reply in (a lost race, not "no templates")."""
        return not self.replied


@dataclass(frozen=True)
class TemplateRoute:
    """One template as the router sees it: who owns it and what it matches."""

    template: UriTemplate
    owner: str

    @property
    def key(self) -> tuple[int, str, str]:
        # longest literal prefix first, then the first source-id, then the first text
        return (-len(self.template.literal_prefix), self.owner, self.template.text)


def _entries(payload: str) -> list[object] | str:
    """The raw `templates` array of a reply, or why the reply is unusable."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(data, dict):
        return "not a JSON object"
    templates = data.get("templates")
    if not isinstance(templates, list):
        return "no `templates` array"
    return templates


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    return str(errors[0]["msg"]) if errors else str(exc)


def merge_templates(principal: Principal, messages: Iterable[Message], limits: Limits) -> TemplatesResult:
    result = TemplatesResult(principal)
    seen: set[str] = set()
    per_source: dict[str, dict[str, ResourceTemplate]] = {}
    context = {"limits": limits}

    for message in messages:
        if message.principal != principal:
            result.dropped_replies += 1
            log.warning(
                "templates reply from %s dropped: attributed to %s, not to the invoking principal %s",
                message.source_id,
                message.principal,
                principal,
            )
            continue
        source = message.source_id
        if source in seen:
            result.dropped_replies += 1
            log.warning("second templates reply from %s in one round dropped (principal %s)", source, principal)
            continue
        seen.add(source)

        entries = _entries(message.payload)
        if isinstance(entries, str):
            result.dropped_replies += 1
            log.warning("templates reply from %s dropped: %s", source, entries)
            continue
        if len(entries) > limits.templates_per_describe:
            result.dropped_replies += 1
            log.warning(
                "templates reply from %s dropped: %d templates, more than the limit of %d",
                source,
                len(entries),
                limits.templates_per_describe,
            )
            continue

        accepted: dict[str, ResourceTemplate] = {}
        for index, entry in enumerate(entries):
            entry = strip_bad_meta(entry, limits, f"templates reply from {source}, entry {index}")
            try:
                # Through TemplatesResponse, so the reply-level rules and the
                # per-entry limits come from the one model.
                template = TemplatesResponse.model_validate({"templates": [entry]}, context=context).templates[0]
            except ValidationError as exc:
                result.dropped_entries += 1
                log.warning("templates reply from %s: entry %d dropped: %s", source, index, _first_error(exc))
                continue
            if template.uri_template in accepted:
                result.dropped_entries += 1
                log.warning(
                    "templates reply from %s declares %s twice; the first entry is kept", source, template.uri_template
                )
                continue
            accepted[template.uri_template] = template
        per_source[source] = accepted
        result.replied.add(source)

    # Dedup on uri_template: visit sources in lexicographic order so the first
    # one wins independently of arrival order.
    chosen: dict[str, ResourceTemplate] = {}
    for source in sorted(per_source):
        for text, template in per_source[source].items():
            winner = result.owners.get(text)
            if winner is None:
                result.owners[text] = source
                chosen[text] = template
                continue
            result.collisions.append(TemplateCollision(text, winner, source, principal))
            audit.warning(
                "resource template collision: uri_template=%s principal=%s winner=%s loser=%s "
                "(the lexicographically first source-id wins)",
                text,
                principal,
                winner,
                source,
            )

    ordered = [chosen[text] for text in sorted(chosen)]
    cap = limits.templates_per_principal
    if len(ordered) > cap:
        result.capped = len(ordered) - cap
        log.warning(
            "principal %s: %d templates over the cap of %d dropped (the last by uri_template order)",
            principal,
            result.capped,
            cap,
        )
        for template in ordered[cap:]:
            result.owners.pop(template.uri_template, None)
        ordered = ordered[:cap]
    result.templates = ordered
    return result


def template_routes(owners: Mapping[str, str]) -> tuple[TemplateRoute, ...]:
    """The routing table of a templates snapshot, in the order `pick_template` tries it."""
    routes = [TemplateRoute(UriTemplate.parse(text), owner) for text, owner in owners.items()]
    return tuple(sorted(routes, key=lambda route: route.key))


def pick_template(routes: Iterable[TemplateRoute], uri: str) -> TemplateRoute | None:
    """The route that serves `uri`: the first match in `template_routes` order (see the module docstring)."""
    for route in routes:
        if route.template.match(uri) is not None:
            return route
    return None
