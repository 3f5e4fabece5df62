// Roles and Permissions (Part B): scope rules, escalation, seed Roles, deletion, assignment rights,
// idempotent assignment and removal, implicit default_app_role rows, events and audit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, storageName, type TestApp } from '../helpers/app.js';
import { client, commitWhileWaiting, withTransactionStatements } from '../helpers/locks.js';
import {
  ALL_PERMISSIONS, appKey, assertError, assertStatus, auditOf, call, createOrg, customPlatformRole, effective, grant, newApp, outbox, patchEnt, person, platformKey,
  rand, slugOf, sql, type AppFixture,
} from './support.js';
import { loadMigrations } from '../../src/db/migrate.js';

let t: TestApp;
let admin: string;
let superadmin: Awaited<ReturnType<typeof person>>;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  superadmin = await person(t, { roles: ['superadmin'] });
});
after(() => t.close());

const createRole = (cred: string, body: Record<string, unknown>) => call(t, 'POST', '/v1/roles', cred, body);
const assign = (cred: string, userId: string, roleId: string) => call(t, 'POST', `/v1/users/${userId}/roles/${roleId}`, cred, {});
const unassign = (cred: string, userId: string, roleId: string) => call(t, 'DELETE', `/v1/users/${userId}/roles/${roleId}`, cred);
const roleEvents = async (userId: string, type: string) => (await outbox(t, { userId, types: [type] })).map((e) => e.data);
const heldRoles = async (userId: string) => (await sql(t, 'SELECT role_id FROM role_assignments WHERE user_id = $1 ORDER BY role_id', [userId])).map((r) => r.role_id);

/** An Application declaring app.<slug>.read / write and the given role names. */
async function appWith(roles: string[], extra: Record<string, unknown> = {}): Promise<AppFixture> {
  const slug = slugOf('r');
  return newApp(t, admin, {
    slug,
    available_app_roles: roles,
    permissions: [{ key: `app.${slug}.read`, description: 'read' }, { key: `app.${slug}.write`, description: 'write' }],
    ...extra,
  });
}

// ---- creating and changing Roles -------------------------------------------------------------------

test('POST /v1/roles creates a platform Role role_platform_<name> (201) with audit role.created', async () => {
  const name = `ops_${rand(3)}`;
  const role = assertStatus(await createRole(superadmin.token, { name, scope: 'platform', description: 'Ops', permissions: ['users.list', 'audit.view'] }), 201);
  assert.equal(role.id, `role_platform_${name}`);
  assert.equal(role.scope, 'platform');
  assert.deepEqual(role.permissions, ['users.list', 'audit.view']);
  assert.equal(role.seed, false);
  assert.equal(role.assignment_count, 0);
  assert.equal((await auditOf(t, role.id, 'role.created')).length, 1);
});

test('a platform Role holds only platform keys and an app Role only that Application\'s app.<slug>.* keys (422 unknown_permission)', async () => {
  const app = await appWith(['viewer', 'editor']);
  const other = await appWith([]);
  assertError(await createRole(superadmin.token, { name: `p_${rand(3)}`, scope: 'platform', permissions: [`app.${app.slug}.read`] }), 422, 'unknown_permission');
  assertError(await createRole(superadmin.token, { name: `p_${rand(3)}`, scope: 'platform', permissions: ['users.list', 'made.up'] }), 422, 'unknown_permission');
  // Free the declared name "editor" (its empty Role was seeded) so a create can be tried.
  assert.equal((await call(t, 'DELETE', `/v1/roles/role_${app.slug}_editor`, app.owner!.token)).statusCode, 204);
  assertError(await createRole(app.owner!.token, { name: 'editor', scope: app.id, permissions: ['users.list'] }), 422, 'unknown_permission');
  assertError(await createRole(app.owner!.token, { name: 'editor', scope: app.id, permissions: [`app.${other.slug}.read`] }), 422, 'unknown_permission');
  assertError(await createRole(app.owner!.token, { name: 'editor', scope: app.id, permissions: [`app.${app.slug}.delete`] }), 422, 'unknown_permission');
  const role = assertStatus(await createRole(app.owner!.token, { name: 'editor', scope: app.id, permissions: [`app.${app.slug}.write`] }), 201);
  assert.equal(role.id, `role_${app.slug}_editor`);
  assert.equal(role.scope, app.id);
  assertError(await call(t, 'PATCH', `/v1/roles/${role.id}`, app.owner!.token, { permissions: ['users.list'] }), 422, 'unknown_permission');
});

