// Declaring a capsule: its resources, families and templates, and the facts the manifest check reads.
import { Context } from './context.js';
import { authorSite, callerLines } from './site.js';
import { UriTemplate } from './template.js';
import { isFlatKey, MAX_URI_BYTES, utf8Length } from './uri.js';
import { definition, type Described, type Result } from './wire.js';
import { serve, type HookResult } from './serving.js';

/** Returns the resource's text (a string) or bytes (a Uint8Array), or a Promise of one. */
export type Handler = (ctx: Context) => Result | Promise<Result>;
export type Completer = (prefix: string, ctx: Context) => string[] | Promise<string[]>;
/** Whether the calling principal sees it (synchronous; a throw hides it). */
export type Visible = (ctx: Context) => boolean;
/** The URIs a family or template lists for the calling principal (describe): a key, a URI, or a Member. */
export type Lister = (ctx: Context) => Iterable<string | Member>;

export interface ResourceOptions extends Described {
  /** The content's size in bytes (before base64), if known: clients may show it. */
  size?: number;
  visible?: Visible;
}

export interface TemplateOptions extends Described {
  complete?: Record<string, Completer>;
  visible?: Visible;
  /** Lists URIs the template serves, so describe shows them (one it does not match is dropped, logged). */
  list?: Lister;
}

export interface FamilyOptions {
  /** Each member's mime type (a Member may give its own). */
  mimeType?: string;
  /** Lists the members the calling principal sees; without one, the family is served but not listed. */
  list?: Lister;
}

/** One listed URI of a family (by `key` or full `uri`) or a template (by `uri`). */
export interface Member extends Described {
  uri?: string;
  key?: string;
  size?: number;
}

export interface Static {
  uri: string;
  described: ResourceOptions;
  handler: Handler;
  visible?: Visible;
  site: number[];
}

export interface Family {
  prefix: string;
  options: FamilyOptions;
  handler: Handler;
  site: number[];
}

export interface Template {
  parsed: UriTemplate;
  described: Described;
  handler: Handler;
  complete: Record<string, Completer>;
  visible?: Visible;
  list?: Lister;
  site: number[];
}

const URI = /^[a-z][a-z0-9+.-]*:\/\/./;

function checkUri(uri: string, what: string): void {
  if (typeof uri !== 'string' || !URI.test(uri)) throw new Error(`${what} ${uri}: not a URI (astrid://NAME/...)`);
  if (utf8Length(uri) > MAX_URI_BYTES) throw new Error(`${what} ${uri.slice(0, 64)}...: over ${MAX_URI_BYTES} bytes`);
}

function checkFunction(value: unknown, what: string, option: string): void {
  if (value !== undefined && typeof value !== 'function') throw new Error(`${what}: ${option} must be a function of ctx`);
}

function checkSize(size: unknown, what: string): void {
  if (size !== undefined && !(Number.isInteger(size) && (size as number) >= 0 && (size as number) < 2 ** 32)) {
    throw new Error(`${what}: size must be an integer from 0 to 2**32-1 (bytes before base64)`);
  }
}

export class Capsule {
  readonly statics = new Map<string, Static>();
  /** Longest prefix first, so a narrower family wins over a wider one. */
  readonly families: Family[] = [];
  readonly templates: Template[] = [];
  /** The reply topics' last segment: the name folded into [a-z0-9_-]. */
  readonly replySuffix: string;

  constructor(readonly name: string) {
    this.replySuffix = name.toLowerCase().replace(/[^a-z0-9_-]/g, '-').slice(0, 64) || 'capsule';
  }

  /** A static resource: `handler(ctx)` returns its text (a string) or bytes (a Uint8Array), or a Promise of one.
   * `visible(ctx)` hides it from the principals it returns false for: not listed, reads unanswered. */
  resource(uri: string, options: ResourceOptions, handler: Handler): this {
    checkUri(uri, 'resource');
    if (this.statics.has(uri)) throw new Error(`resource ${uri} is declared twice`);
    checkSize(options.size, `resource ${uri}`);
    checkFunction(options.visible, `resource ${uri}`, 'visible');
    this.statics.set(uri, { uri, described: options, handler, visible: options.visible, site: callerLines() });
    return this;
  }

