"""URI templates: the SDK's own copy of the contract's rules (docs/contract/templates.md §9.2).

    template = UriTemplate.parse("astrid://files/{+path}")
    template.match("astrid://files/notes/today.md")   # {"path": "notes/today.md"}
    template.match("astrid://files/../etc/passwd")    # None: a `..` segment
    template.literal_prefix                            # "astrid://files/"

- `{var}` is one path segment: its value never holds `/`, `?` or `#`, even
  percent-encoded.
- `{+var}` may span `/`, but never yields a `.` or `..` segment, a `?` or a
  `#`.
- Every value is percent-decoded as UTF-8 (a value that is not UTF-8 once
  decoded does not match) and holds no control character (C0 or DEL). The
  decoder is `_uri.percent_decode`, the one a family's keys go through too.
- Variable names are `[A-Za-z_][A-Za-z0-9_]*`, each used once; two variables
  need a literal between them. Other RFC 6570 operators are refused.

The host applies the same rules (`astrid.host.contract.uri_template`), which
the guest cannot import; `tests/capsules/test_template_agreement.py` holds
the two to one table of cases. Stdlib only: this module runs inside the
wasm guest.
"""

from __future__ import annotations

import re

from astrid_sdk._errors import DefinitionError
from astrid_sdk._uri import percent_decode

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXPRESSION = re.compile(r"\{([^{}]*)\}")
_SEGMENT_VALUE = r"[^/?#]+"
_RESERVED_VALUE = r"[^?#]+"


class Variable:
    """One `{name}` (reserved=False) or `{+name}` (reserved=True) of a template."""

    __slots__ = ("name", "reserved")

    def __init__(self, name: str, reserved: bool) -> None:
        self.name = name
        self.reserved = reserved

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Variable) and (self.name, self.reserved) == (other.name, other.reserved)

    def __hash__(self) -> int:
        return hash((self.name, self.reserved))

    def __repr__(self) -> str:
        return f"{{+{self.name}}}" if self.reserved else f"{{{self.name}}}"


class UriTemplate:
    """A parsed URI template: `parse` checks it, `match` reads a URI's variables."""

    __slots__ = ("text", "variables", "literal_prefix", "_pattern")

    def __init__(self, text: str, variables: tuple[Variable, ...], literal_prefix: str, pattern: re.Pattern) -> None:
        self.text = text
        self.variables = variables
        self.literal_prefix = literal_prefix  # the text before the first `{`
        self._pattern = pattern

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(variable.name for variable in self.variables)

    @classmethod
    def parse(cls, text: object) -> UriTemplate:
        """The template `text`; DefinitionError naming the problem when it breaks the rules."""
        if not isinstance(text, str) or not text:
            raise DefinitionError("a uri template is a non-empty string")
        pattern: list[str] = []
        variables: list[Variable] = []
        position = 0
        previous_was_variable = False
        for expression in _EXPRESSION.finditer(text):
            literal = text[position : expression.start()]
            if "{" in literal or "}" in literal:
                raise DefinitionError(f"unbalanced braces in {text!r}")
            if literal:
                pattern.append(re.escape(literal))
                previous_was_variable = False
            elif previous_was_variable:
                raise DefinitionError(f"two variables with no literal between them in {text!r}")
            body = expression.group(1)
            reserved = body.startswith("+")
            name = body[1:] if reserved else body
            if not _NAME.fullmatch(name):
                raise DefinitionError(
                    f"{{{body}}} in {text!r}: use {{name}} or {{+name}} with a name of [A-Za-z_][A-Za-z0-9_]* "
                    "(other RFC 6570 operators are not supported)"
                )
            if any(variable.name == name for variable in variables):
                raise DefinitionError(f"variable {name!r} appears twice in {text!r}")
            variables.append(Variable(name, reserved))
            pattern.append(f"(?P<{name}>{_RESERVED_VALUE if reserved else _SEGMENT_VALUE})")
            previous_was_variable = True
            position = expression.end()
        tail = text[position:]
        if "{" in tail or "}" in tail:
            raise DefinitionError(f"unbalanced braces in {text!r}")
        pattern.append(re.escape(tail))
        if not variables:
            raise DefinitionError(f"{text!r} has no variable: list it as a resource instead")
        return cls(text, tuple(variables), text[: text.index("{")], re.compile("".join(pattern), re.DOTALL))

    def match(self, uri: object) -> dict[str, str] | None:
        """The decoded variables of `uri` when the template matches it and every value is safe, else None."""
        if not isinstance(uri, str):
            return None
        found = self._pattern.fullmatch(uri)
        if found is None:
            return None
        params: dict[str, str] = {}
        for variable in self.variables:
            value = _safe_value(found.group(variable.name), variable.reserved)
            if value is None:
                return None
            params[variable.name] = value
        return params

    def __repr__(self) -> str:
        return f"UriTemplate({self.text!r})"


def _safe_value(raw: str, reserved: bool) -> str | None:
    """The percent-decoded value, or None when it must not reach a handler."""
    try:
        value = percent_decode(raw)
    except UnicodeDecodeError:
        return None
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        return None
    if not reserved:
        unsafe = "/" in value or "?" in value or "#" in value or value in (".", "..")
        return None if unsafe else value
    if "?" in value or "#" in value:
        return None
    if any(segment in (".", "..") for segment in value.split("/")):
        return None
    return value
