// Part B, Tier-change request: "While a Tenant is `migrating`, reads work and writes to its data return
// 503 `service_unavailable` with Retry-After." These cover the writes beyond applications, entitlements,
// organization grants and checkout: an Application's Roles and their assignments, app-scope webhook
// subscriptions, AppProfiles, AppSettings, and an ownership move into a migrating Tenant. Each write answers 503 with
// Retry-After and changes nothing; the Tenant is set to migrating directly (as the tier-change processor does).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { blockedBy, client, endedOrWaiting, probeWhileHeld, withTransactionStatements } from '../helpers/locks.js';
import { createApiKey } from '../helpers/fixtures.js';
import { assertError, assertStatus, call, grant, newApp, person, platformKey, sql, type InjectResponse } from '../access/support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp({ webhookAllowPrivateTargets: true });
  admin = await platformKey(t);
});
after(() => t.close());

const setTenant = (id: string, cols: Record<string, unknown>) =>
  sql(t, `UPDATE tenants SET ${Object.keys(cols).map((k, i) => `${k} = $${i + 2}`).join(', ')} WHERE id = $1`, [id, ...Object.values(cols)]);

/** 503 service_unavailable, Retry-After, and the reason naming the Tenant. */
function assertMigrating(res: InjectResponse, tenantId: string): void {
  const error = assertError(res, 503, 'service_unavailable');
  assert.equal(res.headers['retry-after'], '60');
  assert.equal(error.details.tenant_id, tenantId);
  assert.equal(error.details.reason, 'tenant_migrating');
}

const roleRow = async (id: string) => (await sql(t, 'SELECT description, permissions, updated_at FROM roles WHERE id = $1', [id]))[0];
const assignmentRow = async (userId: string, roleId: string) =>
  (await sql(t, 'SELECT * FROM role_assignments WHERE user_id = $1 AND role_id = $2', [userId, roleId]))[0];

/** An enterprise-plan Application with Roles editor, viewer and spare; a user with access holds viewer. */
async function appWithRoles() {
  const app = await newApp(t, admin, { available_app_roles: ['editor', 'viewer', 'spare'] });
  await setTenant(app.tenant_id, { plan: 'enterprise' });
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/role_${app.slug}_viewer`, admin, {}), 201);
  return { app, user };
}

test('PATCH /v1/roles/{id} of an app Role (and POST /v1/roles) while its Tenant is migrating: 503, the Role unchanged', async () => {
  const { app } = await appWithRoles();
  const roleId = `role_${app.slug}_editor`;
  assertStatus(await call(t, 'PATCH', `/v1/roles/${roleId}`, admin, { description: 'before migration' }), 200);
  // A deleted declared Role can be created again: done during the migration, it must be refused too.
  assertStatus(await call(t, 'DELETE', `/v1/roles/role_${app.slug}_spare`, admin), 204);
  const before = await roleRow(roleId);
  await setTenant(app.tenant_id, { status: 'migrating' });

  assertMigrating(await call(t, 'PATCH', `/v1/roles/${roleId}`, admin, { description: 'changed during migration' }), app.tenant_id);
  assert.deepEqual(await roleRow(roleId), before);
  assertMigrating(await call(t, 'PATCH', `/v1/roles/${roleId}`, app.owner!.token, { description: 'by the owner' }), app.tenant_id);
  assert.deepEqual(await roleRow(roleId), before);
  assertMigrating(await call(t, 'POST', '/v1/roles', admin, { scope: app.id, name: 'spare', description: 'during migration' }), app.tenant_id);
  assert.equal(await roleRow(`role_${app.slug}_spare`), undefined);

  // Reads keep working.
  assert.equal(assertStatus(await call(t, 'GET', `/v1/roles/${roleId}`, admin), 200).description, 'before migration');
  // Back to active, the same write goes through.
  await setTenant(app.tenant_id, { status: 'active' });
  assertStatus(await call(t, 'PATCH', `/v1/roles/${roleId}`, admin, { description: 'after migration' }), 200);
});

test('POST and DELETE /v1/users/{u}/roles/{appRoleId} while the Tenant is migrating: 503, assignments unchanged', async () => {
  const { app, user } = await appWithRoles();
  const other = await person(t);
  const viewer = `role_${app.slug}_viewer`;
  const editor = `role_${app.slug}_editor`;
  const held = await assignmentRow(user.id, viewer);
  await setTenant(app.tenant_id, { status: 'migrating' });

  assertMigrating(await call(t, 'POST', `/v1/users/${other.id}/roles/${editor}`, admin, {}), app.tenant_id);
  assert.equal(await assignmentRow(other.id, editor), undefined);
  assertMigrating(await call(t, 'DELETE', `/v1/users/${user.id}/roles/${viewer}`, admin), app.tenant_id);
  assert.deepEqual(await assignmentRow(user.id, viewer), held);
  const events = await sql(t, `SELECT 1 FROM outbox_events WHERE type IN ('role.assigned', 'role.removed') AND data->>'user_id' = ANY($1)`, [[user.id, other.id]]);
  assert.equal(events.length, 1, 'only the assignment made before the migration');

  // Reads keep working; platform Roles are no Tenant's data.
  const listed = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/roles?application_id=${app.id}`, admin), 200);
  assert.ok(listed.data.some((a: any) => a.role_id === viewer), 'listed.data.some((a: any) => a.role_id === viewer)');
});

