"""docs/contract/mcp.md §6 reshape rules and docs/contract/resources.md §5.6 error codes, one by one."""

from __future__ import annotations

import json

import mcp.types as types
import pytest

from astrid.host.contract.outcomes import Failure
from astrid.host.contract.resource import Annotations, BlobChunk, ResourceDefinition, TextChunk
from astrid.host.limits import Limits
from astrid.host.mcp.reshape import (
    clamp_priority,
    clean_meta,
    is_iso8601,
    is_reserved_meta_key,
    read_error,
    to_annotations,
    to_contents,
    to_resource,
)


@pytest.mark.parametrize(
    ("key", "reserved"),
    [
        ("io.modelcontextprotocol/x", True),
        ("dev.mcp/y", True),
        ("com.MCP/z", True),
        ("modelcontextprotocol.io/x", False),  # first label, not second
        ("mcp/x", False),  # a single label has no second one
        ("com.example/mcp", False),
        ("plain", False),
        ("com.example.mcp/x", False),  # third label
    ],
)
def test_reserved_meta_prefixes(key, reserved):
    assert is_reserved_meta_key(key) is reserved


def test_meta_keeps_other_keys_drops_reserved_ones():
    raw = json.dumps({"com.example/a": 1, "io.modelcontextprotocol/b": 2, "dev.mcp/c": 3, "plain": [1]})
    assert clean_meta(raw) == {"com.example/a": 1, "plain": [1]}


@pytest.mark.parametrize("raw", ["[1, 2]", '"text"', "3", "null", "not json", '{"io.modelcontextprotocol/x": 1}'])
def test_meta_that_is_not_an_object_or_ends_empty_is_dropped(raw):
    assert clean_meta(raw) is None


def test_meta_over_the_cap_is_dropped():
    raw = json.dumps({"com.example/a": "x" * 100})
    assert clean_meta(raw, Limits(meta_bytes=64)) is None
    assert clean_meta(raw, Limits(meta_bytes=4096)) == {"com.example/a": "x" * 100}


@pytest.mark.parametrize(
    ("value", "clamped"),
    [
        (-1.0, 0.0),
        (0.0, 0.0),
        (0.25, 0.25),
        (1.0, 1.0),
        (7.0, 1.0),
        (float("inf"), 1.0),
        (float("-inf"), 0.0),
        (float("nan"), None),
        (None, None),
    ],
)
def test_priority_is_clamped(value, clamped):
    assert clamp_priority(value) == clamped


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("2025-01-12T15:00:58Z", True),
        ("2025-01-12", True),
        ("2025-01-12T15:00:58.123+02:00", True),
        ("yesterday", False),
        ("", False),
        ("2025-13-40", False),
    ],
)
def test_iso8601(value, valid):
    assert is_iso8601(value) is valid


def test_only_an_invalid_last_modified_is_dropped():
    kept = to_annotations(Annotations(audience=["user"], priority=3.0, last_modified="noon-ish"))
    assert kept.audience == ["user"] and kept.priority == 1.0 and kept.last_modified is None
    assert to_annotations(Annotations(last_modified="noon-ish")) is None


def test_resource_with_every_field():
    definition = ResourceDefinition.model_validate(
        {
            "uri": "astrid://x/y",
            "name": "y",
            "title": "Y",
            "description": "d",
            "mime_type": "text/plain",
            "size": 3,
            "annotations": {"audience": ["assistant"], "priority": 0.5, "last_modified": "2025-01-12T15:00:58Z"},
            "icons": [
                {"src": "https://example.com/i.png", "mime_type": "image/png", "sizes": ["any"], "theme": "light"}
            ],
            "meta": json.dumps({"com.example/k": "v", "io.modelcontextprotocol/k": "v"}),
        }
    )
    wire = to_resource(definition).model_dump(by_alias=True, mode="json", exclude_none=True)
    assert wire == {
        "uri": "astrid://x/y",
        "name": "y",
        "title": "Y",
        "description": "d",
        "mimeType": "text/plain",
        "size": 3,
        "annotations": {"audience": ["assistant"], "priority": 0.5, "lastModified": "2025-01-12T15:00:58Z"},
        "icons": [{"src": "https://example.com/i.png", "mimeType": "image/png", "sizes": ["any"], "theme": "light"}],
        "_meta": {"com.example/k": "v"},
    }


def test_minimal_resource_has_no_empty_fields():
    wire = to_resource(ResourceDefinition(uri="astrid://m", name="m")).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    assert wire == {"uri": "astrid://m", "name": "m"}


def test_chunks():
    text = to_contents(TextChunk(uri="astrid://a#1", text="hi", mime_type="text/plain", meta='{"com.x/a": 1}'))
    assert isinstance(text, types.TextResourceContents)
    assert text.model_dump(by_alias=True, exclude_none=True) == {
        "uri": "astrid://a#1",
        "mimeType": "text/plain",
        "_meta": {"com.x/a": 1},
        "text": "hi",
    }
    blob = to_contents(BlobChunk(uri="astrid://b", blob="AAEC"))
    assert isinstance(blob, types.BlobResourceContents) and blob.blob == "AAEC" and blob.mime_type is None


@pytest.mark.parametrize(
    ("code", "version", "expected"),
    [
        ("not_found", "2025-11-25", -32002),
        ("not_found", "2025-06-18", -32002),
        ("not_found", "2026-07-28", -32602),
        ("denied", "2025-11-25", -32603),
        ("denied", "2026-07-28", -32603),
        ("timeout", "2025-11-25", -32603),
        ("over_limit", "2026-07-28", -32603),
        ("capsule_error", "2025-11-25", -32603),
        ("invalid_request", "2025-11-25", -32603),
        ("internal", "2026-07-28", -32603),
    ],
)
def test_error_codes_per_revision(code, version, expected):
    error = read_error(Failure(code, "why"), "astrid://u", version)
    assert error.code == expected
    assert error.data["uri"] == "astrid://u"
    if code != "not_found":
        assert error.message == "why"
