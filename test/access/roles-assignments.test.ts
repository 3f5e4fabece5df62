// Roles and Permissions (Part B): assignment rights, idempotent assignment and removal, implicit
// default_app_role rows, a user's Roles, events and audit. Creating and changing Roles is in
// roles-create-and-change.test.ts; reading Roles and Permissions in roles-reading.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { client, withTransactionStatements } from '../helpers/locks.js';
import {
  ALL_PERMISSIONS, appKey, assertError, assertStatus, auditOf, call, customPlatformRole, effective, grant, newApp, outbox, patchEnt, person,
  platformKey, rand, roleCalls, sql,
} from './support.js';

let t: TestApp;
let admin: string;
let superadmin: Awaited<ReturnType<typeof person>>;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  superadmin = await person(t, { roles: ['superadmin'] });
});
after(() => t.close());

const { createRole, assign, unassign, roleEvents, heldRoles, appWith } = roleCalls(() => ({ t, admin }));

/** An Application with roles viewer (the default, granting app.<slug>.read) and editor, and a user with access. */
async function defaultRoleHeld() {
  const app = await appWith(['viewer', 'editor'], { default_app_role: 'viewer' });
  const viewer = `role_${app.slug}_viewer`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/${viewer}`, admin, { permissions: [`app.${app.slug}.read`] }), 200);
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  return { app, viewer, user };
}

test('the default_app_role Role is held by every user with access: DELETE is 409 role_in_use while it is the default, and deletable once it is not', async () => {
  const { app, viewer, user } = await defaultRoleHeld();
  const err = assertError(await call(t, 'DELETE', `/v1/roles/${viewer}`, admin), 409, 'role_in_use');
  assert.equal(err.details.default_app_role, true);
  const ep = await effective(t, admin, user.id, app.id);
  assert.deepEqual(ep.effective_permissions, [`app.${app.slug}.read`], 'the implicit holder keeps the default Role');
  assert.deepEqual((await auditOf(t, viewer, 'role.deleted')).length, 0);
  // Another name becomes the default; the former one is an ordinary unassigned Role again.
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { default_app_role: 'editor' }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/roles/${viewer}`, admin)).statusCode, 204);
  // Making a declared name whose Role was deleted the default seeds its Role again.
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { default_app_role: 'viewer' }), 200);
  assertStatus(await call(t, 'GET', `/v1/roles/${viewer}`, admin), 200);
  const rows = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles?application_id=${app.id}`, admin), 200).data;
  assert.deepEqual(rows.filter((r: any) => r.implicit).map((r: any) => r.role_id), [viewer]);
});

test('DELETE of a Role at the same time as a PATCH making it the default_app_role: the default_app_role always names an existing Role (either the delete goes first and the PATCH seeds the Role again, or the delete is 409 role_in_use)', async () => {
  for (let round = 0; round < 8; round++) {
    const app = await appWith(['viewer', 'editor'], { default_app_role: 'viewer' });
    const editor = `role_${app.slug}_editor`;
    const [del, patch] = await Promise.all([
      call(t, 'DELETE', `/v1/roles/${editor}`, admin),
      call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { default_app_role: 'editor' }),
    ]);
    assert.equal(assertStatus(patch, 200).default_app_role, 'editor');
    if (del.statusCode !== 204) assert.equal(assertError(del, 409, 'role_in_use').details.default_app_role, true);
    assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).default_app_role, 'editor');
    assertStatus(await call(t, 'GET', `/v1/roles/${editor}`, admin), 200);
    // role.deleted and role.created again when the PATCH seeded it again; or neither. The rows of the two
    // requests carry each request's own instant, taken when it arrived, so the PATCH that waited for the
    // delete's lock may carry the earlier one: their order is not asserted, their number is.
    const audit = (await auditOf(t, editor)).map((r) => r.action).filter((a) => a === 'role.created' || a === 'role.deleted');
    assert.deepEqual(audit.sort(), del.statusCode === 204 ? ['role.created', 'role.created', 'role.deleted'] : ['role.created'], `round ${round}`);
  }
});

test('app_role_in_use counts the assignments of the caller\'s mode only, as role_in_use does: a test-mode holder keeps the name but is not counted for a live caller', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['editor', 'viewer'] });
  const editor = `role_${app.slug}_editor`;
  const testUser = await person(t, { mode: 'test' });
  assertStatus(await assign(await platformKey(t, ALL_PERMISSIONS, 'test'), testUser.id, editor), 201);
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { available_app_roles: ['viewer'] }), 409, 'app_role_in_use');
  assert.deepEqual(err.details, { role_id: editor, assignments: 0 });
  assert.deepEqual(assertError(await call(t, 'DELETE', `/v1/roles/${editor}`, admin), 409, 'role_in_use').details, { assignment_count: 0 });
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).available_app_roles, ['editor', 'viewer']);
  // A live holder is counted.
  const liveUser = await person(t);
  assertStatus(await assign(admin, liveUser.id, editor), 201);
  assert.equal(assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { available_app_roles: ['viewer'] }), 409, 'app_role_in_use').details.assignments, 1);
});

test('removing the default_app_role name from available_app_roles is 409 app_role_in_use (every user with access holds it) unless the same PATCH changes default_app_role; nothing changes', async () => {
  const { app, viewer, user } = await defaultRoleHeld();
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { available_app_roles: ['editor'] }), 409, 'app_role_in_use');
  assert.deepEqual(err.details, { role_id: viewer, default_app_role: true });
  const kept = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
  assert.deepEqual([kept.available_app_roles, kept.default_app_role], [['viewer', 'editor'], 'viewer']);
  assertStatus(await call(t, 'GET', `/v1/roles/${viewer}`, admin), 200);
  assert.deepEqual((await effective(t, admin, user.id, app.id)).effective_permissions, [`app.${app.slug}.read`]);
  // With a new default in the same PATCH the name and its unassigned Role go.
  const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { available_app_roles: ['editor'], default_app_role: 'editor' }), 200);
  assert.deepEqual([moved.available_app_roles, moved.default_app_role], [['editor'], 'editor']);
  assertError(await call(t, 'GET', `/v1/roles/${viewer}`, admin), 404, 'role_not_found');
});

// ---- assignments -----------------------------------------------------------------------------------

test('assigning a Role: 201 with the assignment, then 200 on a repeat with no second event; role.assigned webhook and audit once', async () => {
  const user = await person(t);
  const res = await assign(superadmin.token, user.id, 'role_platform_support');
  const body = assertStatus(res, 201);
  assert.equal(body.user_id, user.id);
  assert.equal(body.role_id, 'role_platform_support');
  assert.equal(body.application_id, null);
  assert.equal(body.implicit, false);
  assert.deepEqual(body.assigned_by, { type: 'user', id: superadmin.id });
  assert.ok(!Number.isNaN(Date.parse(body.assigned_at)), '!Number.isNaN(Date.parse(body.assigned_at))');
  const again = await assign(superadmin.token, user.id, 'role_platform_support');
  assert.equal(again.statusCode, 200);
  assert.equal(again.json().assigned_at, body.assigned_at);
  assert.deepEqual(await roleEvents(user.id, 'role.assigned'), [{ user_id: user.id, role_id: 'role_platform_support', application_id: null }]);
  const audit = (await auditOf(t, 'role_platform_support', 'role.assigned')).filter((a) => a.target_user_id === user.id);
  assert.equal(audit.length, 1);
  // The Role applies on the next request.
  assert.equal((await call(t, 'GET', '/v1/entitlements', user.token)).statusCode, 200);
});

if (storageName === 'postgres') test('POST /v1/users/{id}/roles/{roleId} "201, or 200 when already held": an assignment whose existing row is removed (DELETE committed) between the conflict and its read is assigned again, 201 with one more role.assigned, not a 500 (PostgreSQL)', async () => {
  const user = await person(t);
  assertStatus(await assign(superadmin.token, user.id, 'role_platform_support'), 201);
  // The removal commits right after the assignment's INSERT met the held Role (and did nothing).
  let removed = false;
  const remover = await client(t);
  const res = await withTransactionStatements(t, async (run, text) => {
    const result = await run();
    if (!removed && text.includes('INSERT INTO role_assignments')) {
      removed = true;
      await remover.query('DELETE FROM role_assignments WHERE user_id = $1 AND role_id = $2', [user.id, 'role_platform_support']);
    }
    return result;
  }, () => assign(superadmin.token, user.id, 'role_platform_support')).finally(() => remover.end());
  assert.ok(removed, 'the removal ran between the INSERT and what followed it');
  const body = assertStatus(res, 201);
  assert.equal(body.role_id, 'role_platform_support');
  assert.deepEqual(await heldRoles(user.id), ['role_platform_member', 'role_platform_support']);
  assert.equal((await roleEvents(user.id, 'role.assigned')).length, 2);
});

test('removing an assignment is idempotent: 204 twice, one role.removed webhook and audit', async () => {
  const user = await person(t);
  assertStatus(await assign(superadmin.token, user.id, 'role_platform_billing_admin'), 201);
  assert.equal((await unassign(superadmin.token, user.id, 'role_platform_billing_admin')).statusCode, 204);
  assert.equal((await unassign(superadmin.token, user.id, 'role_platform_billing_admin')).statusCode, 204);
  assert.deepEqual(await roleEvents(user.id, 'role.removed'), [{ user_id: user.id, role_id: 'role_platform_billing_admin', application_id: null }]);
  assert.equal((await auditOf(t, 'role_platform_billing_admin', 'role.removed')).filter((a) => a.target_user_id === user.id).length, 1);
  assert.deepEqual(await heldRoles(user.id), ['role_platform_member']);
});

test('the last platform member Role cannot be removed (409 member_role_required)', async () => {
  const user = await person(t);
  assertError(await unassign(superadmin.token, user.id, 'role_platform_member'), 409, 'member_role_required');
  assert.deepEqual(await heldRoles(user.id), ['role_platform_member']);
  assert.deepEqual(await roleEvents(user.id, 'role.removed'), []);
});

test('assigning a platform Role needs roles.manage and every permission it grants (403 role_escalation_forbidden); without roles.manage 403 forbidden', async () => {
  const roleId = await customPlatformRole(t, ['roles.manage', 'users.list']);
  const manager = await person(t, { roles: [roleId] });
  const user = await person(t);
  assertError(await assign(manager.token, user.id, 'role_platform_support'), 403, 'role_escalation_forbidden');
  const listOnly = assertStatus(await createRole(superadmin.token, { name: `lo_${rand(3)}`, scope: 'platform', permissions: ['users.list'] }), 201);
  assertStatus(await assign(manager.token, user.id, listOnly.id), 201);
  const plain = await person(t);
  assertError(await assign(plain.token, user.id, listOnly.id), 403, 'forbidden');
  assert.deepEqual(await heldRoles(user.id), [listOnly.id, 'role_platform_member'].sort());
});

test('removing a platform Role needs the rights assigning it needs: without every permission it grants 403 role_escalation_forbidden, which the operation documents (an agent reads its error list)', async () => {
  const roleId = await customPlatformRole(t, ['roles.manage', 'users.list']);
  const manager = await person(t, { roles: [roleId] });
  const user = await person(t);
  assertStatus(await assign(superadmin.token, user.id, 'role_platform_support'), 201);
  assertError(await unassign(manager.token, user.id, 'role_platform_support'), 403, 'role_escalation_forbidden');
  assert.deepEqual(await heldRoles(user.id), ['role_platform_member', 'role_platform_support']);
  const doc = (await t.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json();
  const refusals = doc.paths['/v1/users/{id}/roles/{roleId}'].delete.responses['403'].description.split('; ').map((text: string) => text.split(':')[0]);
  assert.ok(refusals.includes('role_escalation_forbidden'), refusals.join(', '));
});

test('a platform Role may only contain permissions the caller holds, before the PATCH as after it: taking a permission the caller lacks out of a Role its holders hold is 403 role_escalation_forbidden (as removing the Role from them is), and nothing changes', async () => {
  const strong = await customPlatformRole(t, ['users.manage', 'users.list']);
  const manager = await person(t, { roles: [await customPlatformRole(t, ['roles.manage', 'users.list'])] });
  const holder = await person(t, { roles: [strong] });
  const before = assertStatus(await call(t, 'GET', `/v1/roles/${strong}`, superadmin.token), 200);
  assertError(await unassign(manager.token, holder.id, strong), 403, 'role_escalation_forbidden');
  const error = assertError(await call(t, 'PATCH', `/v1/roles/${strong}`, manager.token, { permissions: ['users.list'] }), 403, 'role_escalation_forbidden');
  assert.deepEqual(error.details.permissions, ['users.manage']);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/roles/${strong}`, superadmin.token), 200), before);
  assert.deepEqual(await auditOf(t, strong, 'role.updated'), []);
  // A description change leaves what the holders hold as it is.
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/roles/${strong}`, manager.token, { description: 'Support desk' }), 200).description, 'Support desk');
  // Holding every permission it grants, before and after, the change goes through.
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/roles/${strong}`, superadmin.token, { permissions: ['users.list'] }), 200).permissions, ['users.list']);
});

