// Roles and Permissions (Part B): creating, changing and deleting Roles: scope rules, escalation, seed Roles,
// deletion and its races, read-only fields, name rules, events and audit. Assignments are in
// roles-assignments.test.ts; reading Roles and Permissions in roles-reading.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, storageName, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import {
  appKey, assertError, assertStatus, auditOf, call, customPlatformRole, effective, grant, person, platformKey, rand, roleCalls, sql,
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

test('PATCH of a Role with its own description and permissions changes nothing: 200 with the Role as it was, no updated_at, no role.updated', async () => {
  const created = assertStatus(await createRole(admin, { scope: 'platform', name: `same_${rand()}`, description: 'd', permissions: ['users.list', 'audit.view'] }), 201);
  for (const body of [{ description: 'd' }, { permissions: ['users.list', 'audit.view'] }, { description: 'd', permissions: ['users.list', 'audit.view'] }]) {
    assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/roles/${created.id}`, admin, body), 200), created);
  }
  assert.deepEqual((await auditOf(t, created.id)).map((r) => r.action), ['role.created']);
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
