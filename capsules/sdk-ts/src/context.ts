// What a handler gets: the verified principal, the capsule's config, its log and the capabilities.
import { publish } from 'astrid:ipc/host@1.0.0';
import { getConfig, log } from 'astrid:sys/host@1.0.0';
import { Files, HostError, hostCall, Http, KeyValue, NotGranted } from './capabilities.js';

// astrid-bus:resource-events@1.0.0 (docs/contract/subscriptions.md §11): `ctx.updated(uri)` publishes here.
const UPDATED_TOPIC = 'resource.v1.event.updated';
const UPDATED_WIT = 'astrid-bus:resource-events@1.0.0';

export type Level = 'debug' | 'info' | 'warn' | 'error';

export class Context {
  /** The template's variables, for a template's handler. */
  params: Record<string, string> = {};
  /** A family's read: the part of `uri` after the family's prefix. */
  key = '';

  constructor(
    readonly principal: string,
    readonly uri: string = '',
    readonly capsule: string = '',
  ) {}

  /** Tell this principal's clients subscribed to `uri` (default: the URI being read) that it changed.
   * Call it once the change is made; needs `"resource.v1.event.updated"` under `[publish]` (else NotGranted). */
  updated(uri: string = this.uri): void {
    if (typeof uri !== 'string' || !uri) throw new TypeError('updated(): name the URI that changed (no URI is being read here)');
    try {
      hostCall(() => publish(UPDATED_TOPIC, JSON.stringify({ uri })), uri);
    } catch (error) {
      if (error instanceof HostError && error.code === 'capability-denied') {
        throw new NotGranted(
          error.code,
          `${this.capsule || 'this capsule'} may not announce updates: add ` +
            `"${UPDATED_TOPIC}" = { wit = "${UPDATED_WIT}" } under [publish] in its Capsule.toml`,
        );
      }
      throw error;
    }
  }

  /** The capsule's `[config]` value for `key` (the operator's override first), or undefined. */
  config(key: string): string | undefined {
    try {
      return getConfig(key);
    } catch {
      return undefined; // not configured: the host's error says only that
    }
  }

  /** Read-only files under the mounts granted to this capsule. */
  get fs(): Files {
    return new Files();
  }

  /** `ctx.fs` by the name a reader may look for first. */
  get files(): Files {
    return this.fs;
  }

  /** This capsule's durable key-value state for the calling principal. */
  get kv(): KeyValue {
    return new KeyValue();
  }

  /** Outbound HTTP to the hosts granted to this capsule. */
  get http(): Http {
    return new Http();
  }

  log(message: string, level: Level = 'info'): void {
    hostLog(level, message);
  }
}

/** A line in the host's log; a failing log never stops serving. */
export function hostLog(level: Level, message: string): void {
  try {
    log(level, message.slice(0, 4096));
  } catch {
    // the log is best effort: nothing to tell, nowhere to tell it
  }
}