  /** A family: every URI `prefix + key` (a flat key: one segment, never `.` or `..`). `ctx.key` is the key;
   * throw NotFound for a key that does not exist. `list(ctx)` names the members describe lists. */
  family(prefix: string, options: FamilyOptions, handler: Handler): this {
    checkUri(prefix, 'family');
    if (this.families.some((f) => f.prefix === prefix)) throw new Error(`family ${prefix} is declared twice`);
    checkFunction(options.list, `family ${prefix}`, 'list');
    this.families.push({ prefix, options, handler, site: callerLines() });
    this.families.sort((a, b) => b.prefix.length - a.prefix.length); // stable: equal prefixes keep their order
    return this;
  }

  /** A template (`astrid://notes/{id}`): `ctx.params` holds its variables; `complete` its completers. */
  template(uriTemplate: string, options: TemplateOptions, handler: Handler): this {
    const parsed = new UriTemplate(uriTemplate);
    const { complete = {}, visible, list, ...described } = options;
    if (this.templates.some((t) => t.parsed.text === uriTemplate)) throw new Error(`template ${uriTemplate} is declared twice`);
    for (const name of Object.keys(complete)) {
      if (!parsed.variables.some((v) => v.name === name)) throw new Error(`template ${uriTemplate} has no variable ${name}`);
    }
    checkFunction(visible, `template ${uriTemplate}`, 'visible');
    checkFunction(list, `template ${uriTemplate}`, 'list');
    this.templates.push({ parsed, described, handler, complete, visible, list, site: callerLines() });
    return this;
  }

  /** The component's export: `export const astridHookTrigger = capsule.handler();`. */
  handler(): (action: string, payload: Uint8Array) => HookResult | Promise<HookResult> {
    return (action, payload) => serve(this, action, payload);
  }

  /** The family owning `uri` (by a flat key) and the key, or null. */
  familyOf(uri: string): { family: Family; key: string } | null {
    if (utf8Length(uri) > MAX_URI_BYTES) return null;
    for (const family of this.families) {
      const key = uri.startsWith(family.prefix) ? uri.slice(family.prefix.length) : null;
      if (key !== null && isFlatKey(key)) return { family, key };
    }
    return null;
  }

  /** The answer to `astrid.facts` (docs/contract/reserved-actions.md). */
  facts(): Record<string, unknown> {
    const sites: Record<string, string> = {};
    const declared: [string, number[]][] = [
      ...[...this.statics.values()].map((s): [string, number[]] => [s.uri, s.site]),
      ...this.families.map((f): [string, number[]] => [f.prefix, f.site]),
      ...this.templates.map((t): [string, number[]] => [t.parsed.text, t.site]),
    ];
    for (const [what, lines] of declared) {
      const site = authorSite(lines);
      if (site) sites[what] = site;
    }
    return {
      facts: 1,
      name: this.name,
      resources: [...this.statics.keys()],
      families: this.families.map((f) => f.prefix),
      templates: this.templates.map((t) => ({
        uri_template: t.parsed.text,
        literal_prefix: t.parsed.literalPrefix,
        completes: Object.keys(t.complete),
      })),
      handlers: [],
      sites,
    };
  }

  /** Whether every verified principal gets the same describe: no `visible`, no lister. */
  describeIsConstant(): boolean {
    return (
      [...this.statics.values()].every((s) => s.visible === undefined) &&
      this.families.every((f) => f.options.list === undefined) &&
      this.templates.every((t) => t.list === undefined)
    );
  }

  /** Whether every verified principal gets the same templates list: no template with `visible`. */
  templatesAreConstant(): boolean {
    return this.templates.every((t) => t.visible === undefined);
  }

  staticDefinitions(): Record<string, unknown>[] {
    return [...this.statics.values()].map((s) => definition('uri', s.uri, s.described));
  }

  templateDefinitions(templates: Template[] = this.templates): Record<string, unknown>[] {
    return templates.map((t) => definition('uri_template', t.parsed.text, t.described));
  }
}
