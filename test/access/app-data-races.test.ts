// Part A: for the user themself and the Application's own key, an AppProfile (and, as decisions.md
// "Settings" has it, an AppSettings) write needs the user to "currently have active access to the
// Application, else 403 entitlement_required". The write locks the user; every access change locks the
// users it changes too (withAccessFlips), so access read under that lock is the access the write
// commits against. Two transactions at once need PostgreSQL: only the PostgreSQL pass registers these.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { appKey, assertError, assertStatus, call, grant, newApp, person, platformKey, sql, type AppFixture } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;

/** A user with active access to `app`, and the statements of a revoke of it as it runs (the user locked, then the row). */
async function revokedMeanwhile() {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const revoke: [string, unknown[]][] = [
    ['SELECT 1 FROM users WHERE id = $1 FOR NO KEY UPDATE', [user.id]],
    [`UPDATE entitlements SET status = 'revoked' WHERE id = $1`, [ent.id]],
  ];
  return { user, revoke };
}

const rowsOf = (table: 'app_profiles' | 'app_settings', userId: string) => sql(t, `SELECT 1 FROM ${table} WHERE user_id = $1`, [userId]);
const audited = (userId: string) => sql(t, `SELECT action FROM audit_events WHERE target_user_id = $1 AND action IN ('profile.updated', 'settings.updated')`, [userId]);

if (storageName === 'postgres') {
  // Inside the block: on embedded storage the file registers no test, and hooks without a test would
  // leave the app they start open.
  before(async () => {
    t = await buildTestApp();
    admin = await platformKey(t);
    app = await newApp(t, admin, { settings_schema: { type: 'object', properties: { color: { type: 'string' } } } });
  });
  after(() => t.close());

  for (const caller of ['the user themself', "the Application's own key"] as const) {
    const credOf = async (user: { token: string }) => (caller === 'the user themself' ? user.token : appKey(t, app.id));

    test(`an AppProfile PATCH by ${caller} that waited while the user's access was revoked gets 403 entitlement_required: no AppProfile, no audit row`, async () => {
      const { user, revoke } = await revokedMeanwhile();
      const cred = await credOf(user);
      const res = await commitWhileWaiting(t, revoke, () => call(t, 'PATCH', `/v1/users/${user.id}/apps/${app.id}/profile`, cred, { display_handle: 'Kept' }));
      assert.equal(assertError(res, 403, 'entitlement_required').details.entitlement_status, 'revoked');
      assert.deepEqual(await rowsOf('app_profiles', user.id), []);
      assert.deepEqual(await audited(user.id), []);
    });

    test(`an AppSettings PATCH by ${caller} that waited while the user's access was revoked gets 403 entitlement_required: no AppSettings, no audit row`, async () => {
      const { user, revoke } = await revokedMeanwhile();
      const cred = await credOf(user);
      const res = await commitWhileWaiting(t, revoke, () => call(t, 'PATCH', `/v1/users/${user.id}/apps/${app.id}/settings`, cred, { overrides: { color: 'teal' } }));
      assert.equal(assertError(res, 403, 'entitlement_required').details.entitlement_status, 'revoked');
      assert.deepEqual(await rowsOf('app_settings', user.id), []);
      assert.deepEqual(await audited(user.id), []);
    });
  }

  test('a users.manage PATCH of the AppProfile and AppSettings that waited while the access was revoked still writes (users.manage is exempt)', async () => {
    const { user, revoke } = await revokedMeanwhile();
    assertStatus(await commitWhileWaiting(t, revoke, () => call(t, 'PATCH', `/v1/users/${user.id}/apps/${app.id}/profile`, admin, { display_handle: 'Kept' })), 200);
    assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}/apps/${app.id}/settings`, admin, { overrides: { color: 'teal' } }), 200);
    assert.equal((await rowsOf('app_profiles', user.id)).length, 1);
  });
}
