"""Messages between the MCP server and the broker (SPEC §6 front doors)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from astrid.host.contract._base import WireModel
from astrid.host.contract.resource import ResourceChunk, ResourceDefinition
from astrid.host.topics import is_clean_segment

LIST_TOPIC = "astrid.v1.request.mcp.resources.list"
READ_TOPIC = "astrid.v1.request.mcp.resource.read"
REPLY_PREFIX = "astrid.v1.response."

# Symbolic failure kinds; the MCP server maps them to JSON-RPC codes for the
# negotiated protocol revision.
ErrorKind = Literal["not_found", "denied", "timeout", "over_limit", "capsule_error", "invalid_request", "internal"]


def reply_topic(req_id: str) -> str:
    return REPLY_PREFIX + req_id


class _Request(WireModel):
    req_id: str = Field(max_length=128)

    @field_validator("req_id")
    @classmethod
    def _clean(cls, value: str) -> str:
        if not is_clean_segment(value):
            raise ValueError("req_id must be one topic segment of [a-z0-9_-], at most 128 bytes")
        return value


class ListResourcesRequest(_Request):
    # Ask for a fresh describe round instead of the cached snapshot (the MCP
    # server's list_changed watcher sets it after a capsule-set change, so it
    # never races the broker's own cache invalidation).
    refresh: bool = False


class ReadResourceRequest(_Request):
    uri: str


class FrontDoorError(WireModel):
    code: ErrorKind
    message: str


class ListResourcesReply(WireModel):
    kind: Literal["resources.list"] = "resources.list"
    req_id: str
    resources: list[ResourceDefinition] = []
    # Set (and `resources` empty) only when the broker itself failed.
    error: FrontDoorError | None = None


class ReadResourceReply(WireModel):
    kind: Literal["resource.read"] = "resource.read"
    req_id: str
    uri: str
    contents: list[ResourceChunk] = []
    error: FrontDoorError | None = None
