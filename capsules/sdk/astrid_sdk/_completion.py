"""Completion (docs/contract/templates.md §9): reading a complete-request, and shaping what a completer returned.

The `complete` handler itself is in `_serving`; a completer is declared with
`@template.complete("var")` (`_registry.Template`).
"""

from __future__ import annotations

from astrid_sdk._checks import is_clean_segment
from astrid_sdk._errors import DefinitionError


def complete_request(request: dict | None):
    """(uri_template, argument_name, argument_value, context arguments, correlation_id), or None when malformed."""
    if request is None:
        return None
    fields = [request.get(key) for key in ("uri_template", "argument_name", "argument_value", "correlation_id")]
    if not all(isinstance(value, str) for value in fields) or not is_clean_segment(fields[3]):
        return None
    given = request.get("context_arguments", [])
    if given is None:
        given = []
    if not isinstance(given, list):
        return None
    arguments: dict[str, str] = {}
    for argument in given:
        if not isinstance(argument, dict):
            return None
        name, value = argument.get("name"), argument.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            return None
        arguments[name] = value
    return fields[0], fields[1], fields[2], arguments, fields[3]


def completion_values(returned, prefix: str) -> list[str]:
    """What a completer returned: its distinct strings that start with `prefix`, in order.

    DefinitionError (starting "returned ...") when it is not a list of strings.
    """
    if returned is None or isinstance(returned, (str, bytes, bytearray, memoryview, dict)):
        raise DefinitionError(f"returned {type(returned).__name__}; return a list of strings")
    try:
        items = iter(returned)
    except TypeError:
        raise DefinitionError(f"returned {type(returned).__name__}; return a list of strings") from None
    values: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise DefinitionError(f"returned a {type(item).__name__} as item {index}; values must be strings")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise DefinitionError(f"returned item {index}, which is not valid UTF-8 (a lone surrogate)") from None
        if item.startswith(prefix) and item not in seen:
            seen.add(item)
            values.append(item)
    return values
