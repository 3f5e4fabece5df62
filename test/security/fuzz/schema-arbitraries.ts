// JSON Schema (the subset the OpenAPI document uses) → fast-check arbitraries: schema-valid values,
// and single-site mutations of a valid value (boundary and invalid values). Whether a mutation is
// really invalid is not decided here: the oracle asks ajv, so the expectation never drifts from the
// published schema.
import fc from 'fast-check';

export type Schema = Record<string, any>;
/** A value for a field by its name (fixture ids, https URLs …); null when the name says nothing. */
export type Hint = (name: string, schema: Schema) => fc.Arbitrary<unknown> | null;
export type Path = (string | number)[];

export interface Mutation {
  kind: 'boundary' | 'invalid';
  note: string;
  value: unknown;
}

const codePoints = (s: string) => [...s].length;
/** Only plain objects are descended: markers (class instances) are replaced whole. */
const isPlainObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype;
const MAX_VALID_STRING = 48;

/** Strings that break naive code: NUL, lone surrogates, bidi overrides, LIKE wildcards, SQL, paths. */
export const INTERESTING_STRINGS = [
  '\u0000', 'a\u0000b', '\ud800', 'x\udfffy', '\u202egnp.exe', '\u200b', 'ｅｘａｍｐｌｅ', 'İı', 'ß', 'e\u0301', '😀👩‍👩‍👧',
  '%', '%%%', '_', '\\', "'", '"', "a%'--", "'; DROP TABLE users;--", '../../etc/passwd', '<script>alert(1)</script>',
  '${jndi:ldap://x}', '{{7*7}}', '__proto__', 'constructor', 'null', 'true', '0', '-1', ' ', '\t\n', 'me', 'platform',
];

const ascii = fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789-_'.split('')), minLength: 1, maxLength: 24 });

export function resolveRef(schema: Schema, components: Schema): Schema {
  const ref = schema?.$ref as string | undefined;
  if (!ref) return schema;
  const name = ref.replace('#/components/schemas/', '');
  return components.schemas?.[name] ?? {};
}

export class SchemaArbitraries {
  constructor(private readonly components: Schema, private readonly hint: Hint) {}

  /** Schema-valid values (hints first: they carry fixture ids and the shapes services accept). */
  valid(schema: Schema, name = '', depth = 0): fc.Arbitrary<unknown> {
    const s = resolveRef(schema, this.components);
    const hinted = this.hint(name, s);
    const base = this.structural(s, name, depth);
    return hinted ? fc.oneof({ arbitrary: hinted, weight: 4 }, { arbitrary: base, weight: 1 }) : base;
  }

  private structural(s: Schema, name: string, depth: number): fc.Arbitrary<unknown> {
    if (s.const !== undefined) return fc.constant(s.const);
    if (Array.isArray(s.enum)) return fc.constantFrom(...s.enum);
    const alternatives = s.anyOf ?? s.oneOf;
    if (Array.isArray(alternatives)) return fc.oneof(...alternatives.map((a: Schema) => this.valid(a, name, depth)));
    if (Array.isArray(s.allOf)) return this.valid(Object.assign({}, ...s.allOf), name, depth);
    const types: string[] = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
    if (types.length > 1) return fc.oneof(...types.map((type) => this.structural({ ...s, type }, name, depth)));
    switch (types[0]) {
      case 'string':
        return this.string(s);
      case 'integer':
        return fc.integer({ min: s.minimum ?? -1_000_000, max: s.maximum ?? 1_000_000 });
      case 'number':
        return fc.double({ min: s.minimum ?? -1e6, max: s.maximum ?? 1e6, noNaN: true, noDefaultInfinity: true });
      case 'boolean':
        return fc.boolean();
      case 'null':
        return fc.constant(null);
      case 'array':
        return this.array(s, name, depth);
      case 'object':
        return this.object(s, depth);
      default:
        return fc.jsonValue({ maxDepth: 2 });
    }
  }

