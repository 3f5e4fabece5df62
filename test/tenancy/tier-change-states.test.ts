import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { assertTenantWritable } from '../../src/modules/tenancy/writable.js';
import { ApiError } from '../../src/errors.js';
import { assertError, assertStatus, auditRows, buildApp, call, caller, mailsTo, tenantOwner, tenantRow, type Caller } from './support.js';

let t: TestApp;
let support: Caller;
before(async () => {
  t = await buildApp();
  support = await caller(t, ['support']);
});
after(() => t.close());

const base = (tenantId: string) => `/v1/tenants/${tenantId}/tier-change-requests`;
const patch = (tenantId: string, id: string, body: Record<string, unknown>) => call(t, 'PATCH', `${base(tenantId)}/${id}`, support.token, body);
const future = (seconds = 86_400) => new Date(t.clock.now().getTime() + seconds * 1000).toISOString();

/** An Enterprise Tenant with a request brought to `status` through the API. */
async function requestIn(status: 'pending' | 'scheduled' | 'in_progress' | 'completed' | 'cancelled', body: Record<string, unknown> = { requested_tier: 'dedicated_region', requested_region: 'eu-west-1', reason: 'Residency' }) {
  const owner = await tenantOwner(t, { plan: 'enterprise' });
  const request = assertStatus(await call(t, 'POST', base(owner.tenantId), support.token, body), 201);
  const path: Record<string, Record<string, unknown>[]> = {
    pending: [],
    scheduled: [{ status: 'scheduled', scheduled_for: future() }],
    in_progress: [{ status: 'in_progress' }],
    completed: [{ status: 'in_progress' }, { status: 'completed' }],
    cancelled: [{ status: 'cancelled', notes: 'Not now' }],
  };
  for (const step of path[status]) assertStatus(await patch(owner.tenantId, request.id, step), 200);
  return { owner, id: request.id as string };
}

test('pending → in_progress and scheduled → in_progress set the Tenant status migrating and started_at', async () => {
  for (const from of ['pending', 'scheduled'] as const) {
    const { owner, id } = await requestIn(from);
    const moved = assertStatus(await patch(owner.tenantId, id, { status: 'in_progress' }), 200);
    assert.equal(moved.status, 'in_progress');
    assert.equal(moved.started_at, (await tenantRow(t, owner.tenantId)).updated_at.toISOString());
    const tenant = await tenantRow(t, owner.tenantId);
    assert.equal(tenant.status, 'migrating');
    assert.equal(tenant.tier, 'shared', 'the tier changes only on completion');
    assert.equal(assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}`, owner.token), 200).status, 'migrating');
  }
});

test('while a Tenant is migrating, writes to its data answer 503 service_unavailable with Retry-After and reads work', async () => {
  const { owner } = await requestIn('in_progress');
  const write = await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, owner.token, { plan: 'team', success_url: 'https://app.example.com/ok', cancel_url: 'https://app.example.com/no' }, { 'idempotency-key': 'migrating-1' });
  const error = assertError(write, 503, 'service_unavailable');
  assert.equal(error.details.tenant_id, owner.tenantId);
  assert.ok(Number(write.headers['retry-after']) > 0, 'Retry-After');
  await assert.rejects(assertTenantWritable(t.database.scoped('live'), owner.tenantId), (err: unknown) => err instanceof ApiError && err.code === 'service_unavailable' && !!err.headers['retry-after']);
  for (const path of ['', '/subscription', '/usage', '/tier-change-requests']) {
    assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}${path}`, owner.token), 200);
  }
  const active = await tenantOwner(t);
  await assertTenantWritable(t.database.scoped('live'), active.tenantId);
});

