// GET /v1/users/{id}/apps/{appId}/effective-permissions: the live access check.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import {
  appKey, assertError, assertStatus, call, createOrg, customPlatformRole, effective, grant, newApp, orgGrant, patchEnt, person, platformKey, slugOf, type AppFixture,
} from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const KEYS = ['access_paths', 'allowed', 'application_id', 'computed_at', 'effective_permissions', 'entitlement_status', 'roles', 'user_id', 'user_status'];

/** An Application with three permissions, roles viewer (default) and editor. */
async function appWithRoles(): Promise<AppFixture & { read: string; write: string; admin: string }> {
  const slug = slugOf('ep');
  const app = await newApp(t, admin, {
    slug,
    available_app_roles: ['viewer', 'editor'],
    default_app_role: 'viewer',
    permissions: ['read', 'write', 'admin'].map((n) => ({ key: `app.${slug}.${n}`, description: n })),
  });
  const perm = (n: string) => `app.${slug}.${n}`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${slug}_viewer`, admin, { permissions: [perm('read')] }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${slug}_editor`, admin, { permissions: [perm('read'), perm('write')] }), 200);
  return { ...app, read: perm('read'), write: perm('write'), admin: perm('admin') };
}

/** A result's access_paths ordered by source (the spec gives them no order). */
const pathsBySource = (result: { access_paths: { source: string }[] }) => [...result.access_paths].sort((a, b) => a.source.localeCompare(b.source));

test('always 200 with the documented shape; allowed with an active personal grant; permissions from explicit and implicit (default_app_role) assignments', async () => {
  const app = await appWithRoles();
  const user = await person(t, { roles: ['superadmin'] });
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase' });
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/role_${app.slug}_editor`, admin, {}), 201);
  const before = Date.now();
  const result = await effective(t, user.token, user.id, app.id);
  assert.deepEqual(Object.keys(result).sort(), KEYS);
  assert.equal(result.user_id, user.id);
  assert.equal(result.application_id, app.id);
  assert.equal(result.allowed, true);
  assert.equal(result.user_status, 'active');
  assert.equal(result.entitlement_status, 'active');
  assert.deepEqual(result.access_paths, [{ source: 'purchase', entitlement_id: ent.id, status: 'active' }]);
  assert.deepEqual(
    [...result.roles].sort((a: { role_id: string }, b: { role_id: string }) => a.role_id.localeCompare(b.role_id)),
    [
      { role_id: `role_${app.slug}_editor`, name: 'editor', implicit: false },
      { role_id: `role_${app.slug}_viewer`, name: 'viewer', implicit: true },
    ],
  );
  assert.deepEqual([...result.effective_permissions].sort(), [app.read, app.write].sort());
  // Platform permissions never appear, even for a superadmin.
  assert.ok(result.effective_permissions.every((p: string) => p.startsWith(`app.${app.slug}.`)), 'result.effective_permissions.every((p: string) => p.startsWith(`app.${app.slug}.`))');
  assert.ok(Math.abs(Date.parse(result.computed_at) - before) < 60_000, 'Math.abs(Date.parse(result.computed_at) - before) < 60_000');
});

test('no path: 200 with allowed false, entitlement_status none, no access_paths and empty effective_permissions even with an explicit app Role', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/role_${app.slug}_editor`, admin, {}), 201);
  const result = await effective(t, user.token, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.entitlement_status, 'none');
  assert.equal(result.user_status, 'active');
  assert.deepEqual(result.access_paths, []);
  assert.deepEqual(result.effective_permissions, []);
  assert.ok(!result.roles.some((r: { implicit: boolean }) => r.implicit), 'no implicit default role without access');
});

test('a disabled grant: allowed false, entitlement_status disabled, effective_permissions empty', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.entitlement_status, 'disabled');
  assert.deepEqual(result.access_paths, [{ source: 'admin_grant', entitlement_id: ent.id, status: 'disabled' }]);
  assert.deepEqual(result.effective_permissions, []);
});

