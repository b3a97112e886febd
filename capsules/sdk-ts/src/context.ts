// What a handler gets: the verified principal, the capsule's config and its log.
import { getConfig, log } from 'astrid:sys/host@1.0.0';

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