test('assigning superadmin requires being superadmin: holding all twelve permissions through another Role is not enough', async () => {
  const everything = await customPlatformRole(t, ALL_PERMISSIONS);
  const almost = await person(t, { roles: [everything] });
  const user = await person(t);
  const res = await assign(almost.token, user.id, 'role_platform_superadmin');
  assert.equal(res.statusCode, 403, res.body);
  assert.ok(['role_escalation_forbidden', 'forbidden'].includes(res.json().error.code), res.body);
  assert.ok(!(await heldRoles(user.id)).includes('role_platform_superadmin'), '!(await heldRoles(user.id)).includes(\'role_platform_superadmin\')');
  assertStatus(await assign(superadmin.token, user.id, 'role_platform_superadmin'), 201);
});

test("an app key with roles.manage assigns its own Application's Roles; another Application's Role or a platform Role is 403 role_scope_mismatch", async () => {
  const mine = await appWith(['viewer']);
  const theirs = await appWith(['viewer']);
  const key = await appKey(t, mine.id, ['roles.manage']);
  const user = await person(t);
  await grant(t, admin, user.id, mine.id);
  await grant(t, admin, user.id, theirs.id);
  const body = assertStatus(await assign(key, user.id, `role_${mine.slug}_viewer`), 201);
  assert.equal(body.application_id, mine.id);
  assert.equal(body.assigned_by.type, 'api_key');
  assertError(await assign(key, user.id, `role_${theirs.slug}_viewer`), 403, 'role_scope_mismatch');
  assertError(await assign(key, user.id, 'role_platform_support'), 403, 'role_scope_mismatch');
  assertError(await assign(key, user.id, 'role_platform_member'), 403, 'role_scope_mismatch');
  assert.deepEqual(await roleEvents(user.id, 'role.assigned'), [{ user_id: user.id, role_id: `role_${mine.slug}_viewer`, application_id: mine.id }]);
  const [event] = await outbox(t, { userId: user.id, types: ['role.assigned'] });
  assert.equal(event.application_id, mine.id);
});