test('in_progress → completed: the Tenant takes the requested tier and region, status active, completed_at set; writes tenant.tier_changed', async () => {
  const { owner, id } = await requestIn('in_progress');
  const done = assertStatus(await patch(owner.tenantId, id, { status: 'completed' }), 200);
  assert.equal(done.status, 'completed');
  assert.ok(done.completed_at && done.started_at && done.completed_at >= done.started_at, 'done.completed_at && done.started_at && done.completed_at >= done.started_at');
  const tenant = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}`, owner.token), 200);
  assert.equal(tenant.tier, 'dedicated_region');
  assert.equal(tenant.region, 'eu-west-1');
  assert.equal(tenant.status, 'active');
  const changed = await auditRows(t, 'tenant.tier_changed', owner.tenantId);
  assert.equal(changed.length, 1);
  assert.deepEqual(changed[0].before, { tier: 'shared', region: 'us-east-1' });
  assert.equal(changed[0].after.tier, 'dedicated_region');
  assert.equal(changed[0].after.region, 'eu-west-1');
  // Writes work again (the GET above is a read: the write gate itself is asked).
  await assertTenantWritable(t.database.scoped('live'), owner.tenantId);
});

test('completing an isolated request puts the Tenant on isolated in us-east-1', async () => {
  const { owner } = await requestIn('completed', { requested_tier: 'isolated', reason: 'r' });
  const tenant = await tenantRow(t, owner.tenantId);
  assert.equal(tenant.tier, 'isolated');
  assert.equal(tenant.region, 'us-east-1');
});

test('in_progress → cancelled rolls back: the Tenant returns to active on its original tier and region; notes required', async () => {
  const owner = await tenantOwner(t, { plan: 'enterprise', tier: 'dedicated_region', region: 'ca-central-1' });
  const request = assertStatus(await call(t, 'POST', base(owner.tenantId), support.token, { requested_tier: 'dedicated_region', requested_region: 'eu-west-1', reason: 'r' }), 201);
  assertStatus(await patch(owner.tenantId, request.id, { status: 'in_progress' }), 200);
  const noNotes = assertError(await patch(owner.tenantId, request.id, { status: 'cancelled' }), 422, 'validation_failed');
  assert.equal(noNotes.details.fields[0].path, 'notes');
  assert.equal((await tenantRow(t, owner.tenantId)).status, 'migrating');
  const cancelled = assertStatus(await patch(owner.tenantId, request.id, { status: 'cancelled', notes: 'Copy failed; rolled back' }), 200);
  assert.equal(cancelled.status, 'cancelled');
  assert.equal(cancelled.notes, 'Copy failed; rolled back');
  const tenant = await tenantRow(t, owner.tenantId);
  assert.equal(tenant.status, 'active');
  assert.equal(tenant.tier, 'dedicated_region');
  assert.equal(tenant.region, 'ca-central-1');
  assert.equal((await auditRows(t, 'tenant.tier_changed', owner.tenantId)).length, 0);
});

test('pending → cancelled and scheduled → cancelled need notes and change nothing on the Tenant', async () => {
  for (const from of ['pending', 'scheduled'] as const) {
    const { owner, id } = await requestIn(from);
    assertError(await patch(owner.tenantId, id, { status: 'cancelled', notes: '  ' }), 422, 'validation_failed');
    const before = await tenantRow(t, owner.tenantId);
    assertStatus(await patch(owner.tenantId, id, { status: 'cancelled', notes: 'Customer withdrew' }), 200);
    const after = await tenantRow(t, owner.tenantId);
    assert.deepEqual([after.status, after.tier, after.region, after.updated_at.toISOString()], [before.status, before.tier, before.region, before.updated_at.toISOString()]);
  }
});

test('other moves answer 409 invalid_request_transition and change nothing: every move the request table does not list, completed and cancelled being terminal', async () => {
  const moves: [Parameters<typeof requestIn>[0], Record<string, unknown>][] = [
    ['pending', { status: 'completed' }],
    ['scheduled', { status: 'pending' }],
    ['scheduled', { status: 'completed' }],
    ['in_progress', { status: 'scheduled', scheduled_for: future() }],
    ['in_progress', { status: 'pending' }],
    ['completed', { status: 'cancelled', notes: 'x' }],
    ['completed', { status: 'in_progress' }],
    ['completed', { status: 'pending' }],
    ['completed', { status: 'scheduled', scheduled_for: future() }],
    ['completed', { status: 'completed' }],
    ['completed', { notes: 'late note' }],
    ['cancelled', { status: 'pending' }],
    ['cancelled', { status: 'scheduled', scheduled_for: future() }],
    ['cancelled', { status: 'in_progress' }],
    ['cancelled', { status: 'completed' }],
    ['cancelled', { status: 'cancelled', notes: 'again' }],
  ];
  for (const [from, body] of moves) {
    const { owner, id } = await requestIn(from);
    const read = async () => assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${id}`, support.token), 200);
    const tenant = async () => {
      const row = await tenantRow(t, owner.tenantId);
      return [row.status, row.tier, row.region];
    };
    const [requestBefore, tenantBefore] = [await read(), await tenant()];
    const auditsBefore = (await auditRows(t, 'tenant.tier_change_request_updated', owner.tenantId)).length;
    const mailsBefore = (await mailsTo(t, owner.user.email, 'tier_change_scheduled')).length;
    const error = assertError(await patch(owner.tenantId, id, body), 409, 'invalid_request_transition');
    assert.equal(error.details.from, from);
    const label = `${from} ${JSON.stringify(body)}`;
    assert.deepEqual(await read(), requestBefore, `${label}: the request is unchanged`);
    assert.deepEqual(await tenant(), tenantBefore, `${label}: the Tenant is unchanged`);
    assert.equal((await auditRows(t, 'tenant.tier_change_request_updated', owner.tenantId)).length, auditsBefore, `${label}: no audit row`);
    assert.equal((await mailsTo(t, owner.user.email, 'tier_change_scheduled')).length, mailsBefore, `${label}: no mail`);
  }
});

