import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { decodeJwt } from 'jose';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, login, userToken } from '../helpers/fixtures.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const PLATFORM_PERMISSIONS = [
  'users.list',
  'users.manage',
  'entitlements.manage',
  'applications.manage',
  'roles.manage',
  'organizations.manage',
  'billing.manage',
  'billing.refund',
  'audit.view',
  'webhooks.manage',
  'api_keys.manage',
  'tenants.manage',
];

const sys = () => t.database.scoped('system');
const me = (token: string) => t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) });
const getUser = (token: string, id: string) => t.app.inject({ method: 'GET', url: `/v1/users/${id}`, headers: bearer(token) });
const revokeSession = (token: string, userId: string, sessionId: string) =>
  t.app.inject({ method: 'DELETE', url: `/v1/users/${userId}/sessions/${sessionId}`, headers: bearer(token) });
const logout = (token: string, payload?: object) =>
  t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(token), ...(payload ? { payload } : {}) });

async function revokedAt(sessionId: string): Promise<Date | null> {
  const { rows } = await sys().query<{ revoked_at: Date | null }>('SELECT revoked_at FROM sessions WHERE id = $1', [sessionId]);
  assert.equal(rows.length, 1, `session ${sessionId} exists`);
  return rows[0].revoked_at;
}

/** A live user signed in once: its token and the session id behind it. */
async function victim() {
  const { user, token } = await userToken(t);
  return { user, token, sessionId: String(decodeJwt(token).sid) };
}

// ---------------------------------------------------------------------------------------------
// Destructive gate
// ---------------------------------------------------------------------------------------------

test('a key with restrict_destructive true is refused a destructive operation with 403 destructive_operation_restricted (details.key_id), even holding users.manage', async () => {
  const v = await victim();
  const key = await createApiKey(t, { permissions: ['users.list', 'users.manage'], restrictDestructive: true });
  const res = await revokeSession(key.secret, v.user.id, v.sessionId);
  assert.equal(res.statusCode, 403);
  const body = res.json();
  assert.equal(body.error.code, 'destructive_operation_restricted');
  assert.equal(body.error.details.key_id, key.id);
  // Nothing happened: the session is still live and its token works.
  assert.equal(await revokedAt(v.sessionId), null);
  assert.equal((await me(v.token)).statusCode, 200);
});

test('a restrict_destructive key without the permission gets 403 destructive_operation_restricted too: the gate checks the destructive mark before the permission (docs/decisions.md "Which 403 a restricted key gets"), and nothing changes', async () => {
  const target = await createUser(t);
  const suspend = (secret: string) => t.app.inject({ method: 'POST', url: `/v1/users/${target.id}/suspend`, headers: bearer(secret), payload: {} });
  const key = await createApiKey(t, { permissions: ['users.list'], restrictDestructive: true });
  const res = await suspend(key.secret);
  assert.equal(res.statusCode, 403);
  assert.equal(res.json().error.code, 'destructive_operation_restricted');
  assert.deepEqual(res.json().error.details, { key_id: key.id });
  const unrestricted = await createApiKey(t, { permissions: ['users.list'], restrictDestructive: false });
  const refused = await suspend(unrestricted.secret);
  assert.equal(refused.statusCode, 403);
  assert.equal(refused.json().error.code, 'forbidden', 'the same key without the restriction lacks users.manage');
  const { rows } = await sys().query<{ status: string }>('SELECT status FROM users WHERE id = $1', [target.id]);
  assert.equal(rows[0].status, 'active');
});

test('the same operation with a restrict_destructive false key holding users.manage succeeds (204) and revokes the session', async () => {
  const v = await victim();
  const key = await createApiKey(t, { permissions: ['users.manage'], restrictDestructive: false });
  const res = await revokeSession(key.secret, v.user.id, v.sessionId);
  assert.equal(res.statusCode, 204);
  assert.equal(res.body, '');
  assert.ok((await revokedAt(v.sessionId)) instanceof Date, '(await revokedAt(v.sessionId)) instanceof Date');
  assert.equal((await me(v.token)).statusCode, 401, 'the revoked session token fails at once');
});

