"""One read broadcast, in two steps: drain the replies, then resolve them.

A `Drain` collects the replies to one read request until the listed owner
answered, every receiver finished, or the window ended. `resolve` turns what
was drained into the outcome, by the routing rules of docs/contract/resources.md §5:

- a listed URI is served by its listed owner only; another capsule's answer
  (it saw the broadcast too) is never a substitute;
- an unlisted URI that a template covers is served the same way, by that
  template's owner only (`preferred` is the owner either way; the broker
  picks it, docs/contract/templates.md §9.3);
- any other URI (a family member) goes to the lexicographically first
  source-id that answered, whatever the timing, with an audit line per loser;
- a reply from a capsule the URI authority does not let serve the URI (it is
  outside its publisher's namespaces, or inside another's) is never taken;
- the host's note that a capsule's handler did not return (`unanswered`) is
  taken from the owner only: for any other URI that capsule did not answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from astrid.host.broker.names import NO_NAMES, CapsuleNames
from astrid.host.broker.read_reply import check_read_reply
from astrid.host.bus import Delivery, Message, Principal, Subscription
from astrid.host.contract.outcomes import FailureCode, ReadOutcome
from astrid.host.contract.resource import is_unanswered
from astrid.host.limits import Limits
from astrid.host.tuning import BROKER_TUNING

log = logging.getLogger("astrid.host.broker")
audit = logging.getLogger("astrid.host.broker.audit")


class ReadStatus(Enum):
    """How one read broadcast ended (what the broker does next depends on it)."""

    ANSWERED = "answered"  # a reply was taken (its outcome may still be a failure)
    NO_REPLY = "no reply"  # every receiver finished and none answered
    TIMED_OUT = "timed out"  # the window ended with receivers still running
    REFUSED = "refused"  # the window ended without the listed owner's reply; others' replies were refused
    # The listed owner finished without answering while another capsule answered: the capsule
    # set may have moved on (a capsule rebuilt on another host, before its heartbeat said so).
    MOVED = "moved"
    OWNER_GONE = "owner gone"  # the listed owner was not among the receivers


@dataclass
class Drained:
    """The replies of one read broadcast, at most one per source-id."""

    replies: dict[str, Message] = field(default_factory=dict)
    finished: bool = False  # every receiver's handler had returned


class Drain:
    """Collects the replies to one read request until `preferred` answers, every receiver is done,
    or the window ends; `wait_for` waits for it on a thread, an event loop may drive it instead
    (`settled` never waits).

    An unlisted URI (`preferred` None) waits for every receiver: who serves it
    must not depend on who answers fastest. A completion drains the same way,
    with `uri` the template and `what` "completion" (for the log).
    `may_answer(source_id)` False: that capsule's reply is refused (the URI authority).
    `names` names the capsules in the log lines.
    """

    def __init__(
        self,
        replies: Subscription,
        delivery: Delivery,
        *,
        principal: Principal,
        uri: str,
        preferred: str | None,
        window_s: float,
        what: str = "read",
        may_answer: Callable[[str], bool] | None = None,
        names: CapsuleNames = NO_NAMES,
    ) -> None:
        self.replies = replies
        self.delivery = delivery
        self.principal = principal
        self.uri = uri
        self.preferred = preferred
        self.what = what
        self.may_answer = may_answer
        self.names = names
        self.deadline = time.monotonic() + window_s
        self.drained = Drained()
        self.over = False

    def take(self, message: Message) -> bool:
        """Record a reply; True when it ends the drain."""
        what, drained, names = self.what, self.drained, self.names
        if message.principal != self.principal:
            log.warning(
                "%s reply from %s dropped: attributed to %s, not %s",
                what,
                names.label(message.source_id),
                message.principal,
                self.principal,
            )
            return False
        if message.source_id in drained.replies:
            log.warning("second %s reply from %s for %s dropped", what, names.label(message.source_id), self.uri)
            return False
        if message.source_id != self.preferred and _unanswered(message):
            log.debug(
                "%s of %s: %s did not answer (the host's note, not its owner's)",
                what,
                self.uri,
                names.label(message.source_id),
            )
            return False
        if self.may_answer is not None and not self.may_answer(message.source_id):
            audit.warning(
                "%s reply from %s for %s refused: outside the URI namespaces its capsule may serve (principal %s)",
                what,
                names.label(message.source_id),
                self.uri,
                self.principal,
            )
            return False
        drained.replies[message.source_id] = message
        if message.source_id == self.preferred:
            self.over = True
        return self.over

    def settled(self) -> bool:
        """Take what is queued now; True once the drain is over (never waits)."""
        if not self.over:
            finished = self.delivery.finished  # before the poll: what a finished receiver sent is queued
            taken = any(self.take(message) for message in self.replies.poll(BROKER_TUNING.drain_batch_messages))
            if not taken and (finished or self.remaining_s() <= 0):
                self.over = True  # (a reply that ends the drain set it in `take`)
        return self.over

    def remaining_s(self) -> float:
        return self.deadline - time.monotonic()

    def result(self) -> Drained:
        self.drained.finished = self.delivery.finished
        return self.drained


def _unanswered(message: Message) -> bool:
    """The host's note that this capsule did not answer (`contract.resource.unanswered_reply`)."""
    try:
        return is_unanswered(message.parsed())
    except (ValueError, RecursionError):
        return False  # not JSON: taken, and refused as malformed when it decides the read