test('DELETE /v1/roles/{appRoleId} while the Tenant is migrating: 503, the Role stays', async () => {
  const { app } = await appWithRoles();
  const roleId = `role_${app.slug}_editor`;
  const before = await roleRow(roleId);
  await setTenant(app.tenant_id, { status: 'migrating' });

  assertMigrating(await call(t, 'DELETE', `/v1/roles/${roleId}`, admin), app.tenant_id);
  assert.deepEqual(await roleRow(roleId), before);
  assertMigrating(await call(t, 'DELETE', `/v1/roles/${roleId}`, app.owner!.token), app.tenant_id);
  assert.deepEqual(await roleRow(roleId), before);
});

/**
 * Runs `op` (a write to one of `app`'s Roles) with its Application moved into `destination`, and that
 * Tenant set to migrating, both committed just as the write's transaction starts: after the write read
 * the Application (and its Tenant, active) to authorize it, before it locks anything.
 */
async function movedIntoMigratingTenantMeanwhile(app: { id: string }, destination: string, op: () => Promise<InjectResponse>): Promise<InjectResponse> {
  const mover = await client(t);
  let moved = false;
  try {
    return await withTransactionStatements(t, async (run, text) => {
      if (!moved && /FROM (tenants|applications) WHERE id = \$1 FOR/.test(text)) {
        moved = true;
        await mover.query('UPDATE applications SET tenant_id = $2 WHERE id = $1', [app.id, destination]);
        await mover.query("UPDATE tenants SET status = 'migrating' WHERE id = $1", [destination]);
      }
      return run();
    }, op);
  } finally {
    await mover.end();
    assert.ok(moved, 'the move committed inside the write');
  }
}

if (storageName === 'postgres') test('POST /v1/roles of an app Role whose Application moved into a migrating Tenant while the write began: 503 naming the Tenant it is in now, no Role (PostgreSQL)', async () => {
  const { app } = await appWithRoles();
  const destination = (await newApp(t, admin)).tenant_id;
  assert.notEqual(destination, app.tenant_id);
  assertStatus(await call(t, 'DELETE', `/v1/roles/role_${app.slug}_spare`, admin), 204);
  const res = await movedIntoMigratingTenantMeanwhile(app, destination, () => call(t, 'POST', '/v1/roles', admin, { scope: app.id, name: 'spare' }));
  assertMigrating(res, destination);
  assert.equal(await roleRow(`role_${app.slug}_spare`), undefined);
});

if (storageName === 'postgres') test('DELETE /v1/roles/{appRoleId} whose Application moved into a migrating Tenant while the write began: 503 naming the Tenant it is in now, the Role stays (PostgreSQL)', async () => {
  const { app } = await appWithRoles();
  const destination = (await newApp(t, admin)).tenant_id;
  const roleId = `role_${app.slug}_editor`;
  const before = await roleRow(roleId);
  const res = await movedIntoMigratingTenantMeanwhile(app, destination, () => call(t, 'DELETE', `/v1/roles/${roleId}`, admin));
  assertMigrating(res, destination);
  assert.deepEqual(await roleRow(roleId), before);
});

/**
 * Runs `op` and, once its transaction has checked the Tenant (status read FOR KEY SHARE), tries to
 * take `appId`'s row FOR UPDATE NOWAIT on a connection of the test, as an ownership move does; returns
 * whether it could (the move could have committed the Application into another Tenant under the write).
 */