test('a platform Role may only contain permissions the caller holds: 403 role_escalation_forbidden (roles.manage via a custom Role lacking users.manage)', async () => {
  const roleId = await customPlatformRole(t, ['roles.manage', 'users.list']);
  const manager = await person(t, { roles: [roleId] });
  const name = `esc_${rand(3)}`;
  assertError(await createRole(manager.token, { name, scope: 'platform', permissions: ['users.manage'] }), 403, 'role_escalation_forbidden');
  assert.equal((await sql(t, 'SELECT 1 FROM roles WHERE id = $1', [`role_platform_${name}`])).length, 0);
  const ok = assertStatus(await createRole(manager.token, { name, scope: 'platform', permissions: ['users.list'] }), 201);
  assertError(await call(t, 'PATCH', `/v1/roles/${ok.id}`, manager.token, { permissions: ['users.list', 'users.manage'] }), 403, 'role_escalation_forbidden');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/roles/${ok.id}`, manager.token), 200).permissions, ['users.list']);
});

test('platform Roles need platform roles.manage (403 forbidden otherwise)', async () => {
  const plain = await person(t);
  assertError(await createRole(plain.token, { name: `x_${rand(3)}`, scope: 'platform', permissions: [] }), 403, 'forbidden');
  const key = await platformKey(t, ['users.list']);
  assertError(await createRole(key, { name: `x_${rand(3)}`, scope: 'platform', permissions: [] }), 403, 'forbidden');
});

test('an app Role name must be in available_app_roles (422 app_role_not_declared)', async () => {
  const app = await appWith(['viewer']);
  assertError(await createRole(app.owner!.token, { name: 'auditor', scope: app.id, permissions: [] }), 422, 'app_role_not_declared');
  assertError(await createRole(admin, { name: 'auditor', scope: app.id, permissions: [] }), 422, 'app_role_not_declared');
});

test('a duplicate derived id is 409 role_name_taken (platform, and a seeded app Role)', async () => {
  const name = `dup_${rand(3)}`;
  assertStatus(await createRole(superadmin.token, { name, scope: 'platform', permissions: [] }), 201);
  assertError(await createRole(superadmin.token, { name, scope: 'platform', permissions: [] }), 409, 'role_name_taken');
  assertError(await createRole(superadmin.token, { name: 'member', scope: 'platform', permissions: [] }), 409, 'role_name_taken');
  const app = await appWith(['viewer']);
  assertError(await createRole(app.owner!.token, { name: 'viewer', scope: app.id, permissions: [] }), 409, 'role_name_taken');
});

test('app Roles are managed by the owner, the own key with roles.manage, or roles.manage; the own key without roles.manage gets 403', async () => {
  const app = await appWith(['viewer']);
  const id = `role_${app.slug}_viewer`;
  const keyWith = await appKey(t, app.id, ['roles.manage']);
  const keyWithout = await appKey(t, app.id, ['users.list']);
  for (const cred of [app.owner!.token, keyWith, admin]) {
    assertStatus(await call(t, 'PATCH', `/v1/roles/${id}`, cred, { description: `by ${cred.slice(0, 6)}` }), 200);
  }
  assertError(await call(t, 'PATCH', `/v1/roles/${id}`, keyWithout, { description: 'no' }), 403, 'forbidden');
  const stranger = await person(t);
  assertError(await call(t, 'PATCH', `/v1/roles/${id}`, stranger.token, { description: 'no' }), 404, 'role_not_found');
  const otherKey = await appKey(t, (await appWith([])).id, ['roles.manage']);
  assertError(await call(t, 'PATCH', `/v1/roles/${id}`, otherKey, { description: 'no' }), 404, 'role_not_found');
});

test('POST and DELETE /v1/roles of an app Role ("same as POST": owner, own key with roles.manage, or roles.manage): the own key with roles.manage deletes (204, role.deleted) and creates (201, role.created); without roles.manage it gets 403 forbidden and nothing changes', async () => {
  const app = await appWith(['viewer', 'editor']);
  const id = `role_${app.slug}_editor`;
  const keyWith = await appKey(t, app.id, ['roles.manage']);
  const keyWithout = await appKey(t, app.id, ['users.list']);
  assertError(await call(t, 'DELETE', `/v1/roles/${id}`, keyWithout), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT 1 FROM roles WHERE id = $1', [id])).length, 1, 'the Role stays');
  assert.equal((await call(t, 'DELETE', `/v1/roles/${id}`, keyWith)).statusCode, 204);
  assert.equal((await auditOf(t, id, 'role.deleted')).length, 1);
  assertError(await createRole(keyWithout, { name: 'editor', scope: app.id, permissions: [`app.${app.slug}.read`] }), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT 1 FROM roles WHERE id = $1', [id])).length, 0, 'nothing created');
  const role = assertStatus(await createRole(keyWith, { name: 'editor', scope: app.id, permissions: [`app.${app.slug}.read`] }), 201);
  assert.equal(role.id, id);
  assert.deepEqual(role.permissions, [`app.${app.slug}.read`]);
  assert.equal((await auditOf(t, id, 'role.created')).length, 2, 'seeded with the Application, then created by the key');
});

test('PATCH replaces permissions wholesale and writes role.updated with before and after', async () => {
  const app = await appWith(['viewer']);
  const id = `role_${app.slug}_viewer`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/${id}`, app.owner!.token, { permissions: [`app.${app.slug}.read`, `app.${app.slug}.write`] }), 200);
  const body = assertStatus(await call(t, 'PATCH', `/v1/roles/${id}`, app.owner!.token, { permissions: [`app.${app.slug}.write`] }), 200);
  assert.deepEqual(body.permissions, [`app.${app.slug}.write`]);
  const audit = await auditOf(t, id, 'role.updated');
  assert.equal(audit.length, 2);
  assert.deepEqual(audit[1].before.permissions, [`app.${app.slug}.read`, `app.${app.slug}.write`]);
  assert.deepEqual(audit[1].after.permissions, [`app.${app.slug}.write`]);
});

test('PATCH is a partial update, also under concurrency: a description PATCH and a permissions PATCH of one Role at the same time keep both, and the second role.updated audit row starts from the first one\'s after (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 6; round++) {
    const app = await appWith(['viewer']);
    const id = `role_${app.slug}_viewer`;
    const [a, b] = await Promise.all([
      call(t, 'PATCH', `/v1/roles/${id}`, admin, { description: 'Reads things' }),
      call(t, 'PATCH', `/v1/roles/${id}`, admin, { permissions: [`app.${app.slug}.read`] }),
    ]);
    assertStatus(a, 200);
    assertStatus(b, 200);
    const stored = assertStatus(await call(t, 'GET', `/v1/roles/${id}`, admin), 200);
    assert.deepEqual([stored.description, stored.permissions], ['Reads things', [`app.${app.slug}.read`]], `round ${round}`);
    const audit = await auditOf(t, id, 'role.updated');
    assert.equal(audit.length, 2);
    const fromOriginal = audit.filter((r) => r.before.description === null && r.before.permissions.length === 0);
    assert.equal(fromOriginal.length, 1, `round ${round}: only the first change starts from the original`);
    assert.deepEqual(audit.find((r) => r !== fromOriginal[0])!.before, fromOriginal[0].after);
  }
});

