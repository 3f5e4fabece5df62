import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, login } from '../helpers/fixtures.js';
import { newId } from '../../src/ids.js';
import { assertError, assertStatus, buildApp, call, caller, createApplication, rand, sql, tenantOwner, type Caller } from '../tenancy/support.js';

let t: TestApp;
let admin: Caller;
before(async () => {
  t = await buildApp();
  admin = await caller(t, ['superadmin']);
});
after(() => t.close());

const SUBSCRIPTION_FIELDS = ['add_ons', 'cancel_at_period_end', 'currency', 'current_period_end', 'current_period_start', 'plan', 'restricted', 'seats', 'subscription_status', 'tenant_id'];
const view = (tenantId: string, token: string) => call(t, 'GET', `/v1/tenants/${tenantId}/subscription`, token);

async function seatHolders(appId: string, count: number): Promise<void> {
  const now = t.clock.now();
  const prefix = `sh-${rand()}`;
  await sql(t, `INSERT INTO users (id, email, status, test_mode, created_at, updated_at)
                SELECT $1 || g, $1 || g || '@example.com', 'active', false, $2, $2 FROM generate_series(1, $3::int) g`, [prefix, now, count]);
  await sql(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
                SELECT 'ent_' || $1 || g, $1 || g, $3, 'active', 'admin_grant', $2, false, $2, $2 FROM generate_series(1, $4::int) g`, [prefix, now, appId, count]);
}

test('a Starter Tenant\'s subscription: status none, no period, seats counted live against the 1,000 included, no add-ons', async () => {
  const owner = await caller(t);
  const { appId, tenantId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  await seatHolders(appId, 3);
  const sub = assertStatus(await view(tenantId, owner.token), 200);
  assert.deepEqual(Object.keys(sub).sort(), SUBSCRIPTION_FIELDS);
  assert.deepEqual(sub, {
    tenant_id: tenantId,
    plan: 'starter',
    subscription_status: 'none',
    restricted: false,
    current_period_start: null,
    current_period_end: null,
    cancel_at_period_end: false,
    seats: { current: 3, included: 1000, billable: 0, last_synced_at: null },
    add_ons: [],
    currency: 'usd',
  });
  // seats.current is live: one more grant shows at once.
  await seatHolders(appId, 1);
  assert.equal(assertStatus(await view(tenantId, owner.token), 200).seats.current, 4);
});

test('Team bills the seats beyond the 25 included; seat-sync records when seats were last synced', async () => {
  const owner = await tenantOwner(t, { plan: 'team', subscriptionStatus: 'active' });
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  await seatHolders(appId, 27);
  const before = assertStatus(await view(owner.tenantId, owner.token), 200);
  assert.deepEqual(before.seats, { current: 27, included: 25, billable: 2, last_synced_at: null });
  await t.deps.jobs.runNow('seat-sync');
  const after = assertStatus(await view(owner.tenantId, owner.token), 200);
  assert.equal(typeof after.seats.last_synced_at, 'string');
  const [row] = await sql(t, 'SELECT seats_synced FROM tenants WHERE id = $1', [owner.tenantId]);
  assert.equal(row.seats_synced, 27);
});

test('the subscription is for the owner or billing.manage: tenants.manage alone gets 403 forbidden, others 404 tenant_not_found', async () => {
  const owner = await tenantOwner(t);
  assertStatus(await view(owner.tenantId, (await caller(t, ['billing_admin'])).token), 200);
  assertStatus(await view(owner.tenantId, (await caller(t, ['support'])).token), 200);
  const roleId = `role_platform_tenants_only_${rand()}`;
  const now = t.clock.now();
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, seed, created_at, updated_at) VALUES ($1, $2, 'platform', ARRAY['tenants.manage'], false, $3, $3)`, [roleId, roleId.slice(5), now]);
  const tenantsOnly = await createUser(t, { roles: [roleId] });
  assertError(await view(owner.tenantId, await login(t, tenantsOnly)), 403, 'forbidden');
  assertError(await view(owner.tenantId, (await caller(t)).token), 404, 'tenant_not_found');
  assertError(await view(newId('tnt'), owner.token), 404, 'tenant_not_found');
});

test('every billing operation needs a User token: an API key gets 400 user_token_required', async () => {
  const owner = await tenantOwner(t);
  const key = await createApiKey(t, { permissions: ['billing.manage', 'tenants.manage'] });
  const base = `/v1/tenants/${owner.tenantId}`;
  const ops: [string, string, unknown?][] = [
    ['GET', `${base}/subscription`],
    ['GET', `${base}/usage`],
    ['POST', `${base}/billing/checkout-sessions`, { plan: 'team', success_url: 'https://a.example.com', cancel_url: 'https://a.example.com' }],
    ['POST', `${base}/billing/portal-sessions`, { return_url: 'https://a.example.com' }],
  ];
  for (const [method, url, body] of ops) {
    assertError(await call(t, method, url, key.secret, body, { 'idempotency-key': `k-${rand()}` }), 400, 'user_token_required');
    assert.equal((await call(t, method, url, null, body)).statusCode, 401, `${method} ${url} anonymous`);
  }
});