async function moveCouldLockDuring(appId: string, op: () => Promise<InjectResponse>): Promise<{ moveLocked: boolean | undefined; res: InjectResponse }> {
  const prober = await client(t);
  let moveLocked: boolean | undefined;
  try {
    const res = await withTransactionStatements(t, async (run, text) => {
      const result = await run();
      if (moveLocked === undefined && /FROM tenants WHERE id = \$1 FOR KEY SHARE/.test(text)) {
        await prober.query('BEGIN');
        try {
          await prober.query('SELECT 1 FROM applications WHERE id = $1 FOR UPDATE NOWAIT', [appId]);
          moveLocked = true;
        } catch (err) {
          if ((err as { code?: string }).code !== '55P03') throw err;
          moveLocked = false;
        }
        await prober.query('ROLLBACK');
      }
      return result;
    }, op);
    return { moveLocked, res };
  } finally {
    await prober.end();
  }
}

if (storageName === 'postgres') test('"while a Tenant is migrating, writes to its data return 503": AppProfile, AppSettings, role assignment and removal, and a webhook test call hold their Application against an ownership move from their Tenant check to commit, so the Tenant checked stays the one the data is in (PostgreSQL)', async () => {
  const { app, user } = await appWithRoles();
  await sql(t, 'UPDATE applications SET settings_schema = $2 WHERE id = $1', [app.id, JSON.stringify({ type: 'object', properties: { color: { type: 'string' } } })]);
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: app.id, url: 'http://127.0.0.1:9/hook', events: ['*'] }), 201);
  const writes: [string, () => Promise<InjectResponse>, number][] = [
    ['AppProfile PATCH', () => call(t, 'PATCH', `/v1/users/me/apps/${app.id}/profile`, user.token, { display_handle: 'held' }), 200],
    ['AppSettings PATCH', () => call(t, 'PATCH', `/v1/users/me/apps/${app.id}/settings`, user.token, { overrides: { color: 'red' } }), 200],
    ['role assignment', () => call(t, 'POST', `/v1/users/${user.id}/roles/role_${app.slug}_editor`, admin, {}), 201],
    ['role removal', () => call(t, 'DELETE', `/v1/users/${user.id}/roles/role_${app.slug}_editor`, admin), 204],
    ['webhook test call', () => call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin, {}), 202],
  ];
  const moveCouldLock: [string, boolean | undefined][] = [];
  for (const [what, op, status] of writes) {
    const { moveLocked, res } = await moveCouldLockDuring(app.id, op);
    moveCouldLock.push([what, moveLocked]);
    assertStatus(res, status);
  }
  assert.deepEqual(moveCouldLock, writes.map(([what]) => [what, false]), 'an ownership move could lock the Application while these writes ran');
});

test('app-scope webhook subscriptions of a migrating Tenant: create, PATCH, DELETE, rotate-secret, test and redeliver answer 503 and change nothing', async () => {
  const app = await newApp(t, admin);
  await setTenant(app.tenant_id, { plan: 'enterprise' });
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: app.id, url: 'http://127.0.0.1:9/before', events: ['*'], description: 'before' }), 201);
  const rowOf = async () => (await sql(t, 'SELECT * FROM webhook_subscriptions WHERE id = $1', [sub.id]))[0];
  const tested = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin, {}), 202);
  const before = await rowOf();
  const deliveries = async () => (await sql(t, 'SELECT id FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY id', [sub.id])).map((r) => r.id);
  const deliveriesBefore = await deliveries();
  await setTenant(app.tenant_id, { status: 'migrating' });

  assertMigrating(await call(t, 'POST', '/v1/webhooks', admin, { scope: app.id, url: 'http://127.0.0.1:9/during', events: ['*'] }), app.tenant_id);
  assertMigrating(await call(t, 'POST', '/v1/webhooks', app.owner!.token, { scope: app.id, url: 'http://127.0.0.1:9/owner', events: ['*'] }), app.tenant_id);
  const subs = await sql(t, 'SELECT id FROM webhook_subscriptions WHERE application_id = $1', [app.id]);
  assert.deepEqual(subs.map((r) => r.id), [sub.id], 'no subscription added');

  assertMigrating(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { description: 'during' }), app.tenant_id);
  assertMigrating(await call(t, 'POST', `/v1/webhooks/${sub.id}/rotate-secret`, admin, {}), app.tenant_id);
  assertMigrating(await call(t, 'DELETE', `/v1/webhooks/${sub.id}`, admin), app.tenant_id);
  assertMigrating(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin, {}), app.tenant_id);
  assertMigrating(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${tested.id}/redeliver`, admin, {}), app.tenant_id);
  assert.deepEqual(await rowOf(), before);
  assert.deepEqual(await deliveries(), deliveriesBefore, 'no delivery added');

  // Reads keep working; platform-scope subscriptions are no Tenant's data.
  assert.equal(assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 200).description, 'before');
  const platform = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'http://127.0.0.1:9/platform', events: ['*'] }), 201);
  assertStatus(await call(t, 'DELETE', `/v1/webhooks/${platform.id}`, admin), 204);
});

test('PATCH /v1/users/me/apps/{app}/profile for an Application of a migrating Tenant: 503, the AppProfile unchanged', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  assertStatus(await call(t, 'PATCH', `/v1/users/me/apps/${app.id}/profile`, u.token, { display_handle: 'before', custom: { a: 1 } }), 200);
  const rowOf = async () => (await sql(t, 'SELECT * FROM app_profiles WHERE user_id = $1 AND application_id = $2', [u.id, app.id]))[0];
  const before = await rowOf();
  await setTenant(app.tenant_id, { status: 'migrating' });

  assertMigrating(await call(t, 'PATCH', `/v1/users/me/apps/${app.id}/profile`, u.token, { display_handle: 'during-migration' }), app.tenant_id);
  assertMigrating(await call(t, 'PATCH', `/v1/users/${u.id}/apps/${app.id}/profile`, admin, { custom: { b: 2 } }), app.tenant_id);
  assert.deepEqual(await rowOf(), before);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/users/me/apps/${app.id}/profile`, u.token), 200).display_handle, 'before');

  // A first PATCH (no record yet) creates nothing either.
  const v = await person(t);
  await setTenant(app.tenant_id, { status: 'active' });
  await grant(t, admin, v.id, app.id);
  await setTenant(app.tenant_id, { status: 'migrating' });
  assertMigrating(await call(t, 'PATCH', `/v1/users/me/apps/${app.id}/profile`, v.token, { display_handle: 'new' }), app.tenant_id);
  assert.equal((await sql(t, 'SELECT 1 FROM app_profiles WHERE user_id = $1', [v.id])).length, 0);
});

