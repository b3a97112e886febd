"""Messages between a front-door client and the broker (docs/contract/mcp.md §6)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

from astrid.host.bus.topics import is_clean_segment
from astrid.host.contract._base import DeferredWireModel
from astrid.host.contract.resource import ResourceChunk, ResourceDefinition
from astrid.host.contract.template import Argument, ResourceTemplate


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


class _Request(DeferredWireModel):
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


class FrontDoorFailure(DeferredWireModel):
    """The failure part of a front-door reply (data, not an exception)."""

    # Not strict: the code arrives as its JSON string and becomes the enum.
    code: FailureCode = Field(strict=False)
    message: str


class ListResourcesReply(DeferredWireModel):
    kind: Literal["resources.list"] = "resources.list"
    req_id: str
    resources: list[ResourceDefinition] = []
    # Set (and `resources` empty) only when the broker itself failed.
    error: FrontDoorFailure | None = None


class ReadResourceReply(DeferredWireModel):
    kind: Literal["resource.read"] = "resource.read"
    req_id: str
    uri: str
    contents: list[ResourceChunk] = []
    error: FrontDoorFailure | None = None
    # How long the contents stay fresh, in seconds, when the owner declared
    # it (docs/contract/resources.md §5.7); never set with `error`.
    max_age_s: float | None = Field(default=None, gt=0)


class ListTemplatesRequest(_Request):
    refresh: bool = False


class ListTemplatesReply(DeferredWireModel):
    kind: Literal["resources.templates"] = "resources.templates"
    req_id: str
    templates: list[ResourceTemplate] = []
    error: FrontDoorFailure | None = None


class CompletionRequest(_Request):
    """Complete `argument_name` of `uri_template`, given what was typed so far."""

    uri_template: str
    argument_name: str
    argument_value: str
    context_arguments: list[Argument] = []


class CompletionReply(DeferredWireModel):
    kind: Literal["completion.complete"] = "completion.complete"
    req_id: str
    values: list[str] = []
    total: int | None = None
    has_more: bool = False
    error: FrontDoorFailure | None = None
