// AppProfile (Part A): GET / PATCH /v1/users/{id}/apps/{appId}/profile.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import {
  appKey, assertError, assertInvalid, assertStatus, call, grant, newApp, patchEnt, person, platformKey, sql, type AppFixture,
} from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
});
after(() => t.close());

const url = (userId: string, appId = app.id) => `/v1/users/${userId}/apps/${appId}/profile`;
const read = (cred: string, userId: string, appId = app.id) => call(t, 'GET', url(userId, appId), cred);
const write = (cred: string, userId: string, body: Record<string, unknown>, appId = app.id) => call(t, 'PATCH', url(userId, appId), cred, body);
const rows = async (userId: string) => sql(t, 'SELECT * FROM app_profiles WHERE user_id = $1', [userId]);
const displayName = async (userId: string) => (await sql(t, 'SELECT display_name FROM profiles WHERE user_id = $1', [userId]))[0].display_name;

/** A user with active access to `app`. */
async function member() {
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  return user;
}

test('without a record a read returns display_handle null, custom {}, updated_at null and the Profile name, and writes nothing', async () => {
  const user = await member();
  const body = assertStatus(await read(user.token, 'me'), 200);
  assert.deepEqual(body, {
    user_id: user.id,
    application_id: app.id,
    display_handle: null,
    effective_display_name: await displayName(user.id),
    custom: {},
    updated_at: null,
  });
  assert.equal((await rows(user.id)).length, 0);
  assertStatus(await read(admin, user.id), 200);
  assert.equal((await rows(user.id)).length, 0);
});

test('the first PATCH creates the record; effective_display_name is the display_handle, falling back to the Profile display_name when null', async () => {
  const user = await member();
  const body = assertStatus(await write(user.token, 'me', { display_handle: 'Captain' }), 200);
  assert.equal(body.display_handle, 'Captain');
  assert.equal(body.effective_display_name, 'Captain');
  assert.deepEqual(body.custom, {});
  assert.ok(!Number.isNaN(Date.parse(body.updated_at)), '!Number.isNaN(Date.parse(body.updated_at))');
  const [row] = await rows(user.id);
  assert.equal(row.application_id, app.id);
  assert.equal(row.display_handle, 'Captain');
  // The global Profile name follows when the handle is cleared.
  assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', user.token, { display_name: 'Global Name' }), 200);
  const cleared = assertStatus(await write(user.token, 'me', { display_handle: null }), 200);
  assert.equal(cleared.display_handle, null);
  assert.equal(cleared.effective_display_name, 'Global Name');
  assert.equal((await rows(user.id)).length, 1);
});

test('custom merges one level deep and a key sent as null is removed', async () => {
  const user = await member();
  assertStatus(await write(user.token, user.id, { custom: { a: 1, b: { x: 1 }, keep: 'yes' } }), 200);
  let body = assertStatus(await write(user.token, user.id, { custom: { b: { y: 2 }, c: [1, 2] } }), 200);
  assert.deepEqual(body.custom, { a: 1, b: { y: 2 }, keep: 'yes', c: [1, 2] });
  body = assertStatus(await write(user.token, user.id, { custom: { a: null, c: null } }), 200);
  assert.deepEqual(body.custom, { b: { y: 2 }, keep: 'yes' });
  // A PATCH without custom leaves it.
  body = assertStatus(await write(user.token, user.id, { display_handle: 'h' }), 200);
  assert.deepEqual(body.custom, { b: { y: 2 }, keep: 'yes' });
  assert.deepEqual(assertStatus(await read(user.token, user.id), 200).custom, { b: { y: 2 }, keep: 'yes' });
});

