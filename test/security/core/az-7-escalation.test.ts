// AZ-7: escalation. Every way the catalog names to gain more than the caller holds, walked in one
// table with the exact 403 code from Part A and Part B: platform keys and platform Roles with
// unheld permissions (by a user and by a key), unheld or superadmin Role assignment (also to
// oneself, also by a key holding all twelve permissions), another Application's Role through an app
// key, org status set by an org admin, and seed Role edits. Nothing may change on the way.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import {
  ALL_PERMISSIONS, appKey, assertStatus, call, createOrg, customPlatformRole, grant, newApp, person, platformKey, rand, slugOf, sql,
  type AppFixture, type InjectResponse, type Person,
} from '../../access/support.js';
import { figure } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

/** An Application declaring app.<slug>.read and the Role name viewer. */
async function appWithViewer(): Promise<AppFixture> {
  const slug = slugOf('az');
  return newApp(t, admin, { slug, available_app_roles: ['viewer'], permissions: [{ key: `app.${slug}.read`, description: 'read' }] });
}

const SEEDS = ['role_platform_superadmin', 'role_platform_support', 'role_platform_billing_admin', 'role_platform_member'];

test('AZ-7 escalation: unheld permissions on a platform key or platform Role and unheld or superadmin assignment are 403 role_escalation_forbidden, another Application\'s Role through an app key 403 role_scope_mismatch, org status by an org admin 403 forbidden, seed Role edits 403 seed_role_immutable; nothing changes', async () => {
  const superadmin = await person(t, { roles: ['superadmin'] });
  // roles.manage, api_keys.manage and users.list, but not users.manage (which support and superadmin grant).
  const manager = await person(t, { roles: [await customPlatformRole(t, ['roles.manage', 'api_keys.manage', 'users.list'])] });
  // Every one of the twelve permissions, through a Role that is not superadmin.
  const almost = await person(t, { roles: [await customPlatformRole(t, ALL_PERMISSIONS)] });
  const rolesKey = await platformKey(t, ['roles.manage', 'users.list']);
  const target = await person(t);

  const ownKey = assertStatus(await call(t, 'POST', '/v1/api-keys', manager.token, { name: 'own', scope: 'platform', permissions: ['users.list'] }), 201);
  // A key holding what the manager lacks: rotating it would hand the manager its secret.
  const strongKey = assertStatus(await call(t, 'POST', '/v1/api-keys', superadmin.token, { name: 'strong', scope: 'platform', permissions: ['users.manage'] }), 201);
  const ownRole = assertStatus(await call(t, 'POST', '/v1/roles', manager.token, { name: `own_${rand(3)}`, scope: 'platform', permissions: ['users.list'] }), 201);

  const mine = await appWithViewer();
  const theirs = await appWithViewer();
  const mineKey = await appKey(t, mine.id, ['roles.manage']);
  await grant(t, admin, target.id, mine.id);
  await grant(t, admin, target.id, theirs.id);
  // Held by target through the owner of theirs, so the DELETE below has something to remove.
  assertStatus(await call(t, 'POST', `/v1/users/${target.id}/roles/role_${theirs.slug}_viewer`, theirs.owner!.token, {}), 201);

  const orgAdmin = await person(t);
  const orgId = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);

  const assign = (cred: string, user: Person, roleId: string) => call(t, 'POST', `/v1/users/${user.id}/roles/${roleId}`, cred, {});
  const variants: [string, () => Promise<InjectResponse>, string][] = [
    ['platform key with an unheld permission (create)', () => call(t, 'POST', '/v1/api-keys', manager.token, { name: 'x', scope: 'platform', permissions: ['users.list', 'users.manage'] }), 'role_escalation_forbidden'],
    ['platform key with an unheld permission (PATCH)', () => call(t, 'PATCH', `/v1/api-keys/${ownKey.id}`, manager.token, { permissions: ['users.list', 'users.manage'] }), 'role_escalation_forbidden'],
    ['platform key with an unheld permission (rotate: its new secret)', () => call(t, 'POST', `/v1/api-keys/${strongKey.id}/rotate`, manager.token, {}), 'role_escalation_forbidden'],
    ['platform Role with an unheld permission (create, user)', () => call(t, 'POST', '/v1/roles', manager.token, { name: `esc_${rand(3)}`, scope: 'platform', permissions: ['users.manage'] }), 'role_escalation_forbidden'],
    ['platform Role with an unheld permission (PATCH, user)', () => call(t, 'PATCH', `/v1/roles/${ownRole.id}`, manager.token, { permissions: ['users.list', 'users.manage'] }), 'role_escalation_forbidden'],
    ['platform Role with an unheld permission (create, platform key)', () => call(t, 'POST', '/v1/roles', rolesKey, { name: `esck_${rand(3)}`, scope: 'platform', permissions: ['users.list', 'users.manage'] }), 'role_escalation_forbidden'],
    ['platform Role with an unheld permission (PATCH, platform key)', () => call(t, 'PATCH', `/v1/roles/${ownRole.id}`, rolesKey, { permissions: ['users.manage'] }), 'role_escalation_forbidden'],
    ['assigning a Role with unheld permissions (support) to another user', () => assign(manager.token, target, 'role_platform_support'), 'role_escalation_forbidden'],
    ['assigning a Role with unheld permissions (support) to oneself', () => assign(manager.token, manager, 'role_platform_support'), 'role_escalation_forbidden'],
    ['assigning superadmin while not superadmin (to oneself)', () => assign(manager.token, manager, 'role_platform_superadmin'), 'role_escalation_forbidden'],
    ['assigning superadmin holding all twelve permissions through another Role', () => assign(almost.token, target, 'role_platform_superadmin'), 'role_escalation_forbidden'],
    ['assigning superadmin to oneself holding all twelve permissions', () => assign(almost.token, almost, 'role_platform_superadmin'), 'role_escalation_forbidden'],
    ['assigning superadmin with a platform key holding all twelve permissions', () => assign(admin, target, 'role_platform_superadmin'), 'role_escalation_forbidden'],
    ["an app key assigning another Application's Role", () => assign(mineKey, target, `role_${theirs.slug}_viewer`), 'role_scope_mismatch'],
    ["an app key removing another Application's Role", () => call(t, 'DELETE', `/v1/users/${target.id}/roles/role_${theirs.slug}_viewer`, mineKey), 'role_scope_mismatch'],
    ['an app key assigning a platform Role', () => assign(mineKey, target, 'role_platform_support'), 'role_scope_mismatch'],
    ['an org admin suspending the Organization', () => call(t, 'PATCH', `/v1/organizations/${orgId}`, orgAdmin.token, { status: 'suspended' }), 'forbidden'],
    ['an org admin sending status with a rename and a reason', () => call(t, 'PATCH', `/v1/organizations/${orgId}`, orgAdmin.token, { name: 'Renamed', status: 'suspended', reason: 'self' }), 'forbidden'],
    ...SEEDS.flatMap((id): [string, () => Promise<InjectResponse>, string][] => [
      [`seed Role ${id}: PATCH permissions (superadmin)`, () => call(t, 'PATCH', `/v1/roles/${id}`, superadmin.token, { permissions: id === 'role_platform_member' ? ['users.list'] : [] }), 'seed_role_immutable'],
      [`seed Role ${id}: PATCH description (platform key)`, () => call(t, 'PATCH', `/v1/roles/${id}`, admin, { description: 'changed' }), 'seed_role_immutable'],
      [`seed Role ${id}: DELETE (superadmin)`, () => call(t, 'DELETE', `/v1/roles/${id}`, superadmin.token), 'seed_role_immutable'],
    ]),
  ];

  const untouched = await snapshot(orgId, ownKey.id);
  const accepted: string[] = [];
  for (const [name, send, code] of variants) {
    const res = await send();
    const got = res.statusCode === 403 ? res.json().error?.code : undefined;
    if (res.statusCode !== 403 || got !== code) accepted.push(`${name}: expected 403 ${code}, got ${res.statusCode} ${res.body.slice(0, 200)}`);
  }
  figure('AZ-7', `escalations accepted: ${accepted.length} / ${variants.length}`);
  assert.deepEqual(accepted, []);
  assert.deepEqual(await snapshot(orgId, ownKey.id), untouched, 'nothing changed: assignments, Roles, the key, the Organization');
  // The strong key's secret was not replaced: it still answers.
  assertStatus(await call(t, 'GET', `/v1/users/${target.id}`, strongKey.secret), 200);

  // Controls: the same callers within what they hold, and the holders of the right, succeed.
  assertStatus(await assign(mineKey, target, `role_${mine.slug}_viewer`), 201);
  assertStatus(await assign(manager.token, target, ownRole.id), 201);
  assertStatus(await assign(superadmin.token, target, 'role_platform_superadmin'), 201);
  assertStatus(await call(t, 'PATCH', `/v1/organizations/${orgId}`, admin, { status: 'suspended', reason: 'control' }), 200);
});

/** What the variants could have changed: every role assignment, the Roles, the key, the Organization. */
async function snapshot(orgId: string, keyId: string) {
  return {
    assignments: await sql(t, 'SELECT user_id, role_id FROM role_assignments ORDER BY user_id, role_id'),
    roles: await sql(t, 'SELECT id, description, permissions, updated_at FROM roles ORDER BY id'),
    key: await sql(t, 'SELECT permissions, restrict_destructive FROM api_keys WHERE id = $1', [keyId]),
    org: await sql(t, 'SELECT name, status FROM organizations WHERE id = $1', [orgId]),
  };
}