test('a suspended user: allowed false, user_status suspended, entitlement_status still active, no permissions', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/suspend`, admin, {}), 200);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.user_status, 'suspended');
  assert.equal(result.entitlement_status, 'active');
  assert.deepEqual(result.effective_permissions, []);
});

test('access_paths list organization grants with organization_id and member_decision; the best path decides', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  const org = await createOrg(t, [{ userId: user.id }]);
  const orgEnt = await orgGrant(t, org, app.id);
  const personal = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, personal.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, true);
  assert.equal(result.entitlement_status, 'active');
  assert.deepEqual(pathsBySource(result), [
    { source: 'admin_grant', entitlement_id: personal.id, status: 'disabled' },
    { source: 'org_seat', entitlement_id: orgEnt, status: 'active', organization_id: org, member_decision: 'included' },
  ]);
  assert.deepEqual(result.effective_permissions, [app.read]);
});

test('organization-wide grants reach active members only: a pending (invited) member has no path through the grant (allowed false, entitlement_status none, no access_paths, no implicit Role)', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  const org = await createOrg(t, [{ userId: user.id, status: 'pending' }]);
  await orgGrant(t, org, app.id);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.entitlement_status, 'none');
  assert.deepEqual(result.access_paths, []);
  assert.deepEqual(result.roles, []);
  assert.deepEqual(result.effective_permissions, []);
});

test('without an active path, entitlement_status is the best of the paths\' resolved statuses: scheduled, then disabled, then expired, then revoked (docs/decisions.md "Resolved status")', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  const scheduled = await grant(t, admin, user.id, app.id, { starts_at: new Date(t.clock.now().getTime() + 86_400_000).toISOString() });
  const disabled = await orgGrant(t, await createOrg(t, [{ userId: user.id }]), app.id, { status: 'disabled' });
  const expired = await orgGrant(t, await createOrg(t, [{ userId: user.id }]), app.id, { status: 'expired' });
  await orgGrant(t, await createOrg(t, [{ userId: user.id }]), app.id, { status: 'revoked' });
  const status = async () => {
    const result = await effective(t, admin, user.id, app.id);
    assert.equal(result.allowed, false);
    assert.deepEqual(result.effective_permissions, []);
    return result.entitlement_status;
  };
  assert.equal(await status(), 'scheduled');
  assertStatus(await patchEnt(t, admin, scheduled.id, { status: 'revoked', disabled_reason: 'x' }), 200);
  assert.equal(await status(), 'disabled');
  assertStatus(await patchEnt(t, admin, disabled, { status: 'revoked', disabled_reason: 'x' }), 200);
  assert.equal(await status(), 'expired');
  assertStatus(await patchEnt(t, admin, expired, { status: 'revoked', disabled_reason: 'x' }), 200);
  assert.equal(await status(), 'revoked');
});

test('roles[]: a user explicitly assigned the default_app_role Role holds it once, as the explicit assignment (implicit false), not again as the implicit row "without an assignment row"', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/role_${app.slug}_viewer`, admin, {}), 201);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, true);
  assert.deepEqual(result.roles, [{ role_id: `role_${app.slug}_viewer`, name: 'viewer', implicit: false }]);
  assert.deepEqual(result.effective_permissions, [app.read]);
});

