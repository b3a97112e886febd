"""The pydantic models and the WIT files must describe the same records.

Parses the WIT with `wasm-tools component wit --json` and compares, record by
record, field names (kebab-case in WIT, snake_case in JSON) and field types.
"""

from __future__ import annotations

import json
import subprocess
import types as pytypes
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from astrid.host.contract import (
    Annotations,
    BlobChunk,
    DescribeResponse,
    Icon,
    ReadRequest,
    ReadResponse,
    ResourceDefinition,
    TextChunk,
)
from astrid.host.contract._base import WitType
from astrid.host.contract.events import ResourceUpdated
from astrid.host.contract.template import (
    Argument,
    CompleteRequest,
    CompleteResponse,
    ResourceTemplate,
    TemplatesResponse,
)
from astrid.host.toolpaths import wasm_tools
from astrid.wit import WIT_DIR

RECORD_MODELS: dict[str, type[BaseModel]] = {
    "annotations": Annotations,
    "icon": Icon,
    "resource-definition": ResourceDefinition,
    "resource-text": TextChunk,
    "resource-blob": BlobChunk,
    "describe-response": DescribeResponse,
    "read-request": ReadRequest,
    "read-response": ReadResponse,
    "resource-template": ResourceTemplate,
    "templates-response": TemplatesResponse,
    "argument": Argument,
    "complete-request": CompleteRequest,
    "complete-response": CompleteResponse,
    "updated": ResourceUpdated,  # astrid-bus:resource-events@1.0.0 (docs/contract/subscriptions.md §11)
}
# Fields the JSON encoding adds that are not WIT record fields.
VARIANT_TAG = "type"


@pytest.fixture(scope="module")
def wit() -> dict[str, Any]:
    out = subprocess.run(
        [wasm_tools(), "component", "wit", "--json", str(WIT_DIR)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def wit_type(doc: dict[str, Any], ref: Any) -> str:
    """Render a WIT type reference from the JSON dump as `option<list<icon>>` etc."""
    if ref is None:  # a variant case without a payload
        return "_"
    if isinstance(ref, str):
        return ref
    entry = doc["types"][ref]
    kind = entry["kind"]
    if entry["name"] is not None and not (isinstance(kind, dict) and "type" in kind):
        return entry["name"]
    if "type" in kind:
        return wit_type(doc, kind["type"])
    if "option" in kind:
        return f"option<{wit_type(doc, kind['option'])}>"
    if "list" in kind:
        return f"list<{wit_type(doc, kind['list'])}>"
    raise AssertionError(f"unhandled WIT type {entry}")


def named_types(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    owned = {}
    for entry in doc["types"]:
        if entry["name"] and isinstance(entry["kind"], dict) and "type" not in entry["kind"]:
            owned[entry["name"]] = entry
    return owned


def model_type(annotation: Any, doc: dict[str, Any]) -> str:
    """Render a pydantic field annotation in WIT notation."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        markers = [m for m in args[1:] if isinstance(m, WitType)]
        return markers[0].name if markers else model_type(args[0], doc)
    if origin in (typing.Union, pytypes.UnionType):
        members = [a for a in args if a is not type(None)]
        if type(None) in args:
            assert len(members) == 1, annotation
            return f"option<{model_type(members[0], doc)}>"
        cases = {model_type(m, doc) for m in members}
        for name, entry in named_types(doc).items():
            variant = entry["kind"].get("variant")
            if variant and {wit_type(doc, c["type"]) for c in variant["cases"]} == cases:
                return name
        raise AssertionError(f"no WIT variant with cases {cases}")
    if origin is list:
        return f"list<{model_type(args[0], doc)}>"
    if origin is typing.Literal:
        for name, entry in named_types(doc).items():
            enum = entry["kind"].get("enum")
            if enum and [c["name"] for c in enum["cases"]] == list(args):
                return name
        raise AssertionError(f"no WIT enum with cases {args}")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, model in RECORD_MODELS.items():
            if model is annotation:
                return name
        raise AssertionError(f"{annotation.__name__} maps to no WIT record")
    return {str: "string", bool: "bool"}[annotation]


def field_annotation(model: type[BaseModel], name: str) -> Any:
    info = model.model_fields[name]
    annotation = info.annotation
    markers = [m for m in info.metadata if isinstance(m, WitType)]
    if markers:
        return typing.Annotated[annotation, markers[0]]
    return annotation


@pytest.mark.parametrize("record", sorted(RECORD_MODELS))
def test_model_matches_wit_record(wit: dict[str, Any], record: str) -> None:
    model = RECORD_MODELS[record]
    entry = named_types(wit)[record]
    wit_fields = {f["name"].replace("-", "_"): wit_type(wit, f["type"]) for f in entry["kind"]["record"]["fields"]}
    model_fields = {
        name: model_type(field_annotation(model, name), wit)
        for name in model.model_fields
        if not (name == VARIANT_TAG and record in ("resource-text", "resource-blob"))
    }
    assert model_fields == wit_fields


def test_resource_contents_variant_cases_match_the_chunk_tags(wit: dict[str, Any]) -> None:
    variant = named_types(wit)["resource-contents"]["kind"]["variant"]
    cases = {c["name"]: wit_type(wit, c["type"]) for c in variant["cases"]}
    assert cases == {"text": "resource-text", "blob": "resource-blob"}
    assert TextChunk.model_fields[VARIANT_TAG].default == "text"
    assert BlobChunk.model_fields[VARIANT_TAG].default == "blob"


def test_every_contract_record_has_a_model(wit: dict[str, Any]) -> None:
    packages = ("types", "resource", "resource-template", "resource-events")
    contract_interfaces = {i for i, iface in enumerate(wit["interfaces"]) if iface["name"] in packages}
    records = {
        t["name"]
        for t in wit["types"]
        if t["name"] and t["owner"] and t["owner"].get("interface") in contract_interfaces and "record" in t["kind"]
    }
    assert records == set(RECORD_MODELS)