test("the owner assigns its Application's Roles (even to a user without access: allowed, grants nothing); another Application's Role is 403", async () => {
  const mine = await appWith(['viewer']);
  const theirs = await appWith(['viewer']);
  const user = await person(t);
  assertStatus(await assign(mine.owner!.token, user.id, `role_${mine.slug}_viewer`), 201);
  const res = await assign(mine.owner!.token, user.id, `role_${theirs.slug}_viewer`);
  assert.equal(res.statusCode, 403, res.body);
  const view = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/apps/${mine.id}/effective-permissions`, admin), 200);
  assert.equal(view.allowed, false);
  assert.deepEqual(view.effective_permissions, []);
});

test('GET /v1/users/{id}/roles lists explicit rows and the implicit default_app_role row only while access is active; implicit rows cannot be removed', async () => {
  const app = await appWith(['viewer', 'editor'], { default_app_role: 'viewer' });
  const user = await person(t);
  assertStatus(await assign(admin, user.id, `role_${app.slug}_editor`), 201);
  const list = async () => assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles`, user.token), 200).data;
  let rows = await list();
  assert.deepEqual(rows.map((r: { role_id: string }) => r.role_id).sort(), [`role_${app.slug}_editor`, 'role_platform_member'].sort());
  const ent = await grant(t, admin, user.id, app.id);
  rows = await list();
  const implicit = rows.find((r: { implicit: boolean }) => r.implicit);
  assert.deepEqual(implicit, { user_id: user.id, role_id: `role_${app.slug}_viewer`, application_id: app.id, assigned_at: null, assigned_by: null, implicit: true });
  assert.equal(rows.length, 3);
  // Implicit rows cannot be removed: the call changes nothing.
  const removal = await unassign(admin, user.id, `role_${app.slug}_viewer`);
  assert.ok([204, 409].includes(removal.statusCode), removal.body);
  assert.ok((await list()).some((r: { implicit: boolean }) => r.implicit), '(await list()).some((r: { implicit: boolean }) => r.implicit)');
  assert.deepEqual(await roleEvents(user.id, 'role.removed'), []);
  // application_id filter.
  const filtered = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles?application_id=${app.id}`, admin), 200).data;
  assert.deepEqual(filtered.map((r: { role_id: string }) => r.role_id).sort(), [`role_${app.slug}_editor`, `role_${app.slug}_viewer`].sort());
  // Access off: the implicit row disappears.
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  assert.ok(!(await list()).some((r: { implicit: boolean }) => r.implicit), '!(await list()).some((r: { implicit: boolean }) => r.implicit)');
  // The default Role also assigned explicitly is listed once, as the explicit row.
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
  assertStatus(await assign(admin, user.id, `role_${app.slug}_viewer`), 201);
  const viewer = (await list()).filter((r: { role_id: string }) => r.role_id === `role_${app.slug}_viewer`);
  assert.equal(viewer.length, 1);
  assert.equal(viewer[0].implicit, false);
});

test('GET /v1/users/{id}/roles: self, roles.manage and users.list read it; an app-confined key sees only its Application\'s rows; others 404', async () => {
  const mine = await appWith(['viewer']);
  const theirs = await appWith(['viewer']);
  const user = await person(t);
  await grant(t, admin, user.id, mine.id);
  assertStatus(await assign(admin, user.id, `role_${mine.slug}_viewer`), 201);
  assertStatus(await assign(admin, user.id, `role_${theirs.slug}_viewer`), 201);
  for (const cred of [user.token, await platformKey(t, ['roles.manage']), await platformKey(t, ['users.list'])]) {
    assert.equal(assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles`, cred), 200).data.length, 3);
  }
  // Any of the four confined permissions makes an app key app-confined; without one it reads nothing.
  for (const permission of ['users.list', 'roles.manage', 'entitlements.manage', 'audit.view']) {
    const key = await appKey(t, mine.id, [permission]);
    const confined = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles`, key), 200).data;
    assert.deepEqual(confined.map((r: { role_id: string }) => r.role_id), [`role_${mine.slug}_viewer`], permission);
  }
  assertError(await call(t, 'GET', `/v1/users/${user.id}/roles`, await appKey(t, mine.id, [])), 404, 'user_not_found');
  const stranger = await person(t);
  assertError(await call(t, 'GET', `/v1/users/${user.id}/roles`, stranger.token), 404, 'user_not_found');
});

test("removing an assignment of another Application's Role with an app key holding roles.manage is 403 role_scope_mismatch, and the assignment stays (no role.removed)", async () => {
  const mine = await appWith(['viewer']);
  const theirs = await appWith(['viewer']);
  const key = await appKey(t, mine.id, ['roles.manage']);
  const user = await person(t);
  const roleId = `role_${theirs.slug}_viewer`;
  assertStatus(await assign(superadmin.token, user.id, roleId), 201);
  assertError(await unassign(key, user.id, roleId), 403, 'role_scope_mismatch');
  assert.deepEqual(await heldRoles(user.id), ['role_platform_member', roleId]);
  assert.deepEqual(await roleEvents(user.id, 'role.removed'), []);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'role.removed' AND target_user_id = $1`, [user.id]))[0].n, 0);
});

