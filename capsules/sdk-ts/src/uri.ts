// What a family's flat key is (docs/capsules.md, "Flat URIs"), with a strict percent-decoder:
// the same rules as the Python SDK's, so a URI a family would refuse in one language it refuses in both.
export const MAX_URI_BYTES = 2048;

const utf8 = new TextEncoder();

/** `%XX` escapes decoded as UTF-8; null when the bytes are not UTF-8. A `%` without two hex digits stays. */
export function percentDecode(text: string): string | null {
  if (!text.includes('%')) return text;
  const bytes: number[] = [];
  for (let i = 0; i < text.length; ) {
    if (text[i] === '%' && /^[0-9A-Fa-f]{2}$/.test(text.slice(i + 1, i + 3))) {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 3;
    } else {
      const char = String.fromCodePoint(text.codePointAt(i)!);
      bytes.push(...utf8.encode(char));
      i += char.length;
    }
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array(bytes));
  } catch {
    return null;
  }
}

/** Whether `key` is one flat segment: not empty, no `/`, `\` or control character, never `.` or `..`,
 * and none of that smuggled in percent-encoded. */
export function isFlatKey(key: string): boolean {
  if (!key || /[/\\\u0000-\u001f\u007f]/.test(key)) return false;
  const decoded = percentDecode(key);
  return decoded !== null && decoded !== '.' && decoded !== '..' && !/[/\\]/.test(decoded);
}

export function utf8Length(text: string): number {
  return utf8.encode(text).length;
}