test("only that Application's app.<slug>.* keys appear: Roles of other Applications do not leak", async () => {
  const app = await appWithRoles();
  const other = await appWithRoles();
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  await grant(t, admin, user.id, other.id);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/role_${other.slug}_editor`, admin, {}), 201);
  const result = await effective(t, admin, user.id, app.id);
  assert.deepEqual(result.effective_permissions, [app.read]);
  assert.ok(!result.roles.some((r: { role_id: string }) => r.role_id.startsWith(`role_${other.slug}_`)), '!result.roles.some((r: { role_id: string }) => r.role_id.startsWith(`role_${other.slug}_`))');
  assert.deepEqual([...(await effective(t, admin, user.id, other.id)).effective_permissions].sort(), [other.read, other.write].sort());
});

test('a permission change (PATCH role) applies on the next call', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  assert.deepEqual((await effective(t, admin, user.id, app.id)).effective_permissions, [app.read]);
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${app.slug}_viewer`, app.owner!.token, { permissions: [app.read, app.admin] }), 200);
  assert.deepEqual([...(await effective(t, admin, user.id, app.id)).effective_permissions].sort(), [app.admin, app.read].sort());
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${app.slug}_viewer`, app.owner!.token, { permissions: [] }), 200);
  assert.deepEqual((await effective(t, admin, user.id, app.id)).effective_permissions, []);
});

test("callers: self, the app's own key (about any live user, always 200), users.list and entitlements.manage; another Application's key 404; a stranger 404", async () => {
  const app = await appWithRoles();
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const ownKey = await appKey(t, app.id);
  for (const cred of [user.token, ownKey, await platformKey(t, ['users.list']), await platformKey(t, ['entitlements.manage'])]) {
    assert.equal((await effective(t, cred, user.id, app.id)).allowed, true);
  }
  assert.equal((await effective(t, user.token, 'me', app.id)).user_id, user.id);
  // Always 200 for the own key, also about a user without any path to the Application.
  const pathless = await person(t);
  const view = await effective(t, ownKey, pathless.id, app.id);
  assert.equal(view.allowed, false);
  assert.equal(view.entitlement_status, 'none');
  assert.deepEqual(view.access_paths, []);
  assertError(await call(t, 'GET', `/v1/users/usr_01JAAAAAAAAAAAAAAAAAAAAAAA/apps/${app.id}/effective-permissions`, ownKey), 404, 'user_not_found');
  const otherKey = await appKey(t, (await appWithRoles()).id, ['users.list', 'entitlements.manage']);
  const res = await call(t, 'GET', `/v1/users/${user.id}/apps/${app.id}/effective-permissions`, otherKey);
  assert.equal(res.statusCode, 404, res.body);
  const stranger = await person(t);
  assertError(await call(t, 'GET', `/v1/users/${user.id}/apps/${app.id}/effective-permissions`, stranger.token), 404, 'user_not_found');
  assertError(await call(t, 'GET', `/v1/users/${user.id}/apps/app_nosuchapp/effective-permissions`, admin), 404, 'application_not_found');
});

test('a soft-deleted user is visible only to users.manage: users.list and entitlements.manage readers get 404 user_not_found; users.manage gets 200 with user_status deleted and allowed false', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin)).statusCode, 204);
  const url = `/v1/users/${user.id}/apps/${app.id}/effective-permissions`;
  for (const cred of [await platformKey(t, ['users.list']), await platformKey(t, ['entitlements.manage'])]) {
    assertError(await call(t, 'GET', url, cred), 404, 'user_not_found');
  }
  const seen = await effective(t, await platformKey(t, ['users.list', 'users.manage']), user.id, app.id);
  assert.equal(seen.user_status, 'deleted');
  assert.equal(seen.allowed, false);
  assert.deepEqual(seen.effective_permissions, []);
});

test('the live check authenticates in its own query: a revoked session, a suspended user and a platform role removed apply to the very next call', async () => {
  const app = await appWithRoles();
  const reader = await person(t, { roles: ['support'] });
  const subject = await person(t);
  await grant(t, admin, subject.id, app.id);
  const url = `/v1/users/me/apps/${app.id}/effective-permissions`;
  assert.equal(assertStatus(await call(t, 'GET', url, subject.token), 200).allowed, true);
  // users.list (support) reads another user's check; without it the same call is 404.
  const other = `/v1/users/${subject.id}/apps/${app.id}/effective-permissions`;
  assert.equal(assertStatus(await call(t, 'GET', other, reader.token), 200).user_id, subject.id);
  assertStatus(await call(t, 'DELETE', `/v1/users/${reader.id}/roles/role_platform_support`, admin), 204);
  assertError(await call(t, 'GET', other, reader.token), 404, 'user_not_found');
  // Revoking the session: the access token is refused at once.
  const [{ sid }] = (await t.database.scoped('system').query<{ sid: string }>('SELECT id AS sid FROM sessions WHERE user_id = $1', [subject.id])).rows;
  assertStatus(await call(t, 'DELETE', `/v1/users/${subject.id}/sessions/${sid}`, admin), 204);
  assertError(await call(t, 'GET', url, subject.token), 401, 'unauthenticated');
  // Even a request with a field error: an ended session is told 401, not what was wrong with its input.
  assertError(await call(t, 'GET', `/v1/users/me/apps/${'a'.repeat(101)}/effective-permissions`, subject.token), 401, 'unauthenticated');
  // A suspended user's token is refused at once too.
  const later = await person(t);
  await grant(t, admin, later.id, app.id);
  assertStatus(await call(t, 'POST', `/v1/users/${later.id}/suspend`, admin, { reason: 'test' }), 200);
  assertError(await call(t, 'GET', `/v1/users/me/apps/${app.id}/effective-permissions`, later.token), 401, 'unauthenticated');
});

test('an erased user is "not resolvable": after the erasure cascade even users.manage gets 404 user_not_found (while only soft-deleted, users.manage still gets 200)', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  const manager = await platformKey(t, ['users.list', 'users.manage']);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/erasure-requests`, manager, {}), 202);
  assert.equal((await effective(t, manager, user.id, app.id)).user_status, 'deleted');
  t.clock.advance(7 * 86_400 + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assertError(await call(t, 'GET', `/v1/users/${user.id}/apps/${app.id}/effective-permissions`, manager), 404, 'user_not_found');
});

