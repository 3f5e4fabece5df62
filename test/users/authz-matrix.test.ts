// Authorization matrix for the users, privacy, profiles and API key operations of Part A: every
// operation called by every caller kind gets exactly the status the spec gives. Each cell gets a
// fresh target, so destructive calls never affect another cell. A refused call writes nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, login, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { call, createApplication, grant, sql, type TestApplication } from './support.js';

let t: TestApp;
let adminUser: TestUser;
let tokens: Record<'other' | 'support' | 'admin', string>;
let keys: Record<'platformKey' | 'appKey' | 'testKey' | 'restrictKey', string>;
let app: TestApplication;

before(async () => {
  t = await buildTestApp();
  adminUser = await createUser(t, { roles: ['superadmin'] });
  app = await createApplication(t);
  tokens = {
    other: await login(t, await createUser(t)),
    support: await login(t, await createUser(t, { roles: ['support'] })),
    admin: await login(t, adminUser),
  };
  keys = {
    platformKey: (await createApiKey(t, { permissions: ['users.list', 'users.manage'] })).secret,
    appKey: (await createApiKey(t, { scope: app.id, permissions: ['users.list'] })).secret,
    testKey: (await createApiKey(t, { mode: 'test', permissions: ['users.list', 'users.manage'] })).secret,
    restrictKey: (await createApiKey(t, { permissions: ['users.list', 'users.manage'], intendedUse: 'agent', restrictDestructive: true })).secret,
  };
});
after(() => t.close());

const CALLERS = ['anonymous', 'self', 'other', 'support', 'admin', 'platformKey', 'appKey', 'testKey', 'restrictKey'] as const;
type Caller = (typeof CALLERS)[number];

const CALLER_NAMES: Record<Caller, string> = {
  anonymous: 'no credential',
  self: 'the user themself',
  other: 'another plain user',
  support: 'a users.list holder (support)',
  admin: 'a users.manage holder (superadmin)',
  platformKey: 'a platform key with users.manage',
  appKey: 'an app-scoped key with users.list',
  testKey: 'a test-mode key with users.manage on a live target',
  restrictKey: 'a restrict_destructive key with users.manage',
};

interface Op {
  method: string;
  path: string;
  /** Target a user in the invited state (the invitation re-send). */
  invited?: boolean;
  /** Target a user with a scheduled erasure (not possible for self: an erased user cannot sign in). */
  erasure?: boolean;
  /** Targets an API key rather than a user. */
  apiKey?: boolean;
  destructive?: boolean;
  body?: () => object;
}

const OPS: Record<string, Op> = {
  listUsers: { method: 'GET', path: '/v1/users' },
  createUser: { method: 'POST', path: '/v1/users', body: () => ({ email: uniqueEmail('mx'), send_invitation: false }) },
  getUser: { method: 'GET', path: '/v1/users/{id}' },
  patchUser: { method: 'PATCH', path: '/v1/users/{id}', body: () => ({ email: uniqueEmail('mx-new') }) },
  deleteUser: { method: 'DELETE', path: '/v1/users/{id}', destructive: true },
  suspend: { method: 'POST', path: '/v1/users/{id}/suspend', destructive: true },
  invitation: { method: 'POST', path: '/v1/users/{id}/invitation', invited: true },
  exportUser: { method: 'GET', path: '/v1/users/{id}/export' },
  erasure: { method: 'POST', path: '/v1/users/{id}/erasure-requests', destructive: true },
  cancelErasure: { method: 'DELETE', path: '/v1/users/{id}/erasure-requests/current', erasure: true, destructive: true },
  getProfile: { method: 'GET', path: '/v1/users/{id}/profile' },
  patchProfile: { method: 'PATCH', path: '/v1/users/{id}/profile', body: () => ({ display_name: 'Matrix Name' }) },
  listKeys: { method: 'GET', path: '/v1/api-keys' },
  createKey: { method: 'POST', path: '/v1/api-keys', body: () => ({ name: 'm', scope: 'platform', permissions: [] }) },
  getKey: { method: 'GET', path: '/v1/api-keys/{key}', apiKey: true },
  patchKey: { method: 'PATCH', path: '/v1/api-keys/{key}', apiKey: true, body: () => ({ name: 'renamed' }) },
  revokeKey: { method: 'DELETE', path: '/v1/api-keys/{key}', apiKey: true, destructive: true },
  rotateKey: { method: 'POST', path: '/v1/api-keys/{key}/rotate', apiKey: true },
};

