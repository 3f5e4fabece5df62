import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { createApiKey, createUser, login } from '../helpers/fixtures.js';
import { assertError, assertStatus, buildApp, call, caller, createApplication, seedOrganization, seedTenant, tenantOwner, type Caller } from './support.js';

let t: TestApp;
let admin: Caller;
let support: Caller;
before(async () => {
  t = await buildApp();
  admin = await caller(t, ['superadmin']);
  support = await caller(t, ['support']);
});
after(() => t.close());

const TENANT_FIELDS = ['application_count', 'created_at', 'id', 'owner_organization_id', 'owner_type', 'owner_user_id', 'plan', 'region', 'restricted', 'status', 'subscription_status', 'tier', 'updated_at'];

test("A Tenant appears with the owner's first Application; its owner fetches it with every Tenant field", async () => {
  const owner = await caller(t);
  const { tenantId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  const tenant = assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}`, owner.token), 200);
  assert.deepEqual(Object.keys(tenant).sort(), TENANT_FIELDS);
  assert.equal(tenant.id, tenantId);
  assert.equal(tenant.owner_type, 'user');
  assert.equal(tenant.owner_user_id, owner.user.id);
  assert.equal(tenant.owner_organization_id, null);
  assert.equal(tenant.tier, 'shared');
  assert.equal(tenant.region, 'us-east-1');
  assert.equal(tenant.plan, 'starter');
  assert.equal(tenant.status, 'active');
  assert.equal(tenant.subscription_status, 'none');
  assert.equal(tenant.restricted, false);
  assert.equal(tenant.application_count, 1);
});

test("GET /v1/tenants/{id}: another user's Tenant and an unknown id are 404 tenant_not_found, never 403", async () => {
  const owner = await tenantOwner(t);
  const stranger = await caller(t);
  assertError(await call(t, 'GET', `/v1/tenants/${owner.tenantId}`, stranger.token), 404, 'tenant_not_found');
  assertError(await call(t, 'GET', '/v1/tenants/tnt_01HZZZZZZZZZZZZZZZZZZZZZZZ', owner.token), 404, 'tenant_not_found');
  assert.equal((await call(t, 'GET', `/v1/tenants/${owner.tenantId}`, null)).statusCode, 401);
});

test('GET /v1/tenants/{id}: an org_admin of owner_organization_id is an owner; a plain or pending member is not', async () => {
  const orgAdmin = await createUser(t);
  const member = await createUser(t);
  const pendingAdmin = await createUser(t);
  const orgId = await seedOrganization(t, [
    { userId: orgAdmin.id, role: 'org_admin' },
    { userId: member.id, role: 'member' },
    { userId: pendingAdmin.id, role: 'org_admin', status: 'pending' },
  ]);
  const tenantId = await seedTenant(t, { ownerOrganizationId: orgId, plan: 'team' });
  const seen = assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}`, await login(t, orgAdmin)), 200);
  assert.equal(seen.owner_type, 'organization');
  assert.equal(seen.owner_organization_id, orgId);
  assertError(await call(t, 'GET', `/v1/tenants/${tenantId}`, await login(t, member)), 404, 'tenant_not_found');
  assertError(await call(t, 'GET', `/v1/tenants/${tenantId}`, await login(t, pendingAdmin)), 404, 'tenant_not_found');
});

