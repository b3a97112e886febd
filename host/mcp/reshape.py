"""Bus records -> MCP wire models, at the last trusted choke point (docs/contract/mcp.md §6).

- `_meta`: a JSON object or nothing; keys whose prefix's second label is
  `mcp` or `modelcontextprotocol` (e.g. `io.modelcontextprotocol/x`,
  `dev.mcp/y`) are reserved for the protocol and dropped; a `_meta` over the
  size cap is dropped whole.
- `priority` is clamped to [0, 1] (NaN dropped); an invalid ISO-8601
  `last_modified` is dropped alone.
- Templates get the same field hygiene as resources (`to_template`).
- Errors: a read failure is always a JSON-RPC error whose code depends on the
  negotiated protocol revision, with the uri in `data`; a completion failure
  is `-32602` when the template is unknown or the request is bad, else
  `-32603`, with the template in `data`.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import mcp.types as types
from mcp import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from astrid.host.contract.outcomes import Failure, FailureCode
from astrid.host.contract.resource import Annotations, BlobChunk, Icon, ResourceDefinition, TextChunk
from astrid.host.contract.template import ResourceTemplate
from astrid.host.limits import DEFAULT_LIMITS, Limits

log = logging.getLogger("astrid.host.mcp")

RESOURCE_NOT_FOUND_2025 = -32002  # 2025-11-25 and earlier; retired in 2026-07-28
RESERVED_META_LABELS = frozenset({"mcp", "modelcontextprotocol"})


def is_reserved_meta_key(key: str) -> bool:
    """`io.modelcontextprotocol/x` and `com.mcp/y` are reserved; `plain` is not."""
    if "/" not in key:
        return False
    labels = key.split("/", 1)[0].split(".")
    return len(labels) >= 2 and labels[1].lower() in RESERVED_META_LABELS


def clean_meta(raw: str | None, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    cleaned = {k: v for k, v in value.items() if isinstance(k, str) and not is_reserved_meta_key(k)}
    if not cleaned:
        return None
    encoded = json.dumps(cleaned, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if len(encoded) > limits.meta_bytes:
        return None
    return cleaned


def is_iso8601(value: str) -> bool:
    try:
        datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return False
    return True


def clamp_priority(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return min(1.0, max(0.0, float(value)))


def to_annotations(annotations: Annotations | None) -> types.Annotations | None:
    if annotations is None:
        return None
    last_modified = annotations.last_modified
    if last_modified is not None and not is_iso8601(last_modified):
        last_modified = None
    audience = list(dict.fromkeys(annotations.audience)) or None
    priority = clamp_priority(annotations.priority)
    if audience is None and priority is None and last_modified is None:
        return None
    return types.Annotations(audience=audience, priority=priority, last_modified=last_modified)


def to_icon(icon: Icon) -> types.Icon:
    return types.Icon(src=icon.src, mime_type=icon.mime_type, sizes=list(icon.sizes) or None, theme=icon.theme)


def _described(record: ResourceDefinition | ResourceTemplate, limits: Limits) -> dict[str, Any]:
    """The fields a resource and a template share, in MCP's shape."""
    return {
        "name": record.name,
        "title": record.title,
        "description": record.description,
        "mime_type": record.mime_type,
        "annotations": to_annotations(record.annotations),
        "icons": [to_icon(icon) for icon in record.icons] or None,
        "_meta": clean_meta(record.meta, limits),
    }


def to_resource(definition: ResourceDefinition, limits: Limits = DEFAULT_LIMITS) -> types.Resource | None:
    """One MCP `Resource`, or None (logged) when it cannot be expressed."""
    try:
        return types.Resource(uri=definition.uri, size=definition.size, **_described(definition, limits))
    except ValueError as exc:  # pydantic ValidationError is a ValueError
        log.warning("resource %s left out of the list: %s", definition.uri, exc)
        return None


def to_template(template: ResourceTemplate, limits: Limits = DEFAULT_LIMITS) -> types.ResourceTemplate | None:
    """One MCP `ResourceTemplate`, or None (logged) when it cannot be expressed."""
    try:
        return types.ResourceTemplate(uri_template=template.uri_template, **_described(template, limits))
    except ValueError as exc:  # pydantic ValidationError is a ValueError
        log.warning("resource template %s left out of the list: %s", template.uri_template, exc)
        return None


def to_completion(
    values: Sequence[str], total: int | None, has_more: bool, limits: Limits = DEFAULT_LIMITS
) -> types.Completion:
    """MCP `Completion`: at most `completion_values` values (then `hasMore`); a total never below the count."""
    cap = limits.completion_values
    kept = list(values[:cap])
    more = has_more or len(values) > cap
    if total is not None and total < len(kept):
        total = None  # a total that contradicts the values says nothing
    return types.Completion(values=kept, total=total, has_more=more)


def completion_error(error: Failure, uri_template: str) -> MCPError:
    """The JSON-RPC error for a failed completion: -32602 for what the client asked wrong, else -32603."""
    data = {"uriTemplate": uri_template, "reason": error.code.value}
    if error.code in (FailureCode.NOT_FOUND, FailureCode.INVALID_REQUEST):
        return MCPError(code=types.INVALID_PARAMS, message=error.message or error.code.value, data=data)
    return MCPError(code=types.INTERNAL_ERROR, message=error.message or error.code.value, data=data)


def to_contents(
    chunk: TextChunk | BlobChunk, limits: Limits = DEFAULT_LIMITS
) -> types.TextResourceContents | types.BlobResourceContents:
    meta = clean_meta(chunk.meta, limits)
    if isinstance(chunk, TextChunk):
        return types.TextResourceContents(uri=chunk.uri, mime_type=chunk.mime_type, text=chunk.text, _meta=meta)
    return types.BlobResourceContents(uri=chunk.uri, mime_type=chunk.mime_type, blob=chunk.blob, _meta=meta)


def not_found_code(protocol_version: str | None) -> int:
    return types.INVALID_PARAMS if protocol_version in MODERN_PROTOCOL_VERSIONS else RESOURCE_NOT_FOUND_2025


def read_error(error: Failure, uri: str, protocol_version: str | None) -> MCPError:
    """The JSON-RPC error for a failed read (docs/contract/resources.md §5.6)."""
    data = {"uri": uri, "reason": error.code.value}
    if error.code is FailureCode.NOT_FOUND:
        return MCPError(code=not_found_code(protocol_version), message=f"Resource not found: {uri}", data=data)
    if error.message:  # why, for a client that shows `data` rather than the message (a capsule's file:line)
        data["detail"] = error.message
    return MCPError(code=types.INTERNAL_ERROR, message=error.message or error.code.value, data=data)