test('an unresolvable Role id is 404 role_not_found when assigning or removing it, and nothing is written', async () => {
  const app = await appWith(['viewer']);
  const user = await person(t);
  for (const roleId of [`role_${app.slug}_nope`, 'role_platform_nope', 'garbage']) {
    assertError(await assign(superadmin.token, user.id, roleId), 404, 'role_not_found');
    assertError(await unassign(superadmin.token, user.id, roleId), 404, 'role_not_found');
  }
  assert.deepEqual(await heldRoles(user.id), ['role_platform_member']);
  assert.deepEqual(await roleEvents(user.id, 'role.assigned'), []);
});

test('"A permission change applies on the holder\'s next request … no per-holder webhook fires, so to force immediate revocation remove the assignment": PATCH of a held platform or app Role emits nothing, the holder\'s next request and check follow it; removing the assignment emits role.removed', async () => {
  const other = await person(t);
  const roleId = await customPlatformRole(t, ['users.list']);
  const holder = await person(t, { roles: [roleId] });
  const app = await appWith(['editor']);
  const appRole = `role_${app.slug}_editor`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/${appRole}`, app.owner!.token, { permissions: [`app.${app.slug}.write`] }), 200);
  await grant(t, admin, holder.id, app.id);
  assertStatus(await assign(admin, holder.id, appRole), 201);
  assertStatus(await call(t, 'GET', `/v1/users/${other.id}`, holder.token), 200);
  assert.deepEqual((await effective(t, admin, holder.id, app.id)).effective_permissions, [`app.${app.slug}.write`]);
  const seq = async () => (await sql(t, 'SELECT count(*)::int AS n FROM outbox_events'))[0].n as number;
  const before = await seq();
  assertStatus(await call(t, 'PATCH', `/v1/roles/${roleId}`, superadmin.token, { permissions: [] }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/roles/${appRole}`, app.owner!.token, { permissions: [] }), 200);
  assert.equal(await seq(), before, 'no per-holder webhook fires');
  assert.equal((await auditOf(t, roleId, 'role.updated')).length, 1);
  assertError(await call(t, 'GET', `/v1/users/${other.id}`, holder.token), 404, 'user_not_found');
  assert.deepEqual((await effective(t, admin, holder.id, app.id)).effective_permissions, []);
  assertStatus(await unassign(admin, holder.id, appRole), 204);
  assert.deepEqual(await roleEvents(holder.id, 'role.removed'), [{ user_id: holder.id, role_id: appRole, application_id: app.id }]);
});