  private string(s: Schema): fc.Arbitrary<string> {
    const min = s.minLength ?? 0;
    const max = Math.max(min, Math.min(s.maxLength ?? MAX_VALID_STRING, MAX_VALID_STRING));
    const fits = (v: string) => codePoints(v) >= (s.minLength ?? 0) && codePoints(v) <= (s.maxLength ?? Infinity);
    if (s.format === 'date-time') return dateTime();
    if (s.format === 'email') return email().filter(fits);
    // The service compiles patterns as Ajv does, with the `u` flag (NOT_BLANK uses \p{Cf}).
    if (s.pattern) return fc.stringMatching(new RegExp(s.pattern, 'u')).filter(fits);
    return fc
      .oneof(
        { arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: min, maxLength: max }), weight: 4 },
        { arbitrary: fc.string({ unit: 'grapheme', minLength: min, maxLength: max }), weight: 2 },
        { arbitrary: fc.constantFrom(...INTERESTING_STRINGS), weight: 1 },
      )
      .filter(fits);
  }

  private array(s: Schema, name: string, depth: number): fc.Arbitrary<unknown[]> {
    const item = this.valid(s.items ?? {}, name, depth + 1);
    const minLength = s.minItems ?? 0;
    const maxLength = Math.max(minLength, Math.min(s.maxItems ?? 4, 4));
    return s.uniqueItems ? fc.uniqueArray(item, { minLength, maxLength, selector: (v) => JSON.stringify(v) }) : fc.array(item, { minLength, maxLength });
  }

  private object(s: Schema, depth: number): fc.Arbitrary<unknown> {
    const props = Object.entries<Schema>(s.properties ?? {}).filter(([, p]) => Object.keys(p).length > 0);
    if (props.length === 0) {
      if (s.additionalProperties === false || depth > 2 || !s.additionalProperties) return fc.constant({});
      const value = s.additionalProperties === true ? fc.jsonValue({ maxDepth: 1 }) : this.valid(s.additionalProperties, '', depth + 1);
      return fc.dictionary(ascii, value, { maxKeys: 4 });
    }
    const required = new Set<string>(s.required ?? []);
    const model = Object.fromEntries(props.map(([k, p]) => [k, this.valid(p, k, depth + 1)]));
    const optional = props.map(([k]) => k).filter((k) => !required.has(k));
    const full = fc.record(model, { requiredKeys: [...required].filter((k) => k in model) });
    // Small bodies reach services more often than ones where every optional field can object.
    const small = fc
      .subarray(optional, { maxLength: Math.min(optional.length, Math.max(1, Math.ceil(optional.length / 3))) })
      .chain((keys) => fc.record(Object.fromEntries(Object.entries(model).filter(([k]) => required.has(k) || keys.includes(k)))));
    const arb = fc.oneof({ arbitrary: full, weight: 1 }, { arbitrary: small, weight: 2 });
    return s.minProperties ? arb.filter((o) => Object.keys(o as object).length >= s.minProperties) : arb;
  }

  /** One mutation of `value` at one site (a field, an array item, or the whole value). */
  mutate(schema: Schema, value: unknown): fc.Arbitrary<{ value: unknown; mutation: Mutation; path: Path }> {
    const sites = this.sites(schema, value, []);
    return fc.constantFrom(...sites).chain((site) =>
      this.mutations(site.schema, site.value, site.path).map((mutation) => ({ value: setAt(value, site.path, mutation.value), mutation, path: site.path })),
    );
  }

  private sites(schema: Schema, value: unknown, path: Path): { schema: Schema; value: unknown; path: Path }[] {
    const s = resolveRef(schema, this.components);
    const out = [{ schema: s, value, path }];
    if (isPlainObject(value)) {
      for (const [k, v] of Object.entries(value)) {
        const sub = s.properties?.[k] ?? (typeof s.additionalProperties === 'object' ? s.additionalProperties : {});
        out.push(...this.sites(sub, v, [...path, k]));
      }
    } else if (Array.isArray(value) && value.length > 0) {
      out.push(...this.sites(s.items ?? {}, value[0], [...path, 0]));
    }
    return out;
  }

  /** Boundary and invalid values for one schema node; `current` is the valid value it replaces. */
  mutations(schema: Schema, current: unknown, path: Path): fc.Arbitrary<Mutation> {
    const s = resolveRef(schema, this.components);
    const leaves: Schema[] = s.anyOf ?? s.oneOf ?? [s];
    const out: fc.Arbitrary<Mutation>[] = [wrongType(s)];
    for (const leaf of leaves) out.push(...leafMutations({ ...leaf, ...(leaf.enum || leaf.type ? {} : { type: s.type }) }, this));
    if (s.type === 'object' || s.properties) out.push(...this.objectMutations(s, current));
    if (path.length === 0) out.push(invalid('whole body replaced', null, [], 'text', 42, true));
    return fc.oneof(...out);
  }

  private objectMutations(s: Schema, current: unknown): fc.Arbitrary<Mutation>[] {
    const obj = isPlainObject(current) ? current : {};
    const out: fc.Arbitrary<Mutation>[] = [fc.constant<Mutation>({ kind: 'invalid', note: 'unknown property zz_unknown', value: { ...obj, zz_unknown: 1 } })];
    for (const key of s.required ?? []) {
      const { [key]: _dropped, ...rest } = obj;
      out.push(fc.constant<Mutation>({ kind: 'invalid', note: `required ${key} removed`, value: rest }));
    }
    const readOnly = Object.entries<Schema>(s.properties ?? {}).filter(([, p]) => Object.keys(p).length === 0).map(([k]) => k);
    if (readOnly.length) {
      out.push(fc.tuple(fc.constantFrom(...readOnly), fc.jsonValue({ maxDepth: 1 })).map(([k, v]) => ({ kind: 'invalid' as const, note: `read-only ${k} sent`, value: { ...obj, [k]: v } })));
    }
    if (s.minProperties) out.push(fc.constant<Mutation>({ kind: 'boundary', note: 'empty object under minProperties', value: {} }));
    return out;
  }

  /** A few valid items, for arrays at their size limits. */
  item(s: Schema): fc.Arbitrary<unknown> {
    return this.valid(s.items ?? {}, '', 1);
  }
}

