import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { uniqueEmail } from '../helpers/fixtures.js';
import { alignToWindow, assertError } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp({ authRateLimitPerMinute: 2 });
});
after(() => t.close());

// Every unauthenticated endpoint of the Auth table, with a body it may refuse: the throttle runs first.
const ENDPOINTS: Array<[string, object]> = [
  ['/v1/auth/signup', {}],
  ['/v1/auth/login', { email: 'nobody@example.com', password: 'wrong-password-123' }],
  ['/v1/auth/mfa/verify', { mfa_token: 'mfa_unknown', code: '123456' }],
  ['/v1/auth/token/refresh', { refresh_token: 'rtk_unknown' }],
  ['/v1/auth/email/verify', { token: 'vrf_unknown' }],
  ['/v1/auth/email/verify/resend', { email: 'nobody@example.com' }],
  ['/v1/auth/password/forgot', { email: 'nobody@example.com' }],
  ['/v1/auth/password/reset', { token: 'pwr_unknown', password: 'amber-lantern-orchard-77' }],
  ['/v1/auth/invitations/accept', { token: 'inv_unknown', password: 'amber-lantern-orchard-77' }],
  ['/v1/auth/sso/okta/callback', {}],
];

const call = (url: string, payload: object, remoteAddress = '127.0.0.1') => t.app.inject({ method: 'POST', url, payload, remoteAddress });

