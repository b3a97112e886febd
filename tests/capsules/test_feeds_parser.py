"""The feeds capsule's RSS/Atom reader (capsules/feeds/feed.ts and xml.ts) on awkward documents.

The same TypeScript the capsule is built from, bundled by the JS toolchain's esbuild and run once by
Node.js for every case (well under a second): the parser's corners without a component build. The
capsule itself, built and served, is tests/e2e/test_feeds_capsule.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from astrid.capsules import CAPSULES_DIR
from astrid.host.build.js_install import SHIPPED_DIR

DRIVER = """\
import { readFeed } from './feed.mjs';
const cases = JSON.parse(await new Response(process.stdin).text());
const out = cases.map(([xml, max]) => {
  try {
    return { feed: readFeed(xml, max) };
  } catch (error) {
    return { error: `${error.name}: ${error.message}` };
  }
});
process.stdout.write(JSON.stringify(out));
"""

CASES: dict[str, tuple[str, int]] = {
    "rdf": (
        '<?xml version="1.0"?><rdf:RDF xmlns:rdf="x" xmlns:dc="y"><channel><title>R</title><link>http://r/</link>'
        "</channel><item><title>A</title><link>http://r/a</link><dc:date>2020-01-02T03:04:05Z</dc:date></item>"
        "<item><title>B</title></item></rdf:RDF>",
        10,
    ),
    "entities": (
        "<rss><channel><title>&#x1F600; &#xD800; &foo; a&nbsp;b &#233;&eacute;</title></channel></rss>",
        10,
    ),
    "cdata": ("<rss><channel><title><![CDATA[a ]] b <i>&amp;</i>]]></title></channel></rss>", 10),
    "truncated": (
        "<rss><channel><title>T</title><item><title>one</title></item><item><title>tw",
        10,
    ),
    "deep": ("<a>" * 10_000 + "x" + "</a>" * 10_000, 10),
    "bounded": (
        "<rss><channel>" + "".join(f"<item><title>{i}</title></item>" for i in range(100)) + "</channel></rss>",
        5,
    ),
    "doctype": (
        '<!DOCTYPE rss [<!ENTITY x "y>z">]><!-- a <comment> --><?pi x?><rss><channel><title>D</title></channel></rss>',
        10,
    ),
    "quoted": (
        '<feed><entry><title>Q</title><link rel="alternate" href="http://q/a?b=1&amp;c=&quot;>&quot;"/></entry></feed>',
        10,
    ),
    "long": ("<rss><channel><item><description>" + "word " * 300 + "</description></item></channel></rss>", 10),
    "empty": ("   ", 10),
    "inline html": (
        "<rss><channel><item><title>a < b</title><description><p>Hi <b>there</b></i></p> &lt;br&gt;you"
        "</description><link>http://i/</link></item></channel></rss>",
        10,
    ),
    "prefixed atom": (
        '<atom:feed xmlns:atom="http://www.w3.org/2005/Atom"><atom:title>P</atom:title>'
        '<atom:entry><atom:title>E</atom:title><atom:link href="http://p/e"/>'
        "<atom:updated>2021-05-06T07:08:09Z</atom:updated></atom:entry></atom:feed>",
        10,
    ),
    "schemes": (
        '<feed><entry><title>J</title><link href="javascript:alert(1)"/></entry>'
        '<entry><title>R</title><link href="/posts/r"/></entry>'
        '<entry><title>H</title><link href="HTTPS://h/"/></entry></feed>',
        10,
    ),
    "rss without channel": ("<rss><item><title>x</title></item></rss>", 10),
    "html page": ("<html><head><title>x</title></head><body>no feed link</body></html>", 10),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tools = SHIPPED_DIR  # installed by `make js-toolchain`, as make test does
    esbuild = tools / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists():
        pytest.fail(f"the JS toolchain is not installed in {tools}: run `make js-toolchain`")
    work: Path = tmp_path_factory.mktemp("feeds-parser")
    bundled = subprocess.run(
        [
            str(esbuild),
            str(CAPSULES_DIR / "feeds" / "feed.ts"),
            "--bundle",
            "--format=esm",
            f"--outfile={work}/feed.mjs",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bundled.returncode == 0, bundled.stderr
    (work / "driver.mjs").write_text(DRIVER, encoding="utf-8")
    ran = subprocess.run(
        ["node", "driver.mjs"],
        input=json.dumps(list(CASES.values())),
        capture_output=True,
        text=True,
        cwd=work,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    return dict(zip(CASES, json.loads(ran.stdout), strict=True))


def feed(results: dict[str, Any], case: str) -> dict[str, Any]:
    assert "feed" in results[case], results[case]
    return results[case]["feed"]


def titles(results: dict[str, Any], case: str) -> list[str]:
    return [item["title"] for item in feed(results, case)["items"]]


def test_rss_1_0_keeps_its_items_beside_the_channel(results):
    read = feed(results, "rdf")
    assert (read["format"], read["title"], read["link"]) == ("rss", "R", "http://r/")
    assert titles(results, "rdf") == ["A", "B"]
    assert read["items"][0]["date"] == "2020-01-02T03:04:05.000Z" and read["items"][1]["date"] == ""
    assert read["items"][1]["link"] == ""


def test_entities_numeric_named_invalid_and_unknown(results):
    assert feed(results, "entities")["title"] == "\U0001f600 \ufffd &foo; a b é&eacute;"  # &nbsp; counts as whitespace


def test_cdata_is_taken_as_written(results):
    assert feed(results, "cdata")["title"] == "a ]] b <i>&amp;</i>"


def test_a_cut_off_document_keeps_what_arrived(results):
    assert titles(results, "truncated") == ["one", "tw"]


def test_deep_nesting_neither_overflows_nor_passes_as_a_feed(results):
    assert results["deep"] == {"error": "NotAFeed: its root element is <a>, not <rss> or <feed>"}


def test_items_are_bounded(results):
    assert titles(results, "bounded") == ["0", "1", "2", "3", "4"]


def test_doctype_comments_and_processing_instructions_are_skipped(results):
    assert feed(results, "doctype")["title"] == "D"


def test_a_quoted_attribute_may_hold_the_tag_end(results):
    assert feed(results, "quoted")["items"][0]["link"] == 'http://q/a?b=1&c=">"'


def test_summaries_are_clipped_at_a_word(results):
    (item,) = feed(results, "long")["items"]
    assert len(item["summary"]) <= 500 and item["summary"].endswith("word…")
    assert item["title"].endswith("…") and len(item["title"]) <= 80
    assert len(item["text"]) == len("word " * 300) - 1  # the whole text, whitespace collapsed


def test_inline_html_and_stray_end_tags_read_as_text(results):
    (item,) = feed(results, "inline html")["items"]
    assert item["title"] == "a < b"
    assert item["summary"] == "Hi there you"
    assert item["link"] == "http://i/"


def test_links_of_another_scheme_are_dropped_relative_ones_kept(results):
    assert [item["link"] for item in feed(results, "schemes")["items"]] == ["", "/posts/r", "HTTPS://h/"]


def test_atom_elements_may_carry_a_prefix(results):
    read = feed(results, "prefixed atom")
    assert (read["format"], read["title"]) == ("atom", "P")
    assert read["items"] == [
        {"title": "E", "link": "http://p/e", "date": "2021-05-06T07:08:09.000Z", "summary": "", "text": ""}
    ]


def test_what_is_no_feed_says_what_it_is(results):
    assert results["empty"] == {"error": "NotAFeed: the answer is empty"}
    assert results["rss without channel"] == {"error": "NotAFeed: an <rss> without a <channel>"}
    assert results["html page"] == {
        "error": "NotAFeed: its root element is <html>, not <rss> or <feed>: a web page, not its feed"
    }
