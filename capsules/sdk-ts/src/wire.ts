// The protocol's replies as JSON (wit/deps/astrid-bus-*): snake_case fields, absent optionals left out.
export interface Described {
  name?: string;
  title?: string;
  description?: string;
  mimeType?: string;
}

export type Result = string | Uint8Array;

export function definition(
  key: 'uri' | 'uri_template',
  value: string,
  d: Described & { size?: number },
): Record<string, unknown> {
  const wire: Record<string, unknown> = { [key]: value, name: d.name ?? value };
  if (d.title !== undefined) wire.title = d.title;
  if (d.description !== undefined) wire.description = d.description;
  if (d.mimeType !== undefined) wire.mime_type = d.mimeType;
  if (d.size !== undefined) wire.size = d.size;
  wire.icons = [];
  return wire;
}

export function readReply(uri: string, value: Result, mimeType: string | undefined): string {
  const chunk: Record<string, unknown> = { type: typeof value === 'string' ? 'text' : 'blob', uri };
  if (mimeType !== undefined) chunk.mime_type = mimeType;
  if (typeof value === 'string') chunk.text = value;
  else chunk.blob = base64(value);
  return JSON.stringify({ uri, contents: [chunk] });
}

export function readError(uri: string, error: string): string {
  return JSON.stringify({ uri, contents: [], error });
}

export function completeReply(values: string[], total: number, hasMore: boolean): string {
  return JSON.stringify({ values, total, has_more: hasMore });
}

export function completeError(error: string): string {
  return JSON.stringify({ values: [], has_more: false, error });
}

const DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

function base64(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    out += DIGITS[(n >> 18) & 63] + DIGITS[(n >> 12) & 63];
    out += i + 1 < bytes.length ? DIGITS[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.length ? DIGITS[n & 63] : '=';
  }
  return out;
}
