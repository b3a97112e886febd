// Declaring a capsule: its resources and templates, and the facts the manifest check reads.
import { Context } from './context.js';
import { authorSite, callerLines } from './site.js';
import { UriTemplate } from './template.js';
import { definition, type Described, type Result } from './wire.js';
import { serve, type HookResult } from './serving.js';

export type Handler = (ctx: Context) => Result | Promise<Result>;
export type Completer = (prefix: string, ctx: Context) => string[];

export interface TemplateOptions extends Described {
  complete?: Record<string, Completer>;
}

export interface Static {
  uri: string;
  described: Described;
  handler: Handler;
  site: number[];
}

export interface Template {
  parsed: UriTemplate;
  described: Described;
  handler: Handler;
  complete: Record<string, Completer>;
  site: number[];
}

export class Capsule {
  readonly statics = new Map<string, Static>();
  readonly templates: Template[] = [];
  /** The reply topics' last segment: the name folded into [a-z0-9_-]. */
  readonly replySuffix: string;

  constructor(readonly name: string) {
    this.replySuffix = name.toLowerCase().replace(/[^a-z0-9_-]/g, '-').slice(0, 64) || 'capsule';
  }

  /** A static resource: `handler(ctx)` returns its text (a string) or bytes (a Uint8Array). */
  resource(uri: string, described: Described, handler: Handler): this {
    if (!/^[a-z][a-z0-9+.-]*:\/\/./.test(uri)) throw new Error(`resource ${uri}: not a URI (astrid://NAME/...)`);
    if (this.statics.has(uri)) throw new Error(`resource ${uri} is declared twice`);
    this.statics.set(uri, { uri, described, handler, site: callerLines() });
    return this;
  }

  /** A template (`astrid://notes/{id}`): `ctx.params` holds its variables; `complete` its completers. */
  template(uriTemplate: string, options: TemplateOptions, handler: Handler): this {
    const parsed = new UriTemplate(uriTemplate);
    const { complete = {}, ...described } = options;
    for (const name of Object.keys(complete)) {
      if (!parsed.variables.some((v) => v.name === name)) throw new Error(`template ${uriTemplate} has no variable ${name}`);
    }
    this.templates.push({ parsed, described, handler, complete, site: callerLines() });
    return this;
  }

  /** The component's export: `export const astridHookTrigger = capsule.handler();`. */
  handler(): (action: string, payload: Uint8Array) => HookResult {
    return (action, payload) => serve(this, action, payload);
  }

  /** The answer to `astrid.facts` (docs/contract/reserved-actions.md). */
  facts(): Record<string, unknown> {
    const sites: Record<string, string> = {};
    for (const s of this.statics.values()) {
      const site = authorSite(s.site);
      if (site) sites[s.uri] = site;
    }
    for (const t of this.templates) {
      const site = authorSite(t.site);
      if (site) sites[t.parsed.text] = site;
    }
    return {
      facts: 1,
      name: this.name,
      resources: [...this.statics.keys()],
      families: [],
      templates: this.templates.map((t) => ({
        uri_template: t.parsed.text,
        literal_prefix: t.parsed.literalPrefix,
        completes: Object.keys(t.complete),
      })),
      handlers: [],
      sites,
    };
  }

  describeBody(): string {
    return JSON.stringify({ resources: [...this.statics.values()].map((s) => definition('uri', s.uri, s.described)) });
  }

  templatesBody(): string {
    return JSON.stringify({
      templates: this.templates.map((t) => definition('uri_template', t.parsed.text, t.described)),
    });
  }
}