test('custom "not schema-validated": keys holding line breaks (\\n, \\r\\n, U+2028, U+2029) and other control or format characters are stored and read back as sent, in the PATCH answer, the GET and the export, never silently left out', async () => {
  const user = await member();
  const custom = { 'a\nb': 1, 'line\r\nbreak': 'two', 'ls\u2028': true, 'ps\u2029': 'p', 'tab\tkey': [1], '\u202eltr': { 'nested\nkey': 'kept' }, plain: 'x' };
  assert.deepEqual(assertStatus(await write(user.token, 'me', { custom }), 200).custom, custom);
  assert.deepEqual(assertStatus(await read(user.token, 'me'), 200).custom, custom);
  const exported = assertStatus(await call(t, 'GET', '/v1/users/me/export', user.token), 200);
  assert.deepEqual(exported.applications.find((a: { application_id: string }) => a.application_id === app.id).app_profile.custom, custom);
  // A key sent as null is removed, whatever it holds.
  const { 'a\nb': _removed, ...rest } = custom;
  assert.deepEqual(assertStatus(await write(user.token, 'me', { custom: { 'a\nb': null } }), 200).custom, rest);
});

test('custom is at most 16 KB serialized (422); just under is accepted', async () => {
  const user = await member();
  const tooBig = { blob: 'x'.repeat(16 * 1024) };
  const res = await write(user.token, user.id, { custom: tooBig });
  assert.equal(res.statusCode, 422, res.body);
  assert.equal((await rows(user.id)).length, 0);
  // {"blob":"..."} is 11 bytes of framing.
  const fits = { blob: 'x'.repeat(16 * 1024 - 11) };
  assert.equal(Buffer.byteLength(JSON.stringify(fits)), 16 * 1024);
  assertStatus(await write(user.token, user.id, { custom: fits }), 200);
  // The limit applies to the merged result.
  const more = await write(user.token, user.id, { custom: { extra: 'y' } });
  assert.equal(more.statusCode, 422, more.body);
  assert.deepEqual(Object.keys(assertStatus(await read(user.token, user.id), 200).custom), ['blob']);
});

test('display_handle is 1–64 characters (422 otherwise)', async () => {
  const user = await member();
  assertInvalid(await write(user.token, user.id, { display_handle: '' }), 'display_handle');
  assertInvalid(await write(user.token, user.id, { display_handle: 'h'.repeat(65) }), 'display_handle');
  assert.equal(assertStatus(await write(user.token, user.id, { display_handle: 'h'.repeat(64) }), 200).display_handle.length, 64);
  assert.equal(assertStatus(await write(user.token, user.id, { display_handle: 'z' }), 200).display_handle, 'z');
});

test('display_handle "1–64 characters" counts code points: 64 emoji are accepted and shown as effective_display_name; 65 emoji are 422 naming display_handle', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units
  const user = await member();
  assertInvalid(await write(user.token, user.id, { display_handle: E.repeat(65) }), 'display_handle');
  const body = assertStatus(await write(user.token, user.id, { display_handle: E.repeat(64) }), 200);
  assert.deepEqual([body.display_handle, body.effective_display_name], [E.repeat(64), E.repeat(64)]);
});

test('display_handle is "not unique": two users of one Application set the same handle (200 each) and each reads it back as their effective_display_name', async () => {
  const handle = `Same ${Date.now()}`;
  const [first, second] = [await member(), await member()];
  for (const user of [first, second]) {
    const body = assertStatus(await write(user.token, user.id, { display_handle: handle }), 200);
    assert.deepEqual([body.display_handle, body.effective_display_name], [handle, handle]);
  }
  for (const user of [first, second]) assert.equal(assertStatus(await read(user.token, user.id), 200).display_handle, handle);
});

test("the app's own key reads and writes without any extra permission; users.manage may too", async () => {
  const user = await member();
  const key = await appKey(t, app.id);
  assertStatus(await write(key, user.id, { custom: { level: 3 } }), 200);
  assert.deepEqual(assertStatus(await read(key, user.id), 200).custom, { level: 3 });
  const manager = await platformKey(t, ['users.manage']);
  assertStatus(await write(manager, user.id, { display_handle: 'set by support' }), 200);
  assert.equal(assertStatus(await read(manager, user.id), 200).display_handle, 'set by support');
});