test('docs/decisions.md "Lists hold no duplicates": a Role\'s permissions with a repeated entry are 422 validation_failed naming permissions, on POST (platform and app Roles) and PATCH, and nothing is stored', async () => {
  const name = `dup_${rand(3)}`;
  const fields = (res: Awaited<ReturnType<typeof call>>) => assertError(res, 422, 'validation_failed').details.fields.map((f: { path: string }) => f.path);
  assert.ok(fields(await createRole(superadmin.token, { name, scope: 'platform', description: 'Dup', permissions: ['users.list', 'users.list'] })).includes('permissions'));
  assertError(await call(t, 'GET', `/v1/roles/role_platform_${name}`, superadmin.token), 404, 'role_not_found');
  const app = await appWith(['viewer', 'editor']);
  const read = `app.${app.slug}.read`;
  assert.ok(fields(await createRole(app.owner!.token, { name: 'editor', scope: app.id, description: 'Dup', permissions: [read, read] })).includes('permissions'));
  const id = `role_${app.slug}_viewer`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/${id}`, app.owner!.token, { permissions: [read] }), 200);
  assert.ok(fields(await call(t, 'PATCH', `/v1/roles/${id}`, app.owner!.token, { permissions: [read, read] })).includes('permissions'));
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/roles/${id}`, app.owner!.token), 200).permissions, [read]);
  assert.equal((await auditOf(t, id, 'role.updated')).length, 1);
});

test('seed Roles are immutable: PATCH and DELETE of role_platform_member (or superadmin) are 403 seed_role_immutable', async () => {
  for (const id of ['role_platform_member', 'role_platform_superadmin', 'role_platform_support']) {
    assertError(await call(t, 'PATCH', `/v1/roles/${id}`, superadmin.token, { description: 'changed' }), 403, 'seed_role_immutable');
    assertError(await call(t, 'PATCH', `/v1/roles/${id}`, admin, { permissions: [] }), 403, 'seed_role_immutable');
    assertError(await call(t, 'DELETE', `/v1/roles/${id}`, superadmin.token), 403, 'seed_role_immutable');
  }
  const member = assertStatus(await call(t, 'GET', '/v1/roles/role_platform_member', superadmin.token), 200);
  assert.equal(member.seed, true);
  assert.deepEqual(member.permissions, []);
});