test('seat-sync lifts a lapsed Tenant\'s restriction once its usage fits Starter, and keeps it while it does not', async () => {
  const fits = await tenantOwner(t, { subscriptionStatus: 'canceled', restricted: true });
  const over = await tenantOwner(t, { plan: 'enterprise' });
  for (let i = 0; i < 2; i++) await createApplication(t, admin, { owner_user_id: over.user.id });
  await sql(t, `UPDATE tenants SET plan = 'starter', subscription_status = 'unpaid', restricted = true WHERE id = $1`, [over.tenantId]);
  await t.deps.jobs.runNow('seat-sync');
  assert.equal(assertStatus(await view(fits.tenantId, fits.token), 200).restricted, false);
  assert.equal(assertStatus(await view(over.tenantId, over.token), 200).restricted, true);
});

test('seat-sync keeps a restriction while a new subscription is not yet paid (incomplete) and usage exceeds Starter, and lifts it once usage fits', async () => {
  const fits = await tenantOwner(t, { subscriptionStatus: 'incomplete', restricted: true });
  const over = await tenantOwner(t, { plan: 'enterprise' });
  for (let i = 0; i < 2; i++) await createApplication(t, admin, { owner_user_id: over.user.id });
  await sql(t, `UPDATE tenants SET plan = 'starter', subscription_status = 'incomplete', restricted = true WHERE id = $1`, [over.tenantId]);
  await t.deps.jobs.runNow('seat-sync');
  assert.deepEqual(
    [assertStatus(await view(fits.tenantId, fits.token), 200), assertStatus(await view(over.tenantId, over.token), 200)].map((v) => [v.subscription_status, v.restricted]),
    [['incomplete', false], ['incomplete', true]],
  );
});

test('Team bills only the seats beyond the 25 included: with fewer, billable is 0', async () => {
  const owner = await tenantOwner(t, { plan: 'team', subscriptionStatus: 'active' });
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  await seatHolders(appId, 3);
  assert.deepEqual(assertStatus(await view(owner.tenantId, owner.token), 200).seats, { current: 3, included: 25, billable: 0, last_synced_at: null });
});

test('restricted only follows a lapse: seat-sync never restricts a Tenant whose subscription is active or past_due, even with usage above Starter', async () => {
  const owners = [await tenantOwner(t, { plan: 'team', subscriptionStatus: 'active' }), await tenantOwner(t, { plan: 'team', subscriptionStatus: 'past_due' })];
  for (const owner of owners) for (let i = 0; i < 2; i++) await createApplication(t, admin, { owner_user_id: owner.user.id });
  await t.deps.jobs.runNow('seat-sync');
  for (const owner of owners) assert.equal(assertStatus(await view(owner.tenantId, owner.token), 200).restricted, false);
  // And the Tenant keeps creating within Team's limits.
  assertStatus(await call(t, 'POST', '/v1/applications', admin.token, { slug: `s-${rand()}`, name: 'S', launch_url: 'https://s.example.com', owner_user_id: owners[0].user.id }), 201);
});

test('seats.current is live and counts only grants not yet ended: a grant whose ends_at has come is no seat from that instant, as its access ends then', async () => {
  const owner = await caller(t);
  const { appId, tenantId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  await seatHolders(appId, 2);
  const endsAt = new Date(t.clock.now().getTime() + 60_000);
  await sql(t, `UPDATE entitlements SET ends_at = $2 WHERE id = (SELECT min(id) FROM entitlements WHERE application_id = $1)`, [appId, endsAt]);
  const seatsAt = (at: Date) => atOneInstant(t, async () => assertStatus(await view(tenantId, owner.token), 200).seats.current, at);
  assert.equal(await seatsAt(new Date(endsAt.getTime() - 1)), 2, 'a millisecond before ends_at it is a seat');
  assert.equal(await seatsAt(endsAt), 1, 'at ends_at it has ended');
});

test('only Team bills seats beyond those included: a Starter Tenant left above its 1,000 seats (a lapse from Team) shows billable 0', async () => {
  const owner = await tenantOwner(t, { plan: 'starter' });
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  await seatHolders(appId, 1002);
  assert.deepEqual(assertStatus(await view(owner.tenantId, owner.token), 200).seats, { current: 1002, included: 1000, billable: 0, last_synced_at: null });
});

test('seats count in the mode of the Tenant\'s owner (docs/decisions.md "Each mode\'s seats are counted apart"; Part A: live credentials see only live rows): a test-mode grant on a live Tenant\'s Application is no seat in its subscription or usage', async () => {
  const owner = await caller(t);
  const { appId, tenantId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  const live = await createUser(t);
  assertStatus(await call(t, 'POST', `/v1/users/${live.id}/entitlements`, admin.token, { application_id: appId, source: 'admin_grant' }, { 'idempotency-key': `live-${rand()}` }), 201);
  const testKey = await createApiKey(t, { mode: 'test', permissions: ['entitlements.manage'] });
  for (let i = 0; i < 2; i++) {
    const tester = await createUser(t, { mode: 'test' });
    assertStatus(await call(t, 'POST', `/v1/users/${tester.id}/entitlements`, testKey.secret, { application_id: appId, source: 'admin_grant' }, { 'idempotency-key': `test-${rand()}` }), 201);
  }
  const seats = assertStatus(await view(tenantId, owner.token), 200).seats;
  assert.deepEqual([seats.current, seats.included, seats.billable], [1, 1000, 0]);
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, owner.token), 200);
  assert.deepEqual(usage.limits.seats, { limit: 1000, current: 1, included: 1000 });
});
