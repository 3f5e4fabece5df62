// The one way the sign-in page builds HTML: a tagged template that escapes every interpolated value
// unless it is already markup built the same way, so user- and owner-supplied text never becomes markup.

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c]);

/** Markup that is safe to insert as is (only `html` and `raw` make it). */
export class Html {
  constructor(readonly text: string) {}

  toString(): string {
    return this.text;
  }
}

/** Text known to be markup, written in this module (never data). */
export const raw = (text: string): Html => new Html(text);

function render(value: unknown): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  return escapeHtml(String(value));
}

/** html`<p>${text}</p>`: values are escaped, Html values inserted, arrays joined, null/undefined/false dropped. */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new Html(out);
}
