"""The bundled feeds capsule (TypeScript) end to end: a real MCP client on `astrid mcp serve` over stdio.

Its own build (componentize-js, from the build cache after the first run), then what an operator does:
Capsule.toml edited to name the feeds and ask for their host (no rebuild), the host granted while the
server runs. A tiny HTTP server on loopback serves an RSS 2.0 and an Atom feed, a Latin-1 one, a web page, a
document that is no feed and a 404; another port has nothing listening.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from mcp import types

from astrid.capsules import CAPSULES_DIR
from astrid.host.capabilities.grants import GrantStore
from astrid.host.settings import CONFIG_DIR_ENV, DATA_DIR_ENV
from tests.support.capsules import build_clean
from tests.support.processes import free_port, server_env
from tests.support.stdio import StdioSession, stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RSS = """\
<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom" xmlns:content="http://purl.org/rss/1.0/modules/content/">
<channel>
  <title>Loopback &amp; Friends</title>
  <atom:link href="http://example.invalid/self" rel="self" type="application/rss+xml"/>
  <link>http://example.invalid/</link>
  <description>A feed for tests</description>
  <item>
    <title><![CDATA[First <post> & more]]></title>
    <link>http://example.invalid/1</link>
    <pubDate>Tue, 10 Jun 2003 04:00:00 GMT</pubDate>
    <description>&lt;p&gt;Caf&#233; &amp;amp; <![CDATA[<b>bold</b> text]]>&lt;/p&gt;</description>
    <content:encoded><![CDATA[<p>The whole story, with <a href="x">a link</a>.</p>]]></content:encoded>
  </item>
  <item>
    <description>An item with neither title nor link nor date</description>
    <guid>http://example.invalid/2</guid>
  </item>
</channel>
</rss>
"""

ATOM = """\
<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title type="text">Atom on loopback</title>
  <link rel="self" href="http://example.invalid/atom.xml"/>
  <link href="http://example.invalid/blog"/>
  <entry>
    <title type="html">Entry &amp;lt;one&amp;gt;</title>
    <link rel="alternate" href="http://example.invalid/e1"/>
    <updated>2024-02-03T10:20:30+01:00</updated>
    <summary type="html">&lt;p&gt;Hello &amp;amp; welcome&lt;/p&gt;</summary>
  </entry>
  <entry>
    <title>Entry two</title>
    <link href="http://example.invalid/e2"/>
    <published>not a date</published>
    <content type="xhtml"><div xmlns="http://www.w3.org/1999/xhtml"><p>Inline <em>xhtml</em></p></div></content>
  </entry>
