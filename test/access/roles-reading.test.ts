// Roles and Permissions (Part B): reading Roles and Permissions: who sees which Roles, assignment_count
// per mode, filters, cursors, order and bounded lists. Creating and changing Roles is in
// roles-create-and-change.test.ts; assignments in roles-assignments.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { ALL_PERMISSIONS, appKey, assertError, assertStatus, call, createOrg, person, platformKey, rand, roleCalls, sql } from './support.js';
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

const { createRole, assign, unassign, heldRoles, appWith } = roleCalls(() => ({ t, admin }));

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
