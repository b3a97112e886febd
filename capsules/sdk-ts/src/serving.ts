// Answering the host's calls (docs/contract/reserved-actions.md, resources.md, templates.md):
// the reserved actions first, then the principal check, then the author's code. Never throws, and a
// Promise it returns never rejects: componentize-js runs the event loop until it settles, and a
// rejected (or never settled) export would be a trap.
import { publish } from 'astrid:ipc/host@1.0.0';
import { getCaller } from 'astrid:sys/host@1.0.0';
import type { Capsule, Handler, Lister, Member, Template, Visible } from './capsule.js';
import { Context, hostLog } from './context.js';
import { NotFound } from './errors.js';
import { settle, SPIN_MS, Unsettled } from './settle.js';
import { authorSite, describeError } from './site.js';
import { utf8Length } from './uri.js';
import { completeError, completeReply, definition, readError, readReply, type Result } from './wire.js';

export interface HookResult {
  action: string;
  data?: string;
}

const NOT_VERIFIED = 'principal not verified';
const MAX_COMPLETION_VALUES = 100;
const MAX_ERROR_CHARS = 1000;
const MAX_RESOURCES_PER_DESCRIBE = 256;
const MAX_TEMPLATES_PER_DESCRIBE = 64;
const MAX_MESSAGE_BYTES = 1024 * 1024;

export function serve(capsule: Capsule, action: string, payload: Uint8Array): HookResult | Promise<HookResult> {
  try {
    switch (action) {
      case 'astrid.facts': // declarations only: before (and without) any principal check
        return { action: 'final', data: JSON.stringify(capsule.facts()) };
      case 'astrid.static':
        return { action: 'final', data: JSON.stringify(staticReplies(capsule)) };
      case 'describe':
        return describe(capsule);
      case 'templates':
        return templates(capsule);
      case 'read':
        return read(capsule, request(payload));
      case 'complete':
        return complete(capsule, request(payload));
      default:
        hostLog('warn', `no handler named ${action} (bind describe, read, templates or complete)`);
        return { action: 'continue', data: `unknown handler ${action}` };
    }
  } catch (error) {
    const text = short(describeError(error));
    hostLog('error', `${action}: ${text}`);
    return { action: 'error', data: text };
  }
}

// Declarations only, no user code: null where the reply may depend on who asks (a `visible`, a lister).
function staticReplies(capsule: Capsule): Record<string, unknown> {
  const reply = (kind: string, payload: string) => ({ topic: `resource.v1.response.${kind}.${capsule.replySuffix}`, payload });
  return {
    static: 1,
    describe: capsule.describeIsConstant() ? reply('describe', describeBody(capsule.staticDefinitions())) : null,
    templates: capsule.templatesAreConstant()
      ? reply('templates', templatesBody(capsule.templateDefinitions()))
      : null,
  };
}

function verified(): string | null {
  const caller = getCaller();
  return caller.attribution.tag === 'verified' && caller.attribution.val ? caller.attribution.val : null;
}

function context(capsule: Capsule, principal: string, uri = ''): Context {
  return new Context(principal, uri, capsule.name);
}

/** `visible(ctx)`, failing closed: a throw or an answer that is not a boolean hides it (logged). */
function isVisible(visible: Visible | undefined, ctx: Context, what: string): boolean {
  if (visible === undefined) return true;
  try {
    const seen = visible(ctx);
    if (typeof seen === 'boolean') return seen;
    hostLog('error', `${what}: visible() returned ${seen instanceof Promise ? 'a Promise' : typeof seen}, not a boolean; hidden`);
  } catch (error) {
    hostLog('error', `${what}: visible() raised ${describeError(error)}; hidden`);
  }
  return false;
}

function describe(capsule: Capsule): HookResult {
  const principal = verified();
  if (principal === null) return { action: 'deny', data: NOT_VERIFIED };
  const listed = capsule.describeIsConstant() ? capsule.staticDefinitions() : listedFor(capsule, context(capsule, principal));
  const body = describeBody(listed);
  publish(`resource.v1.response.describe.${capsule.replySuffix}`, body);
  return { action: 'final', data: `${listed.length} resources` };
}

// What this principal sees: visible statics, then each lister's members (a URI is listed once).
function listedFor(capsule: Capsule, ctx: Context): Record<string, unknown>[] {
  const listed = new Map<string, Record<string, unknown>>();
  for (const s of capsule.statics.values()) {
    if (isVisible(s.visible, ctx, `describe ${s.uri}`)) listed.set(s.uri, definition('uri', s.uri, s.described));
  }
  for (const f of capsule.families) {
    const owns = (uri: string) => capsule.familyOf(uri)?.family === f;
    listMembers(f.options.list, ctx, f.prefix, owns, f.options.mimeType, listed);
  }
  for (const t of capsule.templates) {
    if (t.list === undefined || !isVisible(t.visible, ctx, `describe ${t.parsed.text}`)) continue;
    listMembers(t.list, ctx, '', (uri) => t.parsed.match(uri) !== null, t.described.mimeType, listed, t.parsed.text);
  }
  return [...listed.values()];
}