test('Part B status table, once ends_at passes: a disabled row resolves expired ("ends_at passed while disabled") before the sweep, a revoked row stays revoked ("revoked → anything: nobody")', async () => {
  const app = await appWithRoles();
  const user = await person(t);
  const endsAt = new Date(t.clock.now().getTime() + 3_600_000);
  const personal = await grant(t, admin, user.id, app.id, { ends_at: endsAt.toISOString() });
  assertStatus(await patchEnt(t, admin, personal.id, { status: 'revoked', disabled_reason: 'x' }), 200);
  const org = await createOrg(t, [{ userId: user.id }]);
  const orgEnt = await orgGrant(t, org, app.id, { status: 'disabled', endsAt });
  t.clock.advance(3600);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.entitlement_status, 'expired');
  assert.deepEqual(pathsBySource(result), [
    { source: 'admin_grant', entitlement_id: personal.id, status: 'revoked' },
    { source: 'org_seat', entitlement_id: orgEnt, status: 'expired', organization_id: org, member_decision: 'included' },
  ]);
});

test('"soft-deleted users visible only to users.manage" is judged on a signed-in caller\'s roles as they are now (Part A: roles are resolved on every request): a user holding users.list and users.manage reads a soft-deleted user\'s check (200, user_status deleted, allowed false); once users.manage is taken from them, 404 user_not_found', async () => {
  const app = await appWithRoles();
  const subject = await person(t);
  await grant(t, admin, subject.id, app.id);
  assert.equal((await call(t, 'DELETE', `/v1/users/${subject.id}`, admin)).statusCode, 204);
  const listRole = await customPlatformRole(t, ['users.list']);
  const manageRole = await customPlatformRole(t, ['users.manage']);
  const reader = await person(t, { roles: [listRole, manageRole] });
  const seen = await effective(t, reader.token, subject.id, app.id);
  assert.equal(seen.user_status, 'deleted');
  assert.equal(seen.allowed, false);
  assertStatus(await call(t, 'DELETE', `/v1/users/${reader.id}/roles/${manageRole}`, admin), 204);
  assertError(await call(t, 'GET', `/v1/users/${subject.id}/apps/${app.id}/effective-permissions`, reader.token), 404, 'user_not_found');
});

test('callers "users.list, entitlements.manage" are each enough on their own for a signed-in user, judged on their roles as they are now: a user holding only entitlements.manage, or only users.list, reads another user\'s check (200); once that Role is removed, 404 user_not_found', async () => {
  const app = await appWithRoles();
  const subject = await person(t);
  await grant(t, admin, subject.id, app.id);
  const url = `/v1/users/${subject.id}/apps/${app.id}/effective-permissions`;
  for (const permission of ['entitlements.manage', 'users.list']) {
    const roleId = await customPlatformRole(t, [permission]);
    const reader = await person(t, { roles: [roleId] });
    assert.equal((await effective(t, reader.token, subject.id, app.id)).allowed, true, permission);
    assertStatus(await call(t, 'DELETE', `/v1/users/${reader.id}/roles/${roleId}`, admin), 204);
    assertError(await call(t, 'GET', url, reader.token), 404, 'user_not_found');
  }
});
