"""Typed payloads of the bus contract, checked against the WIT by the tests."""

from astrid.host.contract.resource import (
    Annotations,
    BlobChunk,
    DescribeResponse,
    Icon,
    ReadRequest,
    ReadResponse,
    ResourceChunk,
    ResourceDefinition,
    TextChunk,
    chunk_adapter,
)

__all__ = [
    "Annotations",
    "BlobChunk",
    "DescribeResponse",
    "Icon",
    "ReadRequest",
    "ReadResponse",
    "ResourceChunk",
    "ResourceDefinition",
    "TextChunk",
    "chunk_adapter",
]
