"""The guest SDK's URI-template rules agree with the host's, case by case.

The SDK runs inside wasm and cannot import `astrid.host`, so it keeps its own
copy of the rules (`astrid_sdk._template`). The broker routes a read by the
host's copy (`astrid.host.contract.uri_template`) and the capsule serves it
by the SDK's: if they disagreed, a URI the broker sends to a template's owner
could reach a handler the host would have refused, or go unanswered. One
table, both implementations, identical results.
"""

from __future__ import annotations

import pytest

from astrid.host.contract.uri_template import UriTemplate as HostTemplate
from astrid_sdk import DefinitionError
from astrid_sdk._template import UriTemplate as SdkTemplate
from astrid_sdk._template import percent_decode

TEMPLATES = [
    "test://template/{id}/data",
    "astrid://files/{+path}",
    "astrid://{user}/notes/{+path}",
    "x://{a}/b/{c}",
    "x://{a}-{b}",
    "x://a?q={q}",
    "x://a#{frag}",
    "x://{_}.{Z9}",
    "{+all}",
    "{id}",
    "x://é/{v}",
    "x://a/{v}/",
    "x://a.{+rest}",
]

BAD_TEMPLATES = [
    "",
    "astrid://plain",
    "x://{a}{b}",
    "x://{+a}{b}",
    "x://{a}/{a}",
    "x://{a}/{+a}",
    "x://{#a}",
    "x://{?a}",
    "x://{.a}",
    "x://{/a}",
    "x://{;a}",
    "x://{&a}",
    "x://{a,b}",
    "x://{a*}",
    "x://{a:3}",
    "x://{1a}",
    "x://{a-b}",
    "x://{é}",
    "x://{++a}",
    "x://{+}",
    "x://{a",
    "x://a}",
    "x://{{a}}",
    "x://{a}}",
    "x://{}",
    "x://{ a}",
]

URIS = [
    # plain matches, percent-decoding
    "test://template/123/data",
    "test://template/a%20b/data",
    "test://template/%41%42/data",
    "test://template/%e2%82%ac/data",
    "test://template/€/data",
    "test://template/50%/data",
    "test://template/%zz/data",
    "test://template/%4/data",
    "test://template/%25/data",
    "test://template/a%2Db/data",
    # one segment, also percent-encoded
    "test://template/1/2/data",
    "test://template/a%2Fb/data",
    "test://template/a%2fb/data",
    "test://template/a%3Fb/data",
    "test://template/a%23b/data",
    "test://template//data",
    "test://template/x/data?q=1",
    "test://template/x/data#f",
    "test://template/../data",
    "test://template/%2e%2e/data",
    "test://template/./data",
    # reserved expansion
    "astrid://files/notes/today.md",
    "astrid://files/a%20dir/b",
    "astrid://files/.hidden/..x",
    "astrid://files/...",
    "astrid://files/a/b/",
    "astrid://files/a//b",
    "astrid://files/a\\..\\b",
    "astrid://files/../etc/passwd",
    "astrid://files/a/../../b",
    "astrid://files/a/..",
    "astrid://files/..",
    "astrid://files/.",
    "astrid://files/a/./b",
    "astrid://files/a/%2e%2e/b",
    "astrid://files/a/%2E%2E/b",
    "astrid://files/a/.%2e/b",
    "astrid://files/a/%2e/b",
    "astrid://files/a%2F..%2Fb",
    "astrid://files/a%2f%2e%2e%2fb",
    "astrid://files/./a",
    "astrid://files/a?x",
    "astrid://files/a%3Fx",
    "astrid://files/a#frag",
    "astrid://files/a%23frag",
    # control characters, raw and encoded
    "astrid://files/a%00b",
    "astrid://files/a\x00b",
    "astrid://files/a%0Ab",
    "astrid://files/a\nb",
    "astrid://files/a%0d",
    "astrid://files/a%09b",
    "astrid://files/a\tb",
    "astrid://files/a%7Fb",
    "astrid://files/a\x7fb",
    "astrid://files/a%C2%85b",  # U+0085, a C1 control: allowed by both
    "test://template/%00/data",
    "test://template/\x01/data",
    # not UTF-8 once decoded
    "astrid://files/a%ff",
    "astrid://files/a%C3",
    "astrid://files/a%C3%28",
    "astrid://files/a%ED%A0%80",  # an encoded surrogate
    "astrid://files/a%C3é%A9",
    "astrid://files/%C3%A9",
    "astrid://files/a\ud800b",  # a lone surrogate in the URI itself
    "astrid://files/a%F0%9F%98%80",
    # foreign and empty
    "astrid://other/a",
    "astrid://files/",
    "astrid://files",
    "ASTRID://files/a",
    "astrid://ann/notes/x/y",
    "astrid://ann/notes/",
    "astrid://a/b/notes/x",
    "astrid://%2e%2e/notes/x",
    "x://1/b/2",
    "x://1/b/2/3",
    "x://a-b",
    "x://a-b-c",
    "x://-b",
    "x://a?q=1",
    "x://a?q=a%26b",
    "x://a?q=",
    "x://a#x",
    "x://_.z",
    "x://a.b.c",
    "x://a.b",
    "x://a/v/",
    "x://a/v",
    "x://a.b/c",
    "x://a../c",
    "x://a./c",
    "x://é/v",
    "x://%C3%A9/v",
    "",
    "anything",
    "a/b",
    "../x",
    "%2e%2e",
]


