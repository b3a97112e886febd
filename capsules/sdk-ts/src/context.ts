// What a handler gets: the verified principal, the capsule's config, its log and the capabilities.
import { getConfig, log } from 'astrid:sys/host@1.0.0';
import { Files, Http, KeyValue } from './capabilities.js';

export type Level = 'debug' | 'info' | 'warn' | 'error';

export class Context {
  /** The template's variables, for a template's handler. */
  params: Record<string, string> = {};

  constructor(
    readonly principal: string,
    readonly uri: string = '',
  ) {}

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