test('agent keys default to restrict_destructive true and are refused destructive operations', async () => {
  const v = await victim();
  const key = await createApiKey(t, { permissions: ['users.manage'], intendedUse: 'agent' });
  const { rows } = await sys().query<{ restrict_destructive: boolean }>('SELECT restrict_destructive FROM api_keys WHERE id = $1', [key.id]);
  assert.equal(rows[0].restrict_destructive, true);
  const res = await revokeSession(key.secret, v.user.id, v.sessionId);
  assert.equal(res.statusCode, 403);
  assert.equal(res.json().error.code, 'destructive_operation_restricted');
  assert.equal(res.json().error.details.key_id, key.id);
  assert.equal(await revokedAt(v.sessionId), null);
});

test('an agent key with restrict_destructive set false may perform destructive operations it has the permission for', async () => {
  const v = await victim();
  const key = await createApiKey(t, { permissions: ['users.manage'], intendedUse: 'agent', restrictDestructive: false });
  const res = await revokeSession(key.secret, v.user.id, v.sessionId);
  assert.equal(res.statusCode, 204);
  assert.ok((await revokedAt(v.sessionId)) instanceof Date, '(await revokedAt(v.sessionId)) instanceof Date');
});

test('the destructive gate applies to keys only: a User with users.manage may revoke another user\'s session', async () => {
  const v = await victim();
  const { token } = await userToken(t, { roles: ['superadmin'] });
  const res = await revokeSession(token, v.user.id, v.sessionId);
  assert.equal(res.statusCode, 204);
  assert.ok((await revokedAt(v.sessionId)) instanceof Date, '(await revokedAt(v.sessionId)) instanceof Date');
});

// ---------------------------------------------------------------------------------------------
// Conditionally destructive: logout with all_sessions
// ---------------------------------------------------------------------------------------------

test('logout is marked conditionally destructive in the machine-readable description, the condition naming all_sessions', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/v1/openapi.json' });
  assert.equal(res.statusCode, 200);
  const op = res.json().paths['/v1/auth/logout'].post;
  assert.equal(op['x-platform-destructive'], 'conditional');
  assert.equal(typeof op['x-platform-destructive-when'], 'string');
  assert.match(op['x-platform-destructive-when'], /all_sessions/);
});

test('logout needs a User token: an API key gets 400 user_token_required (with or without all_sessions) and nothing is revoked', async () => {
  const v = await victim();
  for (const restrictDestructive of [true, false]) {
    const key = await createApiKey(t, { permissions: PLATFORM_PERMISSIONS, restrictDestructive });
    for (const payload of [undefined, {}, { all_sessions: false }, { all_sessions: true }]) {
      const res = await logout(key.secret, payload);
      assert.equal(res.statusCode, 400, JSON.stringify({ restrictDestructive, payload }));
      assert.equal(res.json().error.code, 'user_token_required');
    }
  }
  assert.equal(await revokedAt(v.sessionId), null);
});

test('logout without all_sessions ends only the calling session; with all_sessions true it ends every session of the user', async () => {
  const user = await createUser(t);
  const [a, b, c] = [await login(t, user), await login(t, user), await login(t, user)];
  const [sa, sb, sc] = [a, b, c].map((tok) => String(decodeJwt(tok).sid));

  const one = await logout(a); // no body at all: all_sessions defaults to false
  assert.equal(one.statusCode, 204);
  assert.ok((await revokedAt(sa)) instanceof Date, '(await revokedAt(sa)) instanceof Date');
  assert.equal(await revokedAt(sb), null);
  assert.equal(await revokedAt(sc), null);
  assert.equal((await me(a)).statusCode, 401);
  assert.equal((await me(b)).statusCode, 200);

  const all = await logout(b, { all_sessions: true });
  assert.equal(all.statusCode, 204);
  assert.ok((await revokedAt(sb)) instanceof Date, '(await revokedAt(sb)) instanceof Date');
  assert.ok((await revokedAt(sc)) instanceof Date, '(await revokedAt(sc)) instanceof Date');
  assert.equal((await me(b)).statusCode, 401);
  assert.equal((await me(c)).statusCode, 401);
});

// ---------------------------------------------------------------------------------------------
// Permissions
// ---------------------------------------------------------------------------------------------

test("a users.list key (it reads the user) revoking or listing another user's sessions gets 403 forbidden (required_permission users.manage) and nothing changes", async () => {
  const v = await victim();
  const key = await createApiKey(t, { permissions: ['users.list'], restrictDestructive: false });
  const res = await revokeSession(key.secret, v.user.id, v.sessionId);
  assert.equal(res.statusCode, 403);
  assert.equal(res.json().error.code, 'forbidden');
  assert.equal(res.json().error.details.required_permission, 'users.manage');
  const list = await t.app.inject({ method: 'GET', url: `/v1/users/${v.user.id}/sessions`, headers: bearer(key.secret) });
  assert.equal(list.statusCode, 403);
  assert.equal(list.json().error.code, 'forbidden');
  assert.equal(await revokedAt(v.sessionId), null);
  assert.equal((await me(v.token)).statusCode, 200);
});

