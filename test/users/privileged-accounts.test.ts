// docs/decisions.md "Another user's account is changed only by a caller holding every permission of
// theirs": users.manage alone does not let a caller take over an account that holds platform
// permissions the caller lacks (Part B: a platform Role is assigned only by one holding every
// permission it grants). The superadmin case (required_role) is in status.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { createMfaUser } from '../auth/support.js';
import { assertError, assertStatus, auditFor, call, createPlatformRole, liveSessionCount, outboxFor, sql, userRow } from './support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };

before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
});
after(() => t.close());

/** The seed support Role's permissions a users.manage holder without them lacks, in order. */
const SUPPORT_ONLY = ['audit.view', 'billing.manage', 'entitlements.manage', 'tenants.manage'];

const takeovers = (id: string): [string, string, object | undefined][] => [
  ['PATCH', `/v1/users/${id}`, { email: uniqueEmail('takeover') }],
  ['PATCH', `/v1/users/${id}`, { status: 'suspended' }],
  ['POST', `/v1/users/${id}/suspend`, {}],
  ['PATCH', `/v1/users/${id}/profile`, { display_name: 'Taken' }],
  ['PATCH', `/v1/users/${id}/settings`, { theme: 'dark' }],
  ['DELETE', `/v1/users/${id}/mfa/totp`, undefined],
  ['GET', `/v1/users/${id}/export`, undefined],
  ['POST', `/v1/users/${id}/erasure-requests`, {}],
  ['DELETE', `/v1/users/${id}`, undefined],
];

test('a users.manage holder (User token or API key) who lacks a platform permission of another user gets 403 forbidden with details.required_permissions on their email, status, Profile, Settings, sessions, TOTP, export and erasure, and nothing changes', async () => {
  const manager = await userToken(t, { roles: [await createPlatformRole(t, ['users.list', 'users.manage'])] });
  const key = (await createApiKey(t, { permissions: ['users.list', 'users.manage'] })).secret;
  // TOTP on, so that a reset which went through would show.
  const target = await createMfaUser(t, { roles: ['support'] });
  const id = target.user.id;
  const audit = (await auditFor(t, id)).length;
  const outbox = (await outboxFor(t, id)).length;
  const [session] = assertStatus(await call(t, 'GET', `/v1/users/${id}/sessions`, admin.token), 200).data;
  for (const cred of [manager.token, key]) {
    for (const [method, url, body] of [...takeovers(id), ['DELETE', `/v1/users/${id}/sessions/${session.id}`, undefined] as const]) {
      const err = assertError(await call(t, method, url, cred, body), 403, 'forbidden');
      assert.deepEqual(err.details.required_permissions, SUPPORT_ONLY, `${method} ${url}`);
    }
  }
  const row = (await userRow(t, id))!;
  assert.deepEqual([row.status, row.email], ['active', target.user.email]);
  assert.ok((await liveSessionCount(t, id)) >= 1, 'the sessions stay');
  assert.equal((await auditFor(t, id)).length, audit, 'no audit row');
  assert.equal((await outboxFor(t, id)).length, outbox, 'no event');
  assert.equal(assertStatus(await call(t, 'GET', '/v1/users/me', target.token), 200).mfa_enabled, true, 'TOTP stays on');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM erasure_requests WHERE user_id = $1', [id]))[0].n, 0, 'no erasure scheduled');
  // Reads change no account: the manager still reads the user, their sessions and Settings.
  for (const url of [`/v1/users/${id}`, `/v1/users/${id}/sessions`, `/v1/users/${id}/settings`]) assertStatus(await call(t, 'GET', url, manager.token), 200);
});

test('a users.manage holder who holds every platform permission of another user changes their account as before; so does one acting on a user holding only the member Role', async () => {
  const peer = await userToken(t, { roles: [await createPlatformRole(t, ['users.list', 'users.manage', ...SUPPORT_ONLY])] });
  const target = await createUser(t, { roles: ['support'] });
  assertStatus(await call(t, 'PATCH', `/v1/users/${target.id}/profile`, peer.token, { display_name: 'Renamed' }), 200);
  assertStatus(await call(t, 'POST', `/v1/users/${target.id}/suspend`, peer.token, {}), 200);
  assert.equal((await userRow(t, target.id))!.status, 'suspended');

  const manager = await userToken(t, { roles: [await createPlatformRole(t, ['users.list', 'users.manage'])] });
  const plain = await createUser(t);
  assertStatus(await call(t, 'PATCH', `/v1/users/${plain.id}`, manager.token, { email: uniqueEmail('moved') }), 200);
  assertStatus(await call(t, 'POST', `/v1/users/${plain.id}/suspend`, manager.token, {}), 200);
});
