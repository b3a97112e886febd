// Where the author's code is: a stack frame of the bundle mapped to `app.ts:LINE` through the table
// the build appends to the bundle (`globalThis.__astridLines`: bundle line -> author file:line).
type Lines = Record<string, string>;

function table(): Lines {
  return ((globalThis as { __astridLines?: Lines }).__astridLines ?? {}) as Lines;
}

/** The bundle lines of a stack, innermost first (SpiderMonkey frames: `name@file:line:column`). */
export function stackLines(stack: string | undefined): number[] {
  const lines: number[] = [];
  for (const frame of (stack ?? '').split('\n')) {
    const found = /:(\d+):\d+\)?$/.exec(frame.trim());
    if (found) lines.push(Number(found[1]));
  }
  return lines;
}

/** The author's innermost `file:line` among bundle lines, or '' when none is the author's. */
export function authorSite(lines: number[]): string {
  const known = table();
  for (const line of lines) {
    const site = known[String(line)];
    if (site) return site;
  }
  return '';
}

/** The bundle lines of whoever called the SDK (captured now, mapped later: the table is appended last). */
export function callerLines(): number[] {
  return stackLines(new Error().stack);
}

/** An exception as one line: `message (app.ts:12)`. */
export function describeError(error: unknown): string {
  const message = error instanceof Error ? `${error.name}: ${error.message}` : `thrown ${String(error)}`;
  const site = error instanceof Error ? authorSite(stackLines(error.stack)) : '';
  return site ? `${message} (${site})` : message;
}
