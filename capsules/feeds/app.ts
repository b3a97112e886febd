// The feeds capsule: the RSS and Atom feeds the operator chooses, fetched through the granted `http`
// hosts, as resources.
//
//   astrid://feeds/index          the configured feeds (JSON): name, URL, URI, the grant that serves it
//   astrid://feeds/{feed}         a feed's items (JSON): title, link, date, summary; completion offers names
//   astrid://feeds/{feed}/{item}  one item (Markdown) by its position, 1 the first the feed lists
//
// The operator chooses the feeds in Capsule.toml ([config.feeds] name = URL), lists their hosts under
// [capabilities] http, and grants each host: `astrid capsule grant feeds http:github.com`. Every read
// fetches the feed anew; a refusal, an unreachable host or a document that is no feed is the read's
// error, naming the fix.
import { Capsule, HostError, type Context } from '@astrid/sdk';
import { NotAFeed, readFeed, type Feed, type Item } from './feed.js';

const capsule = new Capsule('feeds');
const PREFIX = 'astrid://feeds/';
const INDEX = `${PREFIX}index`;
const MAX_FEED_BYTES = 2 * 1024 * 1024; // the host caps an answer at 4 MiB; a feed is far smaller
const DEFAULT_ITEMS = 30;
const MAX_ITEMS = 200;
const NAME = /^[A-Za-z0-9_-]{1,64}$/;

interface Configured {
  name: string;
  url: string;
}

interface Config {
  feeds: Configured[];
  problems: string[]; // configuration mistakes, each saying what to change
}

/** A read that cannot be served: the message is the whole story, for the operator. */
class FeedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FeedError';
  }
}

function config(ctx: Context): Config {
  const raw = ctx.config('feeds');
  if (raw === undefined) {
    return { feeds: [], problems: ['no feeds: add a [config.feeds] table (name = "URL") to the Capsule.toml of feeds'] };
  }
  let table: unknown = raw;
  try {
    table = JSON.parse(raw); // a TOML table reaches the capsule as JSON
  } catch {
    // a plain string: reported below as not a table
  }
  if (table === null || typeof table !== 'object' || Array.isArray(table)) {
    return { feeds: [], problems: ['[config] feeds must be a table: [config.feeds] then one name = "URL" a line'] };
  }
  const feeds: Configured[] = [];
  const problems: string[] = [];
  for (const [name, url] of Object.entries(table)) {
    if (!NAME.test(name) || name === 'index') {
      problems.push(`feed name ${JSON.stringify(name)}: use letters, digits, - and _ (and not "index")`);
    } else if (typeof url !== 'string' || hostOf(url) === null) {
      problems.push(`feed ${name}: ${JSON.stringify(url)} is not an http:// or https:// URL`);
    } else {
      feeds.push({ name, url });
    }
  }
  return { feeds, problems };
}

function maxItems(ctx: Context): number {
  const wanted = Number(ctx.config('max-items') ?? DEFAULT_ITEMS);
  return Number.isInteger(wanted) && wanted > 0 ? Math.min(wanted, MAX_ITEMS) : DEFAULT_ITEMS;
}

