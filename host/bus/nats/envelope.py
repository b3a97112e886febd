"""The envelope in NATS headers: stamped by the publisher's host, read as it stamped it."""

from __future__ import annotations

from typing import Any

from astrid.host.bus.base import Message, Principal
from astrid.host.bus.topics import topic_problem

H_SOURCE, H_KIND, H_NAME, H_TIME, H_HOST, H_MSG = (
    "astrid-source",
    "astrid-principal-kind",
    "astrid-principal",
    "astrid-timestamp",
    "astrid-host",
    "astrid-message",
)
H_RETRY = "astrid-retry-group"  # a request published again for one group (a replica died)


def stamp(message: Message, principal: Principal, host_id: str, message_id: str) -> dict[str, str]:
    """The headers of a message published here (never taken from its payload)."""
    return {
        H_SOURCE: message.source_id,
        H_KIND: principal.kind,
        H_NAME: principal.name or "",
        H_TIME: message.timestamp,
        H_HOST: host_id,
        H_MSG: message_id,
    }


def remote_message(topic: str, data: bytes, headers: dict[str, str], max_payload_bytes: int) -> Message | None:
    """The message another host published, as it stamped it; None when malformed."""
    try:
        payload = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if topic_problem(topic) or len(data) > max_payload_bytes:
        return None
    kind, name = headers.get(H_KIND), headers.get(H_NAME) or None
    if kind == "verified" and name:
        principal = Principal.verified(name)
    elif kind == "claimed" and name:
        principal = Principal.claimed(name)
    elif kind == "system":
        principal = Principal.system()
    else:
        return None
    source = headers.get(H_SOURCE)
    if not source:
        return None
    return Message(topic, payload, source, principal, headers.get(H_TIME) or "", 0)


def hop_attributes(operation: str, topic: str, message_id: str | None) -> dict[str, Any]:
    """A NATS hop's span attributes (OpenTelemetry's messaging conventions); never the payload."""
    attributes: dict[str, Any] = {
        "messaging.system": "nats",
        "messaging.operation.type": operation,
        "messaging.destination.name": topic,
    }
    if message_id:
        attributes["messaging.message.id"] = message_id
    return attributes
