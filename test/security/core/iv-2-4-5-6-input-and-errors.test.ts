// IV-2, IV-4, IV-5, IV-6: the boundary rows the module tests leave open (custom counted in UTF-8 bytes,
// an http avatar), LIKE wildcards and parameter pollution, email look-alikes and a signup burst, and
// what a 500 reveals. The app carries a test-only module whose routes throw and run bad SQL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Module } from '../../../src/modules/types.js';
import { ctxOf } from '../../../src/http/gate.js';
import { PASSWORD, uniqueEmail } from '../../helpers/fixtures.js';
import { assertError, assertStatus, call, grant, grantReq, inSeconds, newApp, person, platformKey, rand, sql } from '../../access/support.js';
import { buildCapturedAppWith } from './catalog-support.js';
import { figure, type CapturedApp } from './support.js';

/** Routes failing the three ways IV-6 names: a thrown Error, a database error, a TypeError from a bug. */
const failing: Module = {
  name: 'iv-6-failures',
  routes: (app, deps) => {
    app.get('/v1/_iv6/throw', { config: { meta: { auth: 'any' } } }, async () => {
      throw new Error('secret-token-abc at /work/main/src/x.ts SELECT * FROM users');
    });
    app.get('/v1/_iv6/sql', { config: { meta: { auth: 'any' } } }, async (request) => {
      await ctxOf(deps, request).db.query('SELECT * FROM no_such_table_xyz WHERE password_hash = $1', ['x']);
      return {};
    });
    app.get('/v1/_iv6/bug', { config: { meta: { auth: 'any' } } }, async () => {
      throw new TypeError("Cannot read properties of undefined (reading 'id')");
    });
    // Timeouts as the pg driver raises them, a lock timeout, and throws that are not Errors.
    app.get('/v1/_iv6/statement-timeout', { config: { meta: { auth: 'any' } } }, async () => {
      throw Object.assign(new Error('canceling statement due to statement timeout: SELECT password_hash FROM users'), { code: '57014', where: 'SQL statement "SELECT secret"' });
    });
    app.get('/v1/_iv6/connect-timeout', { config: { meta: { auth: 'any' } } }, async () => {
      throw new Error('timeout exceeded when trying to connect to postgres://app:s3cretpw@db:5432/platform');
    });
    app.get('/v1/_iv6/lock-timeout', { config: { meta: { auth: 'any' } } }, async () => {
      throw Object.assign(new Error('canceling statement due to lock timeout on relation users'), { code: '55P03' });
    });
    app.get('/v1/_iv6/object', { config: { meta: { auth: 'any' } } }, async () => {
      throw { message: 'a plain object from /work/main/src/x.ts', stack: 'at x (/work/main/src/x.ts:1:1)' };
    });
    app.get('/v1/_iv6/string', { config: { meta: { auth: 'any' } } }, async () => {
      throw 'a string thrown with password=hunter2';
    });
  },
};

let t: CapturedApp;
let admin: string;
before(async () => {
  t = await buildCapturedAppWith([failing]);
  admin = await platformKey(t);
});
after(() => t.close());

test('IV-2 "422 exactly past each limit": custom at 16 KB counts UTF-8 bytes (16,384 bytes of 2-byte characters accepted, 16,385 refused); an http avatar_url is 422', async () => {
  const u = await person(t);
  assertInvalidField(await call(t, 'PATCH', '/v1/users/me/profile', u.token, { avatar_url: 'http://example.com/a.png' }), 'avatar_url');
  const app = await newApp(t, admin);
  await grant(t, admin, u.id, app.id);
  const url = `/v1/users/me/apps/${app.id}/profile`;
  // {"a":"…"} is 8 bytes of framing; 4,000 'é' are 8,000 bytes in UTF-8 but 4,000 UTF-16 units.
  const custom = (bytes: number) => ({ a: 'é'.repeat(4000) + 'x'.repeat(bytes - 8 - 8000) });
  assert.equal(Buffer.byteLength(JSON.stringify(custom(16384))), 16384);
  assertStatus(await call(t, 'PATCH', url, u.token, { custom: custom(16384) }), 200);
  assertInvalidField(await call(t, 'PATCH', url, u.token, { custom: custom(16385) }), 'custom');
  figure('IV-2', 'custom limit counted in UTF-8 bytes: 16,384 accepted, 16,385 refused');
});

