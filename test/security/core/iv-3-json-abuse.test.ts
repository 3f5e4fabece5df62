// IV-3: JSON abuse against a real `custom` PATCH (an AppProfile's custom map, merged one level deep):
// prototype keys at every depth and spelling, duplicate keys, depth 10k, a body one byte past 1 MB,
// wrong content types, bytes that are not UTF-8, NUL and 1e309, plus duplicate keys and prototype keys
// at the OAuth token endpoint (JSON and form bodies), and a 1 MB form body of 150,000 distinct names on
// every route that takes forms (read in linear time, API4); 1 MB JSON bodies of ~100,000 unknown fields or
// wrong-typed array items get their 422 in time, naming at most 100 fields (API4).
// Each gets its 4xx; afterwards no prototype in this (the server's) process is polluted, the stored
// custom map is untouched and the service still answers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { BODY_LIMIT_BYTES } from '../../../src/app.js';
import { assertError, assertStatus, call, grant, newApp, person, platformKey, type InjectResponse } from '../../access/support.js';
import { assertOAuthError, TOKEN } from '../../oauth/support.js';
import { figure } from './support.js';
import { EVENT_TYPES } from '../../../src/modules/webhooks/catalog.js';
import { CreateWebhookBody } from '../../../src/modules/webhooks/schemas.js';
import { validatorCompiler } from '../../../src/http/validation.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
/** `{"custom":{"a":"xxx…"}}` of exactly `bytes` bytes. */
const sized = (bytes: number) => `{"custom":{"a":"${'x'.repeat(bytes - '{"custom":{"a":""}}'.length)}"}}`;