test("GET /v1/users/{id}/roles with an app-confined key: application_id naming another Application still lists only the key's own Application's rows", async () => {
  const mine = await appWith(['viewer']);
  const theirs = await appWith(['viewer']);
  const user = await person(t);
  await grant(t, admin, user.id, mine.id);
  await grant(t, admin, user.id, theirs.id);
  assertStatus(await assign(admin, user.id, `role_${mine.slug}_viewer`), 201);
  assertStatus(await assign(admin, user.id, `role_${theirs.slug}_viewer`), 201);
  const key = await appKey(t, mine.id, ['roles.manage']);
  const res = await call(t, 'GET', `/v1/users/${user.id}/roles?application_id=${theirs.id}`, key);
  const rows: { role_id: string; application_id: string | null }[] = assertStatus(res, 200).data;
  assert.deepEqual(rows.map((r) => r.role_id), [`role_${mine.slug}_viewer`]);
  assert.ok(rows.every((r) => r.application_id === mine.id), res.body);
});

test("GET /v1/users/{id}/roles: the implicit default_app_role rows follow the confinement and the application_id filter too: an app-confined key sees its own Application's implicit row only, and application_id lists that Application's only", async () => {
  const mine = await appWith(['viewer'], { default_app_role: 'viewer' });
  const theirs = await appWith(['viewer'], { default_app_role: 'viewer' });
  const user = await person(t);
  await grant(t, admin, user.id, mine.id);
  await grant(t, admin, user.id, theirs.id);
  const ids = (rows: { role_id: string }[]) => rows.map((r) => r.role_id).sort();
  const all = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles`, admin), 200).data;
  assert.deepEqual(ids(all), ['role_platform_member', `role_${mine.slug}_viewer`, `role_${theirs.slug}_viewer`].sort());
  const key = await appKey(t, mine.id, ['roles.manage']);
  const confined = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles`, key), 200).data;
  assert.deepEqual(confined, [{ user_id: user.id, role_id: `role_${mine.slug}_viewer`, application_id: mine.id, assigned_at: null, assigned_by: null, implicit: true }]);
  const filtered = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles?application_id=${mine.id}`, admin), 200).data;
  assert.deepEqual(ids(filtered), [`role_${mine.slug}_viewer`]);
});

test("an app-confined key with roles.manage assigns its Application's Role only to users with an access path to it (others 404 user_not_found, nothing written); the owner may assign it to anyone", async () => {
  const mine = await appWith(['viewer']);
  const key = await appKey(t, mine.id, ['roles.manage']);
  const stranger = await person(t);
  assertError(await assign(key, stranger.id, `role_${mine.slug}_viewer`), 404, 'user_not_found');
  assert.deepEqual(await heldRoles(stranger.id), ['role_platform_member']);
  assert.deepEqual(await roleEvents(stranger.id, 'role.assigned'), []);
  await grant(t, admin, stranger.id, mine.id);
  assertStatus(await assign(key, stranger.id, `role_${mine.slug}_viewer`), 201);
});

test("role.assigned and role.removed audit rows of an app Role: target the Role and the user, name the Application, and carry {user_id, role_id, application_id} as after (assigned) and before (removed)", async () => {
  const app = await appWith(['viewer']);
  const roleId = `role_${app.slug}_viewer`;
  const user = await person(t);
  assertStatus(await assign(admin, user.id, roleId), 201);
  assert.equal((await unassign(admin, user.id, roleId)).statusCode, 204);
  const data = { user_id: user.id, role_id: roleId, application_id: app.id };
  const [assigned] = await auditOf(t, roleId, 'role.assigned');
  const [removed] = await auditOf(t, roleId, 'role.removed');
  for (const row of [assigned, removed]) {
    assert.equal(row.target_type, 'role');
    assert.equal(row.target_user_id, user.id);
    assert.equal(row.application_id, app.id);
  }
  assert.deepEqual([assigned.before, assigned.after], [null, data]);
  assert.deepEqual([removed.before, removed.after], [data, null]);
  assert.deepEqual(await roleEvents(user.id, 'role.removed'), [data]);
});
