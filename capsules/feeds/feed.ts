// RSS (2.0, 0.9x and 1.0/RDF) and Atom (1.0) documents read into one shape: the feed's title and
// link, and its items' title, link, date and text. Missing fields are empty strings, never errors.
import { decodeEntities, elements, parseXml, textOf, type XmlElement } from './xml.js';

export interface Item {
  title: string;
  link: string;
  date: string; // ISO 8601 when the feed's date parses, else as the feed wrote it
  summary: string; // plain text, at most SUMMARY_CHARS
  text: string; // the whole text (the item's content when it has one), plain, at most TEXT_CHARS
}

export interface Feed {
  format: 'rss' | 'atom';
  title: string;
  link: string;
  description: string;
  items: Item[];
}

/** The document is not an RSS or Atom feed; the message says what it is instead. */
export class NotAFeed extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotAFeed';
  }
}

const SUMMARY_CHARS = 500;
const TEXT_CHARS = 20_000;

/** The feed in `xml`, with at most `maxItems` items (in the feed's order). */
export function readFeed(xml: string, maxItems: number): Feed {
  const root = parseXml(xml);
  if (root === null) throw new NotAFeed(xml.trim() === '' ? 'the answer is empty' : 'the answer has no XML element');
  if (root.local === 'rss' || root.local === 'rdf') return rss(root, maxItems);
  if (root.local === 'feed') return atom(root, maxItems);
  let message = `its root element is <${root.name}>, not <rss> or <feed>`;
  if (root.local === 'html') {
    const found = advertised(root);
    message += found ? `: a web page, whose feed is ${found}` : ': a web page, not its feed';
  }
  throw new NotAFeed(message);
}

// RSS 2.0 keeps its items in <channel>; RSS 1.0 (RDF) beside it.
function rss(root: XmlElement, maxItems: number): Feed {
  const channel = child(root, 'channel');
  if (channel === undefined) throw new NotAFeed(`an <${root.name}> without a <channel>`);
  const items = [...all(channel, 'item'), ...all(root, 'item')].slice(0, maxItems).map((item) => {
    const description = html(child(item, 'description'));
    const content = html(child(item, 'content:encoded'));
    const guid = child(item, 'guid');
    const permalink = guid !== undefined && guid.attrs.ispermalink !== 'false' && /^https?:\/\//.test(plain(guid));
    const summary = clip(description || content, SUMMARY_CHARS);
    return {
      title: plain(child(item, 'title')) || clip(summary, 80) || '(untitled)',
      link: web(plain(child(item, 'link')) || (permalink ? plain(guid) : '')),
      date: isoDate(plain(child(item, 'pubdate') ?? child(item, 'dc:date'))),
      summary,
      text: clip(content || description, TEXT_CHARS),
    };
  });
  return {
    format: 'rss',
    title: plain(child(channel, 'title')),
    link: web(plain(child(channel, 'link'))),
    description: clip(html(child(channel, 'description')), SUMMARY_CHARS),
    items,
  };
}

// Atom elements are matched by local name: some feeds write them with an `atom:` prefix.
function atom(root: XmlElement, maxItems: number): Feed {
  const items = allLocal(root, 'entry')
    .slice(0, maxItems)
    .map((entry) => {
      const summary = atomText(localChild(entry, 'summary'));
      const content = atomText(localChild(entry, 'content'));
      const short = clip(summary || content, SUMMARY_CHARS);
      return {
        title: atomText(localChild(entry, 'title')) || clip(short, 80) || '(untitled)',
        link: atomLink(entry),
        date: isoDate(plain(localChild(entry, 'published') ?? localChild(entry, 'updated'))),
        summary: short,
        text: clip(content || summary, TEXT_CHARS),
      };
    });
  return {
    format: 'atom',
    title: atomText(localChild(root, 'title')),
    link: atomLink(root),
    description: clip(atomText(localChild(root, 'subtitle')), SUMMARY_CHARS),
    items,
  };
}

function child(element: XmlElement, name: string): XmlElement | undefined {
  return elements(element).find((e) => e.name === name);
}

function all(element: XmlElement, name: string): XmlElement[] {
  return elements(element).filter((e) => e.name === name);
}

function localChild(element: XmlElement, local: string): XmlElement | undefined {
  return elements(element).find((e) => e.local === local);
}

function allLocal(element: XmlElement, local: string): XmlElement[] {
  return elements(element).filter((e) => e.local === local);
}

// The page an entry or feed points at: rel="alternate" (or no rel), else its first link.
function atomLink(element: XmlElement): string {
  const links = allLocal(element, 'link');
  const page = links.find((l) => (l.attrs.rel ?? 'alternate') === 'alternate') ?? links[0];
  return web((page?.attrs.href ?? '').trim());
}

// A link as a client may show it: http(s) or relative; another scheme (`javascript:`, `data:`) from an
// untrusted feed is dropped.
function web(link: string): string {
  return /^[a-z][a-z0-9+.-]*:/i.test(link) && !/^https?:/i.test(link) ? '' : link;
}

// An Atom text construct: type="html" is escaped HTML, "xhtml" inline markup, else plain text.
function atomText(element: XmlElement | undefined): string {
  if (element === undefined) return '';
  return element.attrs.type === 'html' || element.attrs.type === 'xhtml' ? html(element) : plain(element);
}

// The element's text with whitespace collapsed.
function plain(element: XmlElement | undefined): string {
  return element === undefined ? '' : squeeze(textOf(element));
}

// RSS descriptions are HTML, escaped or in CDATA (or, carelessly, inline): its text, tags dropped.
function html(element: XmlElement | undefined): string {
  if (element === undefined) return '';
  const markup = textOf(element)
    .replace(/<(script|style)\b[\s\S]*?<\/\1\s*>/gi, ' ')
    .replace(/<!--[\s\S]*?-->/g, ' ')
    .replace(/<\/?(p|div|br|li|h[1-6]|tr|blockquote)\b[^>]*>/gi, ' ')
    .replace(/<[^>]*>/g, '');
  return squeeze(decodeEntities(markup));
}

function squeeze(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

// At most `limit` characters, cut at a word when one ends near the limit.
function clip(text: string, limit: number): string {
  if (text.length <= limit) return text;
  const cut = text.slice(0, limit - 1);
  const space = cut.lastIndexOf(' ');
  return `${space > limit * 0.8 ? cut.slice(0, space) : cut}…`;
}

function isoDate(text: string): string {
  if (text === '') return '';
  const time = Date.parse(text);
  return Number.isNaN(time) ? text : new Date(time).toISOString();
}

// A web page names its feeds in <link rel="alternate" type="application/rss+xml" href="...">.
function advertised(element: XmlElement): string {
  for (const e of elements(element)) {
    const type = e.attrs.type ?? '';
    if (e.local === 'link' && /alternate/i.test(e.attrs.rel ?? '') && /(rss|atom)\+xml/i.test(type)) {
      return e.attrs.href ?? '';
    }
    const deeper = advertised(e);
    if (deeper) return deeper;
  }
  return '';
}
