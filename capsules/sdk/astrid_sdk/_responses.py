"""The protocol's replies as JSON: read-, describe-, templates- and complete-responses.

Each builder takes what it lists (chunks, records, completion values) and
gives the JSON-ready dict; `read_response_json` builds a successful read's
text directly (see `Chunk.to_json`). Encode with `_encoding.dumps`.

Pure Python, stdlib only: this module runs inside the wasm guest.
"""

from __future__ import annotations

from astrid_sdk._encoding import dumps


def read_response(uri: str, chunks=None, error=None) -> dict:
    """The `read-response` record as a JSON-ready dict."""
    wire: dict = {"uri": uri, "contents": [] if error is not None else [c.to_wire(uri) for c in chunks or ()]}
    if error is not None:
        wire["error"] = error
    return wire


def read_response_json(uri: str, chunks) -> str:
    """A successful `read-response` as JSON text (same bytes as `dumps(read_response(...))`)."""
    encoded_uri = dumps(uri)  # once: a chunk without a URI of its own repeats it
    contents = ",".join(c.to_json(uri, encoded_uri) for c in chunks)
    return '{"uri":' + encoded_uri + ',"contents":[' + contents + "]}"


def describe_response(resources) -> dict:
    return {"resources": [resource.to_wire() for resource in resources]}


def templates_response(templates) -> dict:
    return {"templates": [template.to_wire() for template in templates]}


def complete_response(values=(), total=None, has_more=False, error=None) -> dict:
    """The `complete-response` record as a JSON-ready dict (no values when `error` is set)."""
    wire: dict = {"values": [] if error is not None else list(values)}
    if total is not None and error is None:
        wire["total"] = total
    wire["has_more"] = bool(has_more) and error is None
    if error is not None:
        wire["error"] = error
    return wire