test('every change writes tenant.tier_change_request_updated with the request before and after', async () => {
  const { owner, id } = await requestIn('pending');
  assertStatus(await patch(owner.tenantId, id, { notes: 'Waiting on the customer' }), 200);
  assertStatus(await patch(owner.tenantId, id, { status: 'scheduled', scheduled_for: future() }), 200);
  assertStatus(await patch(owner.tenantId, id, { scheduled_for: future(2 * 86_400) }), 200);
  assertStatus(await patch(owner.tenantId, id, { status: 'in_progress' }), 200);
  assertStatus(await patch(owner.tenantId, id, { status: 'completed' }), 200);
  const rows = await auditRows(t, 'tenant.tier_change_request_updated', owner.tenantId);
  assert.deepEqual(rows.map((r) => r.after.status), ['pending', 'scheduled', 'scheduled', 'in_progress', 'completed']);
  assert.deepEqual(rows.map((r) => r.before.status), ['pending', 'pending', 'scheduled', 'scheduled', 'in_progress']);
  assert.ok(rows.every((r) => r.target_id === id && r.actor_id === support.user.id), 'rows.every((r) => r.target_id === id && r.actor_id === support.user.id)');
  // Rescheduling mails the new window too.
  assert.equal((await mailsTo(t, owner.user.email, 'tier_change_scheduled')).length, 2);
  // A PATCH that changes nothing writes nothing.
  const idle = await requestIn('pending');
  assertStatus(await patch(idle.owner.tenantId, idle.id, { status: 'pending' }), 200);
  assert.equal((await auditRows(t, 'tenant.tier_change_request_updated', idle.owner.tenantId)).length, 0);
});

