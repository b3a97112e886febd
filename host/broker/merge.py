"""Merging the replies of one fan-out: the rules a describe round and a templates round share.

No bus here: `merge` takes the messages a round drained (in arrival order),
with the host's own static replies (`LocalEntries`: the capsules of the kernel
beside the broker, checked once by `accept_local` for every principal, then
taken as those capsules' replies for a verified principal), and applies, in a
fixed order:

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

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from pydantic import ValidationError

from astrid.host.bounded_lru import BoundedLru
from astrid.host.broker.authority import OPEN, UriAuthority
from astrid.host.broker.names import NO_NAMES, CapsuleNames
from astrid.host.bus import Message, Principal
from astrid.host.contract._base import without_bad_meta
from astrid.host.contract.local_replies import LocalKind, LocalReply
from astrid.host.limits import Limits
from astrid.host.tuning import BROKER_TUNING

log = logging.getLogger("astrid.host.broker")
audit = logging.getLogger("astrid.host.broker.audit")

Item = TypeVar("Item")


@dataclass(frozen=True)
class FanOut(Generic[Item]):
    """What one kind of fan-out collects, and how its logs name it (the kinds: `broker/kinds.py`)."""

    round: LocalKind  # "describe": its request and reply topics, "describe reply from ..."
    array: str  # the reply's array, "resources"; its limits are `<array>_per_describe` and `_per_principal`
    key_name: str  # "uri": an entry's key
    listed_twice: str  # "lists": "... lists <key> twice"
    audit_label: str  # "resource uri collision"
    response: Any  # the reply's model (`{<array>: [...]}`): an entry is validated through it
    authorized: Callable[[UriAuthority, str, Item], bool]  # may this source-id offer this entry?

    def validate(self, entry: object, context: dict[str, Any]) -> Item:
        """One entry, through the reply model: its reply-level rules and per-entry limits (in `context`)."""
        return getattr(self.response.model_validate({self.array: [entry]}, context=context), self.array)[0]

    def key(self, item: Item) -> str:
        return getattr(item, self.key_name)

    def per_reply(self, limits: Limits) -> int:
        return getattr(limits, f"{self.array}_per_describe")

    def per_principal(self, limits: Limits) -> int:
        return getattr(limits, f"{self.array}_per_principal")

    def merge(
        self,
        principal: Principal,
        messages: Iterable[Message],
        limits: Limits,
        authority: UriAuthority = OPEN,
        names: CapsuleNames = NO_NAMES,
        local: LocalEntries[Item] | None = None,
    ) -> RoundOf[Item]:
        """One round's result from the replies it drained (see the module docstring)."""
        return RoundOf.of(principal, merge(self, principal, messages, limits, authority, names, local or NO_LOCAL))


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


@dataclass(frozen=True)
class Collision:
    """Two capsules offered one key; the lexicographically first source-id won."""

    key: str  # the uri, or the uri_template
    winner: str
    loser: str
    principal: Principal


@dataclass
class RoundOf(Generic[Item]):
    """What one round of a fan-out produced for one principal: `Merged`, with the principal it ran for."""

    principal: Principal
    items: list[Item] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)  # key -> source-id
    replied: set[str] = field(default_factory=set)  # source-ids whose reply was accepted
    collided: list[tuple[str, str, str]] = field(default_factory=list)  # (key, winner, loser)
    dropped_replies: int = 0
    dropped_entries: int = 0
    capped: int = 0

    @property
    def empty_round(self) -> bool:
        """No capsule got an acceptable reply in (a lost race, not "nothing listed")."""
        return not self.replied

    @property
    def collisions(self) -> list[Collision]:
        # Made when asked: a round of many copies of one capsule has many, and nobody reads them but tests.
        return [Collision(key, winner, loser, self.principal) for key, winner, loser in self.collided]

    @classmethod
    def of(cls, principal: Principal, merged: Merged[Item]) -> Self:
        return cls(
            principal,
            items=merged.items,
            owners=merged.owners,
            replied=merged.replied,
            collided=merged.collisions,
            dropped_replies=merged.dropped_replies,
            dropped_entries=merged.dropped_entries,
            capped=merged.capped,
        )