</feed>
"""

PAGE = """\
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Blog</title>
<link rel="alternate" type="application/atom+xml" href="http://example.invalid/feed.atom">
</head><body><p>Hi<br>there</p></body></html>
"""

LATIN1 = '<?xml version="1.0" encoding="ISO-8859-1"?><rss><channel><title>Caf\u00e9 \u00bb</title></channel></rss>'

ROUTES: dict[str, tuple[int, str, bytes]] = {
    "/rss.xml": (200, "application/rss+xml", RSS.encode()),
    "/atom.xml": (200, "application/atom+xml", ATOM.encode()),
    "/page.html": (200, "text/html", PAGE.encode()),
    "/latin1.xml": (200, "application/xml", LATIN1.encode("latin-1")),
    "/plain.txt": (200, "text/plain", b"hello, no markup at all"),
}


@contextmanager
def feed_server() -> Iterator[int]:
    """The feeds above on 127.0.0.1 (a free port); any other path is a 404."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            status, kind, payload = ROUTES.get(self.path, (404, "text/plain", b"not here"))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def built_feeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """capsules/feeds as shipped, built clean (the build cache serves it after the first run)."""
    return build_clean(CAPSULES_DIR / "feeds", tmp_path_factory.mktemp("feeds") / "feeds").folder


def configure(folder: Path, port: int, closed: int) -> None:
    """What the operator does in Capsule.toml: the feeds under [config.feeds], their host under http."""
    manifest = (folder / "Capsule.toml").read_text(encoding="utf-8")
    shipped_ask = 'http = ["github.com"]'
    assert shipped_ask in manifest and "\n[config.feeds]\n" in manifest
    manifest = manifest.replace(shipped_ask, 'http = ["http://127.0.0.1"]')  # any port: see the grants
    base = f"http://127.0.0.1:{port}"
    feeds = {
        "rss": f"{base}/rss.xml",
        "atom": f"{base}/atom.xml",
        "page": f"{base}/page.html",
        "plain": f"{base}/plain.txt",
        "latin1": f"{base}/latin1.xml",
        "gone": f"{base}/gone.xml",
        "down": f"http://127.0.0.1:{closed}/rss.xml",  # nothing listens there
        "elsewhere": f"http://localhost:{port}/rss.xml",  # a host Capsule.toml does not ask for
        "bad name": f"{base}/rss.xml",
        "ftp": "ftp://example.invalid/feed",
    }
    table = "".join(f"{json.dumps(name)} = {json.dumps(url)}\n" for name, url in feeds.items())
    manifest = manifest[: manifest.index("\n[config.feeds]\n")] + "\n[config.feeds]\n" + table
    (folder / "Capsule.toml").write_text(manifest, encoding="utf-8")


async def error_of(served: StdioSession, uri: str) -> str:
    message = (await served.error(uri)).error.message
    assert "\n" not in message and "Traceback" not in message, message
    return message


async def test_feeds_are_listed_completed_read_and_refused_clearly(
    built_feeds: Path, tmp_path: Path, capsule_home: Path, stderr_file: Path
) -> None:
    user = {CONFIG_DIR_ENV: str(tmp_path / "config"), DATA_DIR_ENV: str(tmp_path / "data")}
    with feed_server() as port:
        folder = tmp_path / "feeds"
        folder.mkdir()
        for path in built_feeds.iterdir():
            if path.is_file():
                (folder / path.name).write_bytes(path.read_bytes())
        closed = free_port()
        configure(folder, port, closed)
        grant = f"http:http://127.0.0.1:{port}"
        env = server_env(capsule_home, **user)
        async with stdio_session(folder, capsule_home=capsule_home, stderr=stderr_file, env=env) as served:
            # the index: the configured feeds, the grant each needs, and the configuration's mistakes
            with anyio.fail_after(120):
                index = json.loads(await served.text("astrid://feeds/index"))
            names = ["rss", "atom", "page", "plain", "latin1", "gone", "down", "elsewhere"]
            assert [f["name"] for f in index["feeds"]] == names
            assert index["feeds"][0] == {
                "name": "rss",
                "url": f"http://127.0.0.1:{port}/rss.xml",
                "uri": "astrid://feeds/rss",
                "grant": f"astrid capsule grant feeds {grant}",
            }
            assert len(index["problems"]) == 2
            assert '"bad name"' in index["problems"][0] and '"ftp://example.invalid/feed"' in index["problems"][1]
            assert "astrid://feeds/index" in await served.uris()

            templates = (await served.session.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["astrid://feeds/{feed}", "astrid://feeds/{feed}/{item}"]
            reference = types.ResourceTemplateReference(type="ref/resource", uri="astrid://feeds/{feed}")
            offered = await served.session.complete(reference, argument={"name": "feed", "value": ""})
            assert offered.completion.values == names
            offered = await served.session.complete(reference, argument={"name": "feed", "value": "a"})
            assert offered.completion.values == ["atom"]

            # asked for but not granted yet: the error names the command that grants it
            message = await error_of(served, "astrid://feeds/rss")
            assert f"astrid capsule grant feeds {grant}" in message and "feed rss" in message, message

            grants = GrantStore(tmp_path / "config" / "grants.json")
            grants.grant("feeds", grant)  # no restart
            grants.grant("feeds", f"http:http://127.0.0.1:{closed}")

            rss = json.loads(await served.text("astrid://feeds/rss"))
            assert (rss["format"], rss["title"], rss["link"]) == (
                "rss",
                "Loopback & Friends",
                "http://example.invalid/",
            )
            first, second = rss["items"]
            assert first == {
                "title": "First <post> & more",
                "link": "http://example.invalid/1",
                "date": "2003-06-10T04:00:00.000Z",
                "summary": "Café & bold text",
                "uri": "astrid://feeds/rss/1",
            }
            assert second["title"] == "An item with neither title nor link nor date"
            assert (second["link"], second["date"]) == ("http://example.invalid/2", "")

            atom = json.loads(await served.text("astrid://feeds/atom"))
            assert (atom["format"], atom["title"], atom["link"]) == (
                "atom",
                "Atom on loopback",
                "http://example.invalid/blog",
            )
            one, two = atom["items"]
            assert (one["title"], one["link"]) == ("Entry <one>", "http://example.invalid/e1")
            assert one["summary"] == "Hello & welcome"
            assert one["date"] == "2024-02-03T09:20:30.000Z"
            assert (two["title"], two["date"], two["summary"]) == ("Entry two", "not a date", "Inline xhtml")

            assert json.loads(await served.text("astrid://feeds/latin1"))["title"] == "Café »"  # declared, not UTF-8

            item = await served.text("astrid://feeds/rss/1")
            assert item.startswith("# First <post> & more\n\n<http://example.invalid/1> · 2003-06-10T04:00:00.000Z\n")
            assert "The whole story, with a link." in item
            assert "items 1 to 2" in await error_of(served, "astrid://feeds/rss/3")

            # what is not a feed, or not there, says so and what to check
            page = await error_of(served, "astrid://feeds/page")
            assert "is not an RSS or Atom feed" in page and "http://example.invalid/feed.atom" in page, page
            plain = await error_of(served, "astrid://feeds/plain")
            assert "is not an RSS or Atom feed" in plain and "no XML element" in plain, plain
            gone = await error_of(served, "astrid://feeds/gone")
            assert "HTTP 404" in gone and "[config.feeds]" in gone, gone
            down = await error_of(served, "astrid://feeds/down")
            assert "connection-error" in down and f"that http://127.0.0.1:{closed} is up" in down, down
            unknown = await error_of(served, "astrid://feeds/nope")
            assert "no feed named nope" in unknown and "rss, atom" in unknown, unknown
            # a host the manifest does not ask for: a grant alone would not do, the error says what to add
            elsewhere = await error_of(served, "astrid://feeds/elsewhere")
            assert "Capsule.toml does not ask for it" in elsewhere and "http://localhost" in elsewhere, elsewhere

            # the server kept serving through every refusal
            assert json.loads(await served.text("astrid://feeds/atom"))["items"][0]["title"] == "Entry <one>"

            # a feed added to Capsule.toml while the server runs: no rebuild, no restart
            manifest = folder / "Capsule.toml"
            manifest.write_text(manifest.read_text() + f'more = "http://127.0.0.1:{port}/atom.xml"\n')
            with anyio.fail_after(60):
                while "more" not in [f["name"] for f in json.loads(await served.text("astrid://feeds/index"))["feeds"]]:
                    await anyio.sleep(0.2)
            assert json.loads(await served.text("astrid://feeds/more"))["title"] == "Atom on loopback"