test('scheduled_for is only for scheduling: with another status it answers 422 validation_failed', async () => {
  const { owner, id } = await requestIn('pending');
  const error = assertError(await patch(owner.tenantId, id, { status: 'in_progress', scheduled_for: future() }), 422, 'validation_failed');
  assert.equal(error.details.fields[0].path, 'scheduled_for');
  assert.equal(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${id}`, support.token), 200).status, 'pending');
});

test('cancelling needs notes, sent with it or already on the request: a request with notes cancels without new ones', async () => {
  const { owner, id } = await requestIn('pending');
  assertStatus(await patch(owner.tenantId, id, { notes: 'Customer asked to wait' }), 200);
  const cancelled = assertStatus(await patch(owner.tenantId, id, { status: 'cancelled' }), 200);
  assert.equal(cancelled.status, 'cancelled');
  assert.equal(cancelled.notes, 'Customer asked to wait');
});

test('a move not in the request table is 409 invalid_request_transition also without notes (completed → cancelled), not 422 for missing notes; the request stays completed', async () => {
  const { owner, id } = await requestIn('completed');
  const error = assertError(await patch(owner.tenantId, id, { status: 'cancelled' }), 409, 'invalid_request_transition');
  assert.deepEqual(error.details, { from: 'completed', to: 'cancelled' });
  assert.equal(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${id}`, support.token), 200).status, 'completed');
  assert.equal((await tenantRow(t, owner.tenantId)).tier, 'dedicated_region');
  assert.equal((await auditRows(t, 'tenant.tier_change_request_updated', owner.tenantId)).length, 2);
});

test('started_at is set by the move to in_progress and kept by every later change (a notes edit, the completion); completed_at is set at completion', async () => {
  await withStoppedClock(t, async () => {
    const { owner, id } = await requestIn('pending');
    t.clock.advance(60);
    const startedAt = t.clock.now().toISOString();
    const started = assertStatus(await patch(owner.tenantId, id, { status: 'in_progress' }), 200);
    assert.equal(started.started_at, startedAt);
    assert.equal(started.completed_at, null);
    t.clock.advance(60);
    const noted = assertStatus(await patch(owner.tenantId, id, { notes: 'Copy at 40%' }), 200);
    assert.equal(noted.started_at, startedAt, 'a notes edit keeps started_at');
    t.clock.advance(60);
    const completedAt = t.clock.now().toISOString();
    const done = assertStatus(await patch(owner.tenantId, id, { status: 'completed' }), 200);
    assert.equal(done.started_at, startedAt, 'the completion keeps started_at');
    assert.equal(done.completed_at, completedAt);
  });
});

test('"completed_at only by the completion (a cancelled request keeps it null)" (docs/decisions.md): a request cancelled while pending, scheduled or in progress reads completed_at null; one cancelled in progress keeps its started_at', async () => {
  for (const from of ['pending', 'scheduled', 'in_progress'] as const) {
    const { owner, id } = await requestIn(from);
    const cancelled = assertStatus(await patch(owner.tenantId, id, { status: 'cancelled', notes: 'Withdrawn' }), 200);
    assert.equal(cancelled.status, 'cancelled');
    assert.equal(cancelled.completed_at, null, `cancelled from ${from}`);
    assert.equal(cancelled.started_at === null, from !== 'in_progress', `started_at after cancelling from ${from}`);
    assert.equal(assertStatus(await call(t, 'GET', `${base(owner.tenantId)}/${id}`, support.token), 200).completed_at, null);
  }
});

test('in_progress → cancelled rolls back the tier too: a shared Tenant whose move to isolated is cancelled is active on shared in us-east-1 again', async () => {
  const { owner, id } = await requestIn('in_progress', { requested_tier: 'isolated', reason: 'Isolation' });
  assertStatus(await patch(owner.tenantId, id, { status: 'cancelled', notes: 'Rolled back' }), 200);
  const tenant = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}`, owner.token), 200);
  assert.deepEqual([tenant.status, tenant.tier, tenant.region], ['active', 'shared', 'us-east-1']);
  assert.equal((await auditRows(t, 'tenant.tier_changed', owner.tenantId)).length, 0);
});
