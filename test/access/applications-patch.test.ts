// Applications (Part B): PATCH field rights, plan caps and ownership changes (with their races on
// PostgreSQL), default_app_role, read-only fields, concurrent PATCHes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { client, blockedBy as waitForBlocked, endedOrWaiting as waitEndedOrWaiting } from '../helpers/locks.js';
import { assertError, assertInvalid, assertStatus, auditOf, call, createOrg, grantReq, newApp, person, platformKey, rand, slugOf, sql } from './support.js';
import { applicationCalls, base } from './applications-support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const { post, get } = applicationCalls(() => t);

// ---- PATCH field rights --------------------------------------------------------------------------

test('PATCH: the owner changes configuration fields (200 full object, audit application.updated with before and after)', async () => {
  const app = await newApp(t, admin);
  const res = await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, {
    name: 'Renamed', description: 'new', support_url: 'https://help.example.com', email_from_name: 'Team', redirect_uris: ['https://app.example.com/cb'],
  });
  const body = assertStatus(res, 200);
  assert.equal(body.name, 'Renamed');
  assert.equal(body.description, 'new');
  assert.equal(body.support_url, 'https://help.example.com');
  assert.equal(body.email_from_name, 'Team');
  assert.equal(body.launch_url, 'https://app.example.com/launch', 'unsent fields stay');
  assert.equal(body.tenant_id, app.tenant_id);
  const audit = await auditOf(t, app.id, 'application.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.name, 'Test App');
  assert.equal(audit[0].after.name, 'Renamed');
  assert.equal(audit[0].actor_id, app.owner!.id);
});

test('PATCH that changes nothing (every field sent as it is, settings_schema keys in another order, a review move repeated with its notes) answers 200 with the Application unchanged: no updated_at, no application.updated', async () => {
  const slug = slugOf();
  const app = await newApp(t, admin, {
    slug,
    settings_schema: { type: 'object', properties: { color: { type: 'string' }, size: { type: 'integer' } } },
    permissions: [{ key: `app.${slug}.read`, description: 'read' }],
    available_app_roles: ['viewer'],
    default_app_role: 'viewer',
    redirect_uris: ['https://app.example.com/cb'],
  });
  const fields = ['name', 'description', 'icon_url', 'launch_url', 'redirect_uris', 'support_url', 'email_from_name', 'permissions', 'available_app_roles', 'default_app_role', 'visibility'];
  const same = Object.fromEntries(fields.map((f) => [f, app.body[f]]));
  same.settings_schema = { properties: { size: { type: 'integer' }, color: { type: 'string' } }, type: 'object' };
  const { visibility, ...ownerFields } = same;
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, ownerFields), 200), app.body);
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { ...same, visibility }), 200), app.body);
  const suspended = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { review_status: 'suspended', review_notes: 'policy' }), 200);
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { review_status: 'suspended', review_notes: 'policy' }), 200), suspended);
  assert.deepEqual((await auditOf(t, app.id)).map((r) => r.action), ['application.created', 'application.updated', 'application.review_status_changed']);
});

test('PATCH: an org_admin of the owning Organization is an owner; a plain member is not (403 forbidden)', async () => {
  const orgAdmin = await person(t);
  const member = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: member.id, role: 'member' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, orgAdmin.token, { name: 'By admin' }), 200).name, 'By admin');
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, member.token, { name: 'By member' }), 403, 'forbidden');
});

test('PATCH: an owner touching visibility, review_status, review_notes or ownership gets 403 moderation_field_forbidden and nothing changes', async () => {
  const app = await newApp(t, admin);
  const other = await person(t);
  for (const body of [{ visibility: 'internal' }, { review_status: 'suspended', review_notes: 'x' }, { review_notes: 'hi' }, { owner_user_id: other.id }, { name: 'n', visibility: 'internal' }]) {
    assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, body), 403, 'moderation_field_forbidden');
  }
  const now = assertStatus(await get(admin, app.id), 200);
  assert.equal(now.visibility, 'public');
  assert.equal(now.name, 'Test App');
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('PATCH: applications.manage changes moderation fields (visibility)', async () => {
  const app = await newApp(t, admin);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { visibility: 'invite_only' }), 200).visibility, 'invite_only');
});