test('PATCH /v1/users/me/apps/{app}/settings for an Application of a migrating Tenant: 503, the AppSettings unchanged', async () => {
  const app = await newApp(t, admin, { settings_schema: { type: 'object', properties: { color: { type: 'string' } } } });
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  assertStatus(await call(t, 'PATCH', `/v1/users/me/apps/${app.id}/settings`, u.token, { overrides: { color: 'red' } }), 200);
  const rowOf = async () => (await sql(t, 'SELECT * FROM app_settings WHERE user_id = $1 AND application_id = $2', [u.id, app.id]))[0];
  const before = await rowOf();
  await setTenant(app.tenant_id, { status: 'migrating' });

  assertMigrating(await call(t, 'PATCH', `/v1/users/me/apps/${app.id}/settings`, u.token, { overrides: { color: 'blue' } }), app.tenant_id);
  assert.deepEqual(await rowOf(), before, 'the AppSettings row is unchanged');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/users/me/apps/${app.id}/settings`, u.token), 200).overrides, { color: 'red' }, 'reads keep working');
});

test('PATCH /v1/applications/{a} {owner_user_id} into a migrating Tenant: 503, the Application stays where it was', async () => {
  const a = await newApp(t, admin); // user A's Tenant, active
  const b = await newApp(t, admin); // user B's Tenant, the destination
  await setTenant(b.tenant_id, { plan: 'enterprise', status: 'migrating' });
  const rowOf = async () => (await sql(t, 'SELECT tenant_id, owner_user_id, owner_organization_id, updated_at FROM applications WHERE id = $1', [a.id]))[0];
  const before = await rowOf();

  assertMigrating(await call(t, 'PATCH', `/v1/applications/${a.id}`, admin, { owner_user_id: b.owner!.id }), b.tenant_id);
  assert.deepEqual(await rowOf(), before);
  assert.equal(before.tenant_id, a.tenant_id);

  // Once the destination is active again, the move goes through.
  await setTenant(b.tenant_id, { status: 'active' });
  const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${a.id}`, admin, { owner_user_id: b.owner!.id }), 200);
  assert.equal(moved.tenant_id, b.tenant_id);
});

