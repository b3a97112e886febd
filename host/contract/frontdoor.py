"""Messages between a front-door client and the broker (docs/contract.md §6)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

from astrid.host.bus.topics import is_clean_segment
from astrid.host.contract._base import WireModel
from astrid.host.contract.resource import ResourceChunk, ResourceDefinition


class FailureCode(StrEnum):
    """Why a front-door request failed; the MCP server maps each to a JSON-RPC
    error for the negotiated protocol revision."""

    NOT_FOUND = "not_found"
    DENIED = "denied"
    TIMEOUT = "timeout"
    OVER_LIMIT = "over_limit"
    CAPSULE_ERROR = "capsule_error"
    INVALID_REQUEST = "invalid_request"
    INTERNAL = "internal"


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


class FrontDoorFailure(WireModel):
    """The failure part of a front-door reply (data, not an exception)."""

    # Not strict: the code arrives as its JSON string and becomes the enum.
    code: FailureCode = Field(strict=False)
    message: str


class ListResourcesReply(WireModel):
    kind: Literal["resources.list"] = "resources.list"
    req_id: str
    resources: list[ResourceDefinition] = []
    # Set (and `resources` empty) only when the broker itself failed.
    error: FrontDoorFailure | None = None


class ReadResourceReply(WireModel):
    kind: Literal["resource.read"] = "resource.read"
    req_id: str
    uri: str
    contents: list[ResourceChunk] = []
    error: FrontDoorFailure | None = None
