"""The host's own capsules' static replies, handed to a broker of the same host without a bus message.

A capsule whose describe (templates) reply is the same for every verified
principal has that reply answered by the host (docs/design.md, "Static
describes"). On the bus that still costs one reply message per capsule and
per round. A broker running beside the kernel takes the same replies through
this seam instead: `LocalReplies.replies` gives them as the kernel checked
them at load (the capsule's source-id, the payload it publishes, its JSON
value), and the broker merges each as that capsule's reply, attributed to
the round's principal, verified principals only, with every rule a bus reply
gets (limits, URI authority, one reply per source-id, tie-breaks).

A broker that takes them `attach`es its source-id: the host then stops
answering that broker's requests on the bus for those capsules, so no round
counts a capsule twice. Other requesters (another host's broker over NATS, a
test publishing a describe) are answered on the bus as before.

Kernel and broker never import each other: the composition root hands the
kernel's directory to the broker as this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

LocalKind = Literal["describe", "templates"]


@dataclass(frozen=True)
class LocalReply:
    """One capsule's static reply: who gives it, its payload text, and that text's JSON value."""

    source_id: str
    payload: str
    data: object = field(compare=False, repr=False)


class LocalReplies(Protocol):
    def replies(self, kind: LocalKind) -> tuple[LocalReply, ...]:
        """The static replies of `kind`, sorted by source-id; the same tuple until the set changes."""
        ...

    def attach(self, consumer: str) -> None:
        """The participant `consumer` takes the replies here: its requests get none on the bus."""
        ...

    def detach(self, consumer: str) -> None:
        """It no longer does: its requests are answered on the bus again."""
        ...


class NoLocalReplies:
    """A broker with no kernel beside it (or a test's): every reply comes over the bus."""

    def replies(self, kind: LocalKind) -> tuple[LocalReply, ...]:
        return ()

    def attach(self, consumer: str) -> None:
        pass

    def detach(self, consumer: str) -> None:
        pass


NO_LOCAL_REPLIES = NoLocalReplies()