test("a plain member revoking or listing another user's sessions gets 404 user_not_found", async () => {
  const v = await victim();
  const { token } = await userToken(t);
  const del = await revokeSession(token, v.user.id, v.sessionId);
  assert.equal(del.statusCode, 404);
  assert.equal(del.json().error.code, 'user_not_found');
  const list = await t.app.inject({ method: 'GET', url: `/v1/users/${v.user.id}/sessions`, headers: bearer(token) });
  assert.equal(list.statusCode, 404);
  assert.equal(list.json().error.code, 'user_not_found');
  assert.equal(await revokedAt(v.sessionId), null);
});

test('a user holding the support Role (users.list) can fetch another user', async () => {
  const other = await createUser(t);
  const { token } = await userToken(t, { roles: ['support'] });
  const res = await getUser(token, other.id);
  assert.equal(res.statusCode, 200);
  assert.equal(res.json().id, other.id);
  assert.equal(res.json().email, other.email);
});

test('a plain member fetching another user gets 404 user_not_found, and can fetch itself', async () => {
  const other = await createUser(t);
  const { user, token } = await userToken(t);
  const res = await getUser(token, other.id);
  assert.equal(res.statusCode, 404);
  assert.equal(res.json().error.code, 'user_not_found');
  const self = await getUser(token, user.id);
  assert.equal(self.statusCode, 200);
  assert.equal(self.json().id, user.id);
});

test('Roles are resolved on every request: a Role change applies on the next call with the same token', async () => {
  const other = await createUser(t);
  const { user, token } = await userToken(t);
  assert.equal((await getUser(token, other.id)).statusCode, 404);

  await sys().query(
    `INSERT INTO role_assignments (user_id, role_id, application_id, assigned_at, assigned_by_type, assigned_by_id)
     VALUES ($1, 'role_platform_superadmin', NULL, $2, 'system', NULL)`,
    [user.id, t.clock.now()],
  );
  const granted = await getUser(token, other.id);
  assert.equal(granted.statusCode, 200, 'same token gains access');
  assert.equal(granted.json().id, other.id);

  await sys().query(`DELETE FROM role_assignments WHERE user_id = $1 AND role_id = 'role_platform_superadmin'`, [user.id]);
  const removed = await getUser(token, other.id);
  assert.equal(removed.statusCode, 404, 'same token loses access');
  assert.equal(removed.json().error.code, 'user_not_found');
});

// ---------------------------------------------------------------------------------------------
// Seed Roles
// ---------------------------------------------------------------------------------------------

test('the seed Role superadmin holds all twelve platform permissions', async () => {
  const { rows } = await sys().query<{ name: string; scope: string; seed: boolean; permissions: string[] }>(
    `SELECT name, scope, seed, permissions FROM roles WHERE id = 'role_platform_superadmin'`,
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0].name, 'superadmin');
  assert.equal(rows[0].scope, 'platform');
  assert.equal(rows[0].seed, true);
  assert.deepEqual([...rows[0].permissions].sort(), [...PLATFORM_PERMISSIONS].sort());
});

test('the seed Role support holds exactly users.list, entitlements.manage, audit.view, tenants.manage, billing.manage', async () => {
  const { rows } = await sys().query<{ name: string; scope: string; seed: boolean; permissions: string[] }>(
    `SELECT name, scope, seed, permissions FROM roles WHERE id = 'role_platform_support'`,
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0].name, 'support');
  assert.equal(rows[0].scope, 'platform');
  assert.equal(rows[0].seed, true);
  assert.deepEqual([...rows[0].permissions].sort(), ['audit.view', 'billing.manage', 'entitlements.manage', 'tenants.manage', 'users.list']);
});