test('PATCH /v1/entitlements/{id} while the Tenant is migrating: a caller who may not change the row (its holder) gets 403 forbidden as at any other time, not 503 with Retry-After; the holder of the right gets 503; the row unchanged', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id);
  const rowOf = async () => (await sql(t, 'SELECT status, disabled_reason, updated_at FROM entitlements WHERE id = $1', [ent.id]))[0];
  const before = await rowOf();
  const body = { status: 'disabled', disabled_reason: 'paused' };
  assertError(await call(t, 'PATCH', `/v1/entitlements/${ent.id}`, u.token, body), 403, 'forbidden');
  await setTenant(app.tenant_id, { status: 'migrating' });

  const refused = await call(t, 'PATCH', `/v1/entitlements/${ent.id}`, u.token, body);
  assertError(refused, 403, 'forbidden');
  assert.equal(refused.headers['retry-after'], undefined, 'a retry would be refused too');
  assertMigrating(await call(t, 'PATCH', `/v1/entitlements/${ent.id}`, admin, body), app.tenant_id);
  assert.deepEqual(await rowOf(), before);
});

test('DELETE /v1/entitlements/{id} while the Tenant is migrating: a caller who may not remove the row (its holder; a restricted key) gets 403 as at any other time, not 503 with Retry-After; the holder of the right gets 503; the row stays', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id);
  const restricted = (await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'], restrictDestructive: true })).secret;
  await setTenant(app.tenant_id, { status: 'migrating' });

  const refused = await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, u.token);
  assertError(refused, 403, 'forbidden');
  assert.equal(refused.headers['retry-after'], undefined, 'a retry would be refused too');
  const gated = await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, restricted);
  assertError(gated, 403, 'destructive_operation_restricted');
  assert.equal(gated.headers['retry-after'], undefined);
  assertMigrating(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin), app.tenant_id);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE id = $1', [ent.id]))[0].n, 1);
});

if (storageName === 'postgres') test('"while a Tenant is migrating, writes to its data return 503": a write that found the Tenant active holds it until it commits, so a tier-change move to in_progress (Tenant FOR UPDATE) cannot start the migration under it (PostgreSQL)', async () => {
  const app = await newApp(t, admin, { settings_schema: { type: 'object', properties: { color: { type: 'string' } } } });
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  // The AppSettings PATCH checks its Tenant (active), then waits for the user row the test holds;
  // meanwhile the Tenant lock a tier-change move to in_progress takes must not be free.
  const { probeLocked, result } = await probeWhileHeld(
    t,
    ['SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE', [u.id]],
    () => call(t, 'PATCH', `/v1/users/me/apps/${app.id}/settings`, u.token, { overrides: { color: 'red' } }),
    ['SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE NOWAIT', [app.tenant_id]],
  );
  assert.equal(probeLocked, false, 'the migration could start while a write that found the Tenant active was still running');
  assert.deepEqual(assertStatus(result, 200).overrides, { color: 'red' });
});

if (storageName === 'postgres') test('"while a Tenant is migrating, writes to its data return 503": a tier-change move to in_progress waits for a write that found the Tenant active, and the Tenant reads migrating only once that write has committed (PostgreSQL)', async () => {
  const app = await newApp(t, admin, { settings_schema: { type: 'object', properties: { color: { type: 'string' } } } });
  await setTenant(app.tenant_id, { plan: 'enterprise' });
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  const request = assertStatus(await call(t, 'POST', `/v1/tenants/${app.tenant_id}/tier-change-requests`, admin, { requested_tier: 'isolated', reason: 'Isolation' }), 201);
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    // The AppSettings PATCH finds the Tenant active, then waits for the user row the test holds.
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE', [u.id]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const writing = call(t, 'PATCH', `/v1/users/me/apps/${app.id}/settings`, u.token, { overrides: { color: 'red' } });
    const writePid = await blockedBy(watcher, holderPid, 'the AppSettings write');
    let moved = false;
    const moving = call(t, 'PATCH', `/v1/tenants/${app.tenant_id}/tier-change-requests/${request.id}`, admin, { status: 'in_progress' }).finally(() => (moved = true));
    await endedOrWaiting(watcher, moving, [writePid], [], 'the tier-change move');
    assert.equal(moved, false, 'the migration started while a write that found the Tenant active was still running');
    assert.equal((await sql(t, 'SELECT status FROM tenants WHERE id = $1', [app.tenant_id]))[0].status, 'active');
    await holder.query('COMMIT');
    assert.deepEqual(assertStatus(await writing, 200).overrides, { color: 'red' });
    assert.equal(assertStatus(await moving, 200).status, 'in_progress');
  } finally {
    await holder.end();
    await watcher.end();
  }
  assert.equal((await sql(t, 'SELECT status FROM tenants WHERE id = $1', [app.tenant_id]))[0].status, 'migrating');
  assertMigrating(await call(t, 'PATCH', `/v1/users/me/apps/${app.id}/settings`, u.token, { overrides: { color: 'blue' } }), app.tenant_id);
});
