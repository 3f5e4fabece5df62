import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser } from '../helpers/fixtures.js';
import { assertError, assertStatus, auditRows, buildApp, call, caller, mailsTo, seedOrganization, seedTenant, tenantOwner, tenantRow, type Caller } from './support.js';

let t: TestApp;
let support: Caller;
before(async () => {
  t = await buildApp();
  support = await caller(t, ['support']);
});
after(() => t.close());

const REQUEST_FIELDS = ['completed_at', 'created_at', 'from_region', 'from_tier', 'id', 'notes', 'reason', 'requested_by', 'requested_region', 'requested_tier', 'scheduled_for', 'started_at', 'status', 'tenant_id'];
const base = (tenantId: string) => `/v1/tenants/${tenantId}/tier-change-requests`;
const create = (tenantId: string, body: Record<string, unknown>, token = support.token) => call(t, 'POST', base(tenantId), token, body);
const patch = (tenantId: string, id: string, body: Record<string, unknown>, token = support.token) => call(t, 'PATCH', `${base(tenantId)}/${id}`, token, body);
const future = (seconds = 86_400) => new Date(t.clock.now().getTime() + seconds * 1000).toISOString();

async function enterpriseTenant(seed: Parameters<typeof tenantOwner>[1] = {}) {
  return tenantOwner(t, { plan: 'enterprise', ...seed });
}

async function openRequest(tenantId: string, body: Record<string, unknown> = { requested_tier: 'isolated', reason: 'Customer needs isolation' }) {
  return assertStatus(await create(tenantId, body), 201);
}

test('POST tier-change-requests (tenants.manage) creates a pending request with 201, writes tenant.tier_change_requested and starts no migration', async () => {
  const owner = await enterpriseTenant();
  const res = await create(owner.tenantId, { requested_tier: 'isolated', reason: 'Compliance review' });
  const request = assertStatus(res, 201);
  assert.deepEqual(Object.keys(request).sort(), REQUEST_FIELDS);
  assert.match(request.id, /^tcr_/);
  assert.equal(request.tenant_id, owner.tenantId);
  assert.equal(request.from_tier, 'shared');
  assert.equal(request.from_region, 'us-east-1');
  assert.equal(request.requested_tier, 'isolated');
  assert.equal(request.requested_region, null);
  assert.equal(request.status, 'pending');
  assert.equal(request.reason, 'Compliance review');
  assert.equal(request.requested_by, support.user.id);
  assert.equal(request.scheduled_for, null);
  assert.equal(request.started_at, null);
  assert.equal(request.completed_at, null);
  const audits = await auditRows(t, 'tenant.tier_change_requested', owner.tenantId);
  assert.equal(audits.length, 1);
  assert.equal(audits[0].target_id, request.id);
  assert.equal(audits[0].actor_id, support.user.id);
  const tenant = await tenantRow(t, owner.tenantId);
  assert.equal(tenant.status, 'active');
  assert.equal(tenant.tier, 'shared');
});

test('creating a request needs tenants.manage (the owner gets 403 forbidden); an unknown Tenant is 404 tenant_not_found', async () => {
  const owner = await enterpriseTenant();
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }, owner.token), 403, 'forbidden');
  assertError(await create('tnt_01HZZZZZZZZZZZZZZZZZZZZZZZ', { requested_tier: 'isolated', reason: 'r' }), 404, 'tenant_not_found');
});

test('"the tier-change writes … are tenants.manage operations: the gate answers 403 forbidden to every caller without it, whatever the id" (docs/decisions.md): a stranger gets the same 403 on POST and PATCH for an existing Tenant and an unknown one', async () => {
  const owner = await enterpriseTenant();
  const request = await openRequest(owner.tenantId);
  const stranger = await caller(t);
  const unknown = 'tnt_01HZZZZZZZZZZZZZZZZZZZZZZZ';
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }, stranger.token), 403, 'forbidden');
  assertError(await create(unknown, { requested_tier: 'isolated', reason: 'r' }, stranger.token), 403, 'forbidden');
  assertError(await patch(owner.tenantId, request.id, { notes: 'n' }, stranger.token), 403, 'forbidden');
  assertError(await patch(unknown, 'tcr_01HZZZZZZZZZZZZZZZZZZZZZZZ', { notes: 'n' }, stranger.token), 403, 'forbidden');
  assert.equal((await patch(owner.tenantId, request.id, { status: 'cancelled', notes: 'audit cleanup' })).statusCode, 200);
});