test('the seed Role billing_admin holds exactly billing.manage, billing.refund, audit.view, and member no platform permission (docs/decisions.md "Seed Roles")', async () => {
  const { rows } = await sys().query<{ id: string; scope: string; seed: boolean; permissions: string[] }>(
    `SELECT id, scope, seed, permissions FROM roles WHERE id IN ('role_platform_billing_admin', 'role_platform_member') ORDER BY id`,
  );
  assert.deepEqual(
    rows.map((r) => [r.id, r.scope, r.seed, [...r.permissions].sort()]),
    [
      ['role_platform_billing_admin', 'platform', true, ['audit.view', 'billing.manage', 'billing.refund']],
      ['role_platform_member', 'platform', true, []],
    ],
  );
});

test('the four seed Roles superadmin, support, billing_admin and member exist as platform Roles', async () => {
  const { rows } = await sys().query<{ id: string; name: string }>(`SELECT id, name FROM roles WHERE seed AND scope = 'platform' ORDER BY name`);
  assert.deepEqual(
    rows.map((r) => [r.id, r.name]),
    [
      ['role_platform_billing_admin', 'billing_admin'],
      ['role_platform_member', 'member'],
      ['role_platform_superadmin', 'superadmin'],
      ['role_platform_support', 'support'],
    ],
  );
});

test('creating a User assigns the platform Role member (live and test, with or without other Roles)', async () => {
  const users = [
    await createUser(t),
    await createUser(t, { mode: 'test' }),
    await createUser(t, { roles: ['support'] }),
    await createUser(t, { status: 'invited' }),
  ];
  for (const u of users) {
    const { rows } = await sys().query<{ role_id: string; application_id: string | null }>(
      'SELECT role_id, application_id FROM role_assignments WHERE user_id = $1 ORDER BY role_id',
      [u.id],
    );
    const member = rows.find((r) => r.role_id === 'role_platform_member');
    assert.ok(member, `${u.id} holds member`);
    assert.equal(member.application_id, null);
  }
});

// ---------------------------------------------------------------------------------------------
// The caller's rights come before the body's shape (README "Architecture": the gate's order)
// ---------------------------------------------------------------------------------------------

const call = (method: 'POST' | 'PATCH', url: string, token: string, payload: unknown) =>
  t.app.inject({ method, url, headers: { ...bearer(token), 'content-type': 'application/json' }, payload: JSON.stringify(payload) });

test('"An API Key can never create, change or rotate API Keys" (400 user_token_required) whatever body it sends: an empty or unknown-field body is not 422 first', async () => {
  const key = await createApiKey(t, { permissions: [...PLATFORM_PERMISSIONS] });
  const keys = async () => (await sys().query('SELECT id FROM api_keys')).rows.length;
  const before = await keys();
  for (const [method, url, payload] of [
    ['POST', '/v1/api-keys', {}],
    ['POST', '/v1/api-keys', { name: 7, bogus: true }],
    ['PATCH', `/v1/api-keys/${key.id}`, { bogus: 1 }],
  ] as const) {
    const res = await call(method, url, key.secret, payload);
    assert.equal(res.statusCode, 400, `${method} ${url}: ${res.body}`);
    assert.equal(res.json().error.code, 'user_token_required');
  }
  assert.equal(await keys(), before);
});

test('a restrict_destructive key is refused a destructive operation with 403 destructive_operation_restricted also when the rest of its body is invalid, and nothing changes', async () => {
  const { user } = await userToken(t);
  const key = await createApiKey(t, { permissions: ['users.list', 'users.manage'], restrictDestructive: true });
  const res = await call('PATCH', `/v1/users/${user.id}`, key.secret, { status: 'suspended', bogus: 1 });
  assert.equal(res.statusCode, 403, res.body);
  assert.equal(res.json().error.code, 'destructive_operation_restricted');
  const { rows } = await sys().query<{ status: string }>('SELECT status FROM users WHERE id = $1', [user.id]);
  assert.equal(rows[0].status, 'active');
});

test('a credential without the operation\'s permission gets 403 forbidden (required_permission) whatever body it sends; with the permission, the same body is 422 validation_failed', async () => {
  const weak = await createApiKey(t, { permissions: ['users.list'] });
  const res = await call('POST', '/v1/users', weak.secret, { bogus: true });
  assert.equal(res.statusCode, 403, res.body);
  assert.equal(res.json().error.code, 'forbidden');
  assert.equal(res.json().error.details.required_permission, 'users.manage');
  const strong = await createApiKey(t, { permissions: ['users.manage'] });
  const ok = await call('POST', '/v1/users', strong.secret, { bogus: true });
  assert.equal(ok.statusCode, 422, ok.body);
  assert.equal(ok.json().error.code, 'validation_failed');
});
