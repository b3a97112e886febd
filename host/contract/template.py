"""Records of `astrid-bus:resource-template@1.0.0` as pydantic models.

The WIT file is the source of truth; `tests/host/contract/test_wit_agreement.py`
fails when these drift from it. URI templates are checked by
`contract.uri_template`: a template that does not parse is not a template.
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator, model_validator

from astrid.host.contract._base import (
    U32,
    DeferredWireModel,
    WireModel,
    check_bytes,
    check_count,
    check_segment,
    limits_of,
)
from astrid.host.contract.resource import Annotations, BoundedFields, Icon
from astrid.host.contract.uri_template import UriTemplate


class ResourceTemplate(BoundedFields):
    uri_template: str = Field(min_length=1)
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    annotations: Annotations | None = None
    icons: list[Icon] = []
    meta: str | None = None

    @field_validator("uri_template")
    @classmethod
    def _template(cls, value: str, info: ValidationInfo) -> str:
        check_bytes(value, limits_of(info).uri_bytes, "uri_template")
        UriTemplate.parse(value)  # ValueError names what is wrong
        return value

    @property
    def parsed(self) -> UriTemplate:
        return UriTemplate.parse(self.uri_template)


class TemplatesResponse(WireModel):
    templates: list[ResourceTemplate]

    @field_validator("templates")
    @classmethod
    def _count_limit(cls, value: list[ResourceTemplate], info: ValidationInfo) -> list[ResourceTemplate]:
        return check_count(value, limits_of(info).templates_per_describe, "templates in one reply")


class Argument(DeferredWireModel):
    name: str
    value: str


class CompleteRequest(DeferredWireModel):
    uri_template: str
    argument_name: str
    argument_value: str
    context_arguments: list[Argument] = []
    correlation_id: str

    @field_validator("correlation_id")
    @classmethod
    def _clean(cls, value: str) -> str:
        return check_segment(value, "correlation_id")


class CompleteResponse(DeferredWireModel):
    values: list[str] = []
    total: U32 | None = None
    has_more: bool = False
    error: str | None = None

    @model_validator(mode="after")
    def _error_means_no_values(self) -> CompleteResponse:
        if self.error is not None and self.values:
            raise ValueError("values must be empty when error is set")
        return self

    @field_validator("values")
    @classmethod
    def _count_limit(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return check_count(value, limits_of(info).completion_values, "completion values")
