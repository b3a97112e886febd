"""Merging the replies of one fan-out: the rules a describe round and a templates round share.

No bus here: `merge` takes the messages a round drained (in arrival order)
and applies, in a fixed order:

1. drop replies whose envelope principal is not the invoking principal;
2. honour at most one reply per envelope source-id (a second is dropped and
   logged);
3. parse the reply; an over-size reply (more than the per-reply limit) is
   dropped whole and logged, a bad entry is dropped alone, an entry outside
   what the URI authority lets its capsule serve is dropped with an audit
   line, and a reply that names one key twice keeps its first entry;
4. dedup on the key: the lexicographically first source-id wins whatever the
   arrival order, and every collision is written to the audit log;
5. sort by the key and cap at the per-principal limit (extras dropped, logged).

`FanOut` says what differs between the two rounds: the reply's array, how an
entry is validated, what its key is, the limits, and the words of the logs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from astrid.host.broker.authority import OPEN, UriAuthority
from astrid.host.broker.names import NO_NAMES, CapsuleNames
from astrid.host.bus import Message, Principal
from astrid.host.contract._base import strip_bad_meta
from astrid.host.limits import Limits

log = logging.getLogger("astrid.host.broker")
audit = logging.getLogger("astrid.host.broker.audit")

Item = TypeVar("Item")


@dataclass(frozen=True)
class FanOut(Generic[Item]):
    """What one kind of fan-out collects, and how its logs name it."""

    round: str  # "describe": "describe reply from ..."
    array: str  # the reply's array: "resources"
    key_name: str  # "uri"
    listed_twice: str  # "lists": "... lists <key> twice"
    audit_label: str  # "resource uri collision"
    validate: Callable[[object, dict[str, Any]], Item]  # one entry, with the limits in the context
    key: Callable[[Item], str]
    authorized: Callable[[UriAuthority, str, Item], bool]  # may this source-id offer this entry?
    per_reply: Callable[[Limits], int]
    per_principal: Callable[[Limits], int]


@dataclass
class Merged(Generic[Item]):
    """What one round produced for one principal."""

    items: list[Item] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)  # key -> source-id
    replied: set[str] = field(default_factory=set)  # source-ids whose reply was accepted
    collisions: list[tuple[str, str, str]] = field(default_factory=list)  # (key, winner, loser)
    dropped_replies: int = 0
    dropped_entries: int = 0
    capped: int = 0


def merge(
    kind: FanOut[Item],
    principal: Principal,
    messages: Iterable[Message],
    limits: Limits,
    authority: UriAuthority = OPEN,
    names: CapsuleNames = NO_NAMES,
) -> Merged[Item]:
    """The round's items; `names` names the capsules in the log and audit lines."""
    merged: Merged[Item] = Merged()
    seen: set[str] = set()  # every source-id that replied, whether its reply was kept or not
    per_source: dict[str, dict[str, Item]] = {}
    for message in messages:
        accepted = _accepted(kind, principal, message, limits, merged, seen, authority, names)
        if accepted is not None:
            per_source[message.source_id] = accepted
            merged.replied.add(message.source_id)
    chosen = _dedup(kind, principal, per_source, merged, names)
    _cap(kind, principal, [chosen[key] for key in sorted(chosen)], limits, merged)
    return merged


def _accepted(
    kind: FanOut[Item],
    principal: Principal,
    message: Message,
    limits: Limits,
    merged: Merged[Item],
    seen: set[str],
    authority: UriAuthority,
    names: CapsuleNames,
) -> dict[str, Item] | None:
    """The entries of one reply by key, or None when the whole reply is dropped."""
    source = message.source_id
    who = names.label(source)
    if message.principal != principal:
        merged.dropped_replies += 1
        log.warning(
            "%s reply from %s dropped: attributed to %s, not to the invoking principal %s",
            kind.round,
            who,
            message.principal,
            principal,
        )
        return None
    if source in seen:
        merged.dropped_replies += 1
        log.warning("second %s reply from %s in one round dropped (principal %s)", kind.round, who, principal)
        return None
    seen.add(source)
    entries = _entries(message.payload, kind.array)
    if isinstance(entries, str):
        merged.dropped_replies += 1
        log.warning("%s reply from %s dropped: %s", kind.round, who, entries)
        return None
    if len(entries) > kind.per_reply(limits):
        merged.dropped_replies += 1
        log.warning(
            "%s reply from %s dropped: %d %s, more than the limit of %d",
            kind.round,
            who,
            len(entries),
            kind.array,
            kind.per_reply(limits),
        )
        return None
    accepted: dict[str, Item] = {}
    context = {"limits": limits}
    for index, entry in enumerate(entries):
        entry = strip_bad_meta(entry, limits, f"{kind.round} reply from {who}, entry {index}")
        try:
            item = kind.validate(entry, context)
        except ValidationError as exc:
            merged.dropped_entries += 1
            log.warning("%s reply from %s: entry %d dropped: %s", kind.round, who, index, _first_error(exc))
            continue
        key = kind.key(item)
        if not kind.authorized(authority, source, item):
            merged.dropped_entries += 1
            audit.warning(
                "%s reply from %s: %s=%s dropped: outside the URI namespaces its capsule may serve (principal %s)",
                kind.round,
                who,
                kind.key_name,
                key,
                principal,
            )
            continue
        if key in accepted:
            merged.dropped_entries += 1
            log.warning(
                "%s reply from %s %s %s twice; the first entry is kept", kind.round, who, kind.listed_twice, key
            )
            continue
        accepted[key] = item
    return accepted


def _dedup(
    kind: FanOut[Item],
    principal: Principal,
    per_source: dict[str, dict[str, Item]],
    merged: Merged[Item],
    names: CapsuleNames,
) -> dict[str, Item]:
    """One item per key: sources visited in lexicographic order, so the first wins whatever the arrival order."""
    chosen: dict[str, Item] = {}
    for source in sorted(per_source):
        for key, item in per_source[source].items():
            winner = merged.owners.get(key)
            if winner is None:
                merged.owners[key] = source
                chosen[key] = item
                continue
            merged.collisions.append((key, winner, source))
            shown_winner, shown_loser = names.labels(winner, source)
            audit.warning(
                "%s: %s=%s principal=%s winner=%s loser=%s (the lexicographically first source-id wins)",
                kind.audit_label,
                kind.key_name,
                key,
                principal,
                shown_winner,
                shown_loser,
            )
    return chosen


def _cap(kind: FanOut[Item], principal: Principal, ordered: list[Item], limits: Limits, merged: Merged[Item]) -> None:
    cap = kind.per_principal(limits)
    if len(ordered) > cap:
        merged.capped = len(ordered) - cap
        log.warning(
            "principal %s: %d %s over the cap of %d dropped (the last by %s order)",
            principal,
            merged.capped,
            kind.array,
            cap,
            kind.key_name,
        )
        for item in ordered[cap:]:
            merged.owners.pop(kind.key(item), None)
        ordered = ordered[:cap]
    merged.items = ordered


def _entries(payload: str, array: str) -> list[object] | str:
    """The raw array of a reply, or why the reply is unusable."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(data, dict):
        return "not a JSON object"
    entries = data.get(array)
    if not isinstance(entries, list):
        return f"no `{array}` array"
    return entries


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    return str(errors[0]["msg"]) if errors else str(exc)
