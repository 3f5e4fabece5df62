// Part A, API Keys, "App keys: api_keys.manage or the Application's owner": an owner's right is read
// under the locks a key write waits for, so an ownership move committed while the write waited
// applies to it. Two transactions at once need PostgreSQL: only the PostgreSQL pass registers these.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { answeredWhileHeld, commitWhileWaiting } from '../helpers/locks.js';
import { userToken } from '../helpers/fixtures.js';
import { assertError, assertStatus, auditOfTarget, call, createApplication, createPlatformRole, sql } from './support.js';

let t: TestApp;

/** An Application of a fresh owner, its key made by that owner, and a second user to move it to. */
async function ownedKey() {
  const [owner, next] = [await userToken(t), await userToken(t)];
  const app = await createApplication(t, { owner: owner.user.id });
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', owner.token, { name: 'app', scope: app.id, permissions: [`app.${app.slug}.read`] }), 201);
  const move: [string, unknown[]] = ['UPDATE applications SET owner_user_id = $2 WHERE id = $1', [app.id, next.user.id]];
  return { owner, app, key, move };
}

/**
 * A user with api_keys.manage and users.list (not roles.manage) owning an Application, their key of
 * `permissions` on it (restricted), a second user to move it to, and the move itself (Application locked first).
 */