@dataclass(frozen=True)
class LocalEntries(Generic[Item]):
    """The host's static replies of one kind (`contract.local_replies`), checked once (`accept_local`):
    what every round takes from them before the URI authority, for whichever principal it runs."""

    replies: tuple[LocalReply, ...]  # what they were made from (kept while the host's tuple is the same)
    by_source: tuple[tuple[str, dict[str, Item]], ...] = ()  # each accepted reply's entries by key
    dropped_replies: int = 0
    dropped_entries: int = 0


NO_LOCAL: LocalEntries[Any] = LocalEntries(())


def accept_local(
    kind: FanOut[Item], replies: tuple[LocalReply, ...], limits: Limits, names: CapsuleNames = NO_NAMES
) -> LocalEntries[Item]:
    """Check the host's static replies as any reply is checked, once for every principal (what
    does not depend on the principal or the URI authority); what is dropped is logged here, once."""
    merged: Merged[Item] = Merged()
    by_source = []
    for reply in replies:
        checked = CHECKED_REPLIES.checked_value(kind, reply.payload, reply.data, limits)
        entries = _keyed(kind, reply.source_id, checked, merged, names)
        if entries is not None:
            by_source.append((reply.source_id, entries))
    return LocalEntries(replies, tuple(by_source), merged.dropped_replies, merged.dropped_entries)


def merge(
    kind: FanOut[Item],
    principal: Principal,
    messages: Iterable[Message],
    limits: Limits,
    authority: UriAuthority = OPEN,
    names: CapsuleNames = NO_NAMES,
    local: LocalEntries[Item] = NO_LOCAL,
) -> Merged[Item]:
    """The round's items, from the host's static replies (`local`, for a verified principal only)
    and the replies the round drained; `names` names the capsules in the log and audit lines."""
    merged: Merged[Item] = Merged()
    seen: set[str] = set()  # every source-id that replied, whether its reply was kept or not
    per_source: dict[str, dict[str, Item]] = {}
    if local.replies and principal.is_verified:
        merged.dropped_replies, merged.dropped_entries = local.dropped_replies, local.dropped_entries
        for source, entries in local.by_source:  # each as that capsule's reply, attributed to `principal`
            seen.add(source)
            per_source[source] = _authorized(kind, principal, source, entries, merged, authority, names)
            merged.replied.add(source)
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
    """The entries of one reply by key, or None when the whole reply is dropped.

    The capsule's name is looked up only for a log line: most replies log nothing."""
    source = message.source_id
    if message.principal != principal:
        merged.dropped_replies += 1
        log.warning(
            "%s reply from %s dropped: attributed to %s, not to the invoking principal %s",
            kind.round,
            names.label(source),
            message.principal,
            principal,
        )
        return None
    if source in seen:
        merged.dropped_replies += 1
        log.warning(
            "second %s reply from %s in one round dropped (principal %s)", kind.round, names.label(source), principal
        )
        return None
    seen.add(source)
    entries = _keyed(kind, source, CHECKED_REPLIES.checked(kind, message, limits), merged, names)
    return None if entries is None else _authorized(kind, principal, source, entries, merged, authority, names)


def _keyed(
    kind: FanOut[Item],
    source: str,
    checked: tuple[CheckedEntry[Item], ...] | str,
    merged: Merged[Item],
    names: CapsuleNames,
) -> dict[str, Item] | None:
    """A checked reply's valid entries by key, the first of any key it names twice; None when the
    check refused the whole reply (`checked` is why)."""
    if isinstance(checked, str):
        merged.dropped_replies += 1
        log.warning("%s reply from %s dropped: %s", kind.round, names.label(source), checked)
        return None
    accepted: dict[str, Item] = {}
    for index, entry in enumerate(checked):
        if entry.meta_dropped is not None:
            log.warning(
                "%s reply from %s, entry %d: meta dropped: %s",
                kind.round,
                names.label(source),
                index,
                entry.meta_dropped,
            )
        item = entry.item
        if item is None:
            merged.dropped_entries += 1
            log.warning("%s reply from %s: entry %d dropped: %s", kind.round, names.label(source), index, entry.error)
            continue
        key = kind.key(item)
        if key in accepted:
            merged.dropped_entries += 1
            log.warning(
                "%s reply from %s %s %s twice; the first entry is kept",
                kind.round,
                names.label(source),
                kind.listed_twice,
                key,
            )
            continue
        accepted[key] = item
    return accepted


