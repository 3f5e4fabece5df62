// Conventions (Part A): PATCH merges, list pagination and filters, test mode and live mode, the per-IP
// throttle, and operations that take no body. Idempotency-Key is in conventions-idempotency.test.ts and
// conventions-idempotency-retention-and-claims.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, login, userToken } from '../helpers/fixtures.js';
import { holder, probeCalls, probeModule, PROBE_TABLES } from '../helpers/probe-module.js';
import { boot } from '../../src/boot.js';

let t: TestApp;
const here = holder();
before(async () => {
  t = await buildTestApp({}, undefined, [probeModule({ delayMs: 150, hold: here.hold })]);
  await t.database.scoped('system').exec(PROBE_TABLES);
});
after(() => t.close());

const { post } = probeCalls(() => t);

test('PATCH changes only the fields sent; custom keys merge one level deep and null removes a key', async () => {
  const { token } = await userToken(t);
  const created = (await post(token, 'k-patch', { name: 'patch-me' })).json();
  const patch = (payload: object) => t.app.inject({ method: 'PATCH', url: `/v1/_probe/items/${created.id}`, headers: bearer(token), payload });
  let res = await patch({ note: 'n1', custom: { a: 1, b: { deep: true } } });
  assert.equal(res.statusCode, 200);
  assert.deepEqual(res.json(), { id: created.id, name: 'patch-me', note: 'n1', custom: { a: 1, b: { deep: true } } });
  res = await patch({ custom: { b: { other: 1 }, c: 'x' } });
  assert.deepEqual(res.json().custom, { a: 1, b: { other: 1 }, c: 'x' }, 'one level deep: b is replaced, not merged');
  assert.equal(res.json().note, 'n1', 'unsent fields stay');
  res = await patch({ custom: { a: null }, note: null });
  assert.deepEqual(res.json().custom, { b: { other: 1 }, c: 'x' });
  assert.equal(res.json().note, null);
  assert.equal(res.json().name, 'patch-me');
});

test('list pagination: limit and opaque cursor walk every row once, stable under concurrent inserts', async () => {
  const user = await createUser(t);
  const tokens: string[] = [];
  for (let i = 0; i < 5; i++) tokens.push(await login(t, user));
  const existing = new Set<string>();
  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  const list = (c: string | null) =>
    t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?limit=2${c ? `&cursor=${encodeURIComponent(c)}` : ''}`, headers: bearer(tokens[0]) });
  const first = await list(null);
  assert.equal(first.statusCode, 200);
  for (const s of (await t.database.scoped('system').query('SELECT id FROM sessions WHERE user_id = $1', [user.id])).rows) existing.add(s.id);
  let body = first.json();
  for (;;) {
    pages++;
    assert.ok(body.data.length <= 2, 'body.data.length <= 2');
    seen.push(...body.data.map((s: { id: string }) => s.id));
    // A new row arrives between pages (a concurrent sign-in).
    await login(t, user);
    if (!body.page.has_more) {
      assert.equal(body.page.next_cursor, null);
      break;
    }
    assert.equal(typeof body.page.next_cursor, 'string');
    cursor = body.page.next_cursor;
    body = (await list(cursor)).json();
  }
  assert.equal(pages, 3);
  assert.deepEqual(new Set(seen), existing, 'every row that existed is listed exactly once');
  assert.equal(seen.length, existing.size);
});

test('list pagination: "has_more" is false on a last page the limit fills exactly: it has no next_cursor, and the walk ends there with every row once', async () => {
  const { user, token } = await userToken(t);
  for (let i = 0; i < 3; i++) await login(t, user);
  const list = (cursor: string | null) =>
    t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, headers: bearer(token) });
  const first = await list(null);
  assert.equal(first.statusCode, 200, first.body);
  assert.equal(first.json().data.length, 2);
  assert.equal(first.json().page.has_more, true);
  const last = await list(first.json().page.next_cursor);
  assert.equal(last.statusCode, 200, last.body);
  assert.equal(last.json().data.length, 2, 'four sessions: the second page of two is full');
  assert.deepEqual(last.json().page, { next_cursor: null, has_more: false });
  const ids = [...first.json().data, ...last.json().data].map((s: { id: string }) => s.id);
  assert.equal(new Set(ids).size, 4);
});

test('list pagination: a cursor that is not from the list gets 422 validation_failed naming cursor; limit out of range too', async () => {
  const { token } = await userToken(t);
  let res = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions?cursor=bm9wZQ', headers: bearer(token) });
  assert.equal(res.statusCode, 422);
  assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor']);
  // Well-formed JSON whose instant is not one the list writes: dates PostgreSQL would refuse to cast,
  // or would read otherwise, are 422 too, never a 500.
  for (const at of ['Tue Mar 05 2024 10:00:00 GMT+0100 (CET)', '+275760-09-13T00:00:00.000Z', '2024-03-05', '1 Jan 2020']) {
    const cursor = Buffer.from(JSON.stringify([at, 'ses_x'])).toString('base64url');
    res = await t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?cursor=${cursor}`, headers: bearer(token) });
    assert.equal(res.statusCode, 422, `${at}: ${res.body}`);
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor']);
  }
  res = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions?limit=101', headers: bearer(token) });
  assert.equal(res.statusCode, 422);
  assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.limit']);
});