test("a self-service AppProfile change writes no audit event; anyone else's (users.manage, the app's own key) writes profile.updated with before and after", async () => {
  const user = await member();
  const audits = async () => sql(t, `SELECT actor_type, target_type, target_id, application_id, before, after FROM audit_events WHERE action = 'profile.updated' AND target_user_id = $1 ORDER BY created_at, id`, [user.id]);
  assertStatus(await write(user.token, user.id, { display_handle: 'me' }), 200);
  assert.deepEqual(await audits(), [], 'self edits are not audited');
  const manager = await platformKey(t, ['users.manage']);
  assertStatus(await write(manager, user.id, { display_handle: 'by support' }), 200);
  assertStatus(await write(await appKey(t, app.id), user.id, { custom: { tier: 'gold' } }), 200);
  const rowsWritten = await audits();
  assert.equal(rowsWritten.length, 2, JSON.stringify(rowsWritten));
  assert.deepEqual(rowsWritten.map((r) => [r.actor_type, r.target_type, r.target_id, r.application_id]), [
    ['api_key', 'app_profile', `${user.id}:${app.id}`, app.id],
    ['api_key', 'app_profile', `${user.id}:${app.id}`, app.id],
  ]);
  assert.equal(rowsWritten[0].before.display_handle, 'me');
  assert.equal(rowsWritten[0].after.display_handle, 'by support');
  assert.deepEqual(rowsWritten[1].after.custom, { tier: 'gold' });
  // A PATCH that changes nothing writes nothing: no audit row, updated_at kept.
  const [before] = await rows(user.id);
  t.clock.advance(5);
  assertStatus(await write(manager, user.id, { display_handle: 'by support', custom: { tier: 'gold' } }), 200);
  assert.equal((await audits()).length, 2, 'no row for a PATCH that changes nothing');
  assert.deepEqual((await rows(user.id))[0].updated_at, before.updated_at);
});

test("another Application's key gets 404 application_not_found, even with users.manage", async () => {
  const user = await member();
  const other = await newApp(t, admin);
  const key = await appKey(t, other.id, ['users.list', 'users.manage', 'entitlements.manage']);
  assertError(await read(key, user.id), 404, 'application_not_found');
  assertError(await write(key, user.id, { display_handle: 'x' }), 404, 'application_not_found');
  assert.equal((await rows(user.id)).length, 0);
});

test('other users cannot read or write someone\'s AppProfile (404); a users.list holder sees the user but gets 403 forbidden on its AppProfile', async () => {
  const user = await member();
  const stranger = await member();
  assert.equal((await read(stranger.token, user.id)).statusCode, 404);
  assert.equal((await write(stranger.token, user.id, { display_handle: 'x' })).statusCode, 404);
  const lister = await platformKey(t, ['users.list']);
  for (const res of [await read(lister, user.id), await write(lister, user.id, { display_handle: 'x' })]) {
    assert.equal(assertError(res, 403, 'forbidden').details.required_permission, 'users.manage');
  }
  assert.equal((await rows(user.id)).length, 0);
});

test("the Application's owner is no caller of a user's AppProfile or AppSettings (Part A: self, the app's own key, users.manage): the owner's User token gets 404 user_not_found, reading or writing, and nothing is written", async () => {
  const user = await member();
  const owner = app.owner!;
  const settings = `/v1/users/${user.id}/apps/${app.id}/settings`;
  for (const res of [await read(owner.token, user.id), await write(owner.token, user.id, { display_handle: 'x' }), await call(t, 'GET', settings, owner.token), await call(t, 'PATCH', settings, owner.token, { overrides: {} })]) {
    assertError(res, 404, 'user_not_found');
  }
  assert.equal((await rows(user.id)).length, 0);
  assert.deepEqual(await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [user.id]), []);
});

test('403 entitlement_required on an AppProfile carries details.entitlement_status, as app-token issuance does (none, then disabled)', async () => {
  const user = await person(t);
  const key = await appKey(t, app.id);
  for (const res of [await read(user.token, 'me'), await write(key, user.id, { display_handle: 'x' })]) {
    assert.deepEqual(assertError(res, 403, 'entitlement_required').details, { entitlement_status: 'none' });
  }
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  assert.deepEqual(assertError(await read(user.token, 'me'), 403, 'entitlement_required').details, { entitlement_status: 'disabled' });
  const token = assertError(await call(t, 'POST', '/v1/auth/app-tokens', user.token, { application_id: app.id }), 403, 'entitlement_required');
  assert.deepEqual(token.details, { entitlement_status: 'disabled' });
  assert.equal((await rows(user.id)).length, 0);
});