test('DELETE of an assigned Role is 409 role_in_use; an unassigned one is 204 with audit role.deleted', async () => {
  const name = `del_${rand(3)}`;
  const role = assertStatus(await createRole(superadmin.token, { name, scope: 'platform', permissions: ['users.list'] }), 201);
  const user = await person(t);
  assertStatus(await assign(superadmin.token, user.id, role.id), 201);
  assertError(await call(t, 'DELETE', `/v1/roles/${role.id}`, superadmin.token), 409, 'role_in_use');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/roles/${role.id}`, superadmin.token), 200).assignment_count, 1);
  assert.equal((await unassign(superadmin.token, user.id, role.id)).statusCode, 204);
  assert.equal((await call(t, 'DELETE', `/v1/roles/${role.id}`, superadmin.token)).statusCode, 204);
  assertError(await call(t, 'GET', `/v1/roles/${role.id}`, superadmin.token), 404, 'role_not_found');
  assert.equal((await auditOf(t, role.id, 'role.deleted')).length, 1);
});

test('role.deleted shows the Role as it was deleted: a PATCH of its permissions committed after the DELETE first read the Role is in the audit row\'s before', async () => {
  const role = assertStatus(await createRole(superadmin.token, { name: `stale_${rand(3)}`, scope: 'platform', permissions: ['users.list'] }), 201);
  const patch = async () => {
    assertStatus(await call(t, 'PATCH', `/v1/roles/${role.id}`, superadmin.token, { permissions: ['users.list', 'audit.view'], description: 'widened' }), 200);
  };
  const res = await pausedAfter(t, 'FROM roles r WHERE r.id = $1', patch, () => call(t, 'DELETE', `/v1/roles/${role.id}`, superadmin.token));
  assert.equal(res.statusCode, 204, res.body);
  const [row] = await auditOf(t, role.id, 'role.deleted');
  assert.deepEqual(row.before.permissions, ['users.list', 'audit.view']);
  assert.equal(row.before.description, 'widened');
  assert.equal(row.after, null);
  assert.equal(row.actor_id, superadmin.id);
});

test('DELETE of a Role at the same time as assigning it: either the delete wins (204, then the assignment is 404 role_not_found) or the assignment wins (201, then the delete is 409 role_in_use); never a 500, never an assignment of a deleted Role (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 8; round++) {
    const app = await appWith(['viewer']);
    const role = `role_${app.slug}_viewer`;
    const user = await person(t);
    const [del, add] = await Promise.all([call(t, 'DELETE', `/v1/roles/${role}`, admin), assign(admin, user.id, role)]);
    if (del.statusCode === 204) {
      assertError(add, 404, 'role_not_found');
      assert.deepEqual(await heldRoles(user.id), ['role_platform_member'], `round ${round}`);
      assert.equal((await auditOf(t, role, 'role.deleted')).length, 1);
      assert.deepEqual(await roleEvents(user.id, 'role.assigned'), []);
    } else {
      assertError(del, 409, 'role_in_use');
      assertStatus(add, 201);
      assert.deepEqual(await heldRoles(user.id), [role, 'role_platform_member'].sort(), `round ${round}`);
      assert.equal((await auditOf(t, role, 'role.deleted')).length, 0);
      assert.equal((await roleEvents(user.id, 'role.assigned')).length, 1);
    }
  }
});

test('an app role name removed by PATCH /v1/applications at the same time as its Role is assigned: either the PATCH wins (200, the Role is gone, the assignment is 404 role_not_found) or the assignment wins (201, the PATCH is 409 app_role_in_use); never a 500 (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 8; round++) {
    const app = await appWith(['viewer', 'editor']);
    const editor = `role_${app.slug}_editor`;
    const user = await person(t);
    const [patch, add] = await Promise.all([call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { available_app_roles: ['viewer'] }), assign(admin, user.id, editor)]);
    const names = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).available_app_roles;
    if (patch.statusCode === 200) {
      assertError(add, 404, 'role_not_found');
      assert.deepEqual(names, ['viewer'], `round ${round}`);
      assertError(await call(t, 'GET', `/v1/roles/${editor}`, admin), 404, 'role_not_found');
      assert.deepEqual(await heldRoles(user.id), ['role_platform_member'], `round ${round}`);
      assert.equal((await auditOf(t, editor, 'role.deleted')).length, 1);
      assert.deepEqual(await roleEvents(user.id, 'role.assigned'), []);
    } else {
      assert.deepEqual(assertError(patch, 409, 'app_role_in_use').details, { role_id: editor, assignments: 1 }, `round ${round}`);
      assertStatus(add, 201);
      assert.deepEqual(names, ['viewer', 'editor'], `round ${round}`);
      assert.deepEqual(await heldRoles(user.id), [editor, 'role_platform_member'].sort(), `round ${round}`);
      assert.equal((await auditOf(t, editor, 'role.deleted')).length, 0);
      assert.equal((await roleEvents(user.id, 'role.assigned')).length, 1);
    }
  }
});

if (storageName === 'postgres') test('PATCH /v1/applications dropping several names checks every dropped Role under its lock before any goes (PostgreSQL): an assignment of the second dropped name, committed while the PATCH waits for that Role, makes it 409 app_role_in_use naming it, and no dropped Role is deleted', async () => {
  const app = await appWith(['viewer', 'editor', 'owner']);
  const [editor, owner] = [`role_${app.slug}_editor`, `role_${app.slug}_owner`];
  const user = await person(t);
  const patch = await commitWhileWaiting(t, [
    ['SELECT 1 FROM roles WHERE id = $1 FOR KEY SHARE', [owner]],
    ['INSERT INTO role_assignments (user_id, role_id, application_id, assigned_at) VALUES ($1, $2, $3, now())', [user.id, owner, app.id]],
  ], () => call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { available_app_roles: ['viewer'] }));
  assert.deepEqual(assertError(patch, 409, 'app_role_in_use').details, { role_id: owner, assignments: 1 });
  for (const id of [editor, owner]) assertStatus(await call(t, 'GET', `/v1/roles/${id}`, admin), 200);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200).available_app_roles, ['viewer', 'editor', 'owner']);
});

test('an app Role holds only keys its Application declares (422 unknown_permission), also when the Application stops declaring one while POST /v1/roles runs: a POST that read the Application before a PATCH removing the key committed is 422, and no Role holds the key (PATCH /v1/applications refuses to remove a key a Role holds: 409 permission_in_use)', async () => {
  const app = await appWith(['viewer', 'editor']);
  assert.equal((await call(t, 'DELETE', `/v1/roles/role_${app.slug}_editor`, admin)).statusCode, 204);
  const kept = [{ key: `app.${app.slug}.read`, description: 'read' }];
  const res = await pausedAfter(t, 'FROM applications a WHERE a.id = $1', async () => {
    assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { permissions: kept }), 200);
  }, () => createRole(admin, { name: 'editor', scope: app.id, permissions: [`app.${app.slug}.write`] }));
  assert.deepEqual(assertError(res, 422, 'unknown_permission').details, { permissions: [`app.${app.slug}.write`] });
  assertError(await call(t, 'GET', `/v1/roles/role_${app.slug}_editor`, admin), 404, 'role_not_found');
  assert.deepEqual(await sql(t, 'SELECT id FROM roles WHERE scope = $1 AND $2 = ANY(permissions)', [app.id, `app.${app.slug}.write`]), []);
});

if (storageName === 'postgres') test('PATCH /v1/roles/{id} reads its Application\'s permissions under the Application\'s lock: a PATCH /v1/applications removing a key, committed while the Role PATCH waits, makes it 422 unknown_permission, so no Role holds a key its Application stopped declaring (which PATCH /v1/applications refuses with 409 permission_in_use) and effective_permissions never lists it', async () => {
  const app = await appWith(['viewer'], { default_app_role: 'viewer' });
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const viewer = `role_${app.slug}_viewer`;
  const kept = JSON.stringify([{ key: `app.${app.slug}.read`, description: 'read' }]);
  const res = await commitWhileWaiting(
    t,
    [['SELECT 1 FROM applications WHERE id = $1 FOR NO KEY UPDATE', [app.id]], ['UPDATE applications SET permissions = $2::jsonb WHERE id = $1', [app.id, kept]]],
    () => call(t, 'PATCH', `/v1/roles/${viewer}`, admin, { permissions: [`app.${app.slug}.read`, `app.${app.slug}.write`] }),
  );
  assert.deepEqual(assertError(res, 422, 'unknown_permission').details, { permissions: [`app.${app.slug}.write`] });
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/roles/${viewer}`, admin), 200).permissions, []);
  assert.equal((await auditOf(t, viewer, 'role.updated')).length, 0);
  assert.deepEqual((await effective(t, admin, user.id, app.id)).effective_permissions, []);
});

