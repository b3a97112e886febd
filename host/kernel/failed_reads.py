"""A read whose handler did not return still gets an answer that says why.

A handler stopped at its call's window, a guest that crashed (a trap), or a
sandbox in quarantine ends a capsule's call before it replies; the broker
would see only that the capsule "finished without answering". So the kernel
answers for it, on the read's reply topic and as the capsule (its manifest
must allow the reply, as for its own): a read-response with no contents and
an error in one line, marked `unanswered` (contract/resource.py). The broker
takes it only from the URI's owner, and as any reply of the capsule (the first
reply of a capsule wins: one the guest sent before it trapped stays).
"""

from __future__ import annotations

from astrid.host.bus import Message
from astrid.host.contract.resource import unanswered_reply
from astrid.host.contract.topics import READ_REPLY_PREFIX, READ_REQUEST_TOPIC
from astrid.host.kernel.sandbox import CallOutcome, CallStatus


def why_unanswered(capsule: str, outcome: CallOutcome, handler: str, window_s: float) -> str:
    """One line: the capsule, how its call ended, and the handler it ran."""
    if outcome.status is CallStatus.TIMED_OUT:
        return f"capsule {capsule}: handler {handler} ran past its {window_s:g} s read window and was stopped"
    if outcome.status is CallStatus.QUARANTINED:
        return f"{outcome.error}; its log says why (astrid -v)"
    if outcome.status is CallStatus.TRAPPED:
        return f"capsule {capsule}: handler {handler} crashed: {outcome.error}"
    return f"capsule {capsule}: handler {handler} failed: {outcome.error}"


def failed_read_reply(
    capsule: str, message: Message, outcome: CallOutcome, handler: str, window_s: float
) -> tuple[str, str] | None:
    """The reply topic and payload that answer a read request whose call ended as `outcome`; None for
    another request, or a request too broken to answer (the broker then says the capsule was silent)."""
    if message.topic != READ_REQUEST_TOPIC or outcome.ok:
        return None
    try:
        request = message.parsed()
    except (ValueError, RecursionError):
        return None
    if not isinstance(request, dict):
        return None
    uri, correlation_id = request.get("uri"), request.get("correlation_id")
    if not isinstance(uri, str) or not isinstance(correlation_id, str):
        return None
    return READ_REPLY_PREFIX + correlation_id, unanswered_reply(
        uri, why_unanswered(capsule, outcome, handler, window_s)
    )