def outcome(parse, text: str):
    try:
        template = parse(text)
    except ValueError as exc:  # the SDK's DefinitionError is a ValueError
        return ("refused", str(exc))
    variables = [(v.name, v.reserved) for v in template.variables]
    return ("parsed", template.literal_prefix, variables, [template.match(uri) for uri in URIS])


@pytest.mark.parametrize("template", TEMPLATES + BAD_TEMPLATES)
def test_both_copies_parse_and_match_alike(template):
    assert outcome(SdkTemplate.parse, template) == outcome(HostTemplate.parse, template)


def test_the_table_covers_both_outcomes():
    assert all(outcome(SdkTemplate.parse, t)[0] == "parsed" for t in TEMPLATES)
    assert all(outcome(SdkTemplate.parse, t)[0] == "refused" for t in BAD_TEMPLATES)
    results = [m for t in TEMPLATES for m in outcome(SdkTemplate.parse, t)[3]]
    assert sum(m is None for m in results) > 100 and sum(m is not None for m in results) > 30


def test_a_bad_template_is_a_definition_error_in_the_sdk():
    for text in BAD_TEMPLATES:
        with pytest.raises(DefinitionError):
            SdkTemplate.parse(text)


@pytest.mark.parametrize("value", [1, None, b"x://{a}"])
def test_non_strings_are_refused_by_both(value):
    with pytest.raises(ValueError, match="non-empty string"):
        SdkTemplate.parse(value)
    with pytest.raises(ValueError, match="non-empty string"):
        HostTemplate.parse(value)


@pytest.mark.parametrize(
    ("uri", "params"),
    [
        ("astrid://files/notes/today.md", {"path": "notes/today.md"}),
        ("astrid://files/a%20dir/b", {"path": "a dir/b"}),
        ("astrid://files/../etc/passwd", None),
        ("astrid://files/a/%2e%2e/b", None),
        ("astrid://files/a%2F..%2Fb", None),
        ("astrid://files/a%00b", None),
        ("astrid://files/a%ff", None),
        ("astrid://files/a#frag", None),
    ],
)
def test_what_the_table_means(uri, params):
    assert SdkTemplate.parse("astrid://files/{+path}").match(uri) == params


@pytest.mark.parametrize(
    "raw",
    ["plain", "a%20b", "%e2%82%ac", "50%", "%zz%4", "%C3é%A9", "€%41", "%", "%%41", "a\ud800%41", "%2F%2f"],
)
def test_percent_decoding_is_unquote(raw):
    from urllib.parse import unquote

    try:
        expected: object = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        expected = UnicodeDecodeError
    try:
        got: object = percent_decode(raw)
    except UnicodeDecodeError:
        got = UnicodeDecodeError
    assert got == expected