test('PATCH: a caller who is neither owner nor applications.manage gets 403 forbidden on a visible Application, 404 on an invisible one', async () => {
  const pub = await newApp(t, admin);
  const internal = await newApp(t, admin, { visibility: 'internal' });
  const user = await person(t);
  assertError(await call(t, 'PATCH', `/v1/applications/${pub.id}`, user.token, { name: 'x' }), 403, 'forbidden');
  assertError(await call(t, 'PATCH', `/v1/applications/${internal.id}`, user.token, { name: 'x' }), 404, 'application_not_found');
  assert.equal(assertStatus(await get(admin, pub.id), 200).name, 'Test App');
});

// ---- plan caps on PATCH, owners ------------------------------------------------------------------

test("ownership change: available_app_roles longer than the new owner's Tenant plan cap is 409 plan_limit_reached (resource app_roles), even when no name is added", async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org, available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d'] });
  const newOwner = await person(t);
  const res = await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id, owner_organization_id: null });
  const err = assertError(res, 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'app_roles');
  assert.equal(err.details.plan, 'starter');
  assert.equal(err.details.limit, 3);
  const current = assertStatus(await get(admin, app.id), 200);
  assert.equal(current.tenant_id, app.tenant_id);
  assert.equal(current.owner_organization_id, org);
  assert.equal(current.owner_user_id, null);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 4);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM tenants WHERE owner_user_id = $1', [newOwner.id]))[0].n, 0);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test("ownership change: app roles added in the same PATCH are checked against the new owner's Tenant plan (Team: no cap)", async () => {
  const app = await newApp(t, admin, { available_app_roles: ['r_a', 'r_b', 'r_c'] });
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const res = await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_organization_id: org, owner_user_id: null, available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d'] });
  const body = assertStatus(res, 200);
  assert.notEqual(body.tenant_id, app.tenant_id);
  assert.equal(body.owner_organization_id, org);
  assert.deepEqual(body.available_app_roles, ['r_a', 'r_b', 'r_c', 'r_d']);
  const [tenant] = await sql(t, 'SELECT plan, owner_organization_id FROM tenants WHERE id = $1', [body.tenant_id]);
  assert.deepEqual({ ...tenant }, { plan: 'team', owner_organization_id: org });
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 4);
  const audit = await auditOf(t, app.id, 'application.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].tenant_id, body.tenant_id);
});

test('PATCH on a restricted Tenant: adding an app role or moving an Application into it is 402 subscription_required, documented in OpenAPI, and nothing changes', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer'] });
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [app.tenant_id]);
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { available_app_roles: ['viewer', 'editor'] }), 402, 'subscription_required');
  assert.equal(err.details.resource, 'app_roles');
  assert.equal(err.details.tenant_id, app.tenant_id);
  assert.deepEqual(assertStatus(await get(admin, app.id), 200).available_app_roles, ['viewer']);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 1);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);

  // Moving another Application into the restricted Tenant.
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const orgApp = await newApp(t, admin, { owner_organization_id: org });
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [orgApp.tenant_id]);
  const moved = await newApp(t, admin);
  assertError(await call(t, 'PATCH', `/v1/applications/${moved.id}`, admin, { owner_organization_id: org, owner_user_id: null }), 402, 'subscription_required');
  const after = assertStatus(await get(admin, moved.id), 200);
  assert.equal(after.tenant_id, moved.tenant_id);
  assert.equal(after.owner_user_id, moved.owner!.id);

  const doc = assertStatus(await call(t, 'GET', '/v1/openapi.json', null), 200);
  const responses = doc.paths['/v1/applications/{id}'].patch.responses;
  assert.ok(responses['402'], 'PATCH /v1/applications/{id} documents 402');
  assert.match(JSON.stringify(responses['402']), /subscription_required/);
});