if (storageName === 'postgres') test('POST /v1/roles reads its Application\'s permissions and role names under the Application\'s lock: a PATCH /v1/applications removing the key committed while the POST waits makes it 422 unknown_permission, and nothing is created', async () => {
  const app = await appWith(['viewer', 'editor']);
  assert.equal((await call(t, 'DELETE', `/v1/roles/role_${app.slug}_editor`, admin)).statusCode, 204);
  const kept = JSON.stringify([{ key: `app.${app.slug}.read`, description: 'read' }]);
  const res = await commitWhileWaiting(
    t,
    [['SELECT 1 FROM applications WHERE id = $1 FOR NO KEY UPDATE', [app.id]], ['UPDATE applications SET permissions = $2::jsonb WHERE id = $1', [app.id, kept]]],
    () => createRole(admin, { name: 'editor', scope: app.id, permissions: [`app.${app.slug}.write`] }),
  );
  assert.deepEqual(assertError(res, 422, 'unknown_permission').details, { permissions: [`app.${app.slug}.write`] });
  assertError(await call(t, 'GET', `/v1/roles/role_${app.slug}_editor`, admin), 404, 'role_not_found');
});

test('the same Role deleted twice at the same time: one 204, one 404 role_not_found, and one role.deleted audit row (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 8; round++) {
    const app = await appWith(['viewer']);
    const role = `role_${app.slug}_viewer`;
    const res = await Promise.all([call(t, 'DELETE', `/v1/roles/${role}`, admin), call(t, 'DELETE', `/v1/roles/${role}`, admin)]);
    assert.deepEqual(res.map((r) => r.statusCode).sort(), [204, 404], `round ${round}: ${res.map((r) => r.body)}`);
    assertError(res.find((r) => r.statusCode === 404)!, 404, 'role_not_found');
    assert.equal((await auditOf(t, role, 'role.deleted')).length, 1, `round ${round}`);
  }
});

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

// ---- reading Roles and Permissions -----------------------------------------------------------------

test('platform Roles are visible to users with a platform permission; an Application\'s Roles to its owner, own key and roles.manage', async () => {
  const app = await appWith(['viewer']);
  const plain = await person(t);
  assertError(await call(t, 'GET', '/v1/roles/role_platform_support', plain.token), 404, 'role_not_found');
  assertError(await call(t, 'GET', `/v1/roles/role_${app.slug}_viewer`, plain.token), 404, 'role_not_found');
  const plainList = assertStatus(await call(t, 'GET', '/v1/roles?limit=100', plain.token), 200).data;
  assert.ok(!plainList.some((r: { scope: string }) => r.scope === 'platform'), '!plainList.some((r: { scope: string }) => r.scope === \'platform\')');
  const ownerList = assertStatus(await call(t, 'GET', `/v1/roles?scope=${app.id}`, app.owner!.token), 200).data;
  assert.deepEqual(ownerList.map((r: { id: string }) => r.id), [`role_${app.slug}_viewer`]);
  for (const cred of [app.owner!.token, await appKey(t, app.id), admin]) assertStatus(await call(t, 'GET', `/v1/roles/role_${app.slug}_viewer`, cred), 200);
  const auditor = await platformKey(t, ['audit.view']);
  assertStatus(await call(t, 'GET', '/v1/roles/role_platform_member', auditor), 200);
});

test("app-confined keys act only on their own Application's rows: an app key holding roles.manage and audit.view does not see platform Roles (404 role_not_found, left out of GET /v1/roles)", async () => {
  const app = await appWith(['viewer']);
  const key = await appKey(t, app.id, ['roles.manage', 'audit.view', 'users.list', 'entitlements.manage']);
  assertError(await call(t, 'GET', '/v1/roles/role_platform_member', key), 404, 'role_not_found');
  assertError(await call(t, 'GET', '/v1/roles/role_platform_support', key), 404, 'role_not_found');
  const listed = assertStatus(await call(t, 'GET', '/v1/roles?limit=100', key), 200).data;
  assert.deepEqual(listed.map((r: { id: string }) => r.id), [`role_${app.slug}_viewer`]);
  assert.deepEqual(assertStatus(await call(t, 'GET', '/v1/roles?scope=platform&limit=100', key), 200).data, []);
});

test('GET /v1/permissions: platform keys plus visible Applications\' keys; an app-scoped key sees platform keys plus its own', async () => {
  const pub = await appWith([]);
  const internal = await appWith([], { visibility: 'internal' });
  const plain = await person(t);
  const items = assertStatus(await call(t, 'GET', '/v1/permissions', plain.token), 200).data;
  const keys = items.map((p: { key: string }) => p.key);
  for (const p of ALL_PERMISSIONS) assert.ok(keys.includes(p), p);
  assert.ok(keys.includes(`app.${pub.slug}.read`), 'keys.includes(`app.${pub.slug}.read`)');
  assert.ok(!keys.includes(`app.${internal.slug}.read`), '!keys.includes(`app.${internal.slug}.read`)');
  assert.deepEqual(items.find((p: { key: string }) => p.key === `app.${pub.slug}.read`), { key: `app.${pub.slug}.read`, scope: pub.id, description: 'read' });
  assert.deepEqual(items.find((p: { key: string }) => p.key === 'users.list').scope, 'platform');
  const key = await appKey(t, internal.id);
  const keyItems = assertStatus(await call(t, 'GET', '/v1/permissions', key), 200).data.map((p: { key: string }) => p.key);
  assert.ok(keyItems.includes(`app.${internal.slug}.read`), 'keyItems.includes(`app.${internal.slug}.read`)');
  assert.ok(!keyItems.includes(`app.${pub.slug}.read`), '!keyItems.includes(`app.${pub.slug}.read`)');
  assert.ok(keyItems.includes('users.list'), 'keyItems.includes(\'users.list\')');
  const platformOnly = assertStatus(await call(t, 'GET', '/v1/permissions?scope=platform', plain.token), 200).data;
  assert.equal(platformOnly.length, 12);
});

