// URI templates (docs/contract/templates.md): `{var}` is one path segment, `{+var}` may span `/`.
export interface Variable {
  name: string;
  reserved: boolean;
}

export class UriTemplate {
  readonly variables: Variable[] = [];
  readonly literalPrefix: string;
  private readonly pattern: RegExp;

  constructor(readonly text: string) {
    let regex = '^';
    let last = 0;
    const expression = /\{([^{}]*)\}/g;
    for (const found of text.matchAll(expression)) {
      const body = found[1];
      const reserved = body.startsWith('+');
      const name = reserved ? body.slice(1) : body;
      if (!/^[A-Za-z0-9_]+$/.test(name)) throw new Error(`template ${text}: {${body}} is not {name} or {+name}`);
      if (found.index === last && last > 0) throw new Error(`template ${text}: two variables need a literal between them`);
      regex += escape(text.slice(last, found.index)) + (reserved ? '([^?#]+)' : '([^/?#]+)');
      this.variables.push({ name, reserved });
      last = found.index + found[0].length;
    }
    regex += escape(text.slice(last)) + '$';
    this.pattern = new RegExp(regex);
    const first = text.indexOf('{');
    this.literalPrefix = first < 0 ? text : text.slice(0, first);
  }

  /** The variables' values when `uri` is one this template serves, else null. */
  match(uri: string): Record<string, string> | null {
    const found = this.pattern.exec(uri);
    if (found === null) return null;
    const params: Record<string, string> = {};
    for (const [i, variable] of this.variables.entries()) {
      const value = decodeURIComponent(found[i + 1]);
      if (variable.reserved && value.split('/').some((s) => s === '.' || s === '..')) return null;
      params[variable.name] = value;
    }
    return params;
  }
}

function escape(literal: string): string {
  return literal.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
