"""URI templates as the contract allows them: RFC 6570 level 1 plus reserved expansion.

    template = UriTemplate.parse("astrid://files/{+path}")
    template.match("astrid://files/notes/today.md")   # {"path": "notes/today.md"}
    template.match("astrid://files/../etc/passwd")    # None: a `..` segment
    template.literal_prefix                            # "astrid://files/"

- `{var}` is one path segment: its value never holds `/`, `?` or `#`, even
  percent-encoded (a `%2F` would smuggle a segment into a capsule's path),
  and is never `.` or `..`.
- `{+var}` may span `/`, but never yields a `.` or `..` segment, a `?` or a
  `#`, nor (after percent-decoding) any control character.
- Variable names are `[A-Za-z_][A-Za-z0-9_]*`, each used once; two variables need a
  literal between them (`{a}{b}` has no single reading). Other RFC 6570
  operators (`#`, `.`, `/`, `;`, `?`, `&`) are refused.

The broker uses `literal_prefix` for precedence (the longest literal prefix
wins) and `match` to route a read; the guest SDK keeps its own copy of these
rules (it cannot import the host), and a test holds the two to the same cases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXPRESSION = re.compile(r"\{([^{}]*)\}")
_SEGMENT_VALUE = r"[^/?#]+"
_RESERVED_VALUE = r"[^?#]+"


@dataclass(frozen=True)
class Variable:
    name: str
    reserved: bool  # `{+name}`: may span `/`


@dataclass(frozen=True)
class UriTemplate:
    text: str
    variables: tuple[Variable, ...]
    literal_prefix: str
    _pattern: re.Pattern[str]

    @staticmethod
    def parse(text: str) -> UriTemplate:
        """The template `text`; ValueError naming the problem when it breaks the rules above."""
        return _parse(text)

    def match(self, uri: str) -> dict[str, str] | None:
        """The decoded variables of `uri` when the template matches it (and every value is safe), else None."""
        found = self._pattern.fullmatch(uri)
        if found is None:
            return None
        values: dict[str, str] = {}
        for variable in self.variables:
            value = _decoded(found.group(variable.name), variable.reserved)
            if value is None:
                return None
            values[variable.name] = value
        return values


@lru_cache(maxsize=4096)
def _parse(text: str) -> UriTemplate:
    if not isinstance(text, str) or not text:
        raise ValueError("a uri template is a non-empty string")
    pattern: list[str] = []
    variables: list[Variable] = []
    position = 0
    previous_was_variable = False
    for expression in _EXPRESSION.finditer(text):
        literal = text[position : expression.start()]
        if "{" in literal or "}" in literal:
            raise ValueError(f"unbalanced braces in {text!r}")
        if literal:
            pattern.append(re.escape(literal))
            previous_was_variable = False
        elif previous_was_variable:
            raise ValueError(f"two variables with no literal between them in {text!r}")
        body = expression.group(1)
        reserved = body.startswith("+")
        name = body[1:] if reserved else body
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"{{{body}}} in {text!r}: use {{name}} or {{+name}} with a name of [A-Za-z_][A-Za-z0-9_]* "
                "(other RFC 6570 operators are not supported)"
            )
        if any(variable.name == name for variable in variables):
            raise ValueError(f"variable {name!r} appears twice in {text!r}")
        variables.append(Variable(name, reserved))
        pattern.append(f"(?P<{name}>{_RESERVED_VALUE if reserved else _SEGMENT_VALUE})")
        previous_was_variable = True
        position = expression.end()
    tail = text[position:]
    if "{" in tail or "}" in tail:
        raise ValueError(f"unbalanced braces in {text!r}")
    pattern.append(re.escape(tail))
    if not variables:
        raise ValueError(f"{text!r} has no variable: list it as a resource instead")
    first = text.index("{")
    return UriTemplate(text, tuple(variables), text[:first], re.compile("".join(pattern), re.DOTALL))


def _decoded(raw: str, reserved: bool) -> str | None:
    """The percent-decoded value, or None when it is not safe to hand a capsule."""
    try:
        value = unquote(raw, errors="strict") if "%" in raw else raw
    except UnicodeDecodeError:  # not UTF-8 once decoded
        return None
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        return None
    if not reserved:
        return None if any(char in value for char in "/?#") or value in (".", "..") else value
    if any(char in value for char in "?#"):
        return None
    if any(segment in (".", "..") for segment in value.split("/")):
        return None
    return value
