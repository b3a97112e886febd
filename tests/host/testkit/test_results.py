"""`ReadResult`: a read's one chunk as text, bytes and MIME type, and what it says when that is not so."""

from __future__ import annotations

import pytest

from astrid.host.contract.resource import BlobChunk, TextChunk
from astrid.host.testkit import ReadResult

URI = "astrid://notes/x"


def test_one_text_chunk():
    result = ReadResult(URI, (TextChunk(uri=URI, mime_type="text/markdown", text="# x"),))
    assert (result.text, result.mime_type) == ("# x", "text/markdown")
    with pytest.raises(ValueError, match=r"^astrid://notes/x read as text \(text/markdown\), not a blob: use \.text$"):
        _ = result.blob


def test_one_blob_chunk():
    result = ReadResult(URI, (BlobChunk(uri=URI, blob="AAEC"),))
    assert result.blob == b"\x00\x01\x02"
    assert result.mime_type is None
    with pytest.raises(ValueError, match=r"read as a blob \(no mime type\), not text: use \.blob$"):
        _ = result.text


@pytest.mark.parametrize("count", [0, 2])
def test_not_one_chunk_points_at_contents(count: int):
    result = ReadResult(URI, tuple(TextChunk(uri=URI, text=str(i)) for i in range(count)))
    for field in ("text", "blob", "mime_type"):
        with pytest.raises(ValueError, match=rf"read as {count} chunks, not one: look at \.contents"):
            getattr(result, field)
