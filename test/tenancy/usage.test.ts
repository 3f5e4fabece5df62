import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser } from '../helpers/fixtures.js';
import { newId } from '../../src/ids.js';
import { assertError, assertStatus, buildApp, call, caller, createApplication, rand, seedOrganization, sql, tenantOwner, type Caller } from './support.js';

let t: TestApp;
let admin: Caller;
before(async () => {
  t = await buildApp();
  admin = await caller(t, ['superadmin']);
});
after(() => t.close());

const usage = async (tenantId: string, token: string) => assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, token), 200);

/** Active personal grants to the Application: each grantee is a seat. */
async function grantSeats(appId: string, userIds: string[]): Promise<void> {
  const now = t.clock.now();
  for (const userId of userIds) {
    await sql(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
                  VALUES ($1, $2, $3, 'active', 'admin_grant', $4, false, $4, $4)`, [newId('ent'), userId, appId, now]);
  }
}

test('the usage document gives each capped resource {limit, current}, seats also included, audit_hot_window_days only {limit}', async () => {
  const owner = await caller(t);
  const { appId, tenantId } = await createApplication(t, admin, { owner_user_id: owner.user.id }, { available_app_roles: ['viewer', 'editor'] });
  const a = await createUser(t);
  const b = await createUser(t);
  await grantSeats(appId, [a.id, b.id]);
  const doc = await usage(tenantId, owner.token);
  assert.deepEqual(doc, {
    tenant_id: tenantId,
    plan: 'starter',
    limits: {
      applications: { limit: 1, current: 1 },
      seats: { limit: 1000, current: 2, included: 1000 },
      app_roles: { limit: 3, current: 2 },
      webhooks: { limit: 1, current: 0 },
      audit_hot_window_days: { limit: 30 },
    },
    fits_plans: ['starter', 'team', 'enterprise'],
  });
});

test('a null limit means unlimited: Enterprise has no caps (its audit window is the negotiated default, 730 days); Team includes 25 seats without a cap', async () => {
  const enterprise = await tenantOwner(t, { plan: 'enterprise' });
  const e = await usage(enterprise.tenantId, enterprise.token);
  assert.deepEqual(e.limits, {
    applications: { limit: null, current: 0 },
    seats: { limit: null, current: 0, included: null },
    app_roles: { limit: null, current: 0 },
    webhooks: { limit: null, current: 0 },
    audit_hot_window_days: { limit: 730 },
  });
  const team = await tenantOwner(t, { plan: 'team' });
  const tm = await usage(team.tenantId, team.token);
  assert.deepEqual(tm.limits.seats, { limit: null, current: 0, included: 25 });
  assert.deepEqual(tm.limits.applications, { limit: 5, current: 0 });
  assert.equal(tm.limits.audit_hot_window_days.limit, 365);
});

test('usage audit_hot_window_days is the window the audit log applies to the Tenant owner (Audit-Hot-Window-Start), on every plan', async () => {
  for (const plan of ['starter', 'team', 'enterprise'] as const) {
    const owner = await tenantOwner(t, { plan });
    const { limit } = (await usage(owner.tenantId, owner.token)).limits.audit_hot_window_days;
    const res = await call(t, 'GET', `/v1/audit-events?tenant_id=${owner.tenantId}`, owner.token);
    assertStatus(res, 200);
    const days = Math.round((t.clock.now().getTime() - Date.parse(String(res.headers['audit-hot-window-start']))) / 86_400_000);
    assert.equal(days, limit, `${plan}: usage says ${limit} days, the audit log applies ${days}`);
  }
});

test('app_roles current is the highest count on any one Application, and decides fits_plans', async () => {
  const owner = await tenantOwner(t, { plan: 'enterprise' });
  for (const roles of [['a1'], ['r1', 'r2', 'r3', 'r4'], ['x1', 'x2']]) {
    await createApplication(t, admin, { owner_user_id: owner.user.id }, { available_app_roles: roles });
  }
  const doc = await usage(owner.tenantId, owner.token);
  assert.deepEqual(doc.limits.app_roles, { limit: null, current: 4 });
  assert.equal(doc.limits.applications.current, 3);
  assert.deepEqual(doc.fits_plans, ['team', 'enterprise']);
});

test('fits_plans lists the plans whose limits the current usage fits: six Applications fit only Enterprise', async () => {
  const owner = await tenantOwner(t, { plan: 'enterprise' });
  for (let i = 0; i < 6; i++) await createApplication(t, admin, { owner_user_id: owner.user.id });
  assert.deepEqual((await usage(owner.tenantId, owner.token)).fits_plans, ['enterprise']);
});

/** n new active users, each with an active personal grant to the Application (n seats), in two statements. */
async function seatHolders(appId: string, n: number): Promise<void> {
  const now = t.clock.now();
  const prefix = `seat-${rand()}`;
  await sql(t, `INSERT INTO users (id, email, status, test_mode, created_at, updated_at)
                SELECT $1 || g, $1 || g || '@example.com', 'active', false, $2, $2 FROM generate_series(1, $3::int) g`, [prefix, now, n]);
  await sql(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
                SELECT 'ent_' || $1 || g, $1 || g, $3, 'active', 'admin_grant', $2, false, $2, $2 FROM generate_series(1, $4::int) g`, [prefix, now, appId, n]);
}

test('seats count distinct users with a live grant; more than 1,000 seats do not fit Starter', async () => {
  const owner = await tenantOwner(t, { plan: 'team' });
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  await seatHolders(appId, 1001);
  // A user holding the Application both personally and through an Organization's grant is one seat.
  const both = await createUser(t);
  await grantSeats(appId, [both.id]);
  const orgId = await seedOrganization(t, [{ userId: both.id, role: 'org_admin' }]);
  const now = t.clock.now();
  await sql(t, `INSERT INTO entitlements (id, organization_id, application_id, status, source, starts_at, member_scope, member_overrides, test_mode, created_at, updated_at, start_notified_at)
                VALUES ($1, $2, $3, 'active', 'org_seat', $4, 'all_members', '{}', false, $4, $4, $4)`, [newId('ent'), orgId, appId, now]);
  const doc = await usage(owner.tenantId, owner.token);
  assert.deepEqual(doc.limits.seats, { limit: null, current: 1002, included: 25 });
  assert.deepEqual(doc.fits_plans, ['team', 'enterprise']);
});

test('seats count users with a live grant: a personal grant, or an organization-wide one, at the very instant of its ends_at is expired (as the access check reads it) and holds no seat', async () => {
  const owner = await tenantOwner(t, { plan: 'team' });
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  const holder = await createUser(t);
  const member = await createUser(t);
  const orgId = await seedOrganization(t, [{ userId: member.id, role: 'org_admin' }]);
  await withStoppedClock(t, async () => {
    const now = t.clock.now();
    const endsAt = new Date(now.getTime() + 60_000);
    await sql(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, ends_at, test_mode, created_at, updated_at)
                  VALUES ($1, $2, $3, 'active', 'admin_grant', $4, $5, false, $4, $4)`, [newId('ent'), holder.id, appId, now, endsAt]);
    await sql(t, `INSERT INTO entitlements (id, organization_id, application_id, status, source, starts_at, ends_at, member_scope, member_overrides, test_mode, created_at, updated_at, start_notified_at)
                  VALUES ($1, $2, $3, 'active', 'org_seat', $4, $5, 'all_members', '{}', false, $4, $4, $4)`, [newId('ent'), orgId, appId, now, endsAt]);
    assert.equal((await usage(owner.tenantId, owner.token)).limits.seats.current, 2, 'a seat each before ends_at');
    t.clock.advance(60);
    try {
      assert.equal((await usage(owner.tenantId, owner.token)).limits.seats.current, 0, 'no seat at ends_at');
    } finally {
      t.clock.advance(-60);
    }
  });
});

test("webhooks current counts the subscriptions of the Tenant's Applications (platform-scope ones belong to no Tenant)", async () => {
  const owner = await tenantOwner(t, { plan: 'team' });
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  assert.equal((await usage(owner.tenantId, owner.token)).limits.webhooks.current, 0);
  const [{ present }] = await sql<{ present: boolean }>(t, `SELECT to_regclass('webhook_subscriptions') IS NOT NULL AS present`);
  const now = t.clock.now();
  if (present) {
    // The webhooks module's table (0008): rows as it writes them.
    for (const [id, scope, app] of [[`whk_${rand()}`, appId, appId], [`whk_${rand()}`, appId, appId], [`whk_${rand()}`, 'platform', null]]) {
      await sql(t, `INSERT INTO webhook_subscriptions (id, scope, application_id, url, events, status, signing_secret, api_version, test_mode, created_at, updated_at)
                    VALUES ($1, $2, $3, 'https://hooks.example.com', ARRAY['*'], 'healthy', 'whsec_x', '2025-01-01', false, $4, $4)`, [id, scope, app, now]);
    }
  } else {
    await t.database.scoped('system').exec(`CREATE TABLE webhook_subscriptions (id text PRIMARY KEY, scope text NOT NULL); GRANT SELECT ON webhook_subscriptions TO platform_app`);
    await sql(t, `INSERT INTO webhook_subscriptions (id, scope) VALUES ('whk_1', $1), ('whk_2', $1), ('whk_3', 'platform')`, [appId]);
  }
  assert.deepEqual((await usage(owner.tenantId, owner.token)).limits.webhooks, { limit: 10, current: 2 });
});

test('webhooks current counts a disabled subscription of the Tenant\'s Applications, never a test-mode one (Part A: live credentials see only live rows) nor a deleted one; at Starter\'s 1 it fits starter, one past it no longer does', async () => {
  const owner = await tenantOwner(t, { plan: 'team' });
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  const subscribe = async (status: string, testMode = false) => {
    const id = `whk_${rand()}`;
    await sql(t, `INSERT INTO webhook_subscriptions (id, scope, application_id, url, events, status, signing_secret, api_version, test_mode, created_at, updated_at)
                  VALUES ($1, $2, $2, 'https://hooks.example.com', ARRAY['*'], $3, 'whsec_x', '2026-01-01', $4, $5, $5)`, [id, appId, status, testMode, t.clock.now()]);
    return id;
  };
  const webhooks = async () => {
    const doc = await usage(owner.tenantId, owner.token);
    return { ...doc.limits.webhooks, fits: doc.fits_plans };
  };
  await subscribe('disabled');
  await subscribe('healthy', true);
  assert.deepEqual(await webhooks(), { limit: 10, current: 1, fits: ['starter', 'team', 'enterprise'] }, 'at the Starter limit');
  const second = await subscribe('unhealthy');
  assert.deepEqual(await webhooks(), { limit: 10, current: 2, fits: ['team', 'enterprise'] }, 'one past the Starter limit');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [second]);
  assert.deepEqual(await webhooks(), { limit: 10, current: 1, fits: ['starter', 'team', 'enterprise'] }, 'a deleted subscription no longer counts');
});

test('usage: owner, billing.manage and tenants.manage read it; anyone else 404 tenant_not_found; an API key 400 user_token_required', async () => {
  const owner = await tenantOwner(t);
  for (const token of [owner.token, (await caller(t, ['billing_admin'])).token, (await caller(t, ['support'])).token]) {
    assert.equal((await usage(owner.tenantId, token)).tenant_id, owner.tenantId);
  }
  assertError(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/usage`, (await caller(t)).token), 404, 'tenant_not_found');
  const key = await createApiKey(t, { permissions: ['billing.manage', 'tenants.manage'] });
  assertError(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/usage`, key.secret), 400, 'user_token_required');
});

test('usage: tenants.manage alone (without billing.manage) reads it', async () => {
  const owner = await tenantOwner(t, { plan: 'team' });
  const name = `tenants_${rand(3)}`;
  const role = assertStatus(await call(t, 'POST', '/v1/roles', admin.token, { name, scope: 'platform', permissions: ['tenants.manage'] }), 201);
  const manager = await caller(t, [role.id]);
  const doc = await usage(owner.tenantId, manager.token);
  assert.equal(doc.tenant_id, owner.tenantId);
  assert.equal(doc.plan, 'team');
});

test('a scheduled grant (starts_at ahead) holds its seat from the moment it is granted, so the Starter seat cap refuses it then (409 plan_limit_reached, resource seats)', async () => {
  const owner = await tenantOwner(t);
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  const starts = new Date(t.clock.now().getTime() + 30 * 86_400_000).toISOString();
  const grant = (userId: string) => call(t, 'POST', `/v1/users/${userId}/entitlements`, admin.token,
    { application_id: appId, source: 'admin_grant', starts_at: starts }, { 'idempotency-key': `seat-${rand()}` });
  const first = await createUser(t);
  const res = assertStatus(await grant(first.id), 201);
  assert.deepEqual([res.status, res.starts_at], ['active', starts], 'a future starts_at creates the row as active (resolved status scheduled)');
  assert.deepEqual((await usage(owner.tenantId, owner.token)).limits.seats, { limit: 1000, current: 1, included: 1000 });

  await seatHolders(appId, 999);
  assert.equal((await usage(owner.tenantId, owner.token)).limits.seats.current, 1000);
  const over = await createUser(t);
  const refused = await grant(over.id);
  assertError(refused, 409, 'plan_limit_reached');
  assert.equal(refused.json().error.details.resource, 'seats');
  assert.deepEqual(await sql(t, 'SELECT id FROM entitlements WHERE user_id = $1', [over.id]), [], 'the refused grant wrote no row');
});

test('plan_limit_reached at each plan\'s Applications cap (Starter 1, Team 5) names the resource, the plan\'s limit and the current usage, which the usage document also shows', async () => {
  for (const [plan, cap] of [['starter', 1], ['team', 5]] as const) {
    const owner = await tenantOwner(t, { plan });
    for (let i = 0; i < cap; i++) await createApplication(t, admin, { owner_user_id: owner.user.id });
    assert.deepEqual((await usage(owner.tenantId, owner.token)).limits.applications, { limit: cap, current: cap });
    const slug = `app-${rand()}`;
    const refused = await call(t, 'POST', '/v1/applications', admin.token, { slug, name: 'Over', launch_url: `https://${slug}.example.com`, owner_user_id: owner.user.id });
    assertError(refused, 409, 'plan_limit_reached');
    assert.deepEqual(refused.json().error.details, { resource: 'applications', limit: cap, current: cap, plan, tenant_id: owner.tenantId }, plan);
    assert.equal((await usage(owner.tenantId, owner.token)).limits.applications.current, cap, `${plan}: nothing is written`);
  }
});
