// The host interfaces (wit/deps) as componentize-js presents them: ES modules named by interface,
// camelCase functions; a `result` error is thrown.
declare module 'astrid:ipc/host@1.0.0' {
  export function publish(topic: string, payload: string): void;
}
declare module 'astrid:sys/host@1.0.0' {
  export type Attribution = { tag: 'verified' | 'claimed'; val: string } | { tag: 'system' };
  export interface CallerContext {
    principal?: string;
    sourceId: string;
    timestamp: string;
    attribution: Attribution;
  }
  export function getCaller(): CallerContext;
  export function log(level: 'trace' | 'debug' | 'info' | 'warn' | 'error', message: string): void;
  export function getConfig(key: string): string;
  export function clockMs(): bigint;
}
