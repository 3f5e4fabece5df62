// OWASP API4:2023: the request schemas' and settings schemas' `uniqueItems` (src/http/unique-items.ts)
// answers as Ajv's own does, valid or not, with the same error (the pair of indices it names) and in
// the same place among the other errors, but in linear time.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import { duplicatePair, linearUniqueItems } from '../../src/http/unique-items.js';

const ajvs = () => {
  const stock = new Ajv.default({ allErrors: true, strict: false });
  const linear = new Ajv.default({ allErrors: true, strict: false });
  linearUniqueItems(linear);
  return { stock, linear };
};

const SCHEMAS: object[] = [
  { type: 'array', uniqueItems: true },
  { type: 'array', uniqueItems: false },
  { type: 'array', uniqueItems: true, items: { type: 'string', maxLength: 3 }, maxItems: 4 },
  { type: 'array', uniqueItems: true, items: { type: ['string', 'number'] } },
  { type: 'array', uniqueItems: true, items: { type: 'integer' }, minItems: 2 },
  { type: 'array', uniqueItems: true, items: { type: ['null', 'boolean'] } },
  { type: 'array', uniqueItems: true, items: { type: 'object' } },
  { type: 'array', uniqueItems: true, items: { anyOf: [{ const: 'a' }, { const: 'b' }, { const: 1 }] }, maxItems: 3 },
  { type: 'array', uniqueItems: true, items: [{ type: 'string' }], contains: { const: 2 } },
  { type: 'object', properties: { tags: { type: 'array', uniqueItems: true, items: { type: 'string' } }, other: { type: 'array', uniqueItems: true } } },
];

const VALUES: unknown[] = ['a', 'b', 'a_', '1', 1, 1.5, 2, 0, -0, true, false, null, [], [1], [1, 2], [2, 1], {}, { a: 1, b: 2 }, { b: 2, a: 1 }, { a: [1, { c: null }] }, { a: [1, { c: null }], b: 'x' }, '__proto__', 'constructor', 'toString'];

/** A deterministic stream of arrays drawn from VALUES (a linear congruential generator). */
function* arrays(count: number): Generator<unknown[]> {
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
  for (let n = 0; n < count; n++) {
    const length = next() % 9;
    yield Array.from({ length }, () => VALUES[next() % VALUES.length]);
  }
}

test('OWASP API4:2023: the linear uniqueItems gives Ajv\'s own answer and errors (same pair of indices, same order among the other errors) on every schema shape, for 3,000 arrays each, nested ones too', () => {
  const { stock, linear } = ajvs();
  let compared = 0;
  for (const schema of SCHEMAS) {
    const expected = stock.compile(schema);
    const actual = linear.compile(schema);
    for (const items of arrays(3_000)) {
      const data = (schema as { type: string }).type === 'object' ? { tags: items, other: [...items].reverse() } : items;
      const ok = expected(data);
      assert.equal(actual(data), ok, `${JSON.stringify(schema)} on ${JSON.stringify(data)}`);
      const strip = (errors: typeof expected.errors) => (errors ?? []).map(({ instancePath, schemaPath, keyword, params, message }) => ({ instancePath, schemaPath, keyword, params: { ...params }, message }));
      assert.deepEqual(strip(actual.errors), strip(expected.errors), `${JSON.stringify(schema)} on ${JSON.stringify(data)}`);
      compared++;
    }
  }
  assert.equal(compared, SCHEMAS.length * 3_000);
});

test('OWASP API4:2023: uniqueItems over 150,000 distinct untyped items (what a 1 MB body holds) compares each item once: no pair of items is compared, where Ajv\'s own loop compared 11 billion pairs', () => {
  const items = Array.from({ length: 150_000 }, (_, i) => i);
  let compared = 0;
  // Counting the keys made stands for counting comparisons: each item is keyed once, then looked up once.
  const counting = new Proxy(items, { get: (target, key) => (typeof key === 'string' && /^\d+$/.test(key) && compared++, Reflect.get(target, key)) });
  assert.equal(duplicatePair(counting, []), null);
  assert.equal(compared, items.length);
  assert.deepEqual(duplicatePair([...items, 5, 7], []), { i: 150_001, j: 7 });
});