test('list pagination: "One that does not decode to such a position gets 422 validation_failed naming query.cursor": a cursor naming year 0000 or holding U+0000 is 422 naming query.cursor, and the list is unchanged', async () => {
  const { token } = await userToken(t);
  const cursors = [
    ['0000-01-01T00:00:00.000Z', 'ses_x'], // an instant JavaScript writes but PostgreSQL has no year for
    ['2024-03-05T10:00:00.000Z', 'ses_\u0000x'], // text PostgreSQL cannot compare
    ['2024-03-05T10:00:00.000Z', 'ses_x', 'ses_y'], // a position is an instant and an id, nothing more
  ];
  for (const key of cursors) {
    const cursor = Buffer.from(JSON.stringify(key)).toString('base64url');
    const res = await t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?cursor=${cursor}`, headers: bearer(token) });
    assert.equal(res.statusCode, 422, `${JSON.stringify(key)}: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor'], res.body);
  }
  const ok = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions', headers: bearer(token) });
  assert.equal(ok.statusCode, 200, ok.body);
  assert.equal(ok.json().data.length, 1);
});

test('list pagination: a cursor that does not decode gets 422 validation_failed naming query.cursor "like every query parameter", also where the caller has nothing to list (tenants, owned applications, roles for a key without permissions)', async () => {
  const key = (await createApiKey(t, { scope: 'platform', permissions: [] })).secret;
  for (const url of ['/v1/tenants', '/v1/applications?owned=true', '/v1/roles']) {
    const empty = await t.app.inject({ method: 'GET', url, headers: bearer(key) });
    assert.equal(empty.statusCode, 200, `${url}: ${empty.body}`);
    assert.deepEqual(empty.json(), { data: [], page: { next_cursor: null, has_more: false } });
    const res = await t.app.inject({ method: 'GET', url: `${url}${url.includes('?') ? '&' : '?'}cursor=bm9wZQ`, headers: bearer(key) });
    assert.equal(res.statusCode, 422, `${url}: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.cursor'], `${url}: ${res.body}`);
  }
});

test('list pagination: "a well-formed position taken from another list only moves the start of this one, never past its filters or its caller\'s scope": another user\'s session cursor lists only the caller\'s own sessions, an unfiltered list\'s cursor under ?q= only the matching users', async () => {
  await withStoppedClock(t, async () => {
    // Scope: B's newest session sorts after every session of A; A's list from that position is A's own, all of them.
    const a = await userToken(t);
    for (let i = 0; i < 2; i++) await login(t, a.user);
    t.clock.advance(1); // strictly later, whatever the machine's speed
    const b = await userToken(t);
    await login(t, b.user);
    const bPage = await t.app.inject({ method: 'GET', url: '/v1/users/me/sessions?limit=1', headers: bearer(b.token) });
    assert.equal(bPage.statusCode, 200, bPage.body);
    const bCursor: string = bPage.json().page.next_cursor;
    assert.equal(typeof bCursor, 'string');
    const own = (await t.database.scoped('system').query<{ id: string }>('SELECT id FROM sessions WHERE user_id = $1', [a.user.id])).rows.map((r) => r.id).sort();
    const aWalk = await t.app.inject({ method: 'GET', url: `/v1/users/me/sessions?limit=100&cursor=${encodeURIComponent(bCursor)}`, headers: bearer(a.token) });
    assert.equal(aWalk.statusCode, 200, aWalk.body);
    assert.deepEqual(aWalk.json().data.map((s: { id: string }) => s.id).sort(), own, 'A\'s sessions and no session of B');

    // Filters: the newest user (outside the filter) gives the position; ?q= from it lists only the matching users.
    const key = (await createApiKey(t, { scope: 'platform', permissions: ['users.list'] })).secret;
    const prefix = `cur${Math.random().toString(36).slice(2, 8)}`;
    const matching: string[] = [];
    for (let i = 0; i < 3; i++) matching.push((await createUser(t, { email: `${prefix}${i}@example.com` })).id);
    t.clock.advance(1);
    for (let i = 0; i < 2; i++) await createUser(t);
    const newest = await t.app.inject({ method: 'GET', url: '/v1/users?limit=1', headers: bearer(key) });
    assert.equal(newest.statusCode, 200, newest.body);
    const cursor: string = newest.json().page.next_cursor;
    const filtered = await t.app.inject({ method: 'GET', url: `/v1/users?q=${prefix}&limit=100&cursor=${encodeURIComponent(cursor)}`, headers: bearer(key) });
    assert.equal(filtered.statusCode, 200, filtered.body);
    assert.deepEqual(filtered.json().data.map((u: { id: string }) => u.id).sort(), [...matching].sort(), 'only the users ?q= matches');
  });
});

test('list filters: an empty filter value ("?order_id=") is 422 validation_failed naming query.<name>, never read as no filter (every row of the list)', async () => {
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage', 'applications.manage', 'tenants.manage', 'roles.manage', 'users.list'] })).secret;
  const user = await createUser(t);
  const cases: [string, string][] = [
    ['/v1/entitlements', 'order_id'], ['/v1/entitlements', 'user_id'], ['/v1/entitlements', 'organization_id'], ['/v1/entitlements', 'application_id'],
    [`/v1/users/${user.id}/entitlements`, 'application_id'], ['/v1/organizations/org_01M8MK6MDH299Z5GNZBJQBNF0B/entitlements', 'order_id'],
    ['/v1/applications', 'tenant_id'], ['/v1/applications', 'owner_user_id'], ['/v1/applications', 'owner_organization_id'],
    ['/v1/tenants', 'owner_user_id'], ['/v1/tenants', 'owner_organization_id'],
    [`/v1/users/${user.id}/roles`, 'application_id'], ['/v1/permissions', 'scope'],
  ];
  for (const [path, name] of cases) {
    const res = await t.app.inject({ method: 'GET', url: `${path}?${name}=`, headers: bearer(key) });
    assert.equal(res.statusCode, 422, `${path}?${name}=: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), [`query.${name}`], `${path}?${name}=: ${res.body}`);
  }
});