test('PATCH ownership to a deleted or erased user is refused as POST refuses it: 422 validation_failed on owner_user_id, nothing changes', async () => {
  const deleted = await person(t);
  await sql(t, `UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [deleted.id]);
  const erased = await person(t);
  await sql(t, `UPDATE users SET erased_at = now() WHERE id = $1`, [erased.id]);
  const app = await newApp(t, admin);
  for (const gone of [deleted, erased]) {
    assertInvalid(await post(admin, base(gone.id)), 'owner_user_id');
    assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: gone.id }), 'owner_user_id');
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM tenants WHERE owner_user_id = $1', [gone.id]))[0].n, 0);
  }
  const current = assertStatus(await get(admin, app.id), 200);
  assert.equal(current.owner_user_id, app.owner!.id);
  assert.equal(current.tenant_id, app.tenant_id);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('ownership change across non-shared Tenants is 409 ownership_change_requires_migration (source or destination not on the shared tier) and nothing changes', async () => {
  const app = await newApp(t, admin);
  const newOwner = await person(t);
  await sql(t, `UPDATE tenants SET tier = 'isolated' WHERE id = $1`, [app.tenant_id]);
  const move = () => call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id });
  assertError(await move(), 409, 'ownership_change_requires_migration');
  // Source back on shared, destination (the new owner's existing Tenant) isolated: refused too.
  await sql(t, `UPDATE tenants SET tier = 'shared' WHERE id = $1`, [app.tenant_id]);
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const orgApp = await newApp(t, admin, { owner_organization_id: org });
  await sql(t, `UPDATE tenants SET tier = 'isolated' WHERE id = $1`, [orgApp.tenant_id]);
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_organization_id: org, owner_user_id: null }), 409, 'ownership_change_requires_migration');
  const current = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([current.owner_user_id, current.owner_organization_id, current.tenant_id], [app.owner!.id, null, app.tenant_id]);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test("ownership change into a Tenant already at its Applications cap is 409 plan_limit_reached (resource applications): Starter allows 1 Application", async () => {
  const app = await newApp(t, admin);
  const full = await newApp(t, admin);
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: full.owner!.id }), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'applications');
  const current = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([current.owner_user_id, current.tenant_id], [app.owner!.id, app.tenant_id]);
});

/** `count` active users, each with an active admin_grant to the Application; their id prefix. */
async function seedHolders(appId: string, count: number): Promise<string> {
  const now = t.clock.now();
  const prefix = `usr_seat${rand(6)}_`;
  await sql(t, `INSERT INTO users (id, email, status, test_mode, created_at, updated_at)
                SELECT $1 || g, $1 || g || '@example.com', 'active', false, $2, $2 FROM generate_series(1, $3::int) g`, [prefix, now, count]);
  await sql(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
                SELECT 'ent_' || $1 || g, $1 || g, $3, 'active', 'admin_grant', $2, false, $2, $2 FROM generate_series(1, $4::int) g`, [prefix, now, appId, count]);
  return prefix;
}

test("ownership change into a Starter Tenant that would hold more than its 1,000 seats is 409 plan_limit_reached (resource seats) and nothing changes", async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  const prefix = await seedHolders(app.id, 1001);
  const newOwner = await person(t);
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id, owner_organization_id: null }), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'seats');
  assert.equal(err.details.plan, 'starter');
  assert.equal(err.details.limit, 1000);
  const current = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([current.owner_organization_id, current.owner_user_id, current.tenant_id], [org, null, app.tenant_id]);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM tenants WHERE owner_user_id = $1', [newOwner.id]))[0].n, 0);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);

  // With one of those users' grants ended, the 1,000 that remain fit.
  await sql(t, `UPDATE entitlements SET status = 'revoked', disabled_reason = 'x' WHERE id = $1`, [`ent_${prefix}1`]);
  const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id, owner_organization_id: null }), 200);
  assert.notEqual(moved.tenant_id, app.tenant_id);
});

/**
 * An Application of a Team Organization held by 1,000 users (exactly a Starter Tenant's seats), a
 * newcomer to grant it to and a new (Starter) owner to move it to; `run` gets a connection of its
 * own to hold locks on (`holder`), a way to wait until a backend waits for a lock `pid` holds, and one
 * to wait until an operation has ended or waits for one of `blockers` (endedOrWaiting).
 */
