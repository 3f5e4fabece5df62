// Part B: an Application's owner grants it ("public and invite_only — platform, own key, owner") and
// assigns its Roles. The owner's right is read under the Application's lock such a write takes, so an
// ownership move committed while the write waited for it applies to it. Two transactions at once need
// PostgreSQL: only the PostgreSQL pass registers these.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { accessEvents, assertError, assertStatus, call, grantReq, newApp, orgGrantReq, orgWithMembers, person, platformKey, sql } from '../organizations/support.js';

let t: TestApp;
let admin: string;

/** An Application of a fresh owner, and the statements that lock it and move it to another user. */
async function movingApp(body: Record<string, unknown> = {}) {
  const app = await newApp(t, admin, body);
  const next = await person(t);
  const move: [string, unknown[]][] = [
    ['SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [app.id]],
    ['UPDATE applications SET owner_user_id = $2 WHERE id = $1', [app.id, next.id]],
  ];
  return { app, owner: app.owner!, move };
}

if (storageName === 'postgres') {
  // Inside the block: on embedded storage the file registers no test, and hooks without a test would
  // leave the app they start open.
  before(async () => {
    t = await buildTestApp();
    admin = await platformKey(t);
  });
  after(() => t.close());

  test('an owner whose Application moves to another user while their personal grant waits for it gets 403 forbidden (a stranger\'s answer): no Entitlement, no access.granted', async () => {
    const { app, owner, move } = await movingApp();
    const user = await person(t);
    const res = await commitWhileWaiting(t, move, () => grantReq(t, owner.token, user.id, { application_id: app.id, source: 'admin_grant' }));
    assertError(res, 403, 'forbidden');
    assert.deepEqual(await sql(t, 'SELECT id FROM entitlements WHERE application_id = $1', [app.id]), []);
    assert.deepEqual(await accessEvents(t, user.id, app.id), []);
  });

  test('an owner whose Application moves to another user while their organization grant waits for it gets 403 forbidden: no Entitlement, no access.granted for the members', async () => {
    const { app, owner, move } = await movingApp();
    const org = await orgWithMembers(t, admin, 1);
    const res = await commitWhileWaiting(t, move, () => orgGrantReq(t, owner.token, org.id, { application_id: app.id }));
    assertError(res, 403, 'forbidden');
    assert.deepEqual(await sql(t, 'SELECT id FROM entitlements WHERE application_id = $1', [app.id]), []);
    assert.deepEqual(await accessEvents(t, org.members[0].id, app.id), []);
  });

  test('an owner whose Application moves to another user while their app Role assignment, or its removal, waits for it gets 403 forbidden: the user\'s Roles stay as they were, no role.assigned or role.removed', async () => {
    const { app, owner, move } = await movingApp({ available_app_roles: ['editor'] });
    const roleId = `role_${app.slug}_editor`;
    const user = await person(t);
    const assign = await commitWhileWaiting(t, move, () => call(t, 'POST', `/v1/users/${user.id}/roles/${roleId}`, owner.token, {}));
    assertError(assign, 403, 'forbidden');
    assert.deepEqual(await sql(t, 'SELECT role_id FROM role_assignments WHERE user_id = $1 AND role_id = $2', [user.id, roleId]), []);

    const again = await movingApp({ available_app_roles: ['editor'] });
    const againRole = `role_${again.app.slug}_editor`;
    assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/${againRole}`, again.owner.token, {}), 201);
    const removal = await commitWhileWaiting(t, again.move, () => call(t, 'DELETE', `/v1/users/${user.id}/roles/${againRole}`, again.owner.token));
    assertError(removal, 403, 'forbidden');
    assert.equal((await sql(t, 'SELECT role_id FROM role_assignments WHERE user_id = $1 AND role_id = $2', [user.id, againRole])).length, 1, 'the assignment stays');
    const actions = (await sql(t, `SELECT action FROM audit_events WHERE target_user_id = $1 AND action IN ('role.assigned', 'role.removed') ORDER BY created_at`, [user.id])).map((r) => r.action);
    assert.deepEqual(actions, ['role.assigned'], 'only the assignment made before the move');
  });
  test('an owner whose Application moves to another user while their DELETE of its Role waits for it gets 404 role_not_found (a stranger\'s answer): the Role stays, no role.deleted', async () => {
    const { app, owner, move } = await movingApp({ available_app_roles: ['editor', 'viewer'] });
    const roleId = `role_${app.slug}_viewer`;
    const res = await commitWhileWaiting(t, move, () => call(t, 'DELETE', `/v1/roles/${roleId}`, owner.token));
    assertError(res, 404, 'role_not_found');
    assert.equal((await sql(t, 'SELECT id FROM roles WHERE id = $1', [roleId])).length, 1, 'the new owner\'s Role stays');
    assert.deepEqual(await sql(t, `SELECT id FROM audit_events WHERE action = 'role.deleted' AND target_id = $1`, [roleId]), []);
  });

  test('an owner whose Application moves to another user while their creation of its Role waits for it gets 403 forbidden (a stranger\'s answer): no Role, no role.created', async () => {
    const { app, owner, move } = await movingApp({ available_app_roles: ['editor', 'viewer'] });
    const roleId = `role_${app.slug}_viewer`;
    // The seeded Role goes first (the owner's right), so the name is free to create again.
    assertStatus(await call(t, 'DELETE', `/v1/roles/${roleId}`, owner.token), 204);
    const res = await commitWhileWaiting(t, move, () => call(t, 'POST', '/v1/roles', owner.token, { scope: app.id, name: 'viewer', permissions: [] }));
    assertError(res, 403, 'forbidden');
    assert.deepEqual(await sql(t, 'SELECT id FROM roles WHERE id = $1', [roleId]), []);
    assert.equal((await sql(t, `SELECT id FROM audit_events WHERE action = 'role.created' AND target_id = $1`, [roleId])).length, 1, 'only the seeded Role\'s creation');
  });
  test('an owner whose Application moves to another user while their configuration PATCH waits for it gets 403 forbidden (a stranger\'s answer): the Application unchanged, no application.updated from them', async () => {
    const { app, owner, move } = await movingApp();
    const res = await commitWhileWaiting(t, move, () => call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { name: 'Taken over' }));
    assertError(res, 403, 'forbidden');
    assert.equal((await sql(t, 'SELECT name FROM applications WHERE id = $1', [app.id]))[0].name, 'Test App');
    assert.deepEqual(await sql(t, `SELECT id FROM audit_events WHERE action = 'application.updated' AND target_id = $1 AND actor_id = $2`, [app.id, owner.id]), []);
  });

  test('an owner whose Application moves to another user while their PATCH of its Role waits for it gets 404 role_not_found (a stranger\'s answer): the Role unchanged, no role.updated', async () => {
    const { app, owner, move } = await movingApp({ available_app_roles: ['editor'] });
    const roleId = `role_${app.slug}_editor`;
    const res = await commitWhileWaiting(t, move, () => call(t, 'PATCH', `/v1/roles/${roleId}`, owner.token, { description: 'Taken over' }));
    assertError(res, 404, 'role_not_found');
    assert.equal((await sql(t, 'SELECT description FROM roles WHERE id = $1', [roleId]))[0].description, null);
    assert.deepEqual(await sql(t, `SELECT id FROM audit_events WHERE action = 'role.updated' AND target_id = $1`, [roleId]), []);
  });
}
