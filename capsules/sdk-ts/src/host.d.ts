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
declare module 'astrid:fs/host@1.0.0' {
  export type EntryKind = 'file' | 'directory' | 'symlink' | 'other';
  export interface FileStat {
    kind: EntryKind;
    size: bigint;
    modifiedMs: bigint;
  }
  export interface DirEntry extends FileStat {
    name: string;
  }
  export function read(path: string): Uint8Array;
  export function list(path: string): DirEntry[];
  export function stat(path: string): FileStat;
}
declare module 'astrid:kv/host@1.0.0' {
  export function get(key: string): Uint8Array;
  export function set(key: string, value: Uint8Array): void;
  function delete_(key: string): void;
  export { delete_ as delete };
  export function listKeys(prefix: string): string[];
}
declare module 'astrid:http/host@1.0.0' {
  export interface Header {
    name: string;
    value: string;
  }
  export interface Request {
    method: string;
    url: string;
    headers: Header[];
    body?: Uint8Array;
  }
  export interface Response {
    status: number;
    headers: Header[];
    body: Uint8Array;
  }
  export function fetch(request: Request): Response;
}
