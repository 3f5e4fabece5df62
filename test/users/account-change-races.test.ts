// docs/decisions.md "Another user's account is changed only by a caller holding every permission of
// theirs": the right is read again under the user's lock, which a platform Role's assignment takes too
// (FOR UPDATE), so a users.manage holder whose write waited while the user was made a superadmin (or
// given a platform permission the caller lacks) is answered as had the assignment committed first:
// 403 forbidden naming what is missing, and nothing changes (no audit row, no event, no mail). Two
// transactions at once need PostgreSQL: only the PostgreSQL pass registers these.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { mailsTo } from '../helpers/mail.js';
import { createMfaUser } from '../auth/support.js';
import { assertError, assertStatus, auditFor, call, createPlatformRole, liveSessionCount, outboxFor, sql, userRow } from './support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };
let manager: { user: TestUser; token: string };

/** The statements of a platform Role's assignment as it runs: the user locked, then the row. */
const assigned = (userId: string, roleId: string): [string, unknown[]][] => [
  ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [userId]],
  ['INSERT INTO role_assignments (user_id, role_id, application_id, assigned_at) VALUES ($1, $2, NULL, now())', [userId, roleId]],
];

/** What a write that went through would leave about the user: audit rows, events, mails. */
async function trail(id: string, email: string) {
  return { audit: (await auditFor(t, id)).length, events: (await outboxFor(t, id)).length, mails: (await mailsTo(t, email)).length };
}

const promoted = (err: any) => assert.equal(err.details.required_role, 'superadmin');