test('"requested_by is the id of the caller that opened the request: a user, or the API key (key_…) that did" (docs/decisions.md): a platform key with tenants.manage opens one naming itself', async () => {
  const owner = await enterpriseTenant();
  const key = await createApiKey(t, { permissions: ['tenants.manage'] });
  const request = assertStatus(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'Opened by automation' }, key.secret), 201);
  assert.match(request.requested_by, /^key_/);
  assert.equal(request.requested_by, key.id);
  assert.equal(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${request.id}`, support.token), 200).requested_by, key.id);
  assertStatus(await patch(owner.tenantId, request.id, { status: 'cancelled', notes: 'done' }), 200);
});

test('creating a request is destructive: a restrict_destructive API key is refused 403 destructive_operation_restricted', async () => {
  const owner = await enterpriseTenant();
  const key = await createApiKey(t, { permissions: ['tenants.manage'], restrictDestructive: true });
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }, key.secret), 403, 'destructive_operation_restricted');
  const open = await createApiKey(t, { permissions: ['tenants.manage'], restrictDestructive: false });
  assertStatus(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }, open.secret), 201);
});

test('the Tenant plan must be enterprise: 409 plan_does_not_allow_tier', async () => {
  for (const plan of ['starter', 'team'] as const) {
    const owner = await tenantOwner(t, { plan });
    const error = assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }), 409, 'plan_does_not_allow_tier');
    assert.equal(error.details.plan, plan);
  }
});

test('requested_tier must be strictly higher on the ladder shared < isolated < dedicated_region: 409 invalid_tier_transition', async () => {
  const cases: [Parameters<typeof tenantOwner>[1], Record<string, unknown>][] = [
    [{ tier: 'shared' }, { requested_tier: 'shared', reason: 'r' }],
    [{ tier: 'isolated' }, { requested_tier: 'isolated', reason: 'r' }],
    [{ tier: 'isolated' }, { requested_tier: 'shared', reason: 'r' }],
    [{ tier: 'dedicated_region', region: 'eu-west-1' }, { requested_tier: 'isolated', reason: 'r' }],
    [{ tier: 'dedicated_region', region: 'eu-west-1' }, { requested_tier: 'dedicated_region', requested_region: 'eu-west-1', reason: 'r' }],
  ];
  for (const [seed, body] of cases) {
    const owner = await enterpriseTenant(seed);
    assertError(await create(owner.tenantId, body), 409, 'invalid_tier_transition');
  }
});

test('a region change within dedicated_region counts as an upgrade; isolated and shared may go to dedicated_region', async () => {
  const dedicated = await enterpriseTenant({ tier: 'dedicated_region', region: 'eu-west-1' });
  const moved = await openRequest(dedicated.tenantId, { requested_tier: 'dedicated_region', requested_region: 'eu-central-1', reason: 'Data residency' });
  assert.equal(moved.from_tier, 'dedicated_region');
  assert.equal(moved.from_region, 'eu-west-1');
  assert.equal(moved.requested_region, 'eu-central-1');
  const isolated = await enterpriseTenant({ tier: 'isolated' });
  await openRequest(isolated.tenantId, { requested_tier: 'dedicated_region', requested_region: 'ap-southeast-2', reason: 'r' });
  const shared = await enterpriseTenant();
  await openRequest(shared.tenantId, { requested_tier: 'dedicated_region', requested_region: 'ca-central-1', reason: 'r' });
});

test('requested_region is required for dedicated_region, forbidden for isolated (422), and off the allow-list is 422 unsupported_region', async () => {
  const owner = await enterpriseTenant();
  const missing = assertError(await create(owner.tenantId, { requested_tier: 'dedicated_region', reason: 'r' }), 422, 'validation_failed');
  assert.equal(missing.details.fields[0].path, 'requested_region');
  const forbidden = assertError(await create(owner.tenantId, { requested_tier: 'isolated', requested_region: 'us-east-1', reason: 'r' }), 422, 'validation_failed');
  assert.equal(forbidden.details.fields[0].path, 'requested_region');
  for (const region of ['us-east-2', 'mars-1', 'EU-WEST-1']) {
    const error = assertError(await create(owner.tenantId, { requested_tier: 'dedicated_region', requested_region: region, reason: 'r' }), 422, 'unsupported_region');
    assert.deepEqual(error.details.supported_regions, ['us-east-1', 'us-west-2', 'ca-central-1', 'eu-west-1', 'eu-central-1', 'ap-southeast-2']);
  }
  for (const region of ['us-east-1', 'us-west-2', 'ca-central-1', 'eu-west-1', 'eu-central-1', 'ap-southeast-2']) {
    const fresh = await enterpriseTenant();
    await openRequest(fresh.tenantId, { requested_tier: 'dedicated_region', requested_region: region, reason: 'r' });
  }
});

test('reason is required, up to 2000 characters; requested_tier is required and strict', async () => {
  const owner = await enterpriseTenant();
  assertError(await create(owner.tenantId, { requested_tier: 'isolated' }), 422, 'validation_failed');
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'x'.repeat(2001) }), 422, 'validation_failed');
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: '   ' }), 422, 'validation_failed');
  assertError(await create(owner.tenantId, { reason: 'r' }), 422, 'validation_failed');
  assertError(await create(owner.tenantId, { requested_tier: 'private', reason: 'r' }), 422, 'validation_failed');
  assertStatus(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'x'.repeat(2000) }), 201);
});

test('one open request per Tenant: 409 tier_change_already_pending while pending, scheduled or in_progress; a new one after it closes', async () => {
  const owner = await enterpriseTenant();
  const first = await openRequest(owner.tenantId);
  const error = assertError(await create(owner.tenantId, { requested_tier: 'dedicated_region', requested_region: 'eu-west-1', reason: 'r' }), 409, 'tier_change_already_pending');
  assert.equal(error.details.request_id, first.id);
  assertStatus(await patch(owner.tenantId, first.id, { status: 'scheduled', scheduled_for: future() }), 200);
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }), 409, 'tier_change_already_pending');
  assertStatus(await patch(owner.tenantId, first.id, { status: 'in_progress' }), 200);
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }), 409, 'tier_change_already_pending');
  assertStatus(await patch(owner.tenantId, first.id, { status: 'cancelled', notes: 'Window missed' }), 200);
  await openRequest(owner.tenantId);
});

test('GET tier-change requests: the owner and tenants.manage list and fetch; billing.manage alone gets 403; others 404 tenant_not_found', async () => {
  const owner = await enterpriseTenant();
  const request = await openRequest(owner.tenantId);
  for (const who of [owner.token, support.token]) {
    const list = assertStatus(await call(t, 'GET', base(owner.tenantId), who), 200);
    assert.deepEqual(list.data.map((r: any) => r.id), [request.id]);
    assert.equal(list.page.has_more, false);
    assert.deepEqual(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${request.id}`, who), 200), request);
  }
  const billing = await caller(t, ['billing_admin']);
  assertError(await call(t, 'GET', base(owner.tenantId), billing.token), 403, 'forbidden');
  assertError(await call(t, 'GET', `${base(owner.tenantId)}/${request.id}`, billing.token), 403, 'forbidden');
  const stranger = await caller(t);
  assertError(await call(t, 'GET', base(owner.tenantId), stranger.token), 404, 'tenant_not_found');
  assertError(await call(t, 'GET', `${base(owner.tenantId)}/${request.id}`, stranger.token), 404, 'tenant_not_found');
});

