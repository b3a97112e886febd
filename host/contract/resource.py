"""Records of `astrid-bus:types` and `astrid-bus:%resource` as pydantic models.

The WIT files are the source of truth; `tests/host/contract/test_wit_agreement.py`
fails when these drift from them.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationInfo, field_validator, model_validator

from astrid.host.contract._base import (
    F32,
    U32,
    WireModel,
    check_bytes,
    check_count,
    check_meta,
    check_segment,
    limits_of,
)

ResourceRole = Literal["user", "assistant"]
IconTheme = Literal["light", "dark"]


class Annotations(WireModel):
    audience: list[ResourceRole] = []
    priority: F32 | None = None
    last_modified: str | None = None


class Icon(WireModel):
    src: str
    mime_type: str | None = None
    sizes: list[str] = []
    theme: IconTheme | None = None


class BoundedFields(WireModel):
    """The size rules of the fields several records share (docs/contract/limits.md §7), written once.

    A record inherits the rules of the fields it declares (`check_fields=False`:
    a rule for a field a record lacks does nothing); its own fields keep their
    own order, so the wire form does not move.
    """

    @field_validator("uri", check_fields=False)
    @classmethod
    def _uri_limit(cls, value: str, info: ValidationInfo) -> str:
        return check_bytes(value, limits_of(info).uri_bytes, "uri")

    @field_validator("title", check_fields=False)
    @classmethod
    def _title_limit(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_bytes(value, limits_of(info).title_bytes, "title")

    @field_validator("description", check_fields=False)
    @classmethod
    def _description_limit(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_bytes(value, limits_of(info).description_bytes, "description")

    @field_validator("icons", check_fields=False)
    @classmethod
    def _icons_limit(cls, value: list[Icon], info: ValidationInfo) -> list[Icon]:
        return value[: limits_of(info).icons_per_definition]  # extras dropped (docs/contract/limits.md §7)

    @field_validator("meta", check_fields=False)
    @classmethod
    def _meta_object(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_meta(value, limits_of(info).meta_bytes)


class ResourceDefinition(BoundedFields):
    uri: str = Field(min_length=1)
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: U32 | None = None
    annotations: Annotations | None = None
    icons: list[Icon] = []
    meta: str | None = None


class _Chunk(BoundedFields):
    uri: str
    mime_type: str | None = None
    meta: str | None = None


class TextChunk(_Chunk):
    """The `text(resource-text)` arm of `resource-contents`."""

    type: Literal["text"] = "text"
    text: str

    def raw_size(self) -> int:
        return len(self.text.encode("utf-8", "surrogatepass"))


class BlobChunk(_Chunk):
    """The `blob(resource-blob)` arm of `resource-contents`."""

    type: Literal["blob"] = "blob"
    blob: str

    @field_validator("blob")
    @classmethod
    def _base64(cls, value: str) -> str:
        if not is_base64(value):
            raise ValueError("blob is not valid base64")
        return value

    def raw_size(self) -> int:
        """The decoded size, from the length alone (the blob was checked on validation)."""
        return len(self.blob) // 4 * 3 - (len(self.blob) - len(self.blob.rstrip("=")))


_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def is_base64(value: str) -> bool:
    """Standard, padded base64, checked without decoding (3x faster than
    b64decode(validate=True), which a 64 KiB blob read would pay twice)."""
    try:
        raw = value.encode("ascii")
    except UnicodeEncodeError:
        return False
    body = raw.rstrip(b"=")
    return len(raw) % 4 == 0 and len(raw) - len(body) <= 2 and not body.translate(None, _BASE64_ALPHABET)


ResourceChunk = Annotated[TextChunk | BlobChunk, Field(discriminator="type")]
chunk_adapter: TypeAdapter[TextChunk | BlobChunk] = TypeAdapter(ResourceChunk)


class DescribeResponse(WireModel):
    resources: list[ResourceDefinition]

    @field_validator("resources")
    @classmethod
    def _count_limit(cls, value: list[ResourceDefinition], info: ValidationInfo) -> list[ResourceDefinition]:
        return check_count(value, limits_of(info).resources_per_describe, "resources in one describe reply")


class ReadRequest(WireModel):
    uri: str
    correlation_id: str

    @field_validator("correlation_id")
    @classmethod
    def _clean(cls, value: str) -> str:
        return check_segment(value, "correlation_id")


def read_request(uri: str, correlation_id: str) -> tuple[str, dict[str, str]]:
    """`ReadRequest(uri=uri, correlation_id=correlation_id).to_json()`, and its JSON value, made
    without the model: the broker makes one per read, for a URI it routed and an id of its own."""
    value = {"uri": uri, "correlation_id": check_segment(correlation_id, "correlation_id")}
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False), value


# A read reply the host sends for a capsule whose handler did not return (kernel/failed_reads.py):
# it says why, but it is no answer. The broker takes it only from the URI's listed or template owner;
# for any other URI a crashing capsule must not turn "no such resource" into its error, nor win a family
# member's read. A capsule that sets it itself only weakens its own reply.
UNANSWERED_FIELD = "unanswered"


def unanswered_reply(uri: str, error: str) -> str:
    """The host's reply for a capsule that did not answer a read of `uri`: no contents, `error`, marked."""
    value = {UNANSWERED_FIELD: True, "uri": uri, "contents": [], "error": error}
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def is_unanswered(reply: object) -> bool:
    """True for a reply's JSON value that `unanswered_reply` made (or a capsule marked so)."""
    return isinstance(reply, dict) and reply.get(UNANSWERED_FIELD) is True


class ReadResponse(WireModel):
    uri: str
    contents: list[ResourceChunk] = []
    error: str | None = None
    meta: str | None = None

    @model_validator(mode="after")
    def _error_means_no_contents(self) -> ReadResponse:
        if self.error is not None and self.contents:
            raise ValueError("contents must be empty when error is set")
        return self

    @field_validator("meta")
    @classmethod
    def _meta_object(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_meta(value, limits_of(info).meta_bytes)