test('IV-2 the boundary table, "422 exactly past each limit": display_name 0/1/100/101 (counted in characters: 100 emoji accepted), avatar_url 2048/2049 and non-https, contact_phone + 7/8/15/16 digits and malformed, order_id 255/256, starts_at 1 year − 1 s / + 1 s, the slug pattern and `platform`, permission keys 64/65 characters after the prefix, another slug or a platform key', async () => {
  const wrong: string[] = [];
  const expect = (label: string, res: Awaited<ReturnType<typeof call>>, status: number) => {
    if (res.statusCode !== status) wrong.push(`${label}: ${res.statusCode} (want ${status}) ${res.body.slice(0, 160)}`);
    else if (status === 422) assert.equal(res.json().error.code, 'validation_failed', `${label}: ${res.body}`);
  };
  const u = await person(t);
  const profile = (body: object) => call(t, 'PATCH', '/v1/users/me/profile', u.token, body);
  for (const [value, status] of [['', 422], ['x', 200], ['x'.repeat(100), 200], ['x'.repeat(101), 422], ['😀'.repeat(100), 200], ['😀'.repeat(101), 422]] as const) {
    expect(`display_name of ${[...value].length} characters`, await profile({ display_name: value }), status);
  }
  const url = (n: number) => `https://e.com/${'a'.repeat(n - 'https://e.com/'.length)}`;
  for (const [value, status] of [[url(2048), 200], [url(2049), 422], ['http://e.com/a', 422], ['ftp://e.com/a', 422]] as const) {
    expect(`avatar_url ${value.slice(0, 12)} of ${value.length}`, await profile({ avatar_url: value }), status);
  }
  for (const [digits, status] of [[7, 422], [8, 200], [15, 200], [16, 422]] as const) expect(`contact_phone + ${digits} digits`, await profile({ contact_phone: `+${'1'.repeat(digits)}` }), status);
  for (const value of ['12345678', '+1234 5678', '+12345678\n', '+１２３４５６７８']) expect(`contact_phone ${JSON.stringify(value)}`, await profile({ contact_phone: value }), 422);

  const app = await newApp(t, admin);
  for (const [length, status] of [[255, 201], [256, 422]] as const) {
    expect(`order_id of ${length}`, await grantReq(t, admin, (await person(t)).id, { application_id: app.id, source: 'purchase', order_id: 'o'.repeat(length) }), status);
  }
  const YEAR = 365 * 86400;
  for (const [ahead, status] of [[YEAR - 1, 201], [YEAR + 1, 422]] as const) {
    expect(`starts_at ${ahead} s ahead`, await grantReq(t, admin, (await person(t)).id, { application_id: app.id, source: 'admin_grant', starts_at: inSeconds(t, ahead) }), status);
  }
  const createApp = async (slug: string, extra: object = {}) =>
    call(t, 'POST', '/v1/applications', admin, { slug, name: 'A', launch_url: 'https://a.example.com', owner_user_id: (await person(t)).id, ...extra });
  const r = rand(3);
  for (const [slug, status] of [['a', 422], [`a${r}`, 201], [`b${r}${'x'.repeat(63 - r.length - 1)}`, 201], [`c${'x'.repeat(64)}`, 422], [`Ab${r}`, 422], [`1b${r}`, 422],
    [`a_b${r}`, 422], [`-a${r}`, 422], ['platform', 422], [`a b${r}`, 422], [`aé${r}`, 422]] as const) {
    expect(`slug ${JSON.stringify(slug)} (${slug.length})`, await createApp(slug), status);
  }
  for (const [suffix, status] of [['k'.repeat(64), 201], ['k'.repeat(65), 422], ['K', 422], ['', 422], ['a-b', 422], ['a b', 422]] as const) {
    const slug = `q${rand(4)}`;
    expect(`permission key app.<slug>.${suffix.slice(0, 5)} (${suffix.length})`, await createApp(slug, { permissions: [{ key: `app.${slug}.${suffix}`, description: 'd' }] }), status);
  }
  expect('permission key of another slug', await createApp(`w${rand(4)}`, { permissions: [{ key: 'app.other.k', description: 'd' }] }), 422);
  expect('a platform permission key', await createApp(`v${rand(4)}`, { permissions: [{ key: 'users.list', description: 'd' }] }), 422);
  figure('IV-2', `boundary rows answered otherwise: ${wrong.length}`);
  assert.deepEqual(wrong, []);
});