test('tier-change list: "terminal records are excluded from list results by default; the flag include_inactive includes them" (completed and cancelled)', async () => {
  const owner = await enterpriseTenant();
  const cancelled = await openRequest(owner.tenantId);
  assertStatus(await patch(owner.tenantId, cancelled.id, { status: 'cancelled', notes: 'Not now' }), 200);
  const completed = await openRequest(owner.tenantId);
  assertStatus(await patch(owner.tenantId, completed.id, { status: 'in_progress' }), 200);
  assertStatus(await patch(owner.tenantId, completed.id, { status: 'completed' }), 200);
  const rolledBack = await openRequest(owner.tenantId, { requested_tier: 'dedicated_region', requested_region: 'eu-west-1', reason: 'r' });
  assertStatus(await patch(owner.tenantId, rolledBack.id, { status: 'in_progress' }), 200);
  assertStatus(await patch(owner.tenantId, rolledBack.id, { status: 'cancelled', notes: 'Rolled back' }), 200);
  const open = await openRequest(owner.tenantId, { requested_tier: 'dedicated_region', requested_region: 'us-west-2', reason: 'r' });
  assertStatus(await patch(owner.tenantId, open.id, { status: 'scheduled', scheduled_for: future() }), 200);
  const ids = (res: any) => res.data.map((r: any) => r.id);

  for (const who of [owner.token, support.token]) {
    // By default only the open (scheduled) request is listed, and the page knows nothing more follows.
    for (const query of ['', '?include_inactive=false', '?limit=1']) {
      const list = assertStatus(await call(t, 'GET', `${base(owner.tenantId)}${query}`, who), 200);
      assert.deepEqual(ids(list), [open.id], query);
      assert.equal(list.page.has_more, false, query);
      assert.equal(list.page.next_cursor, null, query);
    }
    const all = assertStatus(await call(t, 'GET', `${base(owner.tenantId)}?include_inactive=true`, who), 200);
    assert.deepEqual(ids(all), [open.id, rolledBack.id, completed.id, cancelled.id]);
    assert.deepEqual(all.data.map((r: any) => r.status), ['scheduled', 'cancelled', 'completed', 'cancelled']);
    // Cursors keep the flag's filter: two pages of two, nothing repeated or skipped.
    const first = assertStatus(await call(t, 'GET', `${base(owner.tenantId)}?include_inactive=true&limit=2`, who), 200);
    assert.deepEqual(ids(first), [open.id, rolledBack.id]);
    assert.equal(first.page.has_more, true);
    const second = assertStatus(await call(t, 'GET', `${base(owner.tenantId)}?include_inactive=true&limit=2&cursor=${first.page.next_cursor}`, who), 200);
    assert.deepEqual(ids(second), [completed.id, cancelled.id]);
    assert.equal(second.page.has_more, false);
  }
  assertError(await call(t, 'GET', `${base(owner.tenantId)}?include_inactive=maybe`, support.token), 422, 'validation_failed');
});

