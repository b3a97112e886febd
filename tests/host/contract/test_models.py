"""The JSON encoding rule and the docs/contract/limits.md §7 limits, enforced by the models."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from astrid.host.contract import DescribeResponse, ReadRequest, ReadResponse, ResourceDefinition, chunk_adapter
from astrid.host.contract.resource import BlobChunk, TextChunk, read_request
from astrid.host.limits import Limits

GOOD = {
    "uri": "astrid://docs/readme",
    "name": "readme",
    "title": "Read me",
    "mime_type": "text/markdown",
    "size": 12,
    "annotations": {"audience": ["user"], "priority": 0.5, "last_modified": "2026-01-01T00:00:00Z"},
    "icons": [{"src": "data:image/png;base64,AA==", "sizes": ["48x48"], "theme": "dark"}],
    "meta": '{"com.example/x": 1}',
}


def rejection(model, payload, **kwargs) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate_json(json.dumps(payload), **kwargs)
    return str(caught.value)


def test_full_definition_round_trips() -> None:
    definition = ResourceDefinition.model_validate_json(json.dumps(GOOD))
    assert definition.to_wire() == GOOD


def test_unknown_keys_are_ignored_and_options_may_be_absent_or_null() -> None:
    definition = ResourceDefinition.model_validate_json('{"uri":"a://b","name":"n","title":null,"future":1}')
    assert definition.title is None
    assert definition.to_wire() == {"uri": "a://b", "name": "n", "icons": []}


@pytest.mark.parametrize(
    "patch, field",
    [
        ({"name": 5}, "name"),
        ({"size": "12"}, "size"),
        ({"size": -1}, "size"),
        ({"size": 2**32}, "size"),
        ({"title": "x" * 4097}, "title"),
        ({"description": "é" * 2049}, "description"),
        ({"uri": "a://" + "x" * 2048}, "uri"),
        ({"meta": "[1, 2]"}, "meta"),
        ({"meta": "not json"}, "meta"),
        ({"meta": json.dumps({"k": "v" * 4096})}, "meta"),
        ({"annotations": {"audience": ["robot"]}}, "audience"),
        ({"icons": [{"src": "x", "theme": "blue"}]}, "theme"),
    ],
)
def test_malformed_definition_is_rejected_naming_the_field(patch: dict, field: str) -> None:
    assert field in rejection(ResourceDefinition, {**GOOD, **patch})


def test_extra_icons_are_dropped_not_rejected() -> None:
    payload = {**GOOD, "icons": [{"src": f"i{n}"} for n in range(20)]}
    assert len(ResourceDefinition.model_validate_json(json.dumps(payload)).icons) == 8


def test_limits_come_from_the_validation_context() -> None:
    tight = Limits(title_bytes=3)
    assert "title" in rejection(ResourceDefinition, {**GOOD, "title": "four"}, context={"limits": tight})


def test_describe_reply_over_the_resource_cap_is_rejected() -> None:
    many = {"resources": [{"uri": f"a://{n}", "name": str(n)} for n in range(257)]}
    assert "resources" in rejection(DescribeResponse, many)


def test_chunks_use_the_type_discriminant() -> None:
    text = chunk_adapter.validate_json('{"type":"text","uri":"a://b","text":"hi"}')
    blob = chunk_adapter.validate_json('{"type":"blob","uri":"a://b","blob":"aGk="}')
    assert isinstance(text, TextChunk)
    assert (text.text, blob.raw_size()) == ("hi", 2)
    assert text.to_wire() == {"type": "text", "uri": "a://b", "text": "hi"}


@pytest.mark.parametrize(
    "chunk",
    [
        {"type": "image", "uri": "a://b", "text": "x"},
        {"uri": "a://b", "text": "x"},
        {"type": "blob", "uri": "a://b", "blob": "not base64!"},
        {"type": "text", "uri": "a://b", "text": 3},
    ],
)
def test_malformed_chunk_is_rejected(chunk: dict) -> None:
    with pytest.raises(ValidationError):
        chunk_adapter.validate_json(json.dumps(chunk))


def test_read_response_error_excludes_contents() -> None:
    payload = {"uri": "a://b", "error": "boom", "contents": [{"type": "text", "uri": "a://b", "text": "x"}]}
    assert "contents must be empty" in rejection(ReadResponse, payload)
    ok = ReadResponse.model_validate_json('{"uri":"a://b","error":"boom"}')
    assert not ok.contents


def test_correlation_ids_must_be_clean_segments() -> None:
    assert "correlation_id" in rejection(ReadRequest, {"uri": "a://b", "correlation_id": "a.b"})
    assert ReadRequest.model_validate_json('{"uri":"a://b","correlation_id":"c0ffee"}').correlation_id == "c0ffee"


@given(st.text(max_size=80), st.from_regex(r"[a-z0-9_-]{1,40}", fullmatch=True))
def test_the_brokers_read_request_is_the_models_to_the_byte(uri, correlation_id) -> None:
    text, value = read_request(uri, correlation_id)
    assert text == ReadRequest(uri=uri, correlation_id=correlation_id).to_json()
    assert value == json.loads(text)


def test_a_read_request_refuses_a_correlation_id_that_is_not_one_segment() -> None:
    with pytest.raises(ValueError, match="correlation_id"):
        read_request("a://b", "a.b")


@given(st.binary(max_size=300))
def test_a_blob_of_any_bytes_validates_and_knows_its_decoded_size(data):
    chunk = BlobChunk(uri="astrid://c/x", blob=base64.b64encode(data).decode())
    assert chunk.raw_size() == len(data)


@pytest.mark.parametrize("bad", ["abc", "ab=c", "a b=", "YQ==YQ==", "YQ", "Y===", "====", "YQ==\n", "ÿÿÿÿ", "YQ-_"])
def test_a_blob_that_is_not_standard_padded_base64_is_refused(bad):
    with pytest.raises(ValidationError, match="not valid base64"):
        BlobChunk(uri="astrid://c/x", blob=bad)
