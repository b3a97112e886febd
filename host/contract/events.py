"""Kernel events on the bus."""

from __future__ import annotations

from typing import Literal

from astrid.host.contract._base import WireModel


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
