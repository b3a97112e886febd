"""Check one template owner's completion reply, failing closed: the pure core of a completion.

A reply that is not a well-formed `complete-response` is refused
(`capsule_error`), and so is one that carries an `error` (with the capsule's
message). Values past `completion_values` (100, as MCP allows) are cut
before anything is validated, and the result then says `has_more`; a value
that is not a string refuses the reply, and a value longer than a URI
(`uri_bytes`) is dropped alone: a completion value is part of a URI.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from pydantic import ValidationError

from astrid.host.broker.names import NO_NAMES, CapsuleNames
from astrid.host.broker.read_reply import failure
from astrid.host.contract._base import utf8_len
from astrid.host.contract.frontdoor import FailureCode, FrontDoorFailure
from astrid.host.contract.template import CompleteResponse
from astrid.host.limits import Limits

log = logging.getLogger("astrid.host.broker")


@dataclass(frozen=True)
class CompletionOutcome:
    """Either the values of a completion or why it failed (never both)."""

    values: tuple[str, ...] = ()
    total: int | None = None
    has_more: bool = False
    error: FrontDoorFailure | None = None
    source_id: str | None = None

    @staticmethod
    def fail(code: FailureCode, message: str, source_id: str | None = None) -> CompletionOutcome:
        return CompletionOutcome(error=failure(code, message), source_id=source_id)


def check_complete_reply(
    payload: str, uri_template: str, source_id: str, limits: Limits, names: CapsuleNames = NO_NAMES
) -> CompletionOutcome:
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return CompletionOutcome.fail(
            FailureCode.CAPSULE_ERROR, f"the capsule's completion reply for {uri_template} is not JSON", source_id
        )
    cut = False
    cap = limits.completion_values
    if isinstance(data, dict) and isinstance(data.get("values"), list) and len(data["values"]) > cap:
        # Count before validating: a million values must not cost a million checks.
        log.warning(
            "completion reply from %s for %s: %d values cut to %d",
            names.label(source_id),
            uri_template,
            len(data["values"]),
            cap,
        )
        data = {**data, "values": data["values"][:cap]}
        cut = True
    try:
        reply = CompleteResponse.model_validate(data, context={"limits": limits})
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        reason = errors[0]["msg"] if errors else "invalid"
        return CompletionOutcome.fail(
            FailureCode.CAPSULE_ERROR,
            f"the capsule's completion reply for {uri_template} is malformed: {reason}",
            source_id,
        )
    if reply.error is not None:
        return CompletionOutcome.fail(
            FailureCode.CAPSULE_ERROR, reply.error or "the capsule reported an error", source_id
        )
    values = tuple(value for value in reply.values if utf8_len(value) <= limits.uri_bytes)
    if len(values) < len(reply.values):
        log.warning(
            "completion reply from %s for %s: %d values longer than %d bytes dropped",
            names.label(source_id),
            uri_template,
            len(reply.values) - len(values),
            limits.uri_bytes,
        )
    return CompletionOutcome(
        values=values,
        total=reply.total,
        has_more=reply.has_more or cut,
        source_id=source_id,
    )