test('assignment_count counts only the holders of the caller\'s mode; a Role held only in the other mode stays (409 role_in_use) and shows that mode\'s count, 0', async () => {
  const name = `modal${rand(4)}`;
  const role = assertStatus(await createRole(admin, { name, scope: 'platform', permissions: ['audit.view'] }), 201);
  const holder = await person(t);
  assertStatus(await assign(admin, holder.id, role.id), 201);
  const testKey = await platformKey(t, undefined, 'test');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/roles/${role.id}`, admin), 200).assignment_count, 1);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/roles/${role.id}`, testKey), 200).assignment_count, 0, 'live holders are not counted for a test key');
  const listed = assertStatus(await call(t, 'GET', '/v1/roles?scope=platform', testKey), 200).data.find((r: any) => r.id === role.id);
  assert.equal(listed.assignment_count, 0);
  const err = assertError(await call(t, 'DELETE', `/v1/roles/${role.id}`, testKey), 409, 'role_in_use');
  assert.equal(err.details.assignment_count, 0, 'the live count is not revealed');
  assert.equal((await sql(t, 'SELECT 1 FROM roles WHERE id = $1', [role.id])).length, 1, 'the Role stays');
});

test("each mode's assignment_count counts that mode's holders, also for assignments made before they carried their holder's mode (0031)", async () => {
  const role = assertStatus(await createRole(admin, { name: `upg${rand(4)}`, scope: 'platform', permissions: ['audit.view'] }), 201);
  await person(t, { roles: [role.id] });
  await person(t, { roles: [role.id] });
  await person(t, { mode: 'test', roles: [role.id] });
  const testKey = await platformKey(t, undefined, 'test');
  const counts = async () => [admin, testKey].map(async (c) => assertStatus(await call(t, 'GET', `/v1/roles/${role.id}`, c), 200).assignment_count);
  assert.deepEqual(await Promise.all(await counts()), [2, 1]);
  // The table as the last release left it (no mode on assignments), then the migrations from 0031.
  await t.database.scoped('system').transaction(async (tx) => {
    await tx.exec('ALTER TABLE role_assignments DROP COLUMN test_mode');
    for (const m of loadMigrations().filter((m) => m.version >= '0031')) await tx.exec(m.sql);
  });
  assert.deepEqual(await Promise.all(await counts()), [2, 1]);
  assert.deepEqual((await sql(t, 'SELECT test_mode FROM role_assignments WHERE role_id = $1 ORDER BY test_mode', [role.id])).map((r) => r.test_mode), [false, false, true]);
  // A later assignment takes its holder's mode from the database.
  await person(t, { mode: 'test', roles: [role.id] });
  assert.deepEqual(await Promise.all(await counts()), [2, 2]);
});

test('PATCH /v1/roles/{id} changes permissions and description only: name, scope, seed and the other read-only fields give 422 read_only_field and change nothing', async () => {
  const name = `ro${rand(4)}`;
  const role = assertStatus(await createRole(admin, { name, scope: 'platform', permissions: ['audit.view'] }), 201);
  for (const [body, fields] of [
    [{ name: 'renamed' }, ['name']],
    [{ scope: 'platform', seed: true }, ['scope', 'seed']],
    [{ id: 'role_platform_x', description: 'also sent' }, ['id']],
    [{ assignment_count: 9, created_at: '2020-01-01T00:00:00.000Z' }, ['assignment_count', 'created_at']],
  ] as const) {
    const err = assertError(await call(t, 'PATCH', `/v1/roles/${role.id}`, admin, body), 422, 'read_only_field');
    assert.deepEqual(err.details.fields, fields);
  }
  const now = assertStatus(await call(t, 'GET', `/v1/roles/${role.id}`, admin), 200);
  assert.deepEqual([now.name, now.scope, now.seed, now.description], [name, 'platform', false, role.description]);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/roles/${role.id}`, admin, { description: 'fine' }), 200).description, 'fine');
});

test("an internal Application's owner holds no owner rights over its Roles (internal is visible only to applications.manage and its own key)", async () => {
  const app = await appWith(['ed'], { visibility: 'internal' });
  const owner = app.owner!.token;
  assertError(await call(t, 'GET', `/v1/roles/role_${app.slug}_ed`, owner), 404, 'role_not_found');
  assertError(await createRole(owner, { name: 'ed', scope: app.id }), 404, 'application_not_found');
  assertError(await assign(owner, app.owner!.id, `role_${app.slug}_ed`), 404, 'role_not_found');
  assert.deepEqual(await heldRoles(app.owner!.id), ['role_platform_member'], 'nothing assigned');
  assertStatus(await call(t, 'GET', `/v1/roles/role_${app.slug}_ed`, admin), 200);
});

test('the Roles of an Application the caller cannot see do not exist for them: creating or assigning one is 404; on a visible Application without the right, 403 forbidden', async () => {
  const hidden = await appWith(['ed'], { visibility: 'internal' });
  const shown = await appWith(['ed'], { visibility: 'public' });
  const user = await person(t);
  assertError(await createRole(user.token, { name: 'ed', scope: hidden.id }), 404, 'application_not_found');
  assertError(await assign(user.token, user.id, `role_${hidden.slug}_ed`), 404, 'role_not_found');
  assertError(await unassign(user.token, user.id, `role_${hidden.slug}_ed`), 404, 'role_not_found');
  assertError(await call(t, 'GET', `/v1/roles/role_${hidden.slug}_ed`, user.token), 404, 'role_not_found');
  assertError(await createRole(user.token, { name: 'ed', scope: shown.id }), 403, 'forbidden');
  assertError(await assign(user.token, user.id, `role_${shown.slug}_ed`), 403, 'forbidden');
  assert.deepEqual(await heldRoles(user.id), ['role_platform_member'], 'nothing assigned');
});

test('GET /v1/roles: following page.next_cursor one Role at a time returns every Role exactly once, seed Roles and a Role written to the microsecond by hand included (list responses, Part A conventions)', async () => {
  await createRole(admin, { scope: 'platform', name: `walk_${rand()}`, permissions: [] });
  const byHand = `hand_${rand()}`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at)
                VALUES ($1, $2, 'platform', '{}', now() - interval '1 hour' + interval '456 microseconds', now())`, [`role_platform_${byHand}`, byHand]);
  const all = assertStatus(await call(t, 'GET', '/v1/roles?limit=100', superadmin.token), 200).data.map((r: { id: string }) => r.id);
  assert.ok(all.includes('role_platform_member') && all.length > 4, 'all.includes(\'role_platform_member\') && all.length > 4');
  const walked: string[] = [];
  let cursor: string | null = null;
  do {
    const page = assertStatus(await call(t, 'GET', `/v1/roles?limit=1${cursor ? `&cursor=${cursor}` : ''}`, superadmin.token), 200);
    walked.push(...page.data.map((r: { id: string }) => r.id));
    cursor = page.page.next_cursor;
  } while (cursor && walked.length <= all.length);
  assert.deepEqual(walked, all);
});

