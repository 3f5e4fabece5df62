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
import { assertError, assertStatus, call, grant, newApp, person, platformKey, rand, sql } from '../../access/support.js';
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

test('IV-6 an answer the service chooses is no fault: the SSO callback\'s 501 not_implemented is never logged as a warning or an error (the log here keeps warn and above)', async () => {
  const res = await call(t, 'POST', '/v1/auth/sso/google/callback', null, {});
  assertError(res, 501, 'not_implemented');
  const requestId = String(res.headers['request-id']);
  assert.match(requestId, /^req_/);
  assert.deepEqual(t.logs.filter((line) => line.reqId === requestId), []);
});
