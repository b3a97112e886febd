"""Check one capsule's read reply, failing closed: the pure core of a read.

A reply that is not a well-formed `read-response` for the URI asked, carries
an error, carries no contents, or breaks a read limit (chunks per read, bytes
per read counted as text bytes plus decoded blob bytes) is never forwarded,
not even in part.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from astrid.host.bus import Message
from astrid.host.contract._base import strip_bad_meta
from astrid.host.contract.outcomes import FailureCode, ReadOutcome
from astrid.host.contract.resource import ReadResponse
from astrid.host.limits import Limits


def check_read_reply(payload: str | Message, uri: str, source_id: str, limits: Limits) -> ReadOutcome:
    """One capsule's read reply (its text, or the message, whose JSON the bus may have parsed
    already), checked once, here, where it enters: from here on it is a typed, trusted value."""
    try:
        data = payload.parsed() if isinstance(payload, Message) else json.loads(payload)
    except (ValueError, RecursionError):
        return ReadOutcome.fail(FailureCode.CAPSULE_ERROR, f"the capsule's reply for {uri} is not JSON", source_id)
    # Count chunks before validating them: a reply of a million chunks must not
    # cost a million model validations.
    if isinstance(data, dict) and isinstance(data.get("contents"), list):
        count = len(data["contents"])
        if count > limits.chunks_per_read:
            return ReadOutcome.fail(
                FailureCode.OVER_LIMIT,
                f"the capsule returned {count} chunks for {uri}, more than the limit of {limits.chunks_per_read}",
                source_id,
            )
    if isinstance(data, dict):
        data = strip_bad_meta(data, limits, f"read reply for {uri}")
        if isinstance(data.get("contents"), list):
            data = {**data, "contents": [strip_bad_meta(c, limits, f"read reply for {uri}") for c in data["contents"]]}
    try:
        reply = ReadResponse.model_validate(data, context={"limits": limits})
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)
        reason = first[0]["msg"] if first else "invalid"
        return ReadOutcome.fail(
            FailureCode.CAPSULE_ERROR, f"the capsule's reply for {uri} is malformed: {reason}", source_id
        )
    if reply.uri != uri:
        return ReadOutcome.fail(
            FailureCode.CAPSULE_ERROR, f"the capsule answered a read of {uri} with a reply for another uri", source_id
        )
    if reply.error is not None:
        return ReadOutcome.fail(FailureCode.CAPSULE_ERROR, reply.error or "the capsule reported an error", source_id)
    if not reply.contents:
        return ReadOutcome.fail(FailureCode.CAPSULE_ERROR, f"the capsule returned no contents for {uri}", source_id)
    total = 0
    for chunk in reply.contents:
        total += chunk.raw_size()
        if total > limits.bytes_per_read:
            return ReadOutcome.fail(
                FailureCode.OVER_LIMIT,
                f"the contents of {uri} exceed the limit of {limits.bytes_per_read} bytes per read",
                source_id,
            )
    return ReadOutcome(contents=tuple(reply.contents), source_id=source_id)