test('tier-change list: with only terminal requests the default list is empty and a cursor page past the open one holds no terminal rows', async () => {
  const owner = await enterpriseTenant();
  const done = await openRequest(owner.tenantId);
  assertStatus(await patch(owner.tenantId, done.id, { status: 'cancelled', notes: 'No' }), 200);
  const empty = assertStatus(await call(t, 'GET', base(owner.tenantId), owner.token), 200);
  assert.deepEqual(empty.data, []);
  assert.equal(empty.page.has_more, false);
  const open = await openRequest(owner.tenantId);
  const cursorPastOpen = assertStatus(await call(t, 'GET', `${base(owner.tenantId)}?include_inactive=true&limit=1`, owner.token), 200);
  assert.deepEqual(cursorPastOpen.data.map((r: any) => r.id), [open.id]);
  const rest = assertStatus(await call(t, 'GET', `${base(owner.tenantId)}?limit=1&cursor=${cursorPastOpen.page.next_cursor}`, owner.token), 200);
  assert.deepEqual(rest.data, []);
  assert.equal(rest.page.has_more, false);
});

test('a missing request, or one of another Tenant, is 404 tier_change_request_not_found', async () => {
  const a = await enterpriseTenant();
  const b = await enterpriseTenant();
  const request = await openRequest(a.tenantId);
  assertError(await call(t, 'GET', `${base(a.tenantId)}/tcr_01HZZZZZZZZZZZZZZZZZZZZZZZ`, support.token), 404, 'tier_change_request_not_found');
  assertError(await call(t, 'GET', `${base(b.tenantId)}/${request.id}`, support.token), 404, 'tier_change_request_not_found');
  assertError(await patch(b.tenantId, request.id, { notes: 'x' }), 404, 'tier_change_request_not_found');
});