for (const [url, payload] of ENDPOINTS) {
  test(`unauthenticated ${url} is throttled per IP: past the per-minute limit it answers 429 rate_limited with Retry-After`, async () => {
    alignToWindow(t, 60, 1);
    for (let i = 0; i < 2; i++) {
      const res = await call(url, payload);
      assert.notEqual(res.statusCode, 429, `call ${i + 1}: ${res.body}`);
    }
    const throttled = await call(url, payload);
    assertError(throttled, 429, 'rate_limited');
    const retryAfter = Number(throttled.headers['retry-after']);
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${throttled.headers['retry-after']}`);
    // Per IP: another client is not affected.
    assert.notEqual((await call(url, payload, '203.0.113.9')).statusCode, 429);
    // The next minute the client may call again.
    t.clock.advance(60);
    assert.notEqual((await call(url, payload)).statusCode, 429);
  });
}

test('per IP means per client, not per proxy: X-Forwarded-For is ignored unless the request comes from a TRUST_PROXY address, and then names the client that is throttled', async () => {
  const url = '/v1/auth/password/forgot';
  const payload = { email: 'nobody@example.com' };
  const from = (remoteAddress: string, forwardedFor: string) =>
    t.app.inject({ method: 'POST', url, payload, remoteAddress, headers: { 'x-forwarded-for': forwardedFor } });
  // No proxy trusted (the default): a client cannot leave its bucket by naming another address.
  alignToWindow(t, 60, 1);
  for (const forwarded of ['198.51.100.1', '198.51.100.2']) assert.notEqual((await from('192.0.2.10', forwarded)).statusCode, 429);
  assertError(await from('192.0.2.10', '198.51.100.3'), 429, 'rate_limited');
  // Behind a trusted proxy: each client has its own bucket; a client's own X-Forwarded-For is not believed.
  const proxied = await buildTestApp({ authRateLimitPerMinute: 2, trustProxy: ['10.0.0.0/8'] });
  try {
    alignToWindow(proxied, 60, 1);
    const via = (client: string, remoteAddress = '10.1.2.3') =>
      proxied.app.inject({ method: 'POST', url, payload, remoteAddress, headers: { 'x-forwarded-for': client } });
    for (let i = 0; i < 2; i++) assert.notEqual((await via('198.51.100.7')).statusCode, 429);
    assertError(await via('198.51.100.7'), 429, 'rate_limited');
    assert.notEqual((await via('198.51.100.8')).statusCode, 429, 'another client behind the same proxy is not throttled');
    for (let i = 0; i < 2; i++) assert.notEqual((await via(`198.51.100.${20 + i}`, '192.0.2.99')).statusCode, 429);
    // An untrusted peer is throttled as itself, whatever it forwards.
    assertError(await via('198.51.100.30', '192.0.2.99'), 429, 'rate_limited');
  } finally {
    await proxied.close();
  }
});

test('docs/decisions.md "Throttles": "Each endpoint counts separately": a client past the limit on password/forgot still gets its calls on login and token/refresh in the same minute, and stays throttled on forgot', async () => {
  alignToWindow(t, 60, 1);
  const [forgot, payload] = ENDPOINTS.find(([url]) => url === '/v1/auth/password/forgot')!;
  for (let i = 0; i < 2; i++) assert.notEqual((await call(forgot, payload)).statusCode, 429);
  assertError(await call(forgot, payload), 429, 'rate_limited');
  for (const [url, body] of ENDPOINTS.filter(([url]) => url === '/v1/auth/login' || url === '/v1/auth/token/refresh')) {
    for (let i = 0; i < 2; i++) assert.notEqual((await call(url, body)).statusCode, 429, `${url} call ${i + 1}`);
    assertError(await call(url, body), 429, 'rate_limited');
  }
  assertError(await call(forgot, payload), 429, 'rate_limited');
});

test('a throttled signup creates nothing', async () => {
  alignToWindow(t, 60, 1);
  await call('/v1/auth/signup', {});
  await call('/v1/auth/signup', {});
  const email = uniqueEmail('throttled');
  assertError(await call('/v1/auth/signup', { email, password: 'amber-lantern-orchard-77' }), 429, 'rate_limited');
  const rows = (await t.database.scoped('system').query('SELECT id FROM users WHERE email = $1', [email])).rows;
  assert.deepEqual(rows, []);
});

test('the per-minute limit holds for the whole minute: running the idempotency-prune job mid-minute does not reset the count', async () => {
  alignToWindow(t, 60, 1);
  const url = '/v1/auth/password/forgot';
  for (let i = 0; i < 2; i++) assert.notEqual((await call(url, { email: 'nobody@example.com' }, '198.51.100.7')).statusCode, 429);
  await t.deps.jobs.runNow('idempotency-prune');
  assertError(await call(url, { email: 'nobody@example.com' }, '198.51.100.7'), 429, 'rate_limited');
});

test('the limit is per minute: in each of two consecutive minutes the client gets its 2 calls, then 429, and the next minute again', async () => {
  const url = '/v1/auth/email/verify/resend';
  alignToWindow(t, 60, 1);
  for (let minute = 0; minute < 2; minute++) {
    for (let i = 0; i < 2; i++) assert.notEqual((await call(url, { email: 'nobody@example.com' }, '198.51.100.8')).statusCode, 429, `minute ${minute}, call ${i + 1}`);
    assertError(await call(url, { email: 'nobody@example.com' }, '198.51.100.8'), 429, 'rate_limited');
    t.clock.advance(60);
  }
});

test('the windows are fixed one-minute windows (docs/conventions.md "Throttling"): late in a minute, Retry-After counts only to that minute\'s end, and the next minute the client may call again', async () => {
  const url = '/v1/auth/login';
  const payload = { email: 'nobody@example.com', password: 'wrong-password-123' };
  alignToWindow(t, 60, 45);
  for (let i = 0; i < 2; i++) assert.notEqual((await call(url, payload, '198.51.100.9')).statusCode, 429, `call ${i + 1}`);
  const throttled = await call(url, payload, '198.51.100.9');
  assertError(throttled, 429, 'rate_limited');
  const retryAfter = Number(throttled.headers['retry-after']);
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 15, `Retry-After ${throttled.headers['retry-after']}: the minute ends within 15 seconds`);
  t.clock.advance(retryAfter);
  assert.notEqual((await call(url, payload, '198.51.100.9')).statusCode, 429, 'a new minute began');
});

test('"Retry-After set" on the per-IP throttle (fixed one-minute windows): the whole seconds to the minute\'s end, rounded up: 15 at 45.5 s into the minute, 1 at 59.5 s, and at the next minute the client may call again', async () => {
  const url = '/v1/auth/password/forgot';
  const payload = { email: 'nobody@example.com' };
  await withStoppedClock(t, async () => {
    alignToWindow(t, 60, 45.5);
    for (let i = 0; i < 2; i++) assert.notEqual((await call(url, payload, '198.51.100.12')).statusCode, 429, `call ${i + 1}`);
    const throttled = await call(url, payload, '198.51.100.12');
    assertError(throttled, 429, 'rate_limited');
    assert.equal(throttled.headers['retry-after'], '15');
    t.clock.advance(14);
    const late = await call(url, payload, '198.51.100.12');
    assertError(late, 429, 'rate_limited');
    assert.equal(late.headers['retry-after'], '1');
    t.clock.advance(0.5);
    assert.notEqual((await call(url, payload, '198.51.100.12')).statusCode, 429, 'a new minute began');
  });
});

test('per IP means per client: the addresses of one IPv6 /64 (one client holds all 2^64 of them) share a budget, and an IPv4 client counts as one whether written 192.0.2.44 or ::ffff:192.0.2.44', async () => {
  const url = '/v1/auth/login';
  // A new address each time, so that the per-account lockout never answers first.
  const payload = () => ({ email: uniqueEmail('ipv6'), password: 'wrong-password-123' });
  alignToWindow(t, 60, 1);
  assertError(await call(url, payload(), '2001:db8:1:2::1'), 401, 'invalid_credentials');
  assertError(await call(url, payload(), '2001:db8:1:2:ffff:ffff:ffff:fffe'), 401, 'invalid_credentials');
  const throttled = await call(url, payload(), '2001:0DB8:0001:0002:0:0:0:3');
  assertError(throttled, 429, 'rate_limited');
  assert.ok(Number(throttled.headers['retry-after']) >= 1 && Number(throttled.headers['retry-after']) <= 60);
  // The next /64 is another client.
  assertError(await call(url, payload(), '2001:db8:1:3::1'), 401, 'invalid_credentials');
  // IPv4 and its IPv4-mapped IPv6 spelling (a dual-stack listener) are one client.
  assertError(await call(url, payload(), '192.0.2.44'), 401, 'invalid_credentials');
  assertError(await call(url, payload(), '::ffff:192.0.2.44'), 401, 'invalid_credentials');
  assertError(await call(url, payload(), '::ffff:c000:022c'), 429, 'rate_limited');
  assertError(await call(url, payload(), '192.0.2.45'), 401, 'invalid_credentials');
});

test('per IP means per client behind a trusted proxy that writes the client\'s port into X-Forwarded-For (192.0.2.1:50000, [2001:db8::1]:50000): each connection\'s new port is the same client', async () => {
  const url = '/v1/auth/password/forgot';
  const payload = { email: 'nobody@example.com' };
  const proxied = await buildTestApp({ authRateLimitPerMinute: 2, trustProxy: ['10.0.0.0/8'] });
  try {
    alignToWindow(proxied, 60, 1);
    const via = (client: string) => proxied.app.inject({ method: 'POST', url, payload, remoteAddress: '10.1.2.3', headers: { 'x-forwarded-for': client } });
    assert.equal((await via('198.51.100.7:50001')).statusCode, 202);
    assert.equal((await via('198.51.100.7:50002')).statusCode, 202);
    assertError(await via('198.51.100.7:50003'), 429, 'rate_limited');
    assertError(await via('198.51.100.7'), 429, 'rate_limited');
    assert.equal((await via('[2001:db8:5::1]:50001')).statusCode, 202);
    assert.equal((await via('[2001:db8:5::2]:50002')).statusCode, 202);
    assertError(await via('[2001:db8:5::3]:50003'), 429, 'rate_limited');
    assert.equal((await via('198.51.100.8:50004')).statusCode, 202, 'another client is not throttled');
  } finally {
    await proxied.close();
  }
});