async function managerOwnedKey(permissions: string[]) {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const [owner, next] = [await userToken(t, { roles: [role] }), await userToken(t)];
  const app = await createApplication(t, { owner: owner.user.id });
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', owner.token, { name: 'app', scope: app.id, permissions, restrict_destructive: true }), 201);
  const move: [string, unknown[]][] = [['SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [app.id]], ['UPDATE applications SET owner_user_id = $2 WHERE id = $1', [app.id, next.user.id]]];
  return { owner, app, key, move };
}

/** The key as a superadmin reads it, and its audit rows of `actions`: what a refused write left. */
async function keyAfter(keyId: string, actions: string[]) {
  const key = assertStatus(await call(t, 'GET', '/v1/api-keys/' + keyId, (await userToken(t, { roles: ['superadmin'] })).token), 200);
  const rows = (await Promise.all(actions.map((a) => auditOfTarget(t, keyId, a)))).flat();
  return { key, rows };
}

if (storageName === 'postgres') {
  // Inside the block: on embedded storage the file registers no test, and hooks without a test would
  // leave the app they start open.
  before(async () => {
    t = await buildTestApp();
  });
  after(() => t.close());

  test('an owner whose Application moves to another user while their key creation waits for it gets 403 forbidden (a stranger\'s answer) and no key is made', async () => {
    const { owner, app, move } = await ownedKey();
    const res = await commitWhileWaiting(t, [['SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [app.id]], move], () =>
      call(t, 'POST', '/v1/api-keys', owner.token, { name: 'late', scope: app.id, permissions: [] }));
    assertError(res, 403, 'forbidden');
    const keys = assertStatus(await call(t, 'GET', '/v1/api-keys?limit=100', owner.token), 200).data;
    assert.deepEqual(keys, [], 'the former owner holds no key of it');
  });

  test("api_keys.manage without roles.manage, owning the Application: when it moves to another user while the creation of a key holding roles.manage waits for it, the creation gets 403 role_escalation_forbidden (a non-owner's answer) and no key or api_key.created row is made", async () => {
    const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
    const [owner, next] = [await userToken(t, { roles: [role] }), await userToken(t)];
    const app = await createApplication(t, { owner: owner.user.id });
    const res = await commitWhileWaiting(t, [['SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [app.id]], ['UPDATE applications SET owner_user_id = $2 WHERE id = $1', [app.id, next.user.id]]], () =>
      call(t, 'POST', '/v1/api-keys', owner.token, { name: 'late', scope: app.id, permissions: ['users.list', 'roles.manage'] }));
    const err = assertError(res, 403, 'role_escalation_forbidden');
    assert.deepEqual(err.details.permissions, ['roles.manage']);
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM api_keys WHERE created_by_user_id = $1', [owner.user.id]))[0].n, 0, 'no key is made');
    assert.equal((await sql(t, "SELECT count(*)::int AS n FROM audit_events WHERE actor_id = $1 AND action = 'api_key.created'", [owner.user.id]))[0].n, 0, 'no audit row');
  });

  test('api_keys.manage creating an app key of only permissions it holds does not read ownership under the Application\'s lock: 201 while a move holds it', async () => {
    const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
    const owner = await userToken(t, { roles: [role] });
    const app = await createApplication(t, { owner: owner.user.id });
    const hold: [string, unknown[]] = ['SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [app.id]];
    const res = await answeredWhileHeld(t, hold, () => call(t, 'POST', '/v1/api-keys', owner.token, { name: 'own', scope: app.id, permissions: ['users.list'] }), 'the creation');
    assertStatus(res, 201);
  });

  test("api_keys.manage without roles.manage, owning the Application: when it moves to another user while a PATCH adding roles.manage to its key waits for it, the PATCH gets 403 role_escalation_forbidden (a non-owner's answer), the key's permissions unchanged, no api_key.updated", async () => {
    const { owner, key, move } = await managerOwnedKey(['users.list']);
    const res = await commitWhileWaiting(t, move, () => call(t, 'PATCH', `/v1/api-keys/${key.id}`, owner.token, { permissions: ['users.list', 'roles.manage'] }));
    assert.deepEqual(assertError(res, 403, 'role_escalation_forbidden').details.permissions, ['roles.manage']);
    const after = await keyAfter(key.id, ['api_key.updated']);
    assert.deepEqual(after.key.permissions, ['users.list']);
    assert.deepEqual(after.rows, []);
  });

  test("api_keys.manage without roles.manage, owning the Application: when it moves to another user while lifting restrict_destructive on its key holding roles.manage waits for it, the PATCH gets 403 role_escalation_forbidden, the key stays restricted, no audit row", async () => {
    const { owner, key, move } = await managerOwnedKey(['roles.manage']);
    const res = await commitWhileWaiting(t, move, () => call(t, 'PATCH', `/v1/api-keys/${key.id}`, owner.token, { restrict_destructive: false }));
    assert.deepEqual(assertError(res, 403, 'role_escalation_forbidden').details.permissions, ['roles.manage']);
    const after = await keyAfter(key.id, ['api_key.updated', 'api_key.restrict_destructive_disabled']);
    assert.equal(after.key.restrict_destructive, true);
    assert.deepEqual(after.rows, []);
  });

  test("api_keys.manage without roles.manage, owning the Application: when it moves to another user while the rotation of its key holding roles.manage waits for it, the rotation gets 403 role_escalation_forbidden: no new secret, no api_key.rotated", async () => {
    const { owner, key, move } = await managerOwnedKey(['roles.manage']);
    const res = await commitWhileWaiting(t, move, () => call(t, 'POST', `/v1/api-keys/${key.id}/rotate`, owner.token));
    assert.deepEqual(assertError(res, 403, 'role_escalation_forbidden').details.permissions, ['roles.manage']);
    const after = await keyAfter(key.id, ['api_key.rotated']);
    assert.equal(after.key.secret_hint, key.secret_hint);
    assert.deepEqual(after.rows, []);
  });

  test("api_keys.manage changing, unrestricting and rotating an app key of only permissions it holds does not read ownership under the Application's lock: 200 each while a move holds it", async () => {
    const { owner, app, key } = await managerOwnedKey(['users.list']);
    const hold: [string, unknown[]] = ['SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [app.id]];
    await answeredWhileHeld(t, hold, async () => {
      for (const [method, url, body] of [['PATCH', '', { permissions: [`app.${app.slug}.read`, 'users.list'] }], ['PATCH', '', { restrict_destructive: false }], ['POST', '/rotate', undefined]] as const) {
        assertStatus(await call(t, method, `/v1/api-keys/${key.id}${url}`, owner.token, body), 200);
      }
    }, 'a PATCH or the rotation');
  });

  test('an owner whose Application moves to another user while their rotation waits for the key (a change under way) gets 404 api_key_not_found: no new secret, no api_key.rotated, the key unchanged', async () => {
    const { owner, key, move } = await ownedKey();
    const res = await commitWhileWaiting(t, [['SELECT 1 FROM api_keys WHERE id = $1 FOR UPDATE', [key.id]], move], () =>
      call(t, 'POST', `/v1/api-keys/${key.id}/rotate`, owner.token));
    assertError(res, 404, 'api_key_not_found');
    assert.deepEqual(await auditOfTarget(t, key.id, 'api_key.rotated'), []);
    assert.equal(assertStatus(await call(t, 'GET', '/v1/api-keys/' + key.id, (await userToken(t, { roles: ['superadmin'] })).token), 200).secret_hint, key.secret_hint);
  });

  test('an owner whose Application moves to another user while their revocation waits for the key gets 404 api_key_not_found and the key stays live', async () => {
    const { owner, key, move } = await ownedKey();
    const res = await commitWhileWaiting(t, [['SELECT 1 FROM api_keys WHERE id = $1 FOR UPDATE', [key.id]], move], () =>
      call(t, 'DELETE', `/v1/api-keys/${key.id}`, owner.token));
    assertError(res, 404, 'api_key_not_found');
    assert.deepEqual(await auditOfTarget(t, key.id, 'api_key.revoked'), []);
    assert.equal(assertStatus(await call(t, 'GET', '/v1/api-keys/' + key.id, (await userToken(t, { roles: ['superadmin'] })).token), 200).revoked_at, null);
  });
}
