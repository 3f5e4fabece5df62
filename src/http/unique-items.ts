import type Ajv from 'ajv';
import type { AnySchemaObject, ErrorObject, SchemaValidateFunction } from 'ajv';

// Ajv's own `uniqueItems` compares every pair of items (fast-deep-equal) when the items schema names no
// scalar type (an enum written as `anyOf` of constants, untyped or object items): with allErrors it runs
// however far the array is past its maxItems, so a 1 MB body of 150,000 distinct numbers held the event
// loop every caller shares for minutes. This one gives the same answer (valid, and the pair of indices its
// error names) in linear time: one key per item, read in one pass.

type ScalarType = 'string' | 'number' | 'integer' | 'boolean' | 'null';

/** The types Ajv reads from an items schema to compare items by value (getSchemaTypes; `nullable` adds null). */
function itemTypesOf(items: unknown): string[] {
  if (!items || typeof items !== 'object' || Array.isArray(items)) return [];
  const { type, nullable } = items as { type?: unknown; nullable?: unknown };
  const types = (Array.isArray(type) ? [...type] : typeof type === 'string' ? [type] : []) as string[];
  if (!types.includes('null') && nullable === true) types.push('null');
  return types;
}

const isType = (type: ScalarType, value: unknown): boolean =>
  type === 'null' ? value === null : type === 'number' ? typeof value === 'number' : type === 'integer' ? typeof value === 'number' && !(value % 1) && !Number.isNaN(value) : typeof value === type;

/** A text equal for two JSON values exactly when fast-deep-equal finds them equal (object keys in any order). */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    const record = value as Record<string, unknown>;
    return `{${Object.keys(record).sort().map((k) => `${JSON.stringify(k)}:${canonical(record[k])}`).join(',')}}`;
  }
  return value === undefined ? 'undefined' : JSON.stringify(value);
}

/**
 * The pair Ajv reports, or null. Scalar item types: walking down from the last item, the first whose
 * value was met (Ajv's hash loop, items of another type skipped). Otherwise: the last item equal to an
 * earlier one, and the nearest such earlier one (its pairwise loop).
 */
export function duplicatePair(data: unknown[], itemTypes: string[]): { i: number; j: number } | null {
  if (data.length <= 1) return null;
  if (itemTypes.length > 0 && !itemTypes.some((t) => t === 'object' || t === 'array')) {
    // As Ajv's generated code: a plain object of indices, a string suffixed when numbers may be met too.
    const indices: Record<string, unknown> = {};
    for (let i = data.length; i--; ) {
      let item = data[i] as any;
      if (!itemTypes.some((t) => isType(t as ScalarType, item))) continue;
      if (itemTypes.length > 1 && typeof item === 'string') item += '_';
      if (typeof indices[item] === 'number') return { i, j: indices[item] as number };
      indices[item] = i;
    }
    return null;
  }
  let found: { i: number; j: number } | null = null;
  const last = new Map<string, number>();
  for (let i = 0; i < data.length; i++) {
    const key = canonical(data[i]);
    const j = last.get(key);
    if (j !== undefined) found = { i, j };
    last.set(key, i);
  }
  return found;
}

/** Replaces Ajv's `uniqueItems` with duplicatePair, evaluated where Ajv evaluates its own (same errors, same order). */
export function linearUniqueItems(ajv: Ajv.default): void {
  const group = (ajv.RULES.rules as { type?: string; rules: { keyword: string }[] }[]).find((g) => g.type === 'array')!;
  const next = group.rules[group.rules.findIndex((r) => r.keyword === 'uniqueItems') + 1]?.keyword;
  ajv.removeKeyword('uniqueItems');
  ajv.addKeyword({
    keyword: 'uniqueItems',
    type: 'array',
    schemaType: 'boolean',
    errors: true,
    ...(next ? { before: next } : {}),
    compile(schema: boolean, parentSchema: AnySchemaObject) {
      const itemTypes = itemTypesOf(parentSchema.items);
      const validate: SchemaValidateFunction = (data: unknown[]) => {
        const pair = schema ? duplicatePair(data, itemTypes) : null;
        validate.errors = pair
          ? [{ keyword: 'uniqueItems', params: pair, message: `must NOT have duplicate items (items ## ${pair.j} and ${pair.i} are identical)` } satisfies Partial<ErrorObject>]
          : undefined;
        return pair === null;
      };
      return validate;
    },
  });
}
