"""URI templates: what parses, what matches, and what is never handed to a capsule."""

from __future__ import annotations

import pytest

from astrid.host.contract.uri_template import UriTemplate


@pytest.mark.parametrize(
    ("template", "uri", "params"),
    [
        ("test://template/{id}/data", "test://template/123/data", {"id": "123"}),
        ("test://template/{id}/data", "test://template/a%20b/data", {"id": "a b"}),
        ("astrid://files/{+path}", "astrid://files/notes/today.md", {"path": "notes/today.md"}),
        ("astrid://files/{+path}", "astrid://files/a%20dir/b", {"path": "a dir/b"}),
        ("astrid://{user}/notes/{+path}", "astrid://ann/notes/x/y", {"user": "ann", "path": "x/y"}),
        ("astrid://files/{+path}", "astrid://files/.hidden/..x", {"path": ".hidden/..x"}),
    ],
)
def test_a_matching_uri_gives_its_decoded_variables(template, uri, params):
    assert UriTemplate.parse(template).match(uri) == params


@pytest.mark.parametrize(
    ("template", "uri"),
    [
        ("test://template/{id}/data", "test://template/1/2/data"),  # {id} is one segment
        ("test://template/{id}/data", "test://template/a%2Fb/data"),  # ... even percent-encoded
        ("test://template/{id}/data", "test://template//data"),
        ("test://template/{id}/data", "test://template/../data"),
        ("test://template/{id}/data", "test://template/%2E/data"),
        ("test://template/{id}/data", "test://template/x/data?q=1"),
        ("astrid://files/{+path}", "astrid://files/../etc/passwd"),
        ("astrid://files/{+path}", "astrid://files/a/../../b"),
        ("astrid://files/{+path}", "astrid://files/a/%2e%2e/b"),
        ("astrid://files/{+path}", "astrid://files/./a"),
        ("astrid://files/{+path}", "astrid://files/a%00b"),
        ("astrid://files/{+path}", "astrid://files/a%0Ab"),
        ("astrid://files/{+path}", "astrid://files/a%ff"),  # not UTF-8 once decoded
        ("astrid://files/{+path}", "astrid://files/a#frag"),
        ("astrid://files/{+path}", "astrid://other/a"),
        ("astrid://files/{+path}", "astrid://files/"),
    ],
)
def test_an_unsafe_or_foreign_uri_does_not_match(template, uri):
    assert UriTemplate.parse(template).match(uri) is None


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("", "non-empty"),
        ("astrid://plain", "no variable"),
        ("x://{a}{b}", "no literal between"),
        ("x://{a}/{a}", "twice"),
        ("x://{#a}", "not supported"),
        ("x://{?a}", "not supported"),
        ("x://{1a}", "name of"),
        ("x://{a", "unbalanced"),
        ("x://a}", "unbalanced"),
        ("x://{}", "name of"),
    ],
)
def test_a_template_outside_the_rules_is_refused_with_the_reason(template, problem):
    with pytest.raises(ValueError, match=problem):
        UriTemplate.parse(template)


def test_the_literal_prefix_is_the_text_before_the_first_variable():
    assert UriTemplate.parse("test://template/{id}/data").literal_prefix == "test://template/"
    assert UriTemplate.parse("{+all}").literal_prefix == ""
