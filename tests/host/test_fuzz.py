"""Any input gives a valid result or a clean rejection, never an escaping exception."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from astrid.host.capsule.manifest import Manifest, ManifestError, parse_manifest
from astrid.host.contract import DescribeResponse, ReadRequest, ReadResponse, ResourceDefinition, chunk_adapter
from astrid.host.contract._base import WireModel

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
keys = st.sampled_from(
    ["uri", "name", "title", "description", "mime_type", "size", "annotations", "icons", "meta", "type", "text",
     "blob", "contents", "error", "resources", "correlation_id", "req_id", "audience", "priority", "src"]
)  # fmt: skip
shaped = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=6), max_leaves=25
)

MODELS: list[type[WireModel]] = [
    ResourceDefinition,
    DescribeResponse,
    ReadRequest,
    ReadResponse,
]


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, shaped))
def test_payload_models_validate_or_reject_cleanly(value) -> None:
    text = json.dumps(value)
    for model in MODELS:
        try:
            model.model_validate_json(text)
        except ValidationError:
            pass
    try:
        chunk_adapter.validate_json(text)
    except ValidationError:
        pass


manifest_tables = st.fixed_dictionaries(
    {},
    optional={
        "package": st.dictionaries(st.sampled_from(["name", "version", "description", "x"]), scalars, max_size=4),
        "component": st.lists(
            st.dictionaries(st.sampled_from(["id", "file", "type"]), scalars, max_size=3), max_size=2
        ),
        "subscribe": st.dictionaries(st.text(max_size=30), st.one_of(scalars, st.dictionaries(
            st.sampled_from(["wit", "handler", "priority"]), scalars, max_size=3)), max_size=3),
        "publish": st.dictionaries(st.text(max_size=30), scalars, max_size=3),
        "config": st.dictionaries(st.text(max_size=10), json_values, max_size=3),
        "resources": json_values,
        "extra": json_values,
    },
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(manifest_tables)
def test_manifest_parsing_gives_a_manifest_or_a_manifest_error(raw) -> None:
    try:
        assert isinstance(parse_manifest(raw), Manifest)
    except ManifestError as exc:
        assert str(exc).startswith("Capsule.toml: ") and "\n" not in str(exc)


meta_texts = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.dictionaries(st.text(max_size=30), json_values, max_size=5).map(json.dumps),
    st.sampled_from(['{"io.modelcontextprotocol/x": 1, "com.example/y": 2}', '{"mcp.dev/z": 1}', "[]", "null"]),
)
definitions: st.SearchStrategy[dict[str, object]] = st.builds(
    dict,
    uri=st.text(min_size=1, max_size=60),
    name=st.text(max_size=20),
    title=st.none() | st.text(max_size=30),
    mime_type=st.none() | st.text(max_size=20),
    size=st.none() | st.integers(min_value=0, max_value=2**32 - 1),
    annotations=st.none()
    | st.builds(
        dict,
        audience=st.lists(st.sampled_from(["user", "assistant"]), max_size=2),
        priority=st.none() | st.floats(allow_nan=True, allow_infinity=True, width=32),
        last_modified=st.none() | st.text(max_size=30) | st.sampled_from(["2026-01-01T00:00:00Z", "2026-13-45"]),
    ),
    icons=st.lists(
        st.builds(dict, src=st.text(max_size=20), sizes=st.lists(st.text(max_size=5), max_size=2)), max_size=3
    ),
    meta=meta_texts,
)


@settings(max_examples=300, deadline=None)
@given(definitions)
def test_mcp_reshape_gives_a_valid_resource_or_drops_the_entry(raw) -> None:
    import mcp.types as types

    from astrid.host.mcp.reshape import to_resource

    try:
        definition = ResourceDefinition.model_validate(raw)
    except ValidationError:
        return
    resource = to_resource(definition)
    if resource is None:
        return
    assert isinstance(resource, types.Resource)
    wire = resource.model_dump(by_alias=True, mode="json", exclude_none=True)
    types.Resource.model_validate(wire)  # survives the SDK's own validation
    if resource.annotations is not None and resource.annotations.priority is not None:
        assert 0.0 <= resource.annotations.priority <= 1.0
    meta = wire.get("_meta") or {}
    assert not any(key.split("/")[0].split(".")[1:2] in (["mcp"], ["modelcontextprotocol"]) for key in meta)