function assertInvalidField(res: Awaited<ReturnType<typeof call>>, field: string): void {
  const error = assertError(res, 422, 'validation_failed');
  assert.ok(JSON.stringify(error.details).includes(field), res.body);
}

test('IV-4 "LIKE wildcards escaped (%%% matches only literal %)": q=%%%, ___, a%\'--, \\\\\\ and %_% on users, and % patterns in the exact email filter and the organization q, return only literal matches', async () => {
  const pct = await person(t);
  const under = await person(t);
  await person(t);
  assertStatus(await call(t, 'PATCH', `/v1/users/${pct.id}/profile`, admin, { display_name: '%%%literal' }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/users/${under.id}/profile`, admin, { display_name: '___literal' }), 200);
  const unexpected: string[] = [];
  const ids = async (url: string) => assertStatus(await call(t, 'GET', url, admin), 200).data.map((row: { id: string }) => row.id);
  for (const [q, expected] of [['%%%', [pct.id]], ['___', [under.id]], ["a%'--", []], ['\\\\\\', []], ['%_%', []]] as const) {
    const got = await ids(`/v1/users?q=${encodeURIComponent(q)}&limit=100`);
    if (JSON.stringify(got) !== JSON.stringify(expected)) unexpected.push(`users q=${q}: ${got.length} rows`);
  }
  for (const email of ['%', '%@example.com', '_%']) {
    const got = await ids(`/v1/users?email=${encodeURIComponent(email)}`);
    if (got.length) unexpected.push(`users email=${email}: ${got.length} rows`);
  }
  const creator = await person(t);
  assertStatus(await call(t, 'POST', '/v1/organizations', creator.token, { name: `zzz-${rand()}` }), 201);
  const orgs = await ids(`/v1/organizations?q=${encodeURIComponent('%%%')}`);
  if (orgs.length) unexpected.push(`organizations q=%%%: ${orgs.length} rows`);
  figure('IV-4', `unexpected rows: ${unexpected.length}`);
  assert.deepEqual(unexpected, []);
});

test('IV-4 "pollution rejected or resolved deterministically": a repeated query parameter is 422 naming it, in either order; two Authorization headers are resolved by the first one', async () => {
  for (const query of ['status=active&status=deleted', 'status=deleted&status=active', 'limit=5&limit=500']) {
    const res = await call(t, 'GET', `/v1/users?${query}`, admin);
    assertInvalidField(res, `query.${query.split('=')[0]}`);
  }
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const port = (t.app.server.address() as AddressInfo).port;
  const u = await person(t);
  const send = (values: string[]) => new Promise<number>((resolve, reject) => {
    // Raw header pairs keep duplicates; with a raw list Node adds no Host, so it is sent explicitly.
    const headers = ['host', `127.0.0.1:${port}`, ...values.flatMap((v) => ['authorization', `Bearer ${v}`])];
    const req = httpRequest({ host: '127.0.0.1', port, path: '/v1/users/me', method: 'GET', headers }, (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
    req.end();
  });
  assert.equal(await send([u.token]), 200, 'one header works over the socket');
  // Resolved deterministically: the first Authorization header decides (Node's parser drops repeats).
  for (const pair of [[u.token, 'garbage'], ['garbage', u.token], [admin, u.token]]) {
    assert.equal(await send(pair), await send([pair[0]]), `pair starting ${pair[0].slice(0, 8)}`);
  }
  assert.deepEqual([await send([u.token, 'garbage']), await send(['garbage', u.token])], [200, 401]);
});

test('IV-5 "case-insensitive uniqueness per mode": case variants are 409 email_taken; a trailing dot, full-width look-alikes and padding are 422; 20 concurrent signups with one email in mixed case give "exactly one 201 and the rest 409 email_taken"', async () => {
  const local = `iv5-${rand(4)}`;
  const base = `${local}@example.com`;
  assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email: base, password: PASSWORD }), 201);
  const signup = (email: string) => call(t, 'POST', '/v1/auth/signup', null, { email, password: PASSWORD });
  for (const variant of [`${local}@EXAMPLE.COM`, `${local.toUpperCase()}@example.com`]) assertError(await signup(variant), 409, 'email_taken');
  for (const variant of [`${local}@example.com.`, `${local}@\uFF45xample.com`, `${local.replace('i', '\uFF49')}@example.com`, ` ${base}`, `${base} `]) {
    assertInvalidField(await signup(variant), 'email');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM users WHERE lower(email) LIKE $1', [`%${local}%`]))[0].n, 1);

  const email = uniqueEmail('race');
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => signup(i % 2 ? email.toUpperCase() : email)));
  assert.equal(results.filter((r) => r.statusCode === 201).length, 1, results.map((r) => r.statusCode).join(','));
  for (const r of results) if (r.statusCode !== 201) assertError(r, 409, 'email_taken');
  const accounts = (await sql(t, 'SELECT count(*)::int AS n FROM users WHERE lower(email) = lower($1)', [email]))[0].n;
  figure('IV-5', `duplicate accounts: ${accounts - 1}`);
  assert.equal(accounts, 1);
});

test('IV-6 a thrown exception, a database error and a TypeError: "generic 500 with a req_ id; no stack, SQL, file path or secret in any body; the error is logged with the req_ id"', async () => {
  let leaky = 0;
  for (const path of ['/v1/_iv6/throw', '/v1/_iv6/sql', '/v1/_iv6/bug']) {
    const res = await call(t, 'GET', path, admin);
    const requestId = String(res.headers['request-id']);
    assertError(res, 500, 'internal_error');
    assert.match(requestId, /^req_/);
    if (['secret-token', '/work/', 'SELECT', 'no_such_table', 'password_hash', ' at ', 'TypeError', 'undefined', '.ts'].some((s) => res.body.includes(s))) leaky++;
    assert.ok(t.logs.some((line) => line.level >= 50 && JSON.stringify(line).includes(requestId)), `${path}: no error log line with ${requestId}`);
  }
  figure('IV-6', `leaky bodies: ${leaky} / 3`);
  assert.equal(leaky, 0);
});

test('IV-6 "force ... timeouts": a statement timeout (57014), a lock timeout (55P03), a pool connect timeout and throws that are not Errors (an object, a string) get a generic envelope (500 internal_error; the unreachable database 503 service_unavailable with Retry-After) with a req_ id, no SQL, secret, path or timeout detail in the body, and an error log line with that id', async () => {
  const expected: [string, number, string][] = [
    ['statement-timeout', 500, 'internal_error'], ['lock-timeout', 500, 'internal_error'], ['connect-timeout', 503, 'service_unavailable'],
    ['object', 500, 'internal_error'], ['string', 500, 'internal_error'],
  ];
  const leaky: string[] = [];
  for (const [path, status, code] of expected) {
    const res = await call(t, 'GET', `/v1/_iv6/${path}`, admin);
    assertError(res, status, code);
    if (status === 503) assert.equal(res.headers['retry-after'], '5', `${path}: Retry-After (docs/decisions.md: an unreachable database, 5 seconds)`);
    const requestId = String(res.headers['request-id']);
    assert.match(requestId, /^req_/);
    if (/secret|password|hunter2|s3cret|\/work\/|SELECT|statement|timeout|lock|57014|55P03/i.test(res.body)) leaky.push(`${path}: ${res.body}`);
    assert.ok(t.logs.some((line) => line.level >= 50 && JSON.stringify(line).includes(requestId)), `${path}: no error log line with ${requestId}`);
  }
  assert.deepEqual(leaky, []);
});

test('IV-6 an answer the service chooses is no fault: the SSO callback\'s 501 not_implemented is never logged as a warning or an error (the log here keeps warn and above)', async () => {
  const res = await call(t, 'POST', '/v1/auth/sso/google/callback', null, {});
  assertError(res, 501, 'not_implemented');
  const requestId = String(res.headers['request-id']);
  assert.match(requestId, /^req_/);
  assert.deepEqual(t.logs.filter((line) => line.reqId === requestId), []);
});