test('PATCH needs tenants.manage; read-only fields answer 422 read_only_field and change nothing', async () => {
  const owner = await enterpriseTenant();
  const request = await openRequest(owner.tenantId);
  assertError(await patch(owner.tenantId, request.id, { status: 'cancelled', notes: 'x' }, owner.token), 403, 'forbidden');
  const error = assertError(await patch(owner.tenantId, request.id, { requested_tier: 'dedicated_region', tenant_id: 'tnt_x' }), 422, 'read_only_field');
  assert.deepEqual(error.details.fields.sort(), ['requested_tier', 'tenant_id']);
  const stamps = assertError(await patch(owner.tenantId, request.id, { started_at: future(), completed_at: future(), requested_by: 'usr_x', from_tier: 'isolated', reason: 'r' }), 422, 'read_only_field');
  assert.deepEqual(stamps.details.fields.sort(), ['completed_at', 'from_tier', 'reason', 'requested_by', 'started_at']);
  assert.equal(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${request.id}`, support.token), 200).requested_tier, 'isolated');
});

test('pending → scheduled needs scheduled_for in the future and mails the owner the window', async () => {
  const owner = await enterpriseTenant();
  const request = await openRequest(owner.tenantId);
  const missing = assertError(await patch(owner.tenantId, request.id, { status: 'scheduled' }), 422, 'validation_failed');
  assert.equal(missing.details.fields[0].path, 'scheduled_for');
  const past = assertError(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: new Date(t.clock.now().getTime() - 1000).toISOString() }), 422, 'validation_failed');
  assert.equal(past.details.fields[0].path, 'scheduled_for');
  const when = future(3 * 86_400);
  const scheduled = assertStatus(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: when }), 200);
  assert.equal(scheduled.status, 'scheduled');
  assert.equal(scheduled.scheduled_for, when);
  assert.equal((await auditRows(t, 'tenant.tier_change_request_updated', owner.tenantId)).length, 1);
  const rows = await mailsTo(t, owner.user.email, 'tier_change_scheduled');
  assert.equal(rows.length, 1);
  assert.match(rows[0].text_body, new RegExp(owner.tenantId));
  assert.match(rows[0].text_body, /isolated/);
  assert.match(rows[0].text_body, /us-east-1/);
  assert.ok(rows[0].text_body.includes(when), rows[0].text_body);
  assert.equal((await tenantRow(t, owner.tenantId)).status, 'active', 'scheduling changes nothing on the Tenant');
});

test('rescheduling (docs/decisions.md "rescheduling a scheduled request mails the owner again"): scheduled with a new future scheduled_for stays scheduled, mails the new window and writes tenant.tier_change_request_updated; a past scheduled_for is 422 and keeps the window', async () => {
  const owner = await enterpriseTenant();
  const request = await openRequest(owner.tenantId);
  assertStatus(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: future(86_400) }), 200);
  const later = future(5 * 86_400);
  const moved = assertStatus(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: later }), 200);
  assert.equal(moved.status, 'scheduled');
  assert.equal(moved.scheduled_for, later);
  const rows = await mailsTo(t, owner.user.email, 'tier_change_scheduled');
  assert.equal(rows.length, 2);
  assert.ok(rows.some((r) => r.text_body.includes(later)), 'the second mail names the new window');
  const audit = await auditRows(t, 'tenant.tier_change_request_updated', owner.tenantId);
  assert.equal(audit.length, 2);
  const past = assertError(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: new Date(t.clock.now().getTime() - 1000).toISOString() }), 422, 'validation_failed');
  assert.equal(past.details.fields[0].path, 'scheduled_for');
  assert.equal(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${request.id}`, support.token), 200).scheduled_for, later);
  assert.equal((await mailsTo(t, owner.user.email, 'tier_change_scheduled')).length, 2);
});