test('the Application\'s own key is "the app key" even when it holds users.manage: the exemption is a platform users.manage caller\'s, so the own key still gets 403 entitlement_required for a user without active access, and writes nothing', async () => {
  const user = await person(t);
  const key = await appKey(t, app.id, ['users.manage']);
  assertError(await read(key, user.id), 403, 'entitlement_required');
  assertError(await write(key, user.id, { display_handle: 'x' }), 403, 'entitlement_required');
  assert.equal((await rows(user.id)).length, 0);
  await grant(t, admin, user.id, app.id);
  assertStatus(await write(key, user.id, { display_handle: 'x' }), 200);
});

test('403 entitlement_required for self and the app key when access is not active; users.manage is exempt', async () => {
  const user = await person(t);
  const key = await appKey(t, app.id);
  // No access at all, not even a path: self and the app key.
  assertError(await read(user.token, 'me'), 403, 'entitlement_required');
  assertError(await write(user.token, 'me', { display_handle: 'x' }), 403, 'entitlement_required');
  assertError(await read(key, user.id), 403, 'entitlement_required');
  assertError(await write(key, user.id, { display_handle: 'x' }), 403, 'entitlement_required');
  assertError(await read(key, 'usr_01JAAAAAAAAAAAAAAAAAAAAAAA'), 404, 'user_not_found');
  // An access path that is not active (disabled): self and the app key.
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  for (const cred of [user.token, key]) {
    assertError(await read(cred, user.id), 403, 'entitlement_required');
    assertError(await write(cred, user.id, { display_handle: 'x' }), 403, 'entitlement_required');
  }
  assert.equal((await rows(user.id)).length, 0);
  const manager = await platformKey(t, ['users.manage']);
  assertStatus(await read(manager, user.id), 200);
  assertStatus(await write(manager, user.id, { display_handle: 'support' }), 200);
  // Access back on: self may write again.
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
  assert.equal(assertStatus(await read(user.token, 'me'), 200).display_handle, 'support');
});

test('an unknown Application is 404 application_not_found', async () => {
  const user = await member();
  assertError(await read(user.token, 'me', 'app_nosuchapp'), 404, 'application_not_found');
});

test('Part A Errors, entitlement_required ("No active access to the Application (… AppProfile)"): the app key gets 403 for a suspended or an invited user even with an active entitlement; nothing is written; users.manage is exempt', async () => {
  const key = await appKey(t, app.id);
  const suspended = await member();
  assertStatus(await read(key, suspended.id), 200);
  assertStatus(await call(t, 'POST', `/v1/users/${suspended.id}/suspend`, admin, {}), 200);
  const invited = await person(t, { status: 'invited' });
  await grant(t, admin, invited.id, app.id);
  const audit = async () => (await sql(t, 'SELECT count(*)::int AS n FROM audit_events'))[0].n;
  const before = await audit();
  for (const user of [suspended, invited]) {
    assertError(await read(key, user.id), 403, 'entitlement_required');
    assertError(await write(key, user.id, { display_handle: 'x', custom: { a: 1 } }), 403, 'entitlement_required');
    assert.equal((await rows(user.id)).length, 0);
  }
  assert.equal(await audit(), before);
  assertStatus(await read(admin, suspended.id), 200);
});

test('custom keys merge one level deep, also under concurrency: two PATCHes of one AppProfile at the same time with different custom keys keep both (on PostgreSQL the two run at once)', async () => {
  const manager = await platformKey(t, ['users.manage']);
  for (let round = 0; round < 6; round++) {
    const user = await member();
    assertStatus(await write(user.token, user.id, { custom: { theme: 'dark' } }), 200);
    const [a, b] = await Promise.all([
      write(manager, user.id, { custom: { level: 3 } }),
      write(manager, user.id, { display_handle: 'handle', custom: { tier: 'gold' } }),
    ]);
    assertStatus(a, 200);
    assertStatus(b, 200);
    const stored = assertStatus(await read(manager, user.id), 200);
    assert.deepEqual(stored.custom, { theme: 'dark', level: 3, tier: 'gold' }, `round ${round}`);
    assert.equal(stored.display_handle, 'handle');
    const audit = await sql(t, `SELECT before, after FROM audit_events WHERE action = 'profile.updated' AND target_user_id = $1`, [user.id]);
    assert.equal(audit.length, 2);
    const fromOriginal = audit.filter((r) => Object.keys(r.before.custom).length === 1);
    assert.equal(fromOriginal.length, 1, `round ${round}: only the first change starts from the stored row`);
    assert.deepEqual(audit.find((r) => r !== fromOriginal[0])!.before, fromOriginal[0].after);
  }
});