// operation × caller → expected status (Part A endpoint tables, Authentication 1–9, Errors, and
// the design decisions: may read but not change → 403; cannot read → 404 (export and erasure too:
// self or users.manage, and a users.list reader gets 403); a test credential never sees a live user; API keys never manage keys).
//                     anonymous self other support admin platformKey appKey testKey restrictKey
const MATRIX: Record<keyof typeof OPS, number[]> = {
  listUsers:     [401, 403, 403, 200, 200, 200, 200, 200, 200],
  createUser:    [401, 403, 403, 403, 201, 201, 403, 201, 201],
  getUser:       [401, 200, 404, 200, 200, 200, 200, 404, 200],
  patchUser:     [401, 200, 404, 403, 200, 200, 403, 404, 200],
  deleteUser:    [401, 204, 404, 403, 204, 204, 403, 404, 403],
  suspend:       [401, 403, 403, 403, 200, 200, 403, 404, 403],
  invitation:    [401, 403, 403, 403, 202, 202, 403, 404, 202],
  exportUser:    [401, 200, 404, 403, 200, 200, 403, 404, 200],
  erasure:       [401, 202, 404, 403, 202, 202, 403, 404, 403],
  cancelErasure: [401, 403, 403, 403, 204, 204, 403, 404, 403],
  getProfile:    [401, 200, 404, 200, 200, 200, 200, 404, 200],
  patchProfile:  [401, 200, 404, 403, 200, 200, 403, 404, 200],
  listKeys:      [401, 200, 200, 200, 200, 400, 400, 400, 400],
  createKey:     [401, 403, 403, 403, 201, 400, 400, 400, 400],
  getKey:        [401, 404, 404, 404, 200, 400, 400, 400, 400],
  patchKey:      [401, 404, 404, 404, 200, 400, 400, 400, 400],
  revokeKey:     [401, 404, 404, 404, 204, 400, 400, 400, 400],
  rotateKey:     [401, 404, 404, 404, 200, 400, 400, 400, 400],
};

/** The error code each refusal carries. */
function expectedCode(status: number, op: Op, caller: Caller): string | null {
  switch (status) {
    case 401:
      return 'unauthenticated';
    case 400:
      return 'user_token_required';
    case 404:
      return op.apiKey ? 'api_key_not_found' : 'user_not_found';
    case 403:
      return caller === 'restrictKey' && op.destructive ? 'destructive_operation_restricted' : 'forbidden';
    default:
      return null;
  }
}

const written = async () =>
  (
    await sql<{ audit: number; outbox: number; emails: number }>(
      t,
      'SELECT (SELECT count(*)::int FROM audit_events) AS audit, (SELECT count(*)::int FROM outbox_events) AS outbox, (SELECT count(*)::int FROM emails) AS emails',
    )
  )[0];

/** A fresh target for one cell: the user (with an access path to the app key's Application) and a platform API key. */
async function arrange(op: Op, caller: Caller) {
  const target = await createUser(t, { status: op.invited && caller !== 'self' ? 'invited' : 'active' });
  await grant(t, target.id, app.id);
  let token: string | null = null;
  if (caller === 'self') token = await login(t, target);
  else if (caller !== 'anonymous') token = caller in tokens ? tokens[caller as keyof typeof tokens] : keys[caller as keyof typeof keys];
  if (op.erasure && caller !== 'self') {
    const res = await call(t, 'POST', `/v1/users/${target.id}/erasure-requests`, tokens.admin, {});
    assert.equal(res.statusCode, 202, res.body);
  }
  const key = await createApiKey(t, { permissions: ['users.list'], createdBy: adminUser.id });
  const url = op.path.replace('{id}', target.id).replace('{key}', key.id);
  return { target, token, url, key };
}

for (const [name, op] of Object.entries(OPS)) {
  CALLERS.forEach((caller, i) => {
    const status = MATRIX[name as keyof typeof OPS][i];
    const code = expectedCode(status, op, caller);
    test(`authorization: ${op.method} ${op.path} by ${CALLER_NAMES[caller]} → ${status}${code ? ` ${code}` : ''}`, async () => {
      const { target, token, url } = await arrange(op, caller);
      const before = await written();
      const res = await call(t, op.method, url, token, op.body?.());
      assert.equal(res.statusCode, status, `${op.method} ${url} by ${caller}: ${res.statusCode} ${res.body}`);
      if (code) {
        assert.equal(res.json().error?.code, code, res.body);
        assert.deepEqual(await written(), before, 'a refused call writes no audit row, event or mail');
        if (!op.apiKey && op.method !== 'GET') {
          const row = (await sql(t, 'SELECT status, email FROM users WHERE id = $1', [target.id]))[0];
          assert.equal(row.email, target.email, 'target unchanged');
          const arranged = caller === 'self' ? 'active' : op.erasure ? 'deleted' : op.invited ? 'invited' : 'active';
          assert.equal(row.status, arranged, 'target status unchanged');
        }
      } else if (status === 204) {
        assert.equal(res.body, '');
      } else {
        assert.equal(typeof res.json(), 'object');
      }
    });
  });
}