test('GET /v1/tenants/{id}: tenants.manage and billing.manage fetch any Tenant', async () => {
  const owner = await tenantOwner(t);
  const billingAdmin = await caller(t, ['billing_admin']);
  for (const who of [support, billingAdmin, admin]) assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}`, who.token), 200);
});

test("GET /v1/tenants: any user lists only their own Tenants (as owner user or org_admin)", async () => {
  const user = await caller(t);
  const own = await seedTenant(t, { ownerUserId: user.user.id });
  const orgId = await seedOrganization(t, [{ userId: user.user.id, role: 'org_admin' }]);
  const orgTenant = await seedTenant(t, { ownerOrganizationId: orgId, plan: 'team' });
  await tenantOwner(t);
  const body = assertStatus(await call(t, 'GET', '/v1/tenants', user.token), 200);
  assert.deepEqual(body.data.map((x: any) => x.id).sort(), [own, orgTenant].sort());
  assert.equal(body.page.has_more, false);
  const none = assertStatus(await call(t, 'GET', '/v1/tenants', (await caller(t)).token), 200);
  assert.deepEqual(none.data, []);
});

test('GET /v1/tenants: tenants.manage lists every Tenant, filtered by plan, tier, status, restricted, owner_user_id and owner_organization_id', async () => {
  const a = await tenantOwner(t, { plan: 'enterprise', tier: 'isolated' });
  const b = await tenantOwner(t, { plan: 'team', restricted: true });
  const c = await tenantOwner(t, { plan: 'enterprise', tier: 'dedicated_region', region: 'eu-west-1', status: 'migrating' });
  const orgId = await seedOrganization(t, [{ userId: a.user.id, role: 'org_admin' }]);
  const d = await seedTenant(t, { ownerOrganizationId: orgId, plan: 'team' });
  const ids = async (query: string) => {
    const body = assertStatus(await call(t, 'GET', `/v1/tenants?limit=100${query}`, support.token), 200);
    return new Set(body.data.map((x: any) => x.id));
  };
  const all = await ids('');
  for (const id of [a.tenantId, b.tenantId, c.tenantId, d]) assert.ok(all.has(id), id);
  const enterprise = await ids('&plan=enterprise');
  assert.ok(enterprise.has(a.tenantId) && enterprise.has(c.tenantId) && !enterprise.has(b.tenantId), 'enterprise.has(a.tenantId) && enterprise.has(c.tenantId) && !enterprise.has(b.tenantId)');
  // tier alone: with owner_user_id alongside, the owner filter by itself would select a's Tenant.
  const isolated = await ids('&tier=isolated');
  assert.deepEqual([a.tenantId, b.tenantId, c.tenantId, d].map((id) => isolated.has(id)), [true, false, false, false], 'tier=isolated: only the isolated Tenant');
  const dedicated = await ids('&tier=dedicated_region');
  assert.deepEqual([a.tenantId, b.tenantId, c.tenantId, d].map((id) => dedicated.has(id)), [false, false, true, false], 'tier=dedicated_region: only the dedicated one');
  assert.deepEqual([...(await ids(`&tier=isolated&owner_user_id=${a.user.id}`))], [a.tenantId]);
  assert.deepEqual([...(await ids(`&tier=shared&owner_user_id=${a.user.id}`))], [], 'the filters combine');
  assert.ok((await ids('&status=migrating')).has(c.tenantId), '(await ids(\'&status=migrating\')).has(c.tenantId)');
  assert.ok(!(await ids('&status=active')).has(c.tenantId), '!(await ids(\'&status=active\')).has(c.tenantId)');
  const restricted = await ids('&restricted=true');
  assert.ok(restricted.has(b.tenantId) && !restricted.has(a.tenantId), 'restricted.has(b.tenantId) && !restricted.has(a.tenantId)');
  assert.deepEqual([...(await ids(`&owner_organization_id=${orgId}`))], [d]);
  assertError(await call(t, 'GET', '/v1/tenants?plan=gold', support.token), 422, 'validation_failed');
});

test('GET /v1/tenants pages newest first with limit and cursor, never repeating a Tenant', async () => {
  const user = await caller(t);
  const base = t.clock.now().getTime();
  const made: string[] = [];
  for (let i = 0; i < 3; i++) {
    const orgId = await seedOrganization(t, [{ userId: user.user.id, role: 'org_admin' }]);
    made.push(await seedTenant(t, { ownerOrganizationId: orgId, createdAt: new Date(base + i * 1000) }));
  }
  const first = assertStatus(await call(t, 'GET', '/v1/tenants?limit=2', user.token), 200);
  assert.deepEqual(first.data.map((x: any) => x.id), [made[2], made[1]]);
  assert.equal(first.page.has_more, true);
  const second = assertStatus(await call(t, 'GET', `/v1/tenants?limit=2&cursor=${first.page.next_cursor}`, user.token), 200);
  assert.deepEqual(second.data.map((x: any) => x.id), [made[0]]);
  assert.equal(second.page.next_cursor, null);
});

test('GET /v1/tenants: following next_cursor with limit=2 and a filter (plan=team) returns each matching Tenant once, newest first and by id among Tenants of one instant, none repeated or skipped; the filter holds on every page', async () => {
  const user = await caller(t);
  const base = t.clock.now().getTime();
  const seeded: { id: string; plan: 'team' | 'enterprise'; at: number }[] = [];
  for (const [i, offset] of [0, 1000, 1000, 1000, 2000, 1000].entries()) {
    const orgId = await seedOrganization(t, [{ userId: user.user.id, role: 'org_admin' }]);
    const plan = i === 2 ? 'enterprise' : 'team';
    seeded.push({ id: await seedTenant(t, { ownerOrganizationId: orgId, plan, createdAt: new Date(base + offset) }), plan, at: base + offset });
  }
  const expected = seeded.filter((s) => s.plan === 'team').sort((a, b) => b.at - a.at || (a.id < b.id ? 1 : -1)).map((s) => s.id);
  const walked: string[] = [];
  let cursor: string | null = null;
  do {
    const body: any = assertStatus(await call(t, 'GET', `/v1/tenants?plan=team&limit=2${cursor ? `&cursor=${cursor}` : ''}`, user.token), 200);
    assert.ok(body.data.length <= 2 && body.data.every((x: any) => x.plan === 'team'), JSON.stringify(body.data));
    walked.push(...body.data.map((x: any) => x.id));
    cursor = body.page.next_cursor;
    assert.equal(body.page.has_more, cursor !== null);
  } while (cursor);
  assert.deepEqual(walked, expected);
});

test('GET /v1/tenants: a platform API key with tenants.manage lists every Tenant; one without it lists none', async () => {
  const owner = await tenantOwner(t);
  const key = await createApiKey(t, { permissions: ['tenants.manage'] });
  const body = assertStatus(await call(t, 'GET', `/v1/tenants?owner_user_id=${owner.user.id}`, key.secret), 200);
  assert.deepEqual(body.data.map((x: any) => x.id), [owner.tenantId]);
  const bare = await createApiKey(t, { permissions: [] });
  assert.deepEqual(assertStatus(await call(t, 'GET', '/v1/tenants', bare.secret), 200).data, []);
  assertError(await call(t, 'GET', `/v1/tenants/${owner.tenantId}`, bare.secret), 404, 'tenant_not_found');
});

test("a Tenant lives in its owner's mode: a test-mode key with tenants.manage gets 404 tenant_not_found for a live Tenant and never lists it, and the reverse", async () => {
  const live = await tenantOwner(t);
  const testUser = await createUser(t, { mode: 'test' });
  const testTenant = await seedTenant(t, { ownerUserId: testUser.id });
  const testKey = await createApiKey(t, { permissions: ['tenants.manage'], mode: 'test' });
  const liveKey = await createApiKey(t, { permissions: ['tenants.manage'] });
  assertError(await call(t, 'GET', `/v1/tenants/${live.tenantId}`, testKey.secret), 404, 'tenant_not_found');
  assertError(await call(t, 'GET', `/v1/tenants/${live.tenantId}/tier-change-requests`, testKey.secret), 404, 'tenant_not_found');
  assertError(await call(t, 'GET', `/v1/tenants/${testTenant}`, liveKey.secret), 404, 'tenant_not_found');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/tenants/${testTenant}`, testKey.secret), 200).id, testTenant);
  const listedByTest = assertStatus(await call(t, 'GET', '/v1/tenants?limit=100', testKey.secret), 200).data.map((x: any) => x.id);
  assert.ok(listedByTest.includes(testTenant), 'listedByTest.includes(testTenant)');
  assert.ok(!listedByTest.includes(live.tenantId), '!listedByTest.includes(live.tenantId)');
  const listedByLive = assertStatus(await call(t, 'GET', `/v1/tenants?owner_user_id=${testUser.id}`, liveKey.secret), 200).data;
  assert.deepEqual(listedByLive, []);
});