async function moveAndGrantRace(
  run: (f: { appId: string; tenantId: string; org: string; newcomer: string; newOwner: string; holder: pg.Client; blockedBy: (pid: number, what: string) => Promise<number>; endedOrWaiting: (op: Promise<unknown>, blockers: number[], known: number[], what: string) => Promise<void> }) => Promise<void>,
): Promise<void> {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  await seedHolders(app.id, 1000);
  const connect = () => client(t);
  const [holder, watcher] = [await connect(), await connect()];
  const blockedBy = (pid: number, what: string) => waitForBlocked(watcher, pid, what);
  const endedOrWaiting = (op: Promise<unknown>, blockers: number[], known: number[], what: string) => waitEndedOrWaiting(watcher, op, blockers, known, what);
  try {
    await run({ appId: app.id, tenantId: app.tenant_id, org, newcomer: (await person(t)).id, newOwner: (await person(t)).id, holder, blockedBy, endedOrWaiting });
  } finally {
    for (const c of [holder, watcher]) await c.end();
  }
}

const seatsOf = async (tenantId: string) => (await sql(t, `SELECT count(DISTINCT user_id)::int AS n FROM entitlements e JOIN applications a ON a.id = e.application_id
  WHERE a.tenant_id = $1 AND e.status = 'active' AND e.user_id IS NOT NULL`, [tenantId]))[0].n;

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers these tests.
if (storageName === 'postgres') test("a grant of an Application and its ownership move into a Starter Tenant at once do not leave the Tenant over its 1,000 seats (PostgreSQL): a move after the grant read the Application's Tenant waits for it and counts its user, 409 plan_limit_reached (resource seats)", async () => {
  await moveAndGrantRace(async ({ appId, tenantId, org, newcomer, newOwner, holder, blockedBy, endedOrWaiting }) => {
    // The newcomer's row is held: the grant has read the Application's Tenant and waits for the user
    // before it counts the seats, while the move runs.
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [newcomer]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const granting = grantReq(t, admin, newcomer, { application_id: appId, source: 'admin_grant' });
    const grantPid = await blockedBy(holderPid, 'the grant');
    const moving = call(t, 'PATCH', `/v1/applications/${appId}`, admin, { owner_user_id: newOwner, owner_organization_id: null });
    // The move either ends at once (the grant's seat uncounted) or waits for the grant.
    await endedOrWaiting(moving, [holderPid, grantPid], [grantPid], 'the move');
    await holder.query('ROLLBACK');
    const [granted, moved] = await Promise.all([granting, moving]);
    assertStatus(granted, 201);
    const err = assertError(moved, 409, 'plan_limit_reached');
    assert.equal(err.details.resource, 'seats');
    const [current] = await sql(t, 'SELECT tenant_id, owner_organization_id FROM applications WHERE id = $1', [appId]);
    assert.deepEqual([current.tenant_id, current.owner_organization_id], [tenantId, org]);
  });
});

if (storageName === 'postgres') test("a grant of an Application that starts while its ownership move into a Starter Tenant is under way counts against the new Tenant once the move commits (PostgreSQL): 409 plan_limit_reached (resource seats), the Tenant stays at its 1,000 seats", async () => {
  await moveAndGrantRace(async ({ appId, tenantId, newcomer, newOwner, holder, blockedBy, endedOrWaiting }) => {
    // The new owner's (empty) Starter Tenant and the Tenant the Application leaves are held: the move
    // has locked the Application and waits for them (it locks both), so a grant that reads the
    // Application's Tenant meanwhile waits for the move to commit.
    const destination = `tnt_race${rand(6)}`;
    await sql(t, `INSERT INTO tenants (id, owner_type, owner_user_id, plan, created_at, updated_at) VALUES ($1, 'user', $2, 'starter', now(), now())`, [destination, newOwner]);
    await holder.query('BEGIN');
    // FOR NO KEY UPDATE, as the seat and Application counters take them (a FOR UPDATE would stop the
    // move already at its migrating check, which reads the Tenant FOR KEY SHARE, before the Application).
    await holder.query('SELECT 1 FROM tenants WHERE id = ANY($1::text[]) FOR NO KEY UPDATE', [[destination, tenantId]]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const moving = call(t, 'PATCH', `/v1/applications/${appId}`, admin, { owner_user_id: newOwner, owner_organization_id: null });
    const movePid = await blockedBy(holderPid, 'the move');
    const granting = grantReq(t, admin, newcomer, { application_id: appId, source: 'admin_grant' });
    await endedOrWaiting(granting, [holderPid, movePid], [movePid], 'the grant');
    await holder.query('ROLLBACK');
    assert.equal(assertStatus(await moving, 200).tenant_id, destination);
    const err = assertError(await granting, 409, 'plan_limit_reached');
    assert.equal(err.details.resource, 'seats');
    assert.equal(err.details.tenant_id, destination);
    assert.equal(await seatsOf(destination), 1000);
  });
});

test('PATCH: a pending (unaccepted) org_admin of the owning Organization is not an owner (a pending membership grants nothing): 403 forbidden, nothing changes', async () => {
  const activeAdmin = await person(t);
  const pendingAdmin = await person(t);
  const org = await createOrg(t, [{ userId: activeAdmin.id, role: 'org_admin' }, { userId: pendingAdmin.id, role: 'org_admin', status: 'pending' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, pendingAdmin.token, { name: 'Taken over' }), 403, 'forbidden');
  assert.equal(assertStatus(await get(admin, app.id), 200).name, 'Test App');
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, activeAdmin.token, { name: 'Renamed' }), 200);
});