test('PATCH of a Role with its own description and permissions changes nothing: 200 with the Role as it was, no updated_at, no role.updated', async () => {
  const created = assertStatus(await createRole(admin, { scope: 'platform', name: `same_${rand()}`, description: 'd', permissions: ['users.list', 'audit.view'] }), 201);
  for (const body of [{ description: 'd' }, { permissions: ['users.list', 'audit.view'] }, { description: 'd', permissions: ['users.list', 'audit.view'] }]) {
    assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/roles/${created.id}`, admin, body), 200), created);
  }
  assert.deepEqual((await auditOf(t, created.id)).map((r) => r.action), ['role.created']);
});

test("GET /v1/permissions filter scope: scope=<application id> lists only that Application's keys, scope=platform only the platform keys", async () => {
  const app = await appWith([]);
  const other = await appWith([]);
  const plain = await person(t);
  const items = assertStatus(await call(t, 'GET', `/v1/permissions?scope=${app.id}`, plain.token), 200).data;
  assert.deepEqual(items, [
    { key: `app.${app.slug}.read`, scope: app.id, description: 'read' },
    { key: `app.${app.slug}.write`, scope: app.id, description: 'write' },
  ]);
  const platform = assertStatus(await call(t, 'GET', '/v1/permissions?scope=platform', plain.token), 200).data;
  assert.deepEqual([...new Set(platform.map((p: { scope: string }) => p.scope))], ['platform']);
  assert.equal(platform.some((p: { key: string }) => p.key.startsWith(`app.${other.slug}.`)), false, 'no Application keys under scope=platform');
});

test("GET /v1/roles: an Organization-owned Application's Roles are listed to an org_admin of that Organization (an owner), not to a plain member", async () => {
  const orgAdmin = await person(t);
  const member = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: member.id, role: 'member' }]);
  const app = await appWith(['viewer'], { owner_organization_id: org });
  const listed = async (token: string) => assertStatus(await call(t, 'GET', `/v1/roles?scope=${app.id}&limit=100`, token), 200).data.map((r: { id: string }) => r.id);
  assert.deepEqual(await listed(orgAdmin.token), [`role_${app.slug}_viewer`]);
  assert.deepEqual(await listed(member.token), []);
  assertError(await call(t, 'GET', `/v1/roles/role_${app.slug}_viewer`, member.token), 404, 'role_not_found');
});

test("GET /v1/roles leaves out the Roles of an internal Application for its owner (internal is visible only to applications.manage and its own key), as GET /v1/roles/{id} does", async () => {
  const app = await appWith(['ed'], { visibility: 'internal' });
  const owner = app.owner!.token;
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/roles?scope=${app.id}&limit=100`, owner), 200).data, []);
  const all = assertStatus(await call(t, 'GET', '/v1/roles?limit=100', owner), 200).data.map((r: { id: string }) => r.id);
  assert.equal(all.includes(`role_${app.slug}_ed`), false, 'not in the unfiltered list either');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/roles?scope=${app.id}&limit=100`, admin), 200).data.map((r: { id: string }) => r.id), [`role_${app.slug}_ed`]);
});

test('a Role name matches ^[a-z][a-z0-9_]{1,40}$ ("role name up to 41 characters"): 41 characters are accepted, 42 and a single character are 422', async () => {
  const name41 = `o${rand(3)}${'x'.repeat(34)}`;
  assert.equal(name41.length, 41);
  for (const name of [`${name41}x`, 'o']) {
    const err = assertError(await createRole(superadmin.token, { name, scope: 'platform', permissions: ['users.list'] }), 422, 'validation_failed');
    assert.ok(JSON.stringify(err.details).includes('name'), `the error names the field name: ${JSON.stringify(err.details)}`);
  }
  const role = assertStatus(await createRole(superadmin.token, { name: name41, scope: 'platform', permissions: ['users.list'] }), 201);
  assert.equal(role.id, `role_platform_${name41}`);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE name = $1', [`${name41}x`]))[0].n, 0);
});

test('POST /v1/roles refuses an unknown body field (422 validation_failed naming it, conventions: "unknown body fields are refused, never silently dropped"); nothing is created', async () => {
  const name = `unk_${rand(3)}`;
  const err = assertError(await createRole(superadmin.token, { name, scope: 'platform', permissions: ['users.list'], seed: true }), 422, 'validation_failed');
  assert.ok(JSON.stringify(err.details).includes('seed'), `the error names the field seed: ${JSON.stringify(err.details)}`);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE name = $1', [name]))[0].n, 0);
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

test('GET /v1/roles lists Roles oldest first (docs/conventions.md: "Results are newest first (Roles and the review queue oldest first)"), by created_at then id', async () => {
  const older = `older_${rand()}`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at)
                VALUES ($1, $2, 'platform', '{}', now() - interval '2 hours', now())`, [`role_platform_${older}`, older]);
  assertStatus(await createRole(admin, { scope: 'platform', name: `newer_${rand()}`, permissions: [] }), 201);
  const rows: { id: string; created_at: string }[] = assertStatus(await call(t, 'GET', '/v1/roles?scope=platform&limit=100', superadmin.token), 200).data;
  const key = (r: { id: string; created_at: string }) => [Date.parse(r.created_at), r.id] as const;
  for (let i = 1; i < rows.length; i++) {
    const [a, b] = [key(rows[i - 1]), key(rows[i])];
    assert.ok(a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]), `${rows[i - 1].id} (${rows[i - 1].created_at}) before ${rows[i].id} (${rows[i].created_at})`);
  }
  assert.ok(rows.some((r) => r.id === `role_platform_${older}`), 'the older Role is listed');
});

