"""Completion: a broadcast that only the template's owner may answer, and its reply checked.

`Completions.complete` finds the template's owner in the principal's
templates snapshot, sends the variable's name, what was typed and the
template's other variables (never names the template does not have), and
takes the owner's reply only; another capsule's reply is refused and logged.
An owner rebuilt or removed since the snapshot is looked up again, once.

`check_complete_reply` is the pure core, failing closed: a reply that is not
a well-formed `complete-response` is refused (`capsule_error`), and so is
one that carries an `error` (with the capsule's message). Values past
`completion_values` (100, as MCP allows) are cut before anything is
validated, and the result then says `has_more`; a value that is not a
string refuses the reply, and a value longer than a URI (`uri_bytes`) is
dropped alone: a completion value is part of a URI.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping

from pydantic import ValidationError

from astrid.host.broker.listings import Listings
from astrid.host.broker.names import NO_NAMES, CapsuleNames
from astrid.host.broker.read_round import Drain, ReadStatus, wait_for
from astrid.host.broker.shared import Shared
from astrid.host.bus import Principal
from astrid.host.contract._base import utf8_len
from astrid.host.contract.outcomes import CompletionOutcome, FailureCode
from astrid.host.contract.template import Argument, CompleteRequest, CompleteResponse
from astrid.host.contract.topics import COMPLETE_REPLY_PREFIX, COMPLETE_TOPIC
from astrid.host.contract.uri_template import UriTemplate
from astrid.host.limits import Limits

log = logging.getLogger("astrid.host.broker")


class Completions:
    def __init__(self, shared: Shared, listings: Listings) -> None:
        self.shared = shared
        self.listings = listings

    def complete(
        self,
        principal: Principal,
        uri_template: str,
        argument_name: str,
        argument_value: str,
        context: Mapping[str, str] | None = None,
    ) -> CompletionOutcome:
        """Values for variable `argument_name` of `uri_template`, from the template's owner only."""
        started = time.perf_counter()
        try:
            return self._complete(principal, uri_template, argument_name, argument_value, dict(context or {}))
        finally:
            self.shared.stats.completions += 1
            log.debug(
                "completion of %s for %s in %.1f ms", uri_template, principal, (time.perf_counter() - started) * 1000
            )

    def _complete(
        self, principal: Principal, uri_template: str, name: str, value: str, context: dict[str, str]
    ) -> CompletionOutcome:
        refused = self._refused(principal, uri_template, name, value, context)
        if refused is not None:
            return refused
        owner = self.listings.template_snapshot(principal).owner_of(uri_template)
        if owner is None:
            return CompletionOutcome.fail(FailureCode.NOT_FOUND, f"no capsule declares the template {uri_template}")
        variables = {variable.name for variable in UriTemplate.parse(uri_template).variables}
        if name not in variables:
            return CompletionOutcome.fail(
                FailureCode.INVALID_REQUEST, f"{name!r} is not a variable of the template {uri_template}"
            )
        # Only the template's other variables travel on: the capsule never
        # sees names its template does not have.
        arguments = [Argument(name=k, value=v) for k, v in sorted(context.items()) if k in variables and k != name]
        request = CompleteRequest(
            uri_template=uri_template,
            argument_name=name,
            argument_value=value,
            context_arguments=arguments,
            correlation_id="pending",
        )
        outcome, status = self._complete_once(principal, request, owner)
        if status is not ReadStatus.OWNER_GONE:
            return outcome
        # The owner was rebuilt or removed since the snapshot: ask who owns it now, once.
        owner = self.listings.template_snapshot(principal, refresh=True).owner_of(uri_template)
        if owner is None:
            return CompletionOutcome.fail(FailureCode.NOT_FOUND, f"no capsule declares the template {uri_template}")
        outcome, _ = self._complete_once(principal, request, owner)
        return outcome

    def _refused(
        self, principal: Principal, uri_template: str, name: str, value: str, context: dict[str, str]
    ) -> CompletionOutcome | None:
        """Why a completion is refused before any round, or None."""
        if not principal.is_verified:
            return CompletionOutcome.fail(
                FailureCode.DENIED, f"completion of {uri_template} refused: the caller is not a verified principal"
            )
        limit = self.shared.limits.uri_bytes
        if not uri_template or utf8_len(uri_template) > limit:
            return CompletionOutcome.fail(
                FailureCode.INVALID_REQUEST, f"the uri template is empty or over {limit} bytes"
            )
        if any(utf8_len(text) > limit for text in (name, value, *context.values())):
            return CompletionOutcome.fail(FailureCode.INVALID_REQUEST, f"an argument is longer than {limit} bytes")
        return None

    def _complete_once(
        self, principal: Principal, request: CompleteRequest, owner: str
    ) -> tuple[CompletionOutcome, ReadStatus]:
        """One completion broadcast; only `owner`'s reply counts."""
        shared, names = self.shared, self.shared.names
        correlation = uuid.uuid4().hex
        payload = request.model_copy(update={"correlation_id": correlation}).to_json()
        template = request.uri_template
        window = shared.limits.read_window_s
        with shared.bus.subscribe(
            shared.participant, COMPLETE_REPLY_PREFIX + correlation, principal_scope=principal
        ) as replies:
            delivery = shared.bus.publish(shared.participant, COMPLETE_TOPIC, payload, principal)
            if owner not in delivery.reached:
                gone = CompletionOutcome.fail(
                    FailureCode.NOT_FOUND, f"the capsule that declared {template} is no longer loaded"
                )
                return gone, ReadStatus.OWNER_GONE
            drained = wait_for(
                Drain(
                    replies,
                    delivery,
                    principal=principal,
                    uri=template,
                    preferred=owner,
                    window_s=window,
                    what="completion",
                    names=names,
                )
            )
        others = sorted(source for source in drained.replies if source != owner)
        if others:
            log.warning(
                "completion of %s for %s: replies of %s refused (the template's owner is %s)",
                template,
                principal,
                ", ".join(names.label(source) for source in others),
                names.label(owner),
            )
        if owner in drained.replies:
            outcome = check_complete_reply(drained.replies[owner].payload, template, owner, shared.limits, names)
            return outcome, ReadStatus.ANSWERED
        declares = f"capsule {names.label(owner)}, which declares {template},"
        if drained.finished:
            silent = CompletionOutcome.fail(
                FailureCode.CAPSULE_ERROR, f"{declares} finished without answering the completion", owner
            )
            return silent, ReadStatus.NO_REPLY
        timeout = CompletionOutcome.fail(FailureCode.TIMEOUT, f"{declares} did not answer within {window:g} s", owner)
        return timeout, ReadStatus.TIMED_OUT


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