function invalid(note: string, ...values: unknown[]): fc.Arbitrary<Mutation> {
  return fc.constantFrom(...values).map((value) => ({ kind: 'invalid' as const, note: `${note}: ${JSON.stringify(value)?.slice(0, 40)}`, value }));
}

function boundary(note: string, ...values: unknown[]): fc.Arbitrary<Mutation> {
  return fc.constantFrom(...values).map((value) => ({ kind: 'boundary' as const, note, value }));
}

function wrongType(s: Schema): fc.Arbitrary<Mutation> {
  const types = new Set<string>([s.type, ...(s.anyOf ?? []).map((a: Schema) => a.type)].flat().filter(Boolean));
  const samples: [string, unknown][] = [['null', null], ['boolean', true], ['integer', 7], ['number', 1.5], ['string', '7'], ['array', ['x']], ['object', { a: 1 }]];
  const wrong = samples.filter(([type]) => !types.has(type) && !(type === 'integer' && types.has('number'))).map(([, v]) => v);
  return invalid('wrong type', ...(wrong.length ? wrong : [{ a: 1 }]));
}

function leafMutations(s: Schema, arbs: SchemaArbitraries): fc.Arbitrary<Mutation>[] {
  const out: fc.Arbitrary<Mutation>[] = [];
  if (Array.isArray(s.enum)) {
    const first = String(s.enum[0]);
    out.push(invalid('bad enum value', 'not_a_value', first.toUpperCase(), `${first} `, '', `${first}\u0000`));
  }
  if (s.type === 'string') {
    const min = s.minLength ?? 0;
    const max = s.maxLength;
    const sizes = [min, ...(max !== undefined ? [max] : [])];
    out.push(boundary('string at its length limits', ...sizes.map((n) => 'a'.repeat(n)), ...sizes.map((n) => '😀'.repeat(n)), ...sizes.map((n) => 'é'.repeat(n))));
    const over: string[] = [];
    if (min > 0) over.push('a'.repeat(min - 1));
    if (max !== undefined) over.push('a'.repeat(max + 1), '😀'.repeat(max + 1));
    over.push('A'.repeat(100_000));
    out.push(invalid('string length out of range', ...over));
    out.push(fc.constantFrom(...INTERESTING_STRINGS).map((value) => ({ kind: 'boundary' as const, note: `interesting string ${JSON.stringify(value)}`, value })));
    if (s.pattern) out.push(invalid('pattern mismatch', 'does not match!', `${'9'.repeat(3)}\n`, 'ä'));
    if (s.format === 'date-time') {
      out.push(invalid('bad date-time', 'not-a-date', '2024-13-45T25:61:61Z', '1700000000', '2024-01-01', '2024-01-01T00:00:00'));
      out.push(boundary('date-time extremes', '1970-01-01T00:00:00Z', '0001-01-01T00:00:00Z', '9999-12-31T23:59:59.999Z', '2024-02-29T12:00:00.123456Z', '2030-01-01T00:00:00+14:00', '2000-01-01T00:00:00-12:00'));
    }
    if (s.format === 'email') {
      out.push(invalid('bad email', 'not-an-email', 'a@', '@b.co', 'a@b@c.co', 'a b@c.co'));
      out.push(boundary('email edge', 'A@EXAMPLE.COM', 'a@b.co', 'user+tag@example.com', `${'a'.repeat(64)}@example.com`, 'ü@exämple.com'));
    }
  }
  if (s.type === 'integer' || s.type === 'number') {
    const lo = s.minimum ?? 0;
    const hi = s.maximum ?? 1000;
    out.push(boundary('number at its limits', lo, hi, 0));
    out.push(invalid('number out of range', lo - 1, hi + 1, -1, 2 ** 31, 2 ** 53 + 2, 1e308, -1e308));
    if (s.type === 'integer') out.push(invalid('fraction for an integer', lo + 0.5, 1e-7));
  }
  if (s.type === 'array') {
    const min = s.minItems ?? 0;
    const max = Math.min(s.maxItems ?? 50, 10_000);
    out.push(boundary('empty array', []));
    out.push(fc.uniqueArray(arbs.item(s), { minLength: Math.min(max, 3), maxLength: Math.min(max, 3), selector: (v) => JSON.stringify(v) }).map((v) => ({ kind: 'boundary' as const, note: 'a few items', value: v })));
    out.push(fc.constant<Mutation>({ kind: 'boundary', note: `${max} items (maxItems)`, value: Array.from({ length: max }, (_, i) => `fz_item_${i}`) }));
    out.push(invalid('too many items', Array.from({ length: max + 1 }, (_, i) => `fz_item_${i}`)));
    if (min > 0) out.push(invalid('too few items', Array.from({ length: min - 1 }, () => 'x')));
    if (s.uniqueItems) out.push(invalid('duplicate items', ['dup', 'dup']));
    out.push(invalid('array of wrong items', [null], [{}], [[]], [1, 2]));
  }
  if (s.type === 'object' && s.additionalProperties !== false && !s.properties) {
    out.push(boundary('object values', { a: null }, { nested: { deeper: { deepest: [1, 'two', null] } } }, { k: 'v'.repeat(5000) }));
  }
  return out;
}

/** A copy of `root` with `path` set to `value` (the root itself when path is empty). */
export function setAt(root: unknown, path: Path, value: unknown): unknown {
  if (path.length === 0) return value;
  const [head, ...rest] = path;
  const copy: any = Array.isArray(root) ? [...root] : isPlainObject(root) ? { ...root } : {};
  copy[head] = setAt(copy[head], rest, value);
  return copy;
}

export function dateTime(): fc.Arbitrary<string> {
  const now = Date.now();
  return fc.oneof(
    fc.integer({ min: -400 * 86400, max: 400 * 86400 }).map((s) => new Date(now + s * 1000).toISOString()),
    fc.integer({ min: 5, max: 3600 }).map((s) => new Date(now + s * 1000).toISOString()),
    fc.date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2040-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString()),
  );
}

export function email(): fc.Arbitrary<string> {
  return fc.oneof(
    { arbitrary: fc.stringMatching(/^[a-z][a-z0-9]{3,12}$/).map((local) => `fz-${local}@example.com`), weight: 4 },
    { arbitrary: fc.emailAddress(), weight: 1 },
  );
}
