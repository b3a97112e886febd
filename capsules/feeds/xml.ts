// A small, forgiving XML reader, just enough for RSS and Atom feeds (no Node built-ins, no npm
// packages): elements, attributes, text, CDATA and entities. Comments, processing instructions and
// DOCTYPEs are skipped; a stray end tag is ignored and an unclosed element ends with its parent, so
// the HTML that feeds carry unescaped reads as text instead of failing the whole feed.

export interface XmlElement {
  name: string; // as written, lower-cased: `content:encoded`
  local: string; // without its prefix: `encoded`
  attrs: Record<string, string>; // names lower-cased, values with entities decoded
  nodes: (XmlElement | string)[]; // children and text, in document order
}

// Bounds on what one document may cost: a feed is a few hundred elements, not millions.
const MAX_DEPTH = 64;
const MAX_ELEMENTS = 50_000;
// HTML's elements that never have content (`<br>`), so a web page or inline HTML nests sanely; not
// `link`, which RSS fills with text.
const VOID = new Set(['area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'meta', 'param', 'source', 'wbr']);

const NAMED: Record<string, string> = {
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0',
  hellip: '\u2026', mdash: '\u2014', ndash: '\u2013', lsquo: '\u2018', rsquo: '\u2019',
  ldquo: '\u201c', rdquo: '\u201d', laquo: '\u00ab', raquo: '\u00bb', bull: '\u2022',
  middot: '\u00b7', copy: '\u00a9', reg: '\u00ae', trade: '\u2122', euro: '\u20ac', deg: '\u00b0',
};

/** `&amp;`, `&#233;`, `&#xE9;` and the common HTML names decoded; an unknown name is left as written. */
export function decodeEntities(text: string): string {
  if (!text.includes('&')) return text;
  return text.replace(/&(#[xX][0-9a-fA-F]{1,6}|#[0-9]{1,7}|[A-Za-z][A-Za-z0-9]{1,31});/g, (whole, body: string) => {
    if (body[0] !== '#') return NAMED[body] ?? NAMED[body.toLowerCase()] ?? whole;
    const code = body[1] === 'x' || body[1] === 'X' ? parseInt(body.slice(2), 16) : parseInt(body.slice(1), 10);
    const valid = code > 0 && code <= 0x10ffff && !(code >= 0xd800 && code <= 0xdfff);
    return valid ? String.fromCodePoint(code) : '\ufffd';
  });
}

/** The document's root element (the first element at the top level), or null when there is none.
 * Never throws: whatever the input, the result is a tree (maybe not the one meant). */
export function parseXml(source: string): XmlElement | null {
  const top: XmlElement = { name: '', local: '', attrs: {}, nodes: [] };
  const open: XmlElement[] = [top];
  let elements = 0;
  let at = 0;
  const text = (value: string) => {
    if (value === '') return;
    const nodes = open[open.length - 1].nodes;
    const last = nodes.length - 1;
    if (last >= 0 && typeof nodes[last] === 'string') nodes[last] += value;
    else nodes.push(value);
  };
  while (at < source.length) {
    const lt = source.indexOf('<', at);
    if (lt < 0) {
      text(decodeEntities(source.slice(at)));
      break;
    }
    text(decodeEntities(source.slice(at, lt)));
    if (source.startsWith('<![CDATA[', lt)) {
      const end = until(source, ']]>', lt + 9);
      text(source.slice(lt + 9, end));
      at = end + 3;
    } else if (source.startsWith('<!--', lt)) {
      at = until(source, '-->', lt + 4) + 3;
    } else if (source.startsWith('<?', lt)) {
      at = until(source, '?>', lt + 2) + 2;
    } else if (source.startsWith('<!', lt)) {
      at = doctypeEnd(source, lt) + 1;
    } else if (source.startsWith('</', lt)) {
      const end = until(source, '>', lt + 2);
      close(open, source.slice(lt + 2, end).trim().toLowerCase());
      at = end + 1;
    } else {
      const end = tagEnd(source, lt + 1);
      const tag = /^([A-Za-z_][\w.:-]*)/.exec(source.slice(lt + 1, Math.min(end, lt + 200)));
      if (tag === null) {
        text('<'); // `a < b` in careless text: not a tag
        at = lt + 1;
        continue;
      }
      if (++elements > MAX_ELEMENTS) break; // the rest of an enormous document is dropped, not parsed
      const body = source.slice(lt + 1 + tag[1].length, end);
      const name = tag[1].toLowerCase();
      const element: XmlElement = { name, local: name.slice(name.indexOf(':') + 1), attrs: attributes(body), nodes: [] };
      open[open.length - 1].nodes.push(element);
      // Past MAX_DEPTH an element is kept empty (its content reads as its parent's): bounded recursion.
      if (!body.endsWith('/') && !VOID.has(name) && open.length <= MAX_DEPTH) open.push(element);
      at = end + 1;
    }
  }
  return top.nodes.find((node): node is XmlElement => typeof node !== 'string') ?? null;
}

// The index of `marker` from `from`, or the end of the source when it never comes (a cut-off document).
function until(source: string, marker: string, from: number): number {
  const found = source.indexOf(marker, from);
  return found < 0 ? source.length : found;
}

// The `>` ending a start tag, skipping any inside quoted attribute values.
function tagEnd(source: string, from: number): number {
  let quote = '';
  for (let i = from; i < source.length; i++) {
    const c = source[i];
    if (quote) {
      if (c === quote) quote = '';
    } else if (c === '"' || c === "'") {
      quote = c;
    } else if (c === '>') {
      return i;
    }
  }
  return source.length;
}

// A `<!DOCTYPE ...>`, whose internal subset `[...]` may hold `>` of its own.
function doctypeEnd(source: string, from: number): number {
  const close = until(source, '>', from);
  const bracket = source.indexOf('[', from);
  if (bracket < 0 || bracket > close) return close;
  return until(source, '>', until(source, ']', bracket));
}

function attributes(body: string): Record<string, string> {
  const attrs: Record<string, string> = {};
  const pair = /([^\s=/"'<>]+)\s*(?:=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?/g;
  for (const found of body.matchAll(pair)) {
    attrs[found[1].toLowerCase()] = decodeEntities(found[2] ?? found[3] ?? found[4] ?? '');
  }
  return attrs;
}

// An end tag closes the innermost open element of its name and any left open inside it.
function close(open: XmlElement[], name: string): void {
  for (let i = open.length - 1; i > 0; i--) {
    if (open[i].name === name) {
      open.length = i;
      return;
    }
  }
}

/** The element children of `element`. */
export function elements(element: XmlElement): XmlElement[] {
  return element.nodes.filter((node): node is XmlElement => typeof node !== 'string');
}

/** All the text inside `element`, its descendants' included, in document order. */
export function textOf(element: XmlElement): string {
  return element.nodes.map((node) => (typeof node === 'string' ? node : textOf(node))).join('');
}
