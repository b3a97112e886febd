// `ctx.fs` (alias `ctx.files`), `ctx.kv`, `ctx.http`: the host capabilities (docs/capabilities.md).
// The host serves a call only when Capsule.toml asks for it and the operator granted it; a refusal
// is a thrown HostError (NotGranted when there is no grant) whose message is the host's, naming the
// fix, so an uncaught one becomes the read's error, never a trap.
import * as fsHost from 'astrid:fs/host@1.0.0';
import * as httpHost from 'astrid:http/host@1.0.0';
import * as kvHost from 'astrid:kv/host@1.0.0';

/** A refusal from the host: `code` is the WIT error case (`not-found`, `too-large`, ...). */
export class HostError extends Error {
  constructor(
    readonly code: string,
    detail: string,
  ) {
    super(detail ? `${code}: ${detail}` : code);
    this.name = 'HostError';
  }
}

/** No grant (or no `[capabilities]` entry): the message names the `astrid capsule grant` command. */
export class NotGranted extends HostError {
  constructor(code: string, detail: string) {
    super(code, detail);
    this.name = 'NotGranted';
  }
}

// componentize-js throws a result's error case, `{tag, val}`, possibly wrapped in `payload`.
export function hostCall<T>(call: () => T, what: string): T {
  try {
    return call();
  } catch (error) {
    const value = (error as { payload?: unknown })?.payload ?? error;
    const tag = (value as { tag?: unknown })?.tag;
    if (typeof tag !== 'string') throw error; // not the host's refusal: the author's bug, as it is
    const val = (value as { val?: unknown }).val;
    const detail = typeof val === 'string' ? val : what;
    throw tag === 'capability-denied' ? new NotGranted(tag, detail) : new HostError(tag, detail);
  }
}

const utf8 = new TextEncoder();

function bytes(value: string | Uint8Array): Uint8Array {
  return typeof value === 'string' ? utf8.encode(value) : value;
}

export interface Entry {
  name: string;
  kind: fsHost.EntryKind;
  size: number;
  modifiedMs: number; // milliseconds since the UNIX epoch
}

export type Stat = Omit<Entry, 'name'>;

/** Read-only files under the granted mounts: `notes/today.md` is `today.md` in the mount `notes`. */
export class Files {
  /** The whole file (at most 8 MiB). */
  read(path: string): Uint8Array {
    return hostCall(() => fsHost.read(path), path);
  }

  readText(path: string): string {
    return new TextDecoder().decode(this.read(path));
  }

  /** The folder's entries, sorted by name, at most 4096. */
  list(path: string): Entry[] {
    return hostCall(() => fsHost.list(path), path).map((e) => ({ name: e.name, ...stat(e) }));
  }

  stat(path: string): Stat {
    return stat(hostCall(() => fsHost.stat(path), path));
  }
}

function stat(s: fsHost.FileStat): Stat {
  return { kind: s.kind, size: Number(s.size), modifiedMs: Number(s.modifiedMs) };
}

/** This capsule's durable state for the calling principal (nobody else sees it). */
export class KeyValue {
  /** The value, or undefined when the key is not set. */
  get(key: string): Uint8Array | undefined {
    try {
      return hostCall(() => kvHost.get(key), key);
    } catch (error) {
      if (error instanceof HostError && error.code === 'not-found') return undefined;
      throw error;
    }
  }

  getText(key: string): string | undefined {
    const value = this.get(key);
    return value === undefined ? undefined : new TextDecoder().decode(value);
  }

  /** Keep `value` (bytes, or text stored as UTF-8) under `key`; at most 1 MiB. */
  set(key: string, value: string | Uint8Array): void {
    hostCall(() => kvHost.set(key, bytes(value)), key);
  }

  delete(key: string): void {
    hostCall(() => kvHost.delete(key), key);
  }

  /** The keys starting with `prefix`, sorted, at most 1024. */
  keys(prefix = ''): string[] {
    return hostCall(() => kvHost.listKeys(prefix), prefix);
  }
}

/** An HTTP answer; header names lower-case. */
export class Response {
  constructor(
    readonly status: number,
    readonly headers: [string, string][],
    readonly body: Uint8Array,
  ) {}

  header(name: string): string | undefined {
    const wanted = name.toLowerCase();
    return this.headers.find(([key]) => key === wanted)?.[1];
  }

  text(): string {
    return new TextDecoder().decode(this.body);
  }

  json(): unknown {
    return JSON.parse(this.text());
  }
}

export interface RequestOptions {
  headers?: Record<string, string>;
  body?: string | Uint8Array;
}

/** Outbound HTTP to the granted hosts (https unless the grant says http://). Synchronous. */
export class Http {
  get(url: string, headers: Record<string, string> = {}): Response {
    return this.request('GET', url, { headers });
  }

  request(method: string, url: string, options: RequestOptions = {}): Response {
    const headers = Object.entries(options.headers ?? {}).map(([name, value]) => ({ name, value }));
    const request: httpHost.Request = { method: method.toUpperCase(), url, headers };
    if (options.body !== undefined) request.body = bytes(options.body);
    const answer = hostCall(() => httpHost.fetch(request), url);
    const pairs = answer.headers.map((h): [string, string] => [h.name.toLowerCase(), h.value]);
    return new Response(answer.status, pairs, answer.body);
  }
}