test("scheduling an Organization's Tenant mails every active org_admin (not a pending org_admin, not a member)", async () => {
  const adminA = await createUser(t);
  const adminB = await createUser(t);
  const member = await createUser(t);
  const pendingAdmin = await createUser(t);
  const orgId = await seedOrganization(t, [
    { userId: adminA.id, role: 'org_admin' }, { userId: adminB.id, role: 'org_admin' }, { userId: member.id, role: 'member' },
    { userId: pendingAdmin.id, role: 'org_admin', status: 'pending' },
  ]);
  const tenantId = await seedTenant(t, { ownerOrganizationId: orgId, plan: 'enterprise' });
  const request = await openRequest(tenantId, { requested_tier: 'dedicated_region', requested_region: 'eu-central-1', reason: 'r' });
  assertStatus(await patch(tenantId, request.id, { status: 'scheduled', scheduled_for: future() }), 200);
  assert.equal((await mailsTo(t, adminA.email, 'tier_change_scheduled')).length, 1);
  assert.equal((await mailsTo(t, adminB.email, 'tier_change_scheduled')).length, 1);
  assert.equal((await mailsTo(t, member.email, 'tier_change_scheduled')).length, 0);
  assert.equal((await mailsTo(t, pendingAdmin.email, 'tier_change_scheduled')).length, 0, 'a pending org_admin is not an owner');
  assert.match((await mailsTo(t, adminA.email, 'tier_change_scheduled'))[0].text_body, /eu-central-1/);
});

test("scheduling an Organization's Tenant mails its active org_admins but not one who was soft-deleted (DELETE /v1/users/{id}): the membership stays until the erasure cascade, the mail does not go", async () => {
  const admin = await caller(t, ['superadmin']);
  const adminA = await createUser(t);
  const adminB = await createUser(t);
  const orgId = await seedOrganization(t, [{ userId: adminA.id, role: 'org_admin' }, { userId: adminB.id, role: 'org_admin' }]);
  const tenantId = await seedTenant(t, { ownerOrganizationId: orgId, plan: 'enterprise' });
  assert.equal((await call(t, 'DELETE', `/v1/users/${adminB.id}`, admin.token)).statusCode, 204);
  const membership = await t.database.scoped('system').query('SELECT 1 FROM organization_members WHERE user_id = $1 AND organization_id = $2', [adminB.id, orgId]);
  assert.equal(membership.rows.length, 1, 'a soft delete leaves the membership to the erasure cascade');
  const request = await openRequest(tenantId);
  assertStatus(await patch(tenantId, request.id, { status: 'scheduled', scheduled_for: future() }), 200);
  assert.equal((await mailsTo(t, adminA.email, 'tier_change_scheduled')).length, 1);
  assert.equal((await mailsTo(t, adminB.email, 'tier_change_scheduled')).length, 0, 'no mail to a soft-deleted user');
});

test('scheduled_for must be in the future: exactly now answers 422 validation_failed and the request stays pending', async () => {
  const owner = await enterpriseTenant();
  const request = await openRequest(owner.tenantId);
  await atOneInstant(t, async () => {
    const now = assertError(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: t.clock.now().toISOString() }), 422, 'validation_failed');
    assert.equal(now.details.fields[0].path, 'scheduled_for');
  });
  assert.equal(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${request.id}`, support.token), 200).status, 'pending');
});

test('create checks in order: plan_does_not_allow_tier before invalid_tier_transition before tier_change_already_pending', async () => {
  const team = await tenantOwner(t, { plan: 'team', tier: 'isolated' });
  assertError(await create(team.tenantId, { requested_tier: 'shared', reason: 'r' }), 409, 'plan_does_not_allow_tier');
  const owner = await enterpriseTenant();
  await openRequest(owner.tenantId);
  assertError(await create(owner.tenantId, { requested_tier: 'shared', reason: 'r' }), 409, 'invalid_tier_transition');
  assertError(await create(owner.tenantId, { requested_tier: 'isolated', reason: 'r' }), 409, 'tier_change_already_pending');
});

test('a notes edit on a scheduled request, or the same scheduled_for sent again, is no new window: the owner is mailed on scheduling and rescheduling only', async () => {
  const owner = await enterpriseTenant();
  const request = await openRequest(owner.tenantId);
  const when = future();
  assertStatus(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: when }), 200);
  const noted = assertStatus(await patch(owner.tenantId, request.id, { notes: 'Customer confirmed the window' }), 200);
  assert.equal(noted.status, 'scheduled');
  assert.equal(noted.scheduled_for, when);
  assert.equal(noted.notes, 'Customer confirmed the window');
  assertStatus(await patch(owner.tenantId, request.id, { status: 'scheduled', scheduled_for: when, notes: 'Confirmed twice' }), 200);
  assert.equal((await auditRows(t, 'tenant.tier_change_request_updated', owner.tenantId)).length, 3);
  assert.equal((await mailsTo(t, owner.user.email, 'tier_change_scheduled')).length, 1);
});