function listMembers(
  lister: Lister | undefined,
  ctx: Context,
  prefix: string,
  serves: (uri: string) => boolean,
  mimeType: string | undefined,
  into: Map<string, Record<string, unknown>>,
  what = prefix,
): void {
  if (lister === undefined) return;
  let items: (string | Member)[];
  try {
    items = [...lister(ctx)];
  } catch (error) {
    hostLog('error', `describe: lister of ${what} raised ${describeError(error)}`);
    return;
  }
  for (const item of items) {
    const member: Member = typeof item === 'string' ? { key: item } : (item ?? {});
    const given = member.uri ?? member.key ?? '';
    const uri = typeof given === 'string' && prefix && !given.startsWith(prefix) ? prefix + given : given;
    if (typeof uri !== 'string' || !serves(uri)) {
      hostLog('warn', `describe: dropped ${JSON.stringify(item)}, not a URI ${what} serves`);
      continue;
    }
    const name = member.name ?? (prefix ? uri.slice(prefix.length) : uri);
    if (!into.has(uri)) into.set(uri, definition('uri', uri, { mimeType, ...member, name }));
  }
}

function templates(capsule: Capsule): HookResult {
  const principal = verified();
  if (principal === null) return { action: 'deny', data: NOT_VERIFIED };
  const ctx = context(capsule, principal);
  const shown = capsule.templates.filter((t) => isVisible(t.visible, ctx, `templates ${t.parsed.text}`));
  publish(`resource.v1.response.templates.${capsule.replySuffix}`, templatesBody(capsule.templateDefinitions(shown)));
  return { action: 'final', data: `${Math.min(shown.length, MAX_TEMPLATES_PER_DESCRIBE)} templates` };
}

function describeBody(listed: Record<string, unknown>[]): string {
  return bounded(listed, MAX_RESOURCES_PER_DESCRIBE, 'describe', (kept) => ({ resources: kept }));
}

function templatesBody(listed: Record<string, unknown>[]): string {
  return bounded(listed, MAX_TEMPLATES_PER_DESCRIBE, 'templates', (kept) => ({ templates: kept }));
}

/** The reply's JSON with at most `most` entries, then cut below the bus message limit (logged). */
function bounded(listed: unknown[], most: number, what: string, reply: (kept: unknown[]) => unknown): string {
  let kept = listed.slice(0, most);
  if (listed.length > most) hostLog('warn', `${what}: ${listed.length} entries, only the first ${most} are listed`);
  let body = JSON.stringify(reply(kept));
  while (utf8Length(body) > MAX_MESSAGE_BYTES && kept.length > 0) {
    kept = kept.slice(0, kept.length - Math.max(1, Math.floor(kept.length / 10)));
    hostLog('warn', `${what}: reply over 1 MiB, listing ${kept.length}`);
    body = JSON.stringify(reply(kept));
  }
  return body;
}

function request(payload: Uint8Array): Record<string, unknown> | null {
  try {
    const value = JSON.parse(new TextDecoder().decode(payload));
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : null;
  } catch {
    return null; // not JSON: the caller answers "bad request"
  }
}

function cleanId(value: unknown): value is string {
  return typeof value === 'string' && /^[A-Za-z0-9_-]{1,128}$/.test(value);
}

interface Route {
  handler: Handler;
  mimeType?: string;
  params: Record<string, string>;
  key: string;
  site: number[];
}

type Routed = Route | 'not visible' | null;

// A static resource owns its URI, then a family its flat keys, then the matching template with the
// longest literal prefix that this principal sees.
function route(capsule: Capsule, uri: string, ctx: () => Context): Routed {
  const found = capsule.statics.get(uri);
  if (found) {
    if (!isVisible(found.visible, ctx(), `read ${uri}`)) return 'not visible';
    return { handler: found.handler, mimeType: found.described.mimeType, params: {}, key: '', site: found.site };
  }
  const member = capsule.familyOf(uri);
  if (member) {
    const { family, key } = member;
    return { handler: family.handler, mimeType: family.options.mimeType, params: {}, key, site: family.site };
  }
  const matches: [Template, Record<string, string>][] = [];
  for (const t of capsule.templates) {
    const params = t.parsed.match(uri);
    if (params !== null) matches.push([t, params]);
  }
  if (matches.length === 0) return null;
  matches.sort((a, b) => b[0].parsed.literalPrefix.length - a[0].parsed.literalPrefix.length); // stable
  const chosen = matches.find(([t]) => isVisible(t.visible, ctx(), `read ${t.parsed.text}`));
  if (chosen === undefined) return 'not visible';
  const [t, params] = chosen;
  return { handler: t.handler, mimeType: t.described.mimeType, params, key: '', site: t.site };
}