def _authorized(
    kind: FanOut[Item],
    principal: Principal,
    source: str,
    entries: dict[str, Item],
    merged: Merged[Item],
    authority: UriAuthority,
    names: CapsuleNames,
) -> dict[str, Item]:
    """The entries the URI authority lets `source` offer; each one it refuses is dropped with an audit line."""
    if authority is OPEN:
        return entries
    allowed: dict[str, Item] = {}
    for key, item in entries.items():
        if kind.authorized(authority, source, item):
            allowed[key] = item
            continue
        merged.dropped_entries += 1
        audit.warning(
            "%s reply from %s: %s=%s dropped: outside the URI namespaces its capsule may serve (principal %s)",
            kind.round,
            names.label(source),
            kind.key_name,
            key,
            principal,
        )
    return allowed


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
            if not audit.isEnabledFor(logging.WARNING):
                continue
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


@dataclass(frozen=True)
class CheckedEntry(Generic[Item]):
    """One entry of a reply, checked: its item, else why it was dropped; and why its meta was, if it was."""

    item: Item | None
    error: str | None = None
    meta_dropped: str | None = None


def check_reply(kind: FanOut[Item], data: object, limits: Limits) -> tuple[CheckedEntry[Item], ...] | str:
    """A reply's entries, each validated, or why the whole reply is unusable. A pure function of its input."""
    if not isinstance(data, dict):
        return "not a JSON object"
    entries = data.get(kind.array)
    if not isinstance(entries, list):
        return f"no `{kind.array}` array"
    if len(entries) > kind.per_reply(limits):
        return f"{len(entries)} {kind.array}, more than the limit of {kind.per_reply(limits)}"
    context = {"limits": limits}
    checked: list[CheckedEntry[Item]] = []
    for entry in entries:
        entry, meta_dropped = without_bad_meta(entry, limits)
        try:
            checked.append(CheckedEntry(kind.validate(entry, context), meta_dropped=meta_dropped))
        except ValidationError as exc:
            checked.append(CheckedEntry(None, _first_error(exc), meta_dropped))
    return tuple(checked)


class CheckedReplies:
    """Replies already checked, by their exact text.

    A reply that is the same for every principal (a static describe, a
    capsule whose list does not change) is parsed and validated once, not
    once per principal: checking is a pure function of (kind, limits, text),
    and its items are frozen. What depends on the round (the principal, the
    URI authority, the log lines naming the capsule) is applied every time.
    Bounded in replies and in characters, least recently used out first."""

    def __init__(
        self,
        max_replies: int = BROKER_TUNING.checked_replies_kept,
        max_chars: int = BROKER_TUNING.checked_reply_chars_kept,
        max_reply_chars: int = BROKER_TUNING.checked_reply_chars_max,
    ) -> None:
        self._max_reply_chars = max_reply_chars  # a bigger reply is checked every time, never kept
        self._lock = threading.Lock()
        self._kept: BoundedLru[tuple[str, Limits, str], tuple[CheckedEntry[Any], ...] | str] = BoundedLru(
            max_replies, max_chars
        )

    def checked(self, kind: FanOut[Item], message: Message, limits: Limits) -> tuple[CheckedEntry[Item], ...] | str:
        return self._checked(kind, message.payload, message.parsed, limits)

    def checked_value(
        self, kind: FanOut[Item], payload: str, data: object, limits: Limits
    ) -> tuple[CheckedEntry[Item], ...] | str:
        """`checked` for a reply the host already parsed (`data` is `payload`'s JSON value)."""
        return self._checked(kind, payload, lambda: data, limits)

    def _checked(
        self, kind: FanOut[Item], payload: str, parsed: Callable[[], object], limits: Limits
    ) -> tuple[CheckedEntry[Item], ...] | str:
        if len(payload) > self._max_reply_chars:
            return self._check(kind, parsed, limits)
        key = (kind.array, limits, payload)
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None:
            return kept
        checked = self._check(kind, parsed, limits)
        with self._lock:
            self._kept.put(key, checked, len(payload))
        return checked

    @staticmethod
    def _check(
        kind: FanOut[Item], parsed: Callable[[], object], limits: Limits
    ) -> tuple[CheckedEntry[Item], ...] | str:
        try:
            data = parsed()
        except (ValueError, RecursionError):
            return "not JSON"
        return check_reply(kind, data, limits)


CHECKED_REPLIES = CheckedReplies()


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    return str(errors[0]["msg"]) if errors else str(exc)