if (storageName === 'postgres') {
  // Inside the block: on embedded storage the file registers no test, and hooks without a test would
  // leave the app they start open.
  before(async () => {
    t = await buildTestApp();
    admin = await userToken(t, { roles: ['superadmin'] });
    manager = await userToken(t, { roles: [await createPlatformRole(t, ['users.list', 'users.manage'])] });
  });
  after(() => t.close());

  test("a platform Role's assignment waits for a write holding the user's lock (FOR KEY SHARE, as a TOTP reset's): the account's right is read under a lock both take", async () => {
    const user = await createUser(t);
    const res = await commitWhileWaiting(t, [['SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE', [user.id]]], () =>
      call(t, 'POST', `/v1/users/${user.id}/roles/role_platform_superadmin`, admin.token),
    );
    assertStatus(res, 201);
  });

  test("a users.manage holder's PATCH of another user's email that waited while the user was made a superadmin gets 403 forbidden (required_role superadmin): the email stays, no audit row, no event, no mail", async () => {
    const user = await createUser(t);
    const before = await trail(user.id, user.email);
    const email = uniqueEmail('takeover');
    const res = await commitWhileWaiting(t, assigned(user.id, 'role_platform_superadmin'), () => call(t, 'PATCH', `/v1/users/${user.id}`, manager.token, { email }));
    promoted(assertError(res, 403, 'forbidden'));
    assert.equal((await userRow(t, user.id))!.email, user.email);
    assert.deepEqual(await trail(user.id, user.email), before);
    assert.deepEqual(await mailsTo(t, email), []);
  });

  test("a users.manage key's PATCH of another user's email that waited while the user was given a platform Role with a permission the key lacks gets 403 forbidden naming it (required_permissions): the email stays", async () => {
    const key = (await createApiKey(t, { permissions: ['users.list', 'users.manage'] })).secret;
    const user = await createUser(t);
    const role = await createPlatformRole(t, ['audit.view']);
    const before = await trail(user.id, user.email);
    const res = await commitWhileWaiting(t, assigned(user.id, role), () => call(t, 'PATCH', `/v1/users/${user.id}`, key, { email: uniqueEmail('takeover') }));
    assert.deepEqual(assertError(res, 403, 'forbidden').details.required_permissions, ['audit.view']);
    assert.equal((await userRow(t, user.id))!.email, user.email);
    assert.deepEqual(await trail(user.id, user.email), before);
  });

  test("a users.manage holder's PATCH of another user's email that waited while a platform Role the user holds was given a permission the caller lacks (PATCH /v1/roles/{id}) gets 403 forbidden naming it (required_permissions): the email stays", async () => {
    const role = await createPlatformRole(t, ['users.list']);
    const user = await createUser(t, { roles: [role] });
    const before = await trail(user.id, user.email);
    const edited: [string, unknown[]][] = [
      ['SELECT 1 FROM roles WHERE id = $1 FOR NO KEY UPDATE', [role]],
      [`UPDATE roles SET permissions = ARRAY['audit.view', 'users.list'] WHERE id = $1`, [role]],
    ];
    const res = await commitWhileWaiting(t, edited, () => call(t, 'PATCH', `/v1/users/${user.id}`, manager.token, { email: uniqueEmail('takeover') }));
    assert.deepEqual(assertError(res, 403, 'forbidden').details.required_permissions, ['audit.view']);
    assert.equal((await userRow(t, user.id))!.email, user.email);
    assert.deepEqual(await trail(user.id, user.email), before);
  });

  for (const [label, method, path, body] of [
    ['PATCH status suspended', 'PATCH', '', { status: 'suspended' }],
    ['POST /suspend', 'POST', '/suspend', {}],
    ['DELETE (soft delete)', 'DELETE', '', undefined],
  ] as const) {
    test(`a users.manage holder's ${label} of another user that waited while the user was made a superadmin gets 403 forbidden (required_role superadmin): still active, sessions kept, no audit row, no event`, async () => {
      const { user } = await userToken(t);
      const before = await trail(user.id, user.email);
      const res = await commitWhileWaiting(t, assigned(user.id, 'role_platform_superadmin'), () => call(t, method, `/v1/users/${user.id}${path}`, manager.token, body));
      promoted(assertError(res, 403, 'forbidden'));
      assert.equal((await userRow(t, user.id))!.status, 'active');
      assert.equal(await liveSessionCount(t, user.id), 1);
      assert.deepEqual(await trail(user.id, user.email), before);
    });
  }

  test("a users.manage holder's TOTP reset of another user that waited while the user was made a superadmin gets 403 forbidden (required_role superadmin): TOTP stays on, no audit row, no mail", async () => {
    const target = await createMfaUser(t);
    const before = await trail(target.user.id, target.user.email);
    const res = await commitWhileWaiting(t, assigned(target.user.id, 'role_platform_superadmin'), () => call(t, 'DELETE', `/v1/users/${target.user.id}/mfa/totp`, manager.token));
    promoted(assertError(res, 403, 'forbidden'));
    assert.equal(assertStatus(await call(t, 'GET', '/v1/users/me', target.token), 200).mfa_enabled, true);
    assert.deepEqual(await trail(target.user.id, target.user.email), before);
  });

  test("a users.manage holder's revocation of another user's session that waited while the user was made a superadmin gets 403 forbidden (required_role superadmin): the session stays, no audit row", async () => {
    const { user } = await userToken(t);
    const [session] = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/sessions`, admin.token), 200).data;
    const before = await trail(user.id, user.email);
    const res = await commitWhileWaiting(t, assigned(user.id, 'role_platform_superadmin'), () => call(t, 'DELETE', `/v1/users/${user.id}/sessions/${session.id}`, manager.token));
    promoted(assertError(res, 403, 'forbidden'));
    assert.equal(await liveSessionCount(t, user.id), 1);
    assert.deepEqual(await trail(user.id, user.email), before);
  });

  for (const [label, method, path, body, changed] of [
    ['Profile PATCH', 'PATCH', '/profile', { display_name: 'Taken' }, `SELECT 1 FROM profiles WHERE user_id = $1 AND display_name = 'Taken'`],
    ['Settings PATCH', 'PATCH', '/settings', { theme: 'dark' }, `SELECT 1 FROM settings WHERE user_id = $1 AND theme = 'dark'`],
    ['export', 'GET', '/export', undefined, `SELECT 1 FROM counters WHERE bucket = 'export:' || $1`],
    ['erasure request', 'POST', '/erasure-requests', {}, 'SELECT 1 FROM erasure_requests WHERE user_id = $1'],
  ] as const) {
    test(`a users.manage holder's ${label} of another user that waited while the user was made a superadmin gets 403 forbidden (required_role superadmin): nothing changes, no audit row, no event`, async () => {
      const user = await createUser(t);
      const before = await trail(user.id, user.email);
      const res = await commitWhileWaiting(t, assigned(user.id, 'role_platform_superadmin'), () => call(t, method, `/v1/users/${user.id}${path}`, manager.token, body));
      promoted(assertError(res, 403, 'forbidden'));
      assert.deepEqual(await sql(t, changed, [user.id]), []);
      assert.equal((await userRow(t, user.id))!.status, 'active');
      assert.deepEqual(await trail(user.id, user.email), before);
    });
  }

  test("a users.manage holder's invitation re-send to another user that waited while the user was made a superadmin gets 403 forbidden (required_role superadmin): no mail", async () => {
    const user = await createUser(t, { status: 'invited' });
    const before = await trail(user.id, user.email);
    const res = await commitWhileWaiting(t, assigned(user.id, 'role_platform_superadmin'), () => call(t, 'POST', `/v1/users/${user.id}/invitation`, manager.token));
    promoted(assertError(res, 403, 'forbidden'));
    assert.deepEqual(await trail(user.id, user.email), before);
  });

  test("a superadmin's PATCH of another user's email that waited while the user was made a superadmin still changes it (a superadmin may)", async () => {
    const user = await createUser(t);
    const email = uniqueEmail('moved');
    const res = await commitWhileWaiting(t, assigned(user.id, 'role_platform_superadmin'), () => call(t, 'PATCH', `/v1/users/${user.id}`, admin.token, { email }));
    assert.equal(assertStatus(res, 200).email, email);
    assert.equal((await sql(t, 'SELECT email FROM users WHERE id = $1', [user.id]))[0].email, email);
  });
}