function read(capsule: Capsule, req: Record<string, unknown> | null): HookResult | Promise<HookResult> {
  const uri = req?.uri;
  const id = req?.correlation_id;
  if (typeof uri !== 'string' || !cleanId(id)) return { action: 'continue', data: 'bad request' };
  // Ownership first, without user code: a URI nobody here serves costs no principal check.
  if (!capsule.statics.has(uri) && !capsule.familyOf(uri) && !capsule.templates.some((t) => t.parsed.match(uri))) {
    return { action: 'continue', data: 'not mine' };
  }
  const topic = `resource.v1.response.read.${id}`;
  const principal = verified();
  if (principal === null) {
    publish(topic, readError(uri, NOT_VERIFIED));
    return { action: 'deny', data: NOT_VERIFIED };
  }
  const ctx = context(capsule, principal, uri);
  const target = route(capsule, uri, () => ctx);
  if (target === null || target === 'not visible') return { action: 'continue', data: 'not visible' };
  ctx.params = target.params;
  ctx.key = target.key;
  const failed = (error: unknown): HookResult => {
    if (error instanceof NotFound) return { action: 'continue', data: 'not found' };
    return readFailed(topic, uri, `handler of ${uri} ${raised(error, target.site)}`);
  };
  const answer = (value: unknown): HookResult => {
    if (typeof value !== 'string' && !(value instanceof Uint8Array)) {
      return readFailed(topic, uri, `handler of ${uri} returned ${typeof value}, not a string or Uint8Array${at(target.site)}`);
    }
    publish(topic, readReply(uri, value as Result, target.mimeType));
    return { action: 'final' };
  };
  let value: unknown;
  try {
    value = target.handler(ctx);
  } catch (error) {
    return failed(error);
  }
  if (!isThenable(value)) return safely(() => answer(value), failed);
  return settle(value, unsettled(target.site)).then(
    (settled) => safely(() => answer(settled), failed),
    (error) => safely(() => failed(error), () => ({ action: 'error', data: 'cannot publish the read error' })),
  );
}

function unsettled(site: number[]): string {
  return `returned a Promise still pending after ${SPIN_MS} ms with no timer left to wait for${at(site)}`;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  try {
    return typeof (value as { then?: unknown } | null)?.then === 'function';
  } catch {
    return false; // a `then` getter that throws: not a Promise, so the wrong type (a read error)
  }
}


/** `raised TypeError: ... (app.ts:12)`: the error's own line in the author's code, else the declaration's. */
function raised(error: unknown, site: number[]): string {
  if (error instanceof Unsettled) return error.message;
  const text = describeError(error);
  return `raised ${text}${/\([^()]+:\d+\)$/.test(text) ? '' : at(site)}`;
}

function at(site: number[]): string {
  const where = authorSite(site);
  return where ? ` (${where})` : '';
}

function safely(run: () => HookResult, failed: (error: unknown) => HookResult): HookResult {
  try {
    return run();
  } catch (error) {
    return failed(error);
  }
}

function readFailed(topic: string, uri: string, error: string): HookResult {
  const text = short(error);
  hostLog('error', `read ${uri}: ${text}`);
  publish(topic, readError(uri, text));
  return { action: 'error', data: text };
}

function complete(capsule: Capsule, req: Record<string, unknown> | null): HookResult | Promise<HookResult> {
  const uriTemplate = req?.uri_template;
  const name = req?.argument_name;
  const value = req?.argument_value;
  const id = req?.correlation_id;
  if (typeof uriTemplate !== 'string' || typeof name !== 'string' || typeof value !== 'string' || !cleanId(id)) {
    return { action: 'continue', data: 'bad request' };
  }
  const template = capsule.templates.find((t) => t.parsed.text === uriTemplate);
  if (template === undefined) return { action: 'continue', data: 'not mine' };
  const topic = `resource.v1.response.complete.${id}`;
  const principal = verified();
  if (principal === null) {
    publish(topic, completeError(NOT_VERIFIED));
    return { action: 'deny', data: NOT_VERIFIED };
  }
  const ctx = context(capsule, principal);
  if (!isVisible(template.visible, ctx, `complete ${uriTemplate}`)) return { action: 'continue', data: 'not visible' };
  const completer = template.complete[name];
  if (completer === undefined) {
    publish(topic, completeReply([], 0, false));
    return { action: 'final' };
  }
  const what = `completer ${name} of ${uriTemplate}`;
  const failed = (error: unknown): HookResult => {
    const text = short(`${what} ${raised(error, template.site)}`);
    hostLog('error', `complete: ${text}`);
    publish(topic, completeError(text));
    return { action: 'error', data: text };
  };
  const answer = (values: unknown): HookResult => {
    if (!Array.isArray(values) || values.some((v) => typeof v !== 'string')) {
      throw new TypeError('returned something other than a list of strings');
    }
    const total = values.length;
    publish(topic, completeReply(values.slice(0, MAX_COMPLETION_VALUES), total, total > MAX_COMPLETION_VALUES));
    return { action: 'final' };
  };
  let values: unknown;
  try {
    values = completer(value, ctx);
  } catch (error) {
    return failed(error);
  }
  if (!isThenable(values)) return safely(() => answer(values), failed);
  return settle(values, unsettled(template.site)).then(
    (settled) => safely(() => answer(settled), failed),
    (error) => safely(() => failed(error), () => ({ action: 'error', data: 'cannot publish the completion error' })),
  );
}

function short(text: string): string {
  return text.length <= MAX_ERROR_CHARS ? text : `${text.slice(0, MAX_ERROR_CHARS - 1)}…`;
}
