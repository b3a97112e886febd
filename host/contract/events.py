"""Kernel events on the bus, and resource events (`astrid-bus:resource-events@1.0.0`)."""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, field_validator

from astrid.host.contract._base import DeferredWireModel, WireModel, limits_of, utf8_len


class CapsuleInfo(WireModel):
    name: str
    version: str
    description: str | None = None
    source_id: str
    principal: str | None = None


class CapsulesLoaded(WireModel):
    """Published per principal whenever the capsule set changes."""

    status: Literal["ready"] = "ready"
    capsules: list[CapsuleInfo]


class ResourceUpdated(DeferredWireModel):
    """`updated`: the resource at `uri` changed for the message's principal (docs/contract/subscriptions.md §11).

    What a capsule publishes on `resource.v1.event.updated`, and what the
    broker hands on (`astrid.v1.resource_updated`) once it checked it."""

    uri: str

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str, info: ValidationInfo) -> str:
        limit = limits_of(info).uri_bytes
        if not value:
            raise ValueError("the uri is empty")
        if utf8_len(value) > limit:
            raise ValueError(f"the uri is longer than {limit} bytes")
        return value