// ---- default_app_role, read-only fields, concurrent PATCHes --------------------------------------

test('PATCH: default_app_role may name a role added to available_app_roles in the same request; a PATCH that leaves default_app_role out keeps it', async () => {
  const member = await person(t);
  const org = await createOrg(t, [{ userId: member.id, role: 'org_admin' }]);
  const app = assertStatus(await post(admin, { slug: slugOf(), name: 'x', launch_url: 'https://x.example.com', owner_organization_id: org, available_app_roles: ['viewer'] }), 201);
  const both = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, member.token, { available_app_roles: ['viewer', 'editor'], default_app_role: 'editor' }), 200);
  assert.equal(both.default_app_role, 'editor');
  assert.deepEqual(both.available_app_roles, ['viewer', 'editor']);
  const renamed = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, member.token, { name: 'Renamed' }), 200);
  assert.equal(renamed.default_app_role, 'editor', 'a field not sent stays as it was');
  assert.equal(assertStatus(await get(admin, app.id), 200).default_app_role, 'editor');
});

test('PATCH: id and created_at are read-only for the owner and for applications.manage (422 read_only_field naming the field) and nothing changes', async () => {
  const app = await newApp(t, admin);
  for (const cred of [app.owner!.token, admin]) {
    for (const [field, value] of [['id', 'app_other'], ['created_at', '2020-01-01T00:00:00.000Z']] as const) {
      const error = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, cred, { name: 'Renamed', [field]: value }), 422, 'read_only_field');
      assert.deepEqual(error.details.fields, [field]);
    }
  }
  const now = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
  assert.equal(now.id, app.id);
  assert.equal(now.name, 'Test App');
  assert.equal(now.created_at, app.body.created_at);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('PATCH is a partial update, also under concurrency: two PATCHes of one Application at the same time with different fields keep both, and the second application.updated audit row starts from the first one\'s after (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 6; round++) {
    const app = await newApp(t, admin);
    const [a, b] = await Promise.all([
      call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { name: 'Renamed App' }),
      call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { description: 'Now described' }),
    ]);
    assertStatus(a, 200);
    assertStatus(b, 200);
    const stored = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
    assert.deepEqual([stored.name, stored.description], ['Renamed App', 'Now described'], `round ${round}`);
    const audit = await auditOf(t, app.id, 'application.updated');
    assert.equal(audit.length, 2);
    const fromOriginal = audit.filter((r) => r.before.name === 'Test App' && r.before.description === null);
    assert.equal(fromOriginal.length, 1, `round ${round}: only the first change starts from the original`);
    const second = audit.find((r) => r !== fromOriginal[0])!;
    assert.deepEqual(second.before, fromOriginal[0].after, `round ${round}: the second change's before is the first one's after`);
    assert.deepEqual([second.after.name, second.after.description], ['Renamed App', 'Now described']);
  }
});

