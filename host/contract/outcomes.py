"""What the broker answers the layer above it (the MCP server, `astrid resources`): typed values, no wire.

A read is either its chunks or why it failed, never both; so is a completion.
The failure codes are the broker's vocabulary; the MCP server maps each to a
JSON-RPC error for the negotiated protocol revision (`mcp/reshape.py`).
What a capsule sent was checked where it entered the host (the broker), so
these values are trusted from here on and never validated again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from astrid.host.contract.resource import BlobChunk, TextChunk

MAX_FAILURE_MESSAGE = 1024  # a capsule may write any length of error


class FailureCode(StrEnum):
    """Why a request failed."""

    NOT_FOUND = "not_found"
    DENIED = "denied"
    TIMEOUT = "timeout"
    OVER_LIMIT = "over_limit"
    CAPSULE_ERROR = "capsule_error"
    INVALID_REQUEST = "invalid_request"
    INTERNAL = "internal"


@dataclass(frozen=True)
class Failure:
    """Why a request failed (data, not an exception); its message bounded."""

    code: FailureCode
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", FailureCode(self.code))  # its text ("not_found") names it too

    @staticmethod
    def of(code: FailureCode, message: str) -> Failure:
        return Failure(code, message[:MAX_FAILURE_MESSAGE])


@dataclass(frozen=True)
class ReadOutcome:
    """Either the chunks of a read or why it failed (never both); who answered; and, when its owner
    declared freshness (docs/contract/resources.md §5.7), how long the chunks stay fresh."""

    contents: tuple[TextChunk | BlobChunk, ...] = ()
    error: Failure | None = None
    source_id: str | None = None
    max_age_s: float | None = None

    @staticmethod
    def fail(code: FailureCode, message: str, source_id: str | None = None) -> ReadOutcome:
        return ReadOutcome(error=Failure.of(code, message), source_id=source_id)


@dataclass(frozen=True)
class CompletionOutcome:
    """Either the values of a completion or why it failed (never both)."""

    values: tuple[str, ...] = ()
    total: int | None = None
    has_more: bool = False
    error: Failure | None = None
    source_id: str | None = None

    @staticmethod
    def fail(code: FailureCode, message: str, source_id: str | None = None) -> CompletionOutcome:
        return CompletionOutcome(error=Failure.of(code, message), source_id=source_id)
