"""docs/contract/mcp.md §6.2 reshape rules for templates, and the completion result and errors."""

from __future__ import annotations

import json

import mcp.types as types
import pytest

from astrid.host.contract.outcomes import Failure, FailureCode
from astrid.host.contract.template import ResourceTemplate
from astrid.host.limits import Limits
from astrid.host.mcp.reshape import completion_error, to_completion, to_template


def test_a_template_keeps_its_fields_with_the_resource_hygiene():
    wire = ResourceTemplate.model_validate(
        {
            "uri_template": "astrid://files/{+path}",
            "name": "files",
            "title": "Files",
            "description": "any file",
            "mime_type": "text/plain",
            "annotations": {"audience": ["user", "user"], "priority": float("nan"), "last_modified": "2025-01-12"},
            "icons": [{"src": "data:image/png;base64,AAAA", "theme": "dark"}],
            "meta": json.dumps({"com.example/a": 1, "dev.mcp/b": 2}),
        }
    )
    reshaped = to_template(wire)
    assert reshaped is not None
    dumped = reshaped.model_dump(by_alias=True, exclude_none=True)
    assert dumped["uriTemplate"] == "astrid://files/{+path}"
    assert dumped["name"] == "files" and dumped["title"] == "Files" and dumped["mimeType"] == "text/plain"
    assert dumped["annotations"] == {"audience": ["user"], "lastModified": "2025-01-12"}  # NaN priority dropped
    assert dumped["icons"] == [{"src": "data:image/png;base64,AAAA", "theme": "dark"}]
    assert dumped["_meta"] == {"com.example/a": 1}


def test_a_template_meta_over_the_cap_after_cleaning_is_dropped():
    meta = json.dumps({"com.example/big": "x" * 200})
    wire = ResourceTemplate.model_validate({"uri_template": "astrid://x/{a}", "name": "x", "meta": meta})
    reshaped = to_template(wire, Limits(meta_bytes=100))
    assert reshaped is not None and reshaped.meta is None
    only_reserved = ResourceTemplate.model_validate(
        {"uri_template": "astrid://x/{a}", "name": "x", "meta": json.dumps({"io.modelcontextprotocol/x": 1})}
    )
    assert to_template(only_reserved).meta is None  # an empty _meta is left out


def test_completion_values_are_capped_and_say_has_more():
    completion = to_completion([f"v{i}" for i in range(120)], 120, False)
    assert len(completion.values) == 100 and completion.has_more is True and completion.total == 120
    assert to_completion(["a"], None, False) == types.Completion(values=["a"], has_more=False)
    assert to_completion(["a", "b"], 1, True).total is None  # a total below the count says nothing


@pytest.mark.parametrize(
    ("code", "rpc"),
    [
        (FailureCode.NOT_FOUND, types.INVALID_PARAMS),
        (FailureCode.INVALID_REQUEST, types.INVALID_PARAMS),
        (FailureCode.DENIED, types.INTERNAL_ERROR),
        (FailureCode.TIMEOUT, types.INTERNAL_ERROR),
        (FailureCode.CAPSULE_ERROR, types.INTERNAL_ERROR),
        (FailureCode.INTERNAL, types.INTERNAL_ERROR),
    ],
)
def test_completion_errors(code, rpc):
    error = completion_error(Failure(code, "why"), "astrid://x/{a}")
    assert error.code == rpc and error.message == "why"
    assert error.data == {"uriTemplate": "astrid://x/{a}", "reason": code.value}