test("an app Role's role.created, role.updated and role.deleted audit rows carry its application_id; PATCH with description null clears the description (nullable) and role.updated shows before and after", async () => {
  const app = await appWith(['viewer']);
  const roleId = `role_${app.slug}_viewer`;
  assert.equal((await call(t, 'DELETE', `/v1/roles/${roleId}`, app.owner!.token)).statusCode, 204);
  assertStatus(await createRole(app.owner!.token, { name: 'viewer', scope: app.id, description: 'Viewers', permissions: [`app.${app.slug}.read`] }), 201);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/roles/${roleId}`, app.owner!.token, { description: null }), 200).description, null);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/roles/${roleId}`, app.owner!.token), 200).description, null);
  const [updated] = await auditOf(t, roleId, 'role.updated');
  assert.equal((updated.before as { description: string | null }).description, 'Viewers');
  assert.equal((updated.after as { description: string | null }).description, null);
  assert.equal((await call(t, 'DELETE', `/v1/roles/${roleId}`, app.owner!.token)).statusCode, 204);
  const rows = await auditOf(t, roleId);
  // The seeded Role's role.created and role.deleted, then the created one's three.
  assert.deepEqual(rows.map((r) => r.action).sort(), ['role.created', 'role.created', 'role.deleted', 'role.deleted', 'role.updated']);
  for (const row of rows) assert.equal(row.application_id, app.id, `${row.action} names the Application`);
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

// ---- bounded lists (docs/conventions.md, Pagination) ---------------------------------------------------

test('bounded lists: "GET /v1/permissions and a user\'s Roles (GET /v1/users/{id}/roles) return everything in one page (next_cursor null) and take no limit": 21 assignments and every permission key in one page past the default 20, ?limit=1 is 422 naming query.limit', async () => {
  const holder = await person(t);
  const tag = rand(4);
  const assigned: string[] = [];
  for (let i = 0; i < 21; i++) {
    const role = assertStatus(await createRole(admin, { name: `bounded${tag}${i}`, scope: 'platform', permissions: ['audit.view'] }), 201);
    assertStatus(await assign(admin, holder.id, role.id), 201);
    assigned.push(role.id);
  }
  const roles = assertStatus(await call(t, 'GET', `/v1/users/${holder.id}/roles`, admin), 200);
  const held = roles.data.map((a: { role_id: string }) => a.role_id);
  assert.deepEqual(held.filter((id: string) => assigned.includes(id)).sort(), [...assigned].sort());
  assert.deepEqual(held.sort(), (await heldRoles(holder.id)).sort(), 'every assignment, the seed member Role too');
  assert.deepEqual(roles.page, { next_cursor: null, has_more: false });
  const rolesLimited = assertError(await call(t, 'GET', `/v1/users/${holder.id}/roles?limit=1`, admin), 422, 'validation_failed');
  assert.deepEqual(rolesLimited.details.fields.map((f: { path: string }) => f.path), ['query.limit']);

  // 12 platform keys plus two of each of these Applications: more than a default page of 20.
  for (let i = 0; i < 5; i++) await appWith([]);
  const permissions = assertStatus(await call(t, 'GET', '/v1/permissions', admin), 200);
  assert.ok(permissions.data.length > 20, `${permissions.data.length} permission keys`);
  for (const p of ALL_PERMISSIONS) assert.ok(permissions.data.some((item: { key: string }) => item.key === p), p);
  assert.deepEqual(permissions.page, { next_cursor: null, has_more: false });
  const permissionsLimited = assertError(await call(t, 'GET', '/v1/permissions?limit=1', admin), 422, 'validation_failed');
  assert.deepEqual(permissionsLimited.details.fields.map((f: { path: string }) => f.path), ['query.limit']);
});
