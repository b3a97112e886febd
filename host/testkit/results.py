"""What the test kit hands a test: a read's contents, a completion's values (failures are `RequestFailed`)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from astrid.host.contract.resource import BlobChunk, TextChunk


@dataclass(frozen=True)
class ReadResult:
    """The chunks a read of `uri` returned (`contents`); `text`, `blob` and `mime_type` are those of its one
    chunk, and say so when there is not exactly one, or it is not of that kind."""

    uri: str
    contents: tuple[TextChunk | BlobChunk, ...]

    @property
    def text(self) -> str:
        chunk = self._one()
        if not isinstance(chunk, TextChunk):
            raise ValueError(f"{self.uri} read as a blob ({chunk.mime_type or 'no mime type'}), not text: use .blob")
        return chunk.text

    @property
    def blob(self) -> bytes:
        chunk = self._one()
        if not isinstance(chunk, BlobChunk):
            raise ValueError(f"{self.uri} read as text ({chunk.mime_type or 'no mime type'}), not a blob: use .text")
        return base64.b64decode(chunk.blob)

    @property
    def mime_type(self) -> str | None:
        return self._one().mime_type

    def _one(self) -> TextChunk | BlobChunk:
        if len(self.contents) != 1:
            raise ValueError(f"{self.uri} read as {len(self.contents)} chunks, not one: look at .contents")
        return self.contents[0]


@dataclass(frozen=True)
class Completion:
    """The values a completion offered (at most the contract's cap), and how many there are in all."""

    values: list[str]
    total: int | None = None  # None: the capsule did not say
    has_more: bool = False