test('a creation and an ownership move into one Starter Tenant at the same time: "exactly the allowed number succeed" (one Application; the other request is 409 plan_limit_reached, resource applications)', async () => {
  for (let round = 0; round < 6; round++) {
    // The owner's Tenant exists and holds no Application: its first one moved to an Organization.
    const owner = await person(t);
    const first = await newApp(t, admin, { owner_user_id: owner.id });
    const orgId = await createOrg(t, [{ userId: (await person(t)).id, role: 'org_admin' }]);
    assertStatus(await call(t, 'PATCH', `/v1/applications/${first.id}`, admin, { owner_organization_id: orgId }), 200);
    const moving = await newApp(t, admin);
    const [created, moved] = await Promise.all([
      call(t, 'POST', '/v1/applications', admin, { slug: slugOf(), name: 'Second', launch_url: 'https://app.example.com/launch', owner_user_id: owner.id }),
      call(t, 'PATCH', `/v1/applications/${moving.id}`, admin, { owner_user_id: owner.id }),
    ]);
    const succeeded = [created.statusCode === 201, moved.statusCode === 200].filter(Boolean).length;
    assert.equal(succeeded, 1, `round ${round}: ${created.statusCode} ${created.body} / ${moved.statusCode} ${moved.body}`);
    const refused = created.statusCode === 201 ? moved : created;
    assert.equal(assertError(refused, 409, 'plan_limit_reached').details.resource, 'applications');
    const owned = await sql(t, 'SELECT a.id FROM applications a JOIN tenants tn ON tn.id = a.tenant_id WHERE tn.owner_user_id = $1', [owner.id]);
    assert.equal(owned.length, 1, `round ${round}`);
  }
});

test('PATCH: an owner sending owner_organization_id (or owner_user_id) gets 403 moderation_field_forbidden naming exactly the moderation fields sent; the Application keeps its owner and Tenant', async () => {
  const app = await newApp(t, admin);
  const orgId = await createOrg(t, [{ userId: (await person(t)).id, role: 'org_admin' }]);
  const other = await person(t);
  for (const [body, fields] of [
    [{ owner_organization_id: orgId }, ['owner_organization_id']],
    [{ name: 'n', owner_user_id: other.id, owner_organization_id: orgId }, ['owner_user_id', 'owner_organization_id']],
    [{ review_notes: 'hi', visibility: 'internal' }, ['visibility', 'review_notes']],
  ] as const) {
    const error = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, body), 403, 'moderation_field_forbidden');
    assert.deepEqual(error.details.fields, fields);
  }
  const now = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([now.owner_user_id, now.owner_organization_id, now.tenant_id, now.name], [app.owner!.id, null, app.tenant_id, 'Test App']);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('PATCH default_app_role: null clears the default (default_app_role is "null or one of available_app_roles"); a PATCH leaving it out keeps it', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer'], default_app_role: 'viewer' });
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { name: 'Kept' }), 200).default_app_role, 'viewer');
  const cleared = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { default_app_role: null }), 200);
  assert.equal(cleared.default_app_role, null);
  assert.deepEqual(cleared.available_app_roles, ['viewer']);
  assert.equal(assertStatus(await get(admin, app.id), 200).default_app_role, null);
  const audit = await auditOf(t, app.id, 'application.updated');
  assert.deepEqual([audit.at(-1)!.before.default_app_role, audit.at(-1)!.after.default_app_role], ['viewer', null]);
});

test('PATCH: test_mode, updated_at and settings_schema_stats are read-only for the owner and for applications.manage (422 read_only_field naming the field) and nothing changes', async () => {
  const app = await newApp(t, admin);
  for (const cred of [app.owner!.token, admin]) {
    for (const [field, value] of [['test_mode', true], ['updated_at', '2020-01-01T00:00:00.000Z'], ['settings_schema_stats', { stale_override_counts: {} }]] as const) {
      const error = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, cred, { name: 'Renamed', [field]: value }), 422, 'read_only_field');
      assert.deepEqual(error.details.fields, [field]);
    }
  }
  assert.deepEqual(assertStatus(await get(admin, app.id), 200), app.body);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});
