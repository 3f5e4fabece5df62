// The way out when the platform's administrators locked themselves out (README "Operator CLI",
// locked out): `platform bootstrap-admin` with an address no live user holds gives a new superadmin,
// who reinstates, re-promotes and resets the second factor of the one locked out.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { PASSWORD, login, uniqueEmail } from '../helpers/fixtures.js';
import { bootstrapAdmin } from '../../src/modules/users/bootstrap.js';
import { createMfaUser } from '../auth/support.js';
import { assertError, assertStatus, call, sql } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const SUPERADMIN = 'role_platform_superadmin';
const holdsSuperadmin = async (userId: string) => (await sql(t, 'SELECT 1 FROM role_assignments WHERE user_id = $1 AND role_id = $2', [userId, SUPERADMIN])).length === 1;

test('the only superadmin who removed their own superadmin Role, and lost their TOTP device with the recovery codes, is let back in by a superadmin from bootstrap-admin with a new address; their own address changes nothing', async () => {
  await sql(t, 'DELETE FROM role_assignments WHERE role_id = $1', [SUPERADMIN]);
  const old = await createMfaUser(t, { roles: ['superadmin'] });
  assert.equal((await call(t, 'DELETE', `/v1/users/me/roles/${SUPERADMIN}`, old.token)).statusCode, 204, 'the state is reachable');
  assertError(await call(t, 'POST', `/v1/users/me/roles/${SUPERADMIN}`, old.token, {}), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT 1 FROM role_assignments WHERE role_id = $1', [SUPERADMIN])).length, 0, 'no superadmin left');

  // bootstrap-admin with the locked-out admin's own address: a live user holds it, nothing changes.
  const same = await bootstrapAdmin(t.deps, old.user.email, PASSWORD);
  assert.deepEqual(same, { created: false, userId: old.user.id });
  assert.equal(await holdsSuperadmin(old.user.id), false);

  // With an address no live user holds: a new superadmin, who lets the old one back in.
  const fresh = await bootstrapAdmin(t.deps, uniqueEmail('rescue'), PASSWORD);
  assert.equal(fresh.created, true);
  const [rescuer] = await sql(t, 'SELECT email FROM users WHERE id = $1', [fresh.userId]);
  const token = await login(t, { email: rescuer.email, password: PASSWORD, mode: 'live' });
  assert.equal(assertStatus(await call(t, 'POST', `/v1/users/${old.user.id}/roles/${SUPERADMIN}`, token, {}), 201).role_id, SUPERADMIN);
  assert.equal((await call(t, 'DELETE', `/v1/users/${old.user.id}/mfa/totp`, token)).statusCode, 204);
  const signedIn = assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: old.user.email, password: old.user.password }), 200);
  assert.equal(signedIn.mfa_required, undefined, 'signs in with the password alone');
  assert.equal((await call(t, 'GET', '/v1/users?status=active', signedIn.access_token)).statusCode, 200, 'a superadmin again');
});

test('the only superadmin suspended by another superadmin who then left, or deleted by themselves: a superadmin from bootstrap-admin with a new address reactivates or restores them', async () => {
  await sql(t, 'DELETE FROM role_assignments WHERE role_id = $1', [SUPERADMIN]);
  const rescue = async () => {
    const made = await bootstrapAdmin(t.deps, uniqueEmail('rescue'), PASSWORD);
    const [row] = await sql(t, 'SELECT email FROM users WHERE id = $1', [made.userId]);
    return login(t, { email: row.email, password: PASSWORD, mode: 'live' });
  };
  const suspended = await createMfaUser(t, { roles: ['superadmin'] });
  // A users.manage holder who is no superadmin may not (403 forbidden); another superadmin may, and then leaves.
  const other = await createMfaUser(t, { roles: ['superadmin'] });
  assert.equal(assertStatus(await call(t, 'POST', `/v1/users/${suspended.user.id}/suspend`, other.token, {}), 200).status, 'suspended');
  await sql(t, 'DELETE FROM role_assignments WHERE user_id = $1 AND role_id = $2', [other.user.id, SUPERADMIN]);
  assertError(await call(t, 'POST', '/v1/auth/login', null, { email: suspended.user.email, password: suspended.user.password }), 403, 'account_suspended');
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/users/${suspended.user.id}`, await rescue(), { status: 'active' }), 200).status, 'active');

  const deleted = await createMfaUser(t, { roles: ['superadmin'] });
  assert.equal((await call(t, 'DELETE', '/v1/users/me', deleted.token)).statusCode, 204, 'deleting oneself is allowed');
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/users/${deleted.user.id}`, await rescue(), { status: 'active' }), 200).status, 'active');
  assert.equal(await holdsSuperadmin(deleted.user.id), true, 'a restore brings the Role back with the account');
});