test('list pagination: limit is 1–100 in decimal digits (limit=1, limit=100 and limit=021 are accepted; limit=0, and limit=0x10, 1e1, +5, 2.0 or a blank, which JavaScript would read as numbers, are 422 naming query.limit) and defaults to 20 rows a page', async () => {
  // The audit trail: every user created below adds to it.
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['audit.view'] })).secret;
  for (let i = 0; i < 21; i++) await createUser(t);
  const list = (query: string) => t.app.inject({ method: 'GET', url: `/v1/audit-events${query}`, headers: bearer(key) });
  const page = await list('');
  assert.equal(page.statusCode, 200, page.body);
  assert.equal(page.json().data.length, 20);
  assert.equal(page.json().page.has_more, true);
  const max = await list('?limit=100');
  assert.equal(max.statusCode, 200, max.body);
  assert.equal(max.json().data.length > 20, true, 'limit=100 returns more than the default page');
  const one = await list('?limit=1');
  assert.equal(one.statusCode, 200, one.body);
  assert.equal(one.json().data.length, 1, 'limit=1 is a page of one row');
  assert.equal(one.json().page.has_more, true);
  assert.equal(typeof one.json().page.next_cursor, 'string');
  const zero = await list('?limit=0');
  assert.equal(zero.statusCode, 422, zero.body);
  assert.deepEqual(zero.json().error.details.fields.map((f: { path: string }) => f.path), ['query.limit']);
  const decimal = await list('?limit=021');
  assert.equal(decimal.statusCode, 200, decimal.body);
  assert.equal(decimal.json().data.length, 21, 'limit=021 is twenty-one, read in decimal');
  for (const limit of ['0x10', '1e1', '+5', '2.0', '%20', '%205']) {
    const res = await list(`?limit=${limit}`);
    assert.equal(res.statusCode, 422, `limit=${limit}: ${res.body.slice(0, 200)}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields, [{ path: 'query.limit', message: 'must be integer' }], `limit=${limit}`);
  }
});

test('test mode: test credentials never see live rows and live credentials never see test rows', async () => {
  const live = await createUser(t, { mode: 'live' });
  const testUser = await createUser(t, { mode: 'test' });
  const liveKey = await createApiKey(t, { mode: 'live', permissions: ['users.list', 'users.manage'] });
  const testKey = await createApiKey(t, { mode: 'test', permissions: ['users.list', 'users.manage'] });
  await login(t, testUser);
  await login(t, live);
  const get = (key: string, url: string) => t.app.inject({ method: 'GET', url, headers: bearer(key) });
  assert.equal((await get(liveKey.secret, `/v1/users/${live.id}`)).statusCode, 200);
  assert.equal((await get(testKey.secret, `/v1/users/${testUser.id}`)).json().test_mode, true);
  for (const [key, id] of [[liveKey.secret, testUser.id], [testKey.secret, live.id]] as const) {
    const res = await get(key, `/v1/users/${id}`);
    assert.equal(res.statusCode, 404);
    assert.equal(res.json().error.code, 'user_not_found');
    assert.equal((await get(key, `/v1/users/${id}/sessions`)).statusCode, 404);
  }
  const sessions = (await get(testKey.secret, `/v1/users/${testUser.id}/sessions`)).json();
  assert.equal(sessions.data.length, 1);
});

test('email uniqueness is per mode: the same address may exist once live and once in test', async () => {
  const email = `both-${Date.now()}@example.com`;
  const a = await createUser(t, { mode: 'live', email });
  const b = await createUser(t, { mode: 'test', email });
  assert.notEqual(a.id, b.id);
  await assert.rejects(createUser(t, { mode: 'live', email }), /email/);
});

test('per-IP throttle of the unauthenticated auth endpoints is shared by every process and answers 429 with Retry-After', async () => {
  const limited = await buildTestApp({ authRateLimitPerMinute: 3 });
  // Windows are fixed minutes: start just after a minute begins, so that a slow machine cannot carry
  // the attempts across a window boundary.
  const intoMinute = limited.clock.now().getTime() % 60_000;
  limited.clock.advance((60_000 - intoMinute) / 1000 + 0.001);
  // A second process on the same database.
  const second = await boot({ config: limited.config, database: limited.database, clock: limited.clock, logger: false });
  try {
    const attempt = (app: typeof limited.app) =>
      app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: 'nobody@example.com', password: 'wrong-password-123' } });
    assert.equal((await attempt(limited.app)).statusCode, 401);
    assert.equal((await attempt(second.app)).statusCode, 401);
    assert.equal((await attempt(limited.app)).statusCode, 401);
    const throttled = await attempt(second.app);
    assert.equal(throttled.statusCode, 429);
    assert.equal(throttled.json().error.code, 'rate_limited');
    const retryAfter = Number(throttled.headers['retry-after']);
    assert.ok(retryAfter >= 1 && retryAfter <= 60, String(retryAfter));
    // Authenticated endpoints are not throttled by it.
    assert.equal((await limited.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
    limited.clock.advance(61);
    assert.equal((await attempt(limited.app)).statusCode, 401);
  } finally {
    await second.app.close();
    await limited.close();
  }
});

test('AUTH_RATE_LIMIT_PER_MINUTE=0 turns the per-IP throttle off', async () => {
  // A fresh address each time: one address is locked after 5 failures (the per-account lockout), which
  // is not the per-IP throttle.
  for (let i = 0; i < 40; i++) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: `nobody-${i}@example.com`, password: 'wrong-password-123' } });
    assert.equal(res.statusCode, 401, res.body);
  }
});

test('operations that take no body refuse a field with 422 validation_failed and change nothing (TOTP enrollment, invitation re-send, key rotation); no body or {} is accepted', async () => {
  const { user, token } = await userToken(t);
  const enroll = (payload?: object) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token), ...(payload ? { payload } : {}) });
  const refused = await enroll({ secret: 'JBSWY3DPEHPK3PXP' });
  assert.equal(refused.statusCode, 422, refused.body);
  assert.equal(refused.json().error.code, 'validation_failed');
  const pending = await t.database.scoped('system').query('SELECT totp_pending_secret FROM identities WHERE user_id = $1', [user.id]);
  assert.ok(pending.rows.every((r) => r.totp_pending_secret === null), 'no enrollment began');
  assert.equal((await enroll()).statusCode, 200);
  assert.equal((await enroll({})).statusCode, 200);

  const admin = await userToken(t, { roles: ['superadmin'] });
  const invited = await createUser(t, { status: 'invited' });
  const resend = await t.app.inject({ method: 'POST', url: `/v1/users/${invited.id}/invitation`, headers: bearer(admin.token), payload: { email: 'other@example.com' } });
  assert.equal(resend.statusCode, 422, resend.body);
  assert.equal(resend.json().error.code, 'validation_failed');

  const created = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: bearer(admin.token), payload: { name: 'rot', scope: 'platform', permissions: [] } });
  assert.equal(created.statusCode, 201, created.body);
  const rotate = await t.app.inject({ method: 'POST', url: `/v1/api-keys/${created.json().id}/rotate`, headers: bearer(admin.token), payload: { secret: 'mine' } });
  assert.equal(rotate.statusCode, 422, rotate.body);
  const stillWorks = await t.app.inject({ method: 'GET', url: '/v1/permissions', headers: bearer(created.json().secret) });
  assert.equal(stillWorks.statusCode, 200, 'the refused rotation left the secret alone');
});

test('DELETE operations take no body: a field sent with one is 422 validation_failed naming it (a JSON value that is not an object names body), and nothing is deleted; no body, an empty body or {} is accepted', async () => {
  const admin = await userToken(t, { roles: ['superadmin'] });
  const newKey = async () => {
    const created = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: bearer(admin.token), payload: { name: 'del', scope: 'platform', permissions: [] } });
    assert.equal(created.statusCode, 201, created.body);
    return created.json() as { id: string; secret: string };
  };
  const revoke = (id: string, payload?: string) =>
    t.app.inject({ method: 'DELETE', url: `/v1/api-keys/${id}`, headers: { ...bearer(admin.token), 'content-type': 'application/json' }, ...(payload === undefined ? {} : { payload }) });
  const key = await newKey();
  for (const [payload, path] of [['{"reason":"leaked"}', 'reason'], ['[]', 'body'], ['null', 'body'], ['"x"', 'body']]) {
    const res = await revoke(key.id, payload);
    assert.equal(res.statusCode, 422, `${payload}: ${res.body}`);
    assert.equal(res.json().error.code, 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), [path]);
  }
  const stillWorks = await t.app.inject({ method: 'GET', url: '/v1/permissions', headers: bearer(key.secret) });
  assert.equal(stillWorks.statusCode, 200, 'no refused DELETE revoked the key');
  for (const payload of [undefined, '', '{}']) {
    const res = await revoke((await newKey()).id, payload);
    assert.equal(res.statusCode, 204, `${JSON.stringify(payload)}: ${res.body}`);
  }
});