// `https://host[:port]/...` -> `host[:port]`, `http://...` -> `http://host[:port]`: the grant's spelling.
function hostOf(url: string): string | null {
  const found = /^(https?):\/\/([^/?#\s@]+)(?:[/?#]|$)/i.exec(url.trim());
  if (found === null) return null;
  return found[1].toLowerCase() === 'https' ? found[2].toLowerCase() : `http://${found[2].toLowerCase()}`;
}

function grantCommand(url: string): string {
  return `astrid capsule grant feeds http:${hostOf(url)}`;
}

function configuredFeed(ctx: Context, name: string): Configured {
  const { feeds, problems } = config(ctx);
  const found = feeds.find((f) => f.name === name);
  if (found !== undefined) return found;
  const known = feeds.length ? feeds.map((f) => f.name).join(', ') : 'none';
  const why = problems.length ? `; ${problems.join('; ')}` : '';
  throw new FeedError(`no feed named ${name} (configured: ${known}); add it under [config.feeds] in Capsule.toml${why}`);
}

function fetchFeed(ctx: Context, feed: Configured): Feed {
  const where = `feed ${feed.name} (${feed.url})`;
  let answer;
  try {
    answer = ctx.http.get(feed.url, {
      accept: 'application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5',
      'user-agent': 'astrid-feeds/1.0',
    });
  } catch (error) {
    if (!(error instanceof HostError)) throw error;
    const fix = error.code === 'capability-denied' ? '' : `; check the URL, or that ${hostOf(feed.url)} is up`;
    throw new FeedError(`${where}: ${error.message}${fix}`);
  }
  if (answer.status < 200 || answer.status > 299) {
    throw new FeedError(`${where}: the server answered HTTP ${answer.status}; check the URL under [config.feeds]`);
  }
  try {
    return readFeed(decode(answer.body.subarray(0, MAX_FEED_BYTES)), maxItems(ctx));
  } catch (error) {
    if (!(error instanceof NotAFeed)) throw error;
    throw new FeedError(`${where} is not an RSS or Atom feed: ${error.message}; check the URL under [config.feeds]`);
  }
}

// UTF-8 unless the XML declaration names a Latin encoding (read byte for byte as Latin-1).
function decode(body: Uint8Array): string {
  const head = String.fromCharCode(...body.subarray(0, 200));
  if (/^\s*<\?xml[^>]*encoding=["'](iso-8859-1|latin-?1|windows-1252|us-ascii)["']/i.test(head)) {
    let text = '';
    for (let i = 0; i < body.length; i += 8192) text += String.fromCharCode(...body.subarray(i, i + 8192));
    return text;
  }
  return new TextDecoder().decode(body);
}

// Completion of {feed}: the configured names starting with what the client typed.
function feedNames(prefix: string, ctx: Context): string[] {
  return config(ctx)
    .feeds.map((f) => f.name)
    .filter((name) => name.startsWith(prefix));
}

capsule.resource(
  INDEX,
  {
    name: 'feeds',
    title: 'Feeds',
    description: 'The RSS and Atom feeds configured for this capsule, each read at astrid://feeds/NAME',
    mimeType: 'application/json',
  },
  (ctx) => {
    const { feeds, problems } = config(ctx);
    const listed = feeds.map((f) => ({ name: f.name, url: f.url, uri: PREFIX + f.name, grant: grantCommand(f.url) }));
    return JSON.stringify({ feeds: listed, problems }, null, 2);
  },
);

capsule.template(
  `${PREFIX}{feed}`,
  {
    name: 'feed',
    title: 'A feed',
    description: "A configured RSS or Atom feed's items, fetched now: title, link, date and summary of each",
    mimeType: 'application/json',
    complete: { feed: feedNames },
  },
  (ctx) => {
    const feed = configuredFeed(ctx, ctx.params.feed);
    const read = fetchFeed(ctx, feed);
    const items = read.items.map(({ title, link, date, summary }, i) => ({
      title,
      link,
      date,
      summary,
      uri: `${PREFIX}${feed.name}/${i + 1}`,
    }));
    const { format, title, link, description } = read;
    return JSON.stringify({ feed: feed.name, url: feed.url, format, title, link, description, items }, null, 2);
  },
);

capsule.template(
  `${PREFIX}{feed}/{item}`,
  {
    name: 'feed-item',
    title: 'A feed item',
    description: 'One item of a configured feed, by its position (1 is the first the feed lists), with its whole text',
    mimeType: 'text/markdown',
    complete: { feed: feedNames },
  },
  (ctx) => {
    const feed = configuredFeed(ctx, ctx.params.feed);
    const position = Number(ctx.params.item);
    const items = fetchFeed(ctx, feed).items;
    if (!Number.isInteger(position) || position < 1 || position > items.length) {
      throw new FeedError(`feed ${feed.name} has items 1 to ${items.length}, not ${JSON.stringify(ctx.params.item)}`);
    }
    return markdown(items[position - 1]);
  },
);

function markdown(item: Item): string {
  const about = [item.link && `<${item.link}>`, item.date].filter(Boolean).join(' · ');
  return `# ${item.title}\n\n${about ? `${about}\n\n` : ''}${item.text}\n`;
}

// The entry point componentize-js exports; keep this line last.
export const astridHookTrigger = capsule.handler();