if (storageName === 'postgres') test("an erased user's AppProfile is not written back: an admin PATCH of a soft-deleted user that waited for the erasure cascade (Part A: \"Erasure clears everything exported\") gets 404 user_not_found and stores no row and no profile.updated audit row", async () => {
  const user = await member();
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/erasure-requests`, admin, {}), 202);
  // The cascade as it runs: the user row locked, the AppProfiles deleted, the tombstone marked erased.
  const res = await commitWhileWaiting(
    t,
    [
      ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [user.id]],
      ['DELETE FROM app_profiles WHERE user_id = $1', [user.id]],
      ['UPDATE users SET erased_at = now() WHERE id = $1', [user.id]],
    ],
    () => write(admin, user.id, { display_handle: 'Kept', custom: { phone: '+14155550123' } }),
  );
  assertError(res, 404, 'user_not_found');
  assert.equal((await rows(user.id)).length, 0);
  assert.equal((await sql(t, `SELECT 1 FROM audit_events WHERE action = 'profile.updated' AND target_user_id = $1`, [user.id])).length, 0);
});

if (storageName === 'postgres') test('a soft delete that committed while an app-key AppProfile PATCH waited is seen: 404 user_not_found (soft-deleted users are not visible to non-admins), no row and no profile.updated audit row', async () => {
  const user = await member();
  const key = await appKey(t, app.id);
  // The soft delete as it runs: the user row locked and marked deleted.
  const res = await commitWhileWaiting(
    t,
    [
      ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [user.id]],
      [`UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [user.id]],
    ],
    () => write(key, user.id, { display_handle: 'Kept', custom: { phone: '+14155550123' } }),
  );
  assertError(res, 404, 'user_not_found');
  assert.equal((await rows(user.id)).length, 0);
  assert.equal((await sql(t, `SELECT 1 FROM audit_events WHERE action = 'profile.updated' AND target_user_id = $1`, [user.id])).length, 0);
});

test('an AppProfile is "per User per Application": one written for one Application is not read or merged under another (display_handle null, custom {}, updated_at null there; its own first PATCH creates its own record)', async () => {
  const other = await newApp(t, admin);
  const user = await member();
  await grant(t, admin, user.id, other.id);
  assertStatus(await write(user.token, user.id, { display_handle: 'Captain', custom: { a: 1 } }), 200);
  const name = await displayName(user.id);
  const there = assertStatus(await read(user.token, user.id, other.id), 200);
  assert.deepEqual([there.display_handle, there.effective_display_name, there.custom, there.updated_at], [null, name, {}, null]);
  const written = assertStatus(await write(user.token, user.id, { custom: { b: 2 } }, other.id), 200);
  assert.deepEqual([written.display_handle, written.custom], [null, { b: 2 }]);
  const here = assertStatus(await read(user.token, user.id), 200);
  assert.deepEqual([here.display_handle, here.custom], ['Captain', { a: 1 }]);
  assert.equal((await rows(user.id)).length, 2);
});

test('user_id, application_id, effective_display_name and updated_at are read-only on PATCH: 422 read_only_field, nothing written', async () => {
  const user = await member();
  for (const body of [{ effective_display_name: 'X' }, { user_id: user.id }, { application_id: app.id }, { updated_at: new Date().toISOString() }]) {
    assertError(await write(user.token, user.id, { display_handle: 'h', ...body }), 422, 'read_only_field');
  }
  assert.equal((await rows(user.id)).length, 0);
});