def wait_for(collecting: Drain) -> Drained:
    """Block until `collecting` settles (a thread's way to drain)."""
    while not collecting.settled():
        message = collecting.replies.recv(min(collecting.remaining_s(), BROKER_TUNING.read_slice_s))
        if message is not None:
            collecting.take(message)
    return collecting.result()


def resolve(
    drained: Drained,
    *,
    principal: Principal,
    uri: str,
    preferred: str | None,
    window_s: float,
    limits: Limits,
    via_template: bool = False,
    names: CapsuleNames = NO_NAMES,
) -> tuple[ReadOutcome, ReadStatus]:
    """The outcome of a drained read, by the routing rules above (`names` names the capsules)."""
    replies = drained.replies
    if preferred is not None and preferred in replies:
        return check_read_reply(replies[preferred], uri, preferred, limits), ReadStatus.ANSWERED
    if preferred is not None and replies:
        log.warning(
            "read of %s for %s: the %s owner %s did not answer; replies of %s refused",
            uri,
            principal,
            "template's" if via_template else "listed",
            names.label(preferred),
            ", ".join(names.label(source) for source in sorted(replies)),
        )
        if drained.finished:
            return owner_silent(uri, preferred, via_template=via_template, names=names), ReadStatus.MOVED
        failure = ReadOutcome.fail(
            FailureCode.TIMEOUT,
            f"{_the_owner(uri, preferred, via_template, names)} did not answer within {window_s:g} s",
            preferred,
        )
        return failure, ReadStatus.REFUSED
    if replies:
        source, *others = sorted(replies)
        for other in others:
            winner, loser = names.labels(source, other)
            audit.warning(
                "read uri collision: uri=%s principal=%s winner=%s loser=%s "
                "(an unlisted uri; the lexicographically first source-id wins)",
                uri,
                principal,
                winner,
                loser,
            )
        if not drained.finished:
            log.warning("read of %s for %s: the window ended before every capsule finished", uri, principal)
        return check_read_reply(replies[source], uri, source, limits), ReadStatus.ANSWERED
    if drained.finished:
        return ReadOutcome.fail(FailureCode.NOT_FOUND, f"no capsule serves {uri}"), ReadStatus.NO_REPLY
    timeout = ReadOutcome.fail(FailureCode.TIMEOUT, f"no capsule answered the read of {uri} within {window_s:g} s")
    return timeout, ReadStatus.TIMED_OUT


def owner_silent(uri: str, owner: str, *, via_template: bool = False, names: CapsuleNames = NO_NAMES) -> ReadOutcome:
    """The owner finished without answering. A listed owner promised the URI: its
    fault, said once. A template covers a space of URIs its owner may not all
    have, and silence is how a capsule says "not mine": so, no such resource."""
    if via_template:
        return ReadOutcome.fail(
            FailureCode.NOT_FOUND, f"{_the_owner(uri, owner, True, names)} has no such resource", owner
        )
    return ReadOutcome.fail(
        FailureCode.CAPSULE_ERROR,
        f"{_the_owner(uri, owner, via_template, names)} finished without answering the read",
        owner,
    )


def _the_owner(uri: str, owner: str, via_template: bool, names: CapsuleNames = NO_NAMES) -> str:
    """`capsule notes, which lists <uri>,`: the capsule by name (see `names`)."""
    if via_template:
        return f"capsule {names.label(owner)}, whose template covers {uri},"
    return f"capsule {names.label(owner)}, which lists {uri},"
