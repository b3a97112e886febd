// Answering the host's calls (docs/contract/reserved-actions.md, resources.md, templates.md):
// the reserved actions first, then the principal check, then the author's handlers. Never throws.
import { publish } from 'astrid:ipc/host@1.0.0';
import { getCaller } from 'astrid:sys/host@1.0.0';
import type { Capsule } from './capsule.js';
import { Context, hostLog } from './context.js';
import { describeError } from './site.js';
import { completeError, completeReply, readError, readReply } from './wire.js';

export interface HookResult {
  action: string;
  data?: string;
}

const NOT_VERIFIED = 'principal not verified';
const MAX_COMPLETION_VALUES = 100;
const MAX_ERROR_CHARS = 1000;

export function serve(capsule: Capsule, action: string, payload: Uint8Array): HookResult {
  try {
    switch (action) {
      case 'astrid.facts': // declarations only: before (and without) any principal check
        return { action: 'final', data: JSON.stringify(capsule.facts()) };
      case 'astrid.static':
        return { action: 'final', data: JSON.stringify(staticReplies(capsule)) };
      case 'describe':
        return listing(capsule, 'describe', capsule.describeBody(), `${capsule.statics.size} resources`);
      case 'templates':
        return listing(capsule, 'templates', capsule.templatesBody(), `${capsule.templates.length} templates`);
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

// Nothing here depends on who asks: no visible filter, no lister.
function staticReplies(capsule: Capsule): Record<string, unknown> {
  const reply = (kind: string, payload: string) => ({ topic: `resource.v1.response.${kind}.${capsule.replySuffix}`, payload });
  return { static: 1, describe: reply('describe', capsule.describeBody()), templates: reply('templates', capsule.templatesBody()) };
}

function verified(): string | null {
  const caller = getCaller();
  return caller.attribution.tag === 'verified' && caller.attribution.val ? caller.attribution.val : null;
}

function listing(capsule: Capsule, kind: string, body: string, count: string): HookResult {
  if (verified() === null) return { action: 'deny', data: NOT_VERIFIED };
  publish(`resource.v1.response.${kind}.${capsule.replySuffix}`, body);
  return { action: 'final', data: count };
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

function read(capsule: Capsule, req: Record<string, unknown> | null): HookResult {
  const uri = req?.uri;
  const id = req?.correlation_id;
  if (typeof uri !== 'string' || !cleanId(id)) return { action: 'continue', data: 'bad request' };
  const target = route(capsule, uri);
  if (target === null) return { action: 'continue', data: 'not mine' };
  const topic = `resource.v1.response.read.${id}`;
  const principal = verified();
  if (principal === null) {
    publish(topic, readError(uri, NOT_VERIFIED));
    return { action: 'deny', data: NOT_VERIFIED };
  }
  const ctx = new Context(principal, uri);
  ctx.params = target.params;
  try {
    const value = target.handler(ctx);
    if (typeof value !== 'string' && !(value instanceof Uint8Array)) {
      const got = value instanceof Promise ? 'a Promise (handlers must be synchronous)' : typeof value;
      throw new TypeError(`returned ${got}, not a string or Uint8Array`);
    }
    publish(topic, readReply(uri, value, target.mimeType));
    return { action: 'final' };
  } catch (error) {
    const text = short(`handler of ${uri} raised ${describeError(error)}`);
    hostLog('error', `read ${uri}: ${text}`);
    publish(topic, readError(uri, text));
    return { action: 'error', data: text };
  }
}

interface Route {
  handler: (ctx: Context) => unknown;
  mimeType?: string;
  params: Record<string, string>;
}

// A static resource owns its URI; else the matching template with the longest literal prefix.
function route(capsule: Capsule, uri: string): Route | null {
  const found = capsule.statics.get(uri);
  if (found) return { handler: found.handler, mimeType: found.described.mimeType, params: {} };
  let best: Route | null = null;
  let longest = -1;
  for (const t of capsule.templates) {
    const params = t.parsed.match(uri);
    if (params !== null && t.parsed.literalPrefix.length > longest) {
      longest = t.parsed.literalPrefix.length;
      best = { handler: t.handler, mimeType: t.described.mimeType, params };
    }
  }
  return best;
}

function complete(capsule: Capsule, req: Record<string, unknown> | null): HookResult {
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
  const completer = template.complete[name];
  if (completer === undefined) {
    publish(topic, completeReply([], 0, false));
    return { action: 'final' };
  }
  try {
    const values = completer(value, new Context(principal));
    if (!Array.isArray(values) || values.some((v) => typeof v !== 'string')) {
      throw new TypeError('returned something other than a list of strings');
    }
    const total = values.length;
    publish(topic, completeReply(values.slice(0, MAX_COMPLETION_VALUES), total, total > MAX_COMPLETION_VALUES));
    return { action: 'final' };
  } catch (error) {
    const text = short(`completer ${name} of ${uriTemplate} raised ${describeError(error)}`);
    hostLog('error', `complete: ${text}`);
    publish(topic, completeError(text));
    return { action: 'error', data: text };
  }
}

function short(text: string): string {
  return text.length <= MAX_ERROR_CHARS ? text : `${text.slice(0, MAX_ERROR_CHARS - 1)}…`;
}