test('IV-3 JSON abuse on PATCH custom: __proto__ / constructor.prototype at any depth, duplicate keys, NUL and 1e309 are 4xx (400 malformed_json or 422 validation_failed), depth 10k 422, 1 MB + 1 byte 413 payload_too_large, a wrong Content-Type 415 unsupported_media_type; ({}).polluted stays undefined, custom is unchanged and the process stays up', async () => {
  const admin = await platformKey(t);
  const user = await person(t);
  const app = await newApp(t, admin);
  await grant(t, admin, user.id, app.id);
  const url = `/v1/users/me/apps/${app.id}/profile`;
  const send = (payload: string | Buffer, contentType: string | null = 'application/json') =>
    t.app.inject({ method: 'PATCH', url, headers: { authorization: `Bearer ${user.token}`, ...(contentType ? { 'content-type': contentType } : {}) }, payload });
  assertStatus(await send('{"custom":{"kept":1}}'), 200);
  assert.equal(Buffer.byteLength(sized(BODY_LIMIT_BYTES)), BODY_LIMIT_BYTES);

  const malformed = (r: InjectResponse) => assertError(r, 400, 'malformed_json');
  const invalid = (field: string) => (r: InjectResponse) => {
    const error = assertError(r, 422, 'validation_failed');
    assert.ok(error.details.fields.some((f: { path: string }) => f.path.startsWith(field)), r.body);
  };
  const variants: [string, () => Promise<InjectResponse>, (r: InjectResponse) => void][] = [
    ['__proto__ inside custom', () => send('{"custom":{"__proto__":{"polluted":"yes"}}}'), malformed],
    ['__proto__ one level below custom', () => send('{"custom":{"x":{"__proto__":{"polluted":"yes"}}}}'), malformed],
    ['__proto__ spelled with a \\u escape', () => send('{"custom":{"\\u005f_proto__":{"polluted":"yes"}}}'), malformed],
    ['__proto__ at the top level', () => send('{"__proto__":{"polluted":"yes"},"custom":{}}'), malformed],
    ['constructor.prototype inside custom', () => send('{"custom":{"constructor":{"prototype":{"polluted":"yes"}}}}'), malformed],
    ['constructor.prototype at the top level', () => send('{"constructor":{"prototype":{"polluted":"yes"}},"custom":{}}'), malformed],
    ['duplicate key inside custom', () => send('{"custom":{"a":1,"a":2}}'), malformed],
    ['duplicate key, one spelled with a \\u escape', () => send('{"custom":{"a":1,"\\u0061":2}}'), malformed],
    ['duplicate custom at the top level', () => send('{"custom":{"a":1},"custom":{"b":2}}'), malformed],
    ['duplicate key in a nested object, the second an object', () => send('{"custom":{"x":{"k":1,"k":{"polluted":"yes"}}}}'), malformed],
    ['nesting depth 10,000 inside custom', () => send(`{"custom":{"a":${deep(10_000)}}}`), invalid('custom')],
    ['a body of 1 MB + 1 byte', () => send(sized(BODY_LIMIT_BYTES + 1)), (r) => assertError(r, 413, 'payload_too_large')],
    ['Content-Type text/plain', () => send('{"custom":{"a":1}}', 'text/plain'), (r) => assertError(r, 415, 'unsupported_media_type')],
    ['Content-Type application/xml', () => send('<custom><a>1</a></custom>', 'application/xml'), (r) => assertError(r, 415, 'unsupported_media_type')],
    ['a form body on a JSON route', () => send('custom[__proto__][polluted]=yes', 'application/x-www-form-urlencoded'), (r) => assertError(r, 415, 'unsupported_media_type')],
    ['invalid UTF-8 inside custom', () => send(Buffer.concat([Buffer.from('{"custom":{"a":"x'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}}')])), malformed],
    ['NUL escaped in a custom value', () => send('{"custom":{"a":"x\\u0000y"}}'), invalid('custom')],
    ['NUL escaped in a custom key', () => send('{"custom":{"a\\u0000":1}}'), invalid('custom')],
    ['a raw NUL byte in a string', () => send(Buffer.from('{"custom":{"a":"x\u0000y"}}')), malformed],
    ['1e309 inside custom', () => send('{"custom":{"a":1e309}}'), malformed],
    ['duplicate keys in a JSON body at oauth/token (its own error shape)', () => t.app.inject({
      method: 'POST', url: TOKEN, headers: { 'content-type': 'application/json' },
      payload: '{"grant_type":"refresh_token","refresh_token":"rtk_x","client_id":"app_x","client_id":"app_y"}',
    }), (r) => assertOAuthError(r, 'invalid_request')],
    ['__proto__ keys in a form body at oauth/token', () => t.app.inject({
      method: 'POST', url: TOKEN, headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'grant_type=refresh_token&refresh_token=rtk_x&client_id=app_x&__proto__[polluted]=yes&constructor[prototype][polluted]=yes',
    }), (r) => assert.equal(r.statusCode, 400, r.body)],
  ];

  const wrong: string[] = [];
  for (const [name, sendIt, expect] of variants) {
    const res = await sendIt();
    try {
      expect(res);
    } catch (err) {
      wrong.push(`${name}: ${res.statusCode} ${res.body.slice(0, 160)}`);
    }
  }
  const polluted = [Object.prototype, Array.prototype, Function.prototype, String.prototype].filter((p) => 'polluted' in p).length + (({} as any).polluted === undefined ? 0 : 1);
  const health = await t.app.inject({ method: 'GET', url: '/health' });
  figure('IV-3', `variants answered otherwise: ${wrong.length} / ${variants.length}; polluted prototypes: ${polluted}; crashes: ${health.statusCode === 200 ? 0 : 1}`);
  assert.deepEqual(wrong, []);
  assert.equal(polluted, 0);
  assert.equal(health.statusCode, 200, health.body);
  assert.deepEqual(assertStatus(await call(t, 'GET', url, user.token), 200).custom, { kept: 1 }, 'no refused body changed custom');
  assert.deepEqual(assertStatus(await send('{"custom":{"kept":null,"b":2}}'), 200).custom, { b: 2 }, 'the route still merges');
});

/** A form body just under 1 MB of `count` distinct names with empty values (`0=&1=&…&z=&10=…`). */
function manyNames(count: number): string {
  const body = Array.from({ length: count }, (_, i) => `${i.toString(36)}=`).join('&');
  assert.ok(Buffer.byteLength(body) <= BODY_LIMIT_BYTES, 'under the body limit');
  return body;
}

test('IV-3 / OWASP API4:2023 "unrestricted resource consumption": a form body of 1 MB holding 150,000 distinct names is read in time linear in its size on every route that takes forms (the hosted sign-in page, the mailed links\' pages, /forgot-password, the payment simulator, oauth/token); each answers its 4xx within 5 s (a quadratic read held the event loop every caller shares for minutes) and the process stays up', async () => {
  const body = manyNames(150_000);
  const routes: [string, number][] = [
    ['/signin', 403], ['/signin/mfa', 403], ['/signin/continue', 403], ['/verify-email', 403], ['/reset-password', 403],
    ['/accept-invitation', 403], ['/forgot-password', 403], ['/billing/simulator/checkout/cs_sim_unknown/complete', 404], [TOKEN, 400],
  ];
  let slowest = 0;
  for (const [url, status] of routes) {
    const started = performance.now();
    const res = await t.app.inject({ method: 'POST', url, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: body });
    const ms = Math.round(performance.now() - started);
    assert.equal(res.statusCode, status, `${url}: ${res.body.slice(0, 200)}`);
    // A bound CI's load cannot reach; the pairwise check it guards against took 23 s (unique-items.test.ts counts its work).
    assert.ok(ms <= 10_000, `${url} took ${ms} ms`);
    slowest = Math.max(slowest, ms);
  }
  figure('IV-3', `slowest form route on 150,000 names: ${slowest} ms (of ${routes.length} routes)`);
  assert.equal((await t.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
});

/** `{"custom":{},"0":0,"1":0,…}`: a JSON body just under 1 MB of distinct unknown field names (base 36), and the names. */
function manyUnknownFields(): { body: string; names: string[] } {
  const names: string[] = [];
  let bytes = '{"custom":{}}'.length;
  for (let i = 0; ; i++) {
    const name = `u${i.toString(36)}`;
    const more = `,"${name}":0`.length;
    if (bytes + more > BODY_LIMIT_BYTES) break;
    bytes += more;
    names.push(name);
  }
  return { body: `{"custom":{}${names.map((n) => `,"${n}":0`).join('')}}`, names };
}

test('IV-3 / OWASP API4:2023 "unrestricted resource consumption": a 422 validation_failed lists at most the first 100 offending fields, in the order they are found; a 1 MB JSON body of ~100,000 unknown fields answers 100 entries (an answer naming each was ~5 MB) within 5 s; so do 16 KB of AppSettings overrides the settings_schema does not declare (the service\'s own check)', async () => {
  const admin = await platformKey(t);
  const user = await person(t);
  const app = await newApp(t, admin);
  await grant(t, admin, user.id, app.id);
  const { body, names } = manyUnknownFields();
  assert.ok(names.length > 90_000, `${names.length} fields`);
  const send = (url: string, payload: string) =>
    t.app.inject({ method: 'PATCH', url, headers: { authorization: `Bearer ${user.token}`, 'content-type': 'application/json' }, payload });

  let started = performance.now();
  const res = await send(`/v1/users/me/apps/${app.id}/profile`, body);
  const schemaMs = Math.round(performance.now() - started);
  const fields = assertError(res, 422, 'validation_failed').details.fields;
  assert.deepEqual(fields, names.slice(0, 100).map((path) => ({ path, message: 'is not a known field' })));
  assert.ok(res.body.length < 16_384, `${res.body.length} bytes answered`);

  // The service's own check (keys the Application's settings_schema does not declare), not the schema's.
  started = performance.now();
  const undeclared = names.slice(1, 1_500);
  const overridesBody = `{"overrides":{${undeclared.map((n) => `"${n}":0`).join(',')}}}`;
  assert.ok(overridesBody.length < 16_384, 'within the 16 KB the overrides may hold');
  const overrides = await send(`/v1/users/me/apps/${app.id}/settings`, overridesBody);
  const overridesMs = Math.round(performance.now() - started);
  const overrideFields = assertError(overrides, 422, 'validation_failed').details.fields;
  assert.equal(overrideFields.length, 100, overrides.body.slice(0, 300));
  assert.deepEqual(overrideFields[0], { path: `overrides.${names[1]}`, message: "is not a property of the Application's settings_schema" });
  assert.deepEqual(overrideFields[99].path, `overrides.${names[100]}`);
  figure('IV-3', `1 MB of ${names.length} unknown fields: ${schemaMs} ms; ${res.body.length} bytes answered; ${undeclared.length} undeclared overrides: ${overridesMs} ms`);
  assert.ok(schemaMs <= 5_000 && overridesMs <= 5_000, `${schemaMs} ms, ${overridesMs} ms`);
});

/** `[0,1,2,…]`: distinct numbers, as many as fit in `bytes` with the rest of the body. */
const manyNumbers = (bytes: number): number[] => {
  const items: number[] = [];
  for (let size = 2; size + String(items.length).length + 1 <= bytes; ) size += String(items.push(items.length) - 1).length + 1;
  return items;
};

test('IV-3 / OWASP API4:2023 "unrestricted resource consumption": a 1 MB JSON array of ~150,000 wrong-typed items where the schema types an array with maxItems (webhook events, an Organization grant\'s member_overrides) is refused 422 validation_failed within 10 s (it took 23 s: unique items checked by pairs; under 1 s now), naming the array\'s length first and at most 100 fields', async () => {
  const admin = await platformKey(t);
  const bodies: ['POST' | 'PATCH', string, string, string][] = [
    ['POST', '/v1/webhooks', 'events', `must NOT have more than ${EVENT_TYPES.length + 1} items`],
    ['PATCH', '/v1/entitlements/ent_unknown', 'member_overrides', 'must NOT have more than 10000 items'],
  ];
  let slowest = 0;
  for (const [method, url, field, first] of bodies) {
    const rest = method === 'POST' ? { scope: 'platform', url: 'https://hooks.example.com/in' } : {};
    const items = manyNumbers(BODY_LIMIT_BYTES - JSON.stringify({ ...rest, [field]: [] }).length);
    const payload = JSON.stringify({ ...rest, [field]: items });
    assert.ok(items.length > 140_000 && Buffer.byteLength(payload) <= BODY_LIMIT_BYTES, `${items.length} items, ${payload.length} bytes`);
    const started = performance.now();
    const res = await t.app.inject({ method, url, headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, payload });
    const ms = Math.round(performance.now() - started);
    const fields = assertError(res, 422, 'validation_failed').details.fields;
    assert.deepEqual(fields[0], { path: field, message: first }, `${url}: ${res.body.slice(0, 300)}`);
    assert.ok(fields.length <= 100, `${url}: ${fields.length} fields`);
    // A bound CI's load cannot reach; the pairwise check it guards against took 23 s (unique-items.test.ts counts its work).
    assert.ok(ms <= 10_000, `${url} took ${ms} ms`);
    slowest = Math.max(slowest, ms);
  }
  figure('IV-3', `slowest 1 MB array of wrong-typed items: ${slowest} ms`);
});

test('IV-3 / OWASP API4:2023 "unrestricted resource consumption": a wrong item of webhook events is one or two schema errors, however many names events takes (as an anyOf of its 19 names, a number failed each twice: 1 MB of zeros, 524,000 items, made 20 million errors, 3 GB and 24 s); the 422 names the item and the names it may be', async () => {
  const validate = validatorCompiler({ schema: CreateWebhookBody, httpPart: 'body', method: 'POST', url: '/v1/webhooks' }) as (data: unknown) => { error?: unknown[] };
  const items = 1_000;
  for (const wrong of [0, 'user.renamed', {}, null]) {
    // Beside one error or two for each item, the array's own: maxItems and uniqueItems.
    const errors = validate({ scope: 'platform', url: 'https://hooks.example.com/in', events: Array(items).fill(wrong) }).error ?? [];
    assert.ok(errors.length <= 2 * items + 2, `${JSON.stringify(wrong)}: ${errors.length} errors for ${items} items`);
  }
  const names = `must be one of *, ${EVENT_TYPES.join(', ')}`;
  const res = await call(t, 'POST', '/v1/webhooks', await platformKey(t), { scope: 'platform', url: 'https://hooks.example.com/in', events: ['user.deleted', 'user.renamed', 7] });
  assert.deepEqual(assertError(res, 422, 'validation_failed').details.fields, [
    { path: 'events.1', message: names },
    { path: 'events.2', message: 'must be string' },
    { path: 'events.2', message: names },
  ]);
});

test('IV-3 / OWASP API4:2023 "unrestricted resource consumption": AppSettings overrides are at most 16 KB, and values sent beyond it are refused on their size before the settings_schema checks them (an array of 8,000 numbers against an anyOf of 1,000 names, the most a schema held until anyOf took 100, made 8 million errors, 1 GB and 7 s; 1 MB of them would exhaust the memory)', async () => {
  const admin = await platformKey(t);
  const user = await person(t);
  const app = await newApp(t, admin);
  await grant(t, admin, user.id, app.id);
  const names = { anyOf: Array.from({ length: 100 }, (_, i) => ({ const: `name-${i}` })) };
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { settings_schema: { type: 'object', properties: { tags: { type: 'array', items: names } } } }), 200);
  const url = `/v1/users/me/apps/${app.id}/settings`;
  assertStatus(await call(t, 'PATCH', url, user.token, { overrides: { tags: ['name-1', 'name-99'] } }), 200);
  assert.deepEqual(assertError(await call(t, 'PATCH', url, user.token, { overrides: { tags: [1] } }), 422, 'validation_failed').details.fields, [{ path: 'overrides.tags', message: 'must be equal to constant' }], 'a value of at most 16 KB is checked against its property');
  const started = performance.now();
  const res = await call(t, 'PATCH', url, user.token, { overrides: { tags: Array.from({ length: 8_000 }, (_, i) => i) } });
  const ms = Math.round(performance.now() - started);
  assert.deepEqual(assertError(res, 422, 'validation_failed').details.fields, [{ path: 'overrides', message: 'must serialize to at most 16 KB' }]);
  figure('IV-3', `AppSettings overrides of 39 KB against an anyOf of 100 names: ${ms} ms`);
  assert.deepEqual(assertStatus(await call(t, 'GET', url, user.token), 200).overrides, { tags: ['name-1', 'name-99'] });
});