test("GET /v1/tenants: listing every Tenant needs tenants.manage; billing.manage alone lists only the caller's own Tenants", async () => {
  const other = await tenantOwner(t);
  const billingAdmin = await caller(t, ['billing_admin']);
  const own = await seedTenant(t, { ownerUserId: billingAdmin.user.id });
  const body = assertStatus(await call(t, 'GET', '/v1/tenants?limit=100', billingAdmin.token), 200);
  assert.deepEqual(body.data.map((x: any) => x.id), [own]);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/tenants?owner_user_id=${other.user.id}`, billingAdmin.token), 200).data, []);
});

test('GET /v1/tenants: the restricted filter also selects restricted=false', async () => {
  const open = await tenantOwner(t, { plan: 'team' });
  const closed = await tenantOwner(t, { plan: 'team', restricted: true });
  const ids = async (restricted: boolean) =>
    (await Promise.all([open, closed].map(async (o) => assertStatus(await call(t, 'GET', `/v1/tenants?owner_user_id=${o.user.id}&restricted=${restricted}`, support.token), 200).data))).flat().map((x: any) => x.id);
  assert.deepEqual(await ids(false), [open.tenantId]);
  assert.deepEqual(await ids(true), [closed.tenantId]);
});

test("a new Tenant is plan starter for a user owner and team for an Organization owner (created with the owner's first Application)", async () => {
  const orgAdmin = await createUser(t);
  const orgId = await seedOrganization(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const { tenantId } = await createApplication(t, admin, { owner_organization_id: orgId });
  const tenant = assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}`, await login(t, orgAdmin)), 200);
  assert.equal(tenant.owner_type, 'organization');
  assert.equal(tenant.owner_organization_id, orgId);
  assert.equal(tenant.plan, 'team');
  assert.equal(tenant.tier, 'shared');
  assert.equal(tenant.region, 'us-east-1');
  const user = await caller(t);
  const mine = await createApplication(t, admin, { owner_user_id: user.user.id });
  assert.equal(assertStatus(await call(t, 'GET', `/v1/tenants/${mine.tenantId}`, user.token), 200).plan, 'starter');
});
