// Processor events as received: signatures, once per event id, stale and out-of-order events, events
// of another subscription or none. What they do: processor-events-plan-and-status.test.ts; input the
// service cannot store: processor-events-malformed.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, type TestApp } from '../helpers/app.js';
import { assertError, assertStatus, auditRows, buildApp, call, caller, sql, tenantOwner, tenantRow, type Caller } from '../tenancy/support.js';
import { deliver, lapsedTenantOverStarter, postEvent, processorEvent, processorEventRows, sign, subscription, unixNow } from './support.js';
import { loadMigrations } from '../../src/db/migrate.js';

let t: TestApp;
let admin: Caller;
before(async () => {
  t = await buildApp();
  admin = await caller(t, ['superadmin']);
});
after(() => t.close());

const now = () => unixNow(t);
const eventRows = (id: string) => processorEventRows(t, id);
const lapsedOverStarter = (id: string) => lapsedTenantOverStarter(t, admin, id);

test('a missing, malformed or wrong Stripe-Signature answers 400 in the error envelope and changes nothing; of several v1 entries any match is enough', async () => {
  const owner = await tenantOwner(t);
  const event = processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId }));
  const payload = JSON.stringify(event);
  const cases: [string | null, string][] = [
    [null, 'missing_signature'],
    ['', 'missing_signature'],
    ['garbage', 'malformed_signature'],
    [`t=${now()}`, 'malformed_signature'],
    [`v1=${'a'.repeat(64)}`, 'malformed_signature'],
    [sign(t, payload, { secret: 'whsec_someone_else' }), 'signature_mismatch'],
    [sign(t, payload.replace(owner.tenantId, 'tnt_other')), 'signature_mismatch'],
  ];
  for (const [header, reason] of cases) {
    const error = assertError(await postEvent(t, payload, header), 400, 'invalid_signature');
    assert.equal(error.details.reason, reason, String(header));
  }
  // A well-formed signature over no body at all is refused as a signature matter: there is nothing signed to apply.
  assert.equal(assertError(await postEvent(t, '', sign(t, '')), 400, 'invalid_signature').details.reason, 'missing_body');
  // Several v1 entries (the processor rolling its secret): accepted when any matches; entries that are
  // no signature (not hex, the wrong length) are no match, wherever they stand.
  const at = now();
  const right = /v1=([0-9a-f]+)/.exec(sign(t, payload, { timestamp: at }))![1];
  const several = (...v1: string[]) => [`t=${at}`, ...v1.map((v) => `v1=${v}`)].join(',');
  const wrong = /v1=([0-9a-f]+)/.exec(sign(t, payload, { secret: 'whsec_someone_else', timestamp: at }))![1];
  const noMatch = ['zz', right.slice(0, 63), wrong];
  assert.equal(assertError(await postEvent(t, payload, several(...noMatch)), 400, 'invalid_signature').details.reason, 'signature_mismatch');
  // A body signed over different bytes (re-serialized) is refused too.
  const reformatted = JSON.stringify(event, null, 2);
  assertError(await postEvent(t, reformatted, sign(t, payload)), 400, 'invalid_signature');
  assert.equal((await eventRows(event.id)).length, 0);
  const tenant = await tenantRow(t, owner.tenantId);
  assert.equal(tenant.plan, 'starter');
  assert.equal(tenant.subscription_status, 'none');
  assert.deepEqual(assertStatus(await postEvent(t, payload, several(...noMatch, right)), 200), { received: true }, 'any matching v1 is enough');
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'team');
});

test('a signature timestamp more than 5 minutes from the service clock, either way, answers 400 and changes nothing', async () => {
  const owner = await tenantOwner(t);
  const payload = JSON.stringify(processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId })));
  // One instant for the signature and its check, so a slow machine cannot move 301 s inside the window.
  await atOneInstant(t, async () => {
    for (const skew of [-301, 301, -3600]) {
      const error = assertError(await postEvent(t, payload, sign(t, payload, { timestamp: now() + skew })), 400, 'invalid_signature');
      assert.equal(error.details.reason, 'timestamp_outside_tolerance');
    }
  });
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'starter');
  // The service clock is the judge: an hour ahead of the wall clock, a wall-clock signature is old...
  t.clock.advance(3600);
  try {
    const wall = Math.floor(Date.now() / 1000);
    assertError(await postEvent(t, payload, sign(t, payload, { timestamp: wall })), 400, 'invalid_signature');
    // ...and one at the service clock, within the 5 minutes, is accepted.
    assertStatus(await postEvent(t, payload, sign(t, payload, { timestamp: now() - 290 })), 200);
  } finally {
    t.clock.advance(-3600);
  }
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'team');
});

test('events are applied once per event id: a duplicate (even freshly signed) answers 200 and changes nothing', async () => {
  const owner = await tenantOwner(t);
  const event = processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId }));
  const payload = JSON.stringify(event);
  assertStatus(await postEvent(t, payload, sign(t, payload)), 200);
  await sql(t, `UPDATE tenants SET plan = 'starter', subscription_status = 'none' WHERE id = $1`, [owner.tenantId]);
  assertStatus(await postEvent(t, payload, sign(t, payload, { timestamp: now() - 5 })), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'starter', 'the duplicate was not applied again');
  assert.equal((await eventRows(event.id)).length, 1);
  assert.equal((await auditRows(t, 'tenant.plan_changed', owner.tenantId)).length, 1);
});

test('a stale event (created before the last applied one) never moves the subscription backwards', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_s', customer: 'cus_s' };
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'active' }), { created: now() - 10 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' }), { created: now() - 20 }), 200);
  const older = await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'past_due' }), { created: now() - 30, id: 'evt_stale_1' });
  assertStatus(older, 200);
  const row = await tenantRow(t, owner.tenantId);
  assert.equal(row.subscription_status, 'active');
  assert.equal(row.plan, 'team');
  assert.equal((await eventRows('evt_stale_1'))[0].outcome, 'stale');
  // A newer event still applies.
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'past_due' }), { created: now() }), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'past_due');
});

test('a stale event is judged by created to the second: one created a single second before the last applied one never moves the subscription backwards', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const sub = { tenantId: owner.tenantId, id: 'sub_s1', customer: 'cus_s1' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at - 10 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'past_due' }), { created: at - 11, id: 'evt_stale_by_1s' }), 200);
  assert.equal((await eventRows('evt_stale_by_1s'))[0].outcome, 'stale');
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'active');
});

test('only an event created before the last applied one is stale: one of the same second (the processor sends many within one) still applies, and the subscription shows it', async () => {
  const owner = await tenantOwner(t);
  const at = now() - 10;
  const sub = { tenantId: owner.tenantId, id: 'sub_same_second', customer: 'cus_same_second' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, cancelAtPeriodEnd: true }), { created: at, id: 'evt_same_second_cancel' }), 200);
  assertStatus(await deliver(t, 'invoice.payment_failed', { id: 'in_same_second', object: 'invoice', customer: 'cus_same_second', subscription: 'sub_same_second' }, { created: at, id: 'evt_same_second_failed' }), 200);
  for (const id of ['evt_same_second_cancel', 'evt_same_second_failed']) assert.equal((await eventRows(id))[0].outcome, 'applied', id);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.cancel_at_period_end], ['team', 'past_due', true]);
  const changes = await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId);
  assert.deepEqual(changes.map((r) => r.after.subscription_status).sort(), ['active', 'past_due']);
});

test('a stale event never moves the subscription backwards, also behind an invoice.paid that found the subscription already active: an older subscription event arriving after it is stale', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const sub = { tenantId: owner.tenantId, id: 'sub_c', customer: 'cus_c' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at - 20 }), 200);
  const invoice = { id: 'in_c', object: 'invoice', customer: 'cus_c', subscription: 'sub_c' };
  assertStatus(await deliver(t, 'invoice.paid', invoice, { created: at - 5 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'past_due' }), { created: at - 10, id: 'evt_behind_paid' }), 200);
  assert.equal((await eventRows('evt_behind_paid'))[0].outcome, 'stale');
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'active');
});

test('checkout.session.completed only links the processor ids: a customer.subscription.created created before it but delivered after is not stale and makes the Tenant team', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_o', object: 'checkout.session', client_reference_id: owner.tenantId, customer: 'cus_o', subscription: 'sub_o' }, { created: at - 5 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: 'sub_o', customer: 'cus_o' }), { created: at - 10, id: 'evt_sub_before_checkout' }), 200);
  assert.equal((await eventRows('evt_sub_before_checkout'))[0].outcome, 'applied');
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status], ['team', 'active']);
});

test('a canceled subscription never moves backwards: invoice.payment_failed or invoice.paid arriving after the deletion leave the Tenant canceled on Starter', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const sub = { tenantId: owner.tenantId, id: 'sub_x', customer: 'cus_x' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at - 30 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' }), { created: at - 20 }), 200);
  const invoice = { id: 'in_x', object: 'invoice', customer: 'cus_x', subscription: 'sub_x' };
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice, { created: at - 10, id: 'evt_failed_after_cancel' }), 200);
  assertStatus(await deliver(t, 'invoice.paid', invoice, { created: at - 5, id: 'evt_paid_after_cancel' }), 200);
  for (const id of ['evt_failed_after_cancel', 'evt_paid_after_cancel']) assert.equal((await eventRows(id))[0].outcome, 'ignored', id);
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status], ['starter', 'canceled']);
});

test('unknown event types are acknowledged with 200 and ignored', async () => {
  const owner = await tenantOwner(t);
  const res = await deliver(t, 'charge.refunded', { id: 'ch_1', object: 'charge', metadata: { tenant_id: owner.tenantId } }, { id: 'evt_unknown_1' });
  assert.deepEqual(assertStatus(res, 200), { received: true });
  assert.equal((await eventRows('evt_unknown_1'))[0].outcome, 'ignored');
  assert.equal((await tenantRow(t, owner.tenantId)).updated_at.getTime(), (await tenantRow(t, owner.tenantId)).created_at.getTime());
  // An unknown type's object is not the service's to judge: ids it would refuse on a known type (longer than 255) are acknowledged too.
  const long = `cus_${'x'.repeat(300)}`;
  assert.deepEqual(assertStatus(await deliver(t, 'customer.updated', { id: long, object: 'customer', metadata: { tenant_id: owner.tenantId } }, { id: 'evt_unknown_2' }), 200), { received: true });
  assert.equal((await eventRows('evt_unknown_2'))[0].outcome, 'ignored');
});

test('every processor event is recorded, unknown types too, and the idempotency-prune job deletes the records 30 days after they were received (docs/decisions.md, Retention; Stripe retries an event for 3 days)', async () => {
  const owner = await tenantOwner(t);
  const id = `evt_retained_${Date.now()}`;
  assertStatus(await deliver(t, 'charge.refunded', { id: 'ch_r', object: 'charge', metadata: { tenant_id: owner.tenantId } }, { id }), 200);
  const received = (await eventRows(id))[0].received_at as Date;
  const prune = (days: number) => atOneInstant(t, () => t.deps.jobs.runNow('idempotency-prune'), new Date(received.getTime() + days * 86400_000));
  await prune(30 - 1 / 86400);
  assert.equal((await eventRows(id)).length, 1, 'kept until its 30 days are over');
  const result = await prune(30);
  assert.equal((await eventRows(id)).length, 0, 'deleted at 30 days');
  assert.ok((result.processor_events as number) >= 1, JSON.stringify(result));
});

test('an event for no known Tenant is acknowledged and ignored', async () => {
  const res = await deliver(t, 'customer.subscription.created', subscription({ tenantId: 'tnt_nobody', id: 'sub_nobody', customer: 'cus_nobody' }), { id: 'evt_nobody' });
  assertStatus(res, 200);
  assert.equal((await eventRows('evt_nobody'))[0].outcome, 'ignored');
});

test('events of a former subscription never change the Tenant\'s current one: its invoices (named under parent.subscription_details or not) and updates are ignored and do not count for the order', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const old = { tenantId: owner.tenantId, id: 'sub_former', customer: 'cus_former' };
  const current = { ...old, id: 'sub_current', start: at - 100, end: at - 100 + 2_592_000 };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(old), { created: at - 100 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...old, status: 'canceled' }), { created: at - 90 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(current), { created: at - 80 }), 200);
  const state = async () => {
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    return [view.plan, view.subscription_status];
  };
  assert.deepEqual(await state(), ['team', 'active']);
  // A failed invoice of the former subscription, named only under parent (as current processor API versions send it).
  const formerInvoice = { id: 'in_former_1', object: 'invoice', customer: 'cus_former', parent: { type: 'subscription_details', subscription_details: { subscription: 'sub_former', metadata: { tenant_id: owner.tenantId } } } };
  assertStatus(await deliver(t, 'invoice.payment_failed', formerInvoice, { created: at - 70, id: 'evt_former_failed' }), 200);
  assert.deepEqual(await state(), ['team', 'active']);
  // A later update of the former subscription (still canceled) does not lapse the current one.
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...old, status: 'canceled' }), { created: at - 60, id: 'evt_former_updated' }), 200);
  assert.deepEqual(await state(), ['team', 'active']);
  // A paid invoice of the former subscription confirms nothing about the current one...
  assertStatus(await deliver(t, 'invoice.paid', { id: 'in_former_2', object: 'invoice', customer: 'cus_former', subscription: 'sub_former' }, { created: at - 50, id: 'evt_former_paid' }), 200);
  for (const id of ['evt_former_failed', 'evt_former_updated', 'evt_former_paid']) assert.equal((await eventRows(id))[0].outcome, 'ignored', id);
  // ...so an older event of the current subscription arriving after it still applies.
  assertStatus(await deliver(t, 'invoice.payment_failed', { id: 'in_current_1', object: 'invoice', customer: 'cus_former', subscription: 'sub_current' }, { created: at - 55, id: 'evt_current_failed' }), 200);
  assert.equal((await eventRows('evt_current_failed'))[0].outcome, 'applied');
  assert.deepEqual(await state(), ['team', 'past_due']);
  // A paid invoice of the former subscription does not make the current one active.
  assertStatus(await deliver(t, 'invoice.paid', { id: 'in_former_3', object: 'invoice', customer: 'cus_former', subscription: 'sub_former' }, { created: at - 40 }), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'past_due']);
  assert.equal(view.current_period_start, new Date(current.start * 1000).toISOString(), 'the period stays the current subscription\'s');
  assert.equal(view.current_period_end, new Date(current.end * 1000).toISOString());
});

test('a second subscription never takes over a live one: when two checkouts were paid, the Tenant follows the first, and the second\'s events change nothing', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const first = { tenantId: owner.tenantId, id: 'sub_first', customer: 'cus_two' };
  const second = { ...first, id: 'sub_second' };
  const completed = (sub: string) => ({ id: `cs_${sub}`, object: 'checkout.session', client_reference_id: owner.tenantId, metadata: { tenant_id: owner.tenantId }, customer: 'cus_two', subscription: sub });
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(first), { created: at - 50 }), 200);
  assertStatus(await deliver(t, 'checkout.session.completed', completed('sub_first'), { created: at - 49 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...second, plan: 'enterprise' }), { created: at - 40, id: 'evt_second_created' }), 200);
  assertStatus(await deliver(t, 'checkout.session.completed', completed('sub_second'), { created: at - 39 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...second, status: 'canceled' }), { created: at - 30, id: 'evt_second_canceled' }), 200);
  for (const id of ['evt_second_created', 'evt_second_canceled']) assert.equal((await eventRows(id))[0].outcome, 'ignored', id);
  let row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.stripe_subscription_id], ['team', 'active', 'sub_first']);
  // The first subscription's own events still apply.
  assertStatus(await deliver(t, 'invoice.payment_failed', { id: 'in_first', object: 'invoice', customer: 'cus_two', subscription: 'sub_first' }, { created: at - 20 }), 200);
  row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status], ['team', 'past_due']);
});

test('the deletion of a second subscription never replaces a lapsed current one: the current one\'s invoice.paid still makes the Tenant active on Team', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const first = { tenantId: owner.tenantId, id: 'sub_kept_first', customer: 'cus_kept' };
  const second = { ...first, id: 'sub_kept_second' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(first), { created: at - 50 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(second), { created: at - 45 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...first, status: 'unpaid' }), { created: at - 30 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...second, status: 'canceled' }), { created: at - 20, id: 'evt_second_deleted' }), 200);
  assert.equal((await eventRows('evt_second_deleted'))[0].outcome, 'ignored');
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'unpaid');
  assertStatus(await deliver(t, 'invoice.paid', { id: 'in_kept', object: 'invoice', customer: 'cus_kept', subscription: 'sub_kept_first' }, { created: at - 10 }), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'active']);
});

test('the deletion of another subscription never replaces a canceled current one: it is ignored and does not count for the order, so a new subscription created before it but delivered after makes the Tenant active on Team', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const first = { tenantId: owner.tenantId, id: 'sub_gone_first', customer: 'cus_gone' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(first), { created: at - 60 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...first, status: 'canceled' }), { created: at - 50 }), 200);
  const other = { ...first, id: 'sub_gone_other' };
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...other, status: 'canceled' }), { created: at - 20, id: 'evt_other_gone' }), 200);
  assert.equal((await eventRows('evt_other_gone'))[0].outcome, 'ignored');
  let row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.stripe_subscription_id], ['starter', 'canceled', first.id]);
  const next = { ...first, id: 'sub_gone_next' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(next), { created: at - 30, id: 'evt_next_created' }), 200);
  assert.equal((await eventRows('evt_next_created'))[0].outcome, 'applied');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'active']);
  row = await tenantRow(t, owner.tenantId);
  assert.equal(row.stripe_subscription_id, next.id);
});

test('an invoice.payment_failed that finds the subscription already past_due counts for the order: an older invoice.paid arriving after it is stale', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const sub = { tenantId: owner.tenantId, id: 'sub_pd', customer: 'cus_pd' };
  const invoice = (id: string) => ({ id, object: 'invoice', customer: 'cus_pd', subscription: 'sub_pd' });
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at - 30 }), 200);
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice('in_pd_1'), { created: at - 20 }), 200);
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice('in_pd_2'), { created: at - 5, id: 'evt_pd_confirm' }), 200);
  assert.equal((await eventRows('evt_pd_confirm'))[0].outcome, 'applied');
  assertStatus(await deliver(t, 'invoice.paid', invoice('in_pd_1'), { created: at - 10, id: 'evt_pd_old_paid' }), 200);
  assert.equal((await eventRows('evt_pd_old_paid'))[0].outcome, 'stale');
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'past_due');
});

test('a signature timestamp exactly 5 minutes from the service clock, either way, is accepted', async () => {
  await atOneInstant(t, async () => {
    for (const skew of [-300, 300]) {
      const owner = await tenantOwner(t);
      const payload = JSON.stringify(processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: `sub_edge_${skew}`, customer: `cus_edge_${skew}` })));
      assert.deepEqual(assertStatus(await postEvent(t, payload, sign(t, payload, { timestamp: now() + skew })), 200), { received: true }, String(skew));
      assert.equal((await tenantRow(t, owner.tenantId)).plan, 'team', String(skew));
    }
  });
});

test("the checkout.session.completed of a second subscription, ignored while the Tenant's is live, links neither its subscription nor its customer: the portal stays on the live customer", async () => {
  const owner = await tenantOwner(t);
  const tid = owner.tenantId;
  const done = (sub: string, cus: string) => ({ id: `cs_${sub}`, object: 'checkout.session', client_reference_id: tid, metadata: { tenant_id: tid }, customer: cus, subscription: sub });
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: tid, id: 'sub_live_a', customer: 'cus_live_a' }), { created: now() - 20 }), 200);
  assertStatus(await deliver(t, 'checkout.session.completed', done('sub_live_a', 'cus_live_a'), { created: now() - 19 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: tid, id: 'sub_second_b', customer: 'cus_second_b' }), { created: now() - 10 }), 200);
  assertStatus(await deliver(t, 'checkout.session.completed', done('sub_second_b', 'cus_second_b'), { created: now() - 9 }), 200);
  const row = await tenantRow(t, tid);
  assert.deepEqual([row.stripe_subscription_id, row.stripe_customer_id, row.subscription_status], ['sub_live_a', 'cus_live_a', 'active']);
});

test('customer.subscription.created is the first word on a subscription: delivered after its own updated (active) and invoice.paid of the same second, as a checkout sends them, it is stale and the Tenant stays active on Team', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const sub = { tenantId: owner.tenantId, id: 'sub_same_s', customer: 'cus_same_s' };
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_same_s', object: 'checkout.session', client_reference_id: owner.tenantId, customer: 'cus_same_s', subscription: 'sub_same_s' }, { created: at }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'active' }), { created: at }), 200);
  assertStatus(await deliver(t, 'invoice.paid', { id: 'in_same_s', object: 'invoice', customer: 'cus_same_s', subscription: 'sub_same_s' }, { created: at }), 200);
  const late = await deliver(t, 'customer.subscription.created', subscription({ ...sub, status: 'incomplete' }), { created: at, id: 'evt_late_created' });
  assert.deepEqual(assertStatus(late, 200), { received: true });
  assert.equal((await eventRows('evt_late_created'))[0].outcome, 'stale');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['team', 'active', false]);
  const changes = await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId);
  assert.deepEqual(changes.map((r) => r.after.subscription_status), ['active']);
});

test('"that subscription\'s customer.subscription.created is stale once any of its events set the status", also when an invoice event changed the status last: its invoice.paid (past_due to active) keeps the subscription recorded, so the created of the same second delivered after it is stale', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const sub = { tenantId: owner.tenantId, id: 'sub_first_word_invoice', customer: 'cus_first_word_invoice' };
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'past_due' }), { created: at }), 200);
  assertStatus(await deliver(t, 'invoice.paid', { id: 'in_first_word_invoice', object: 'invoice', customer: sub.customer, subscription: sub.id }, { created: at, id: 'evt_first_word_paid' }), 200);
  assert.equal((await eventRows('evt_first_word_paid'))[0].outcome, 'applied');
  assert.equal((await tenantRow(t, owner.tenantId)).status_subscription_id, sub.id);
  const late = await deliver(t, 'customer.subscription.created', subscription({ ...sub, status: 'incomplete' }), { created: at, id: 'evt_first_word_late' });
  assertStatus(late, 200);
  assert.equal((await eventRows('evt_first_word_late'))[0].outcome, 'stale');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'active']);
  assert.deepEqual((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).map((r) => r.after.subscription_status), ['past_due', 'active']);
});

test('a canceled subscription is final: a customer.subscription.updated of the same second delivered after its deletion is stale and the Tenant stays canceled on Starter; a new subscription still replaces it', async () => {
  const { owner, apps, sub } = await lapsedOverStarter('sub_final');
  const deletedAt = now() - 30;
  const late = await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'active', cancelAtPeriodEnd: true }), { created: deletedAt, id: 'evt_update_after_delete' });
  assertStatus(late, 200);
  assert.equal((await eventRows('evt_update_after_delete'))[0].outcome, 'stale');
  let view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['starter', 'canceled', true]);
  assertError(await call(t, 'POST', '/v1/applications', admin.token, { slug: `final-${Date.now()}-${apps.length}`, name: 'F', launch_url: 'https://f.example.com', owner_user_id: owner.user.id }), 402, 'subscription_required');
  assert.deepEqual((await auditRows(t, 'tenant.plan_changed', owner.tenantId)).map((r) => r.after.plan), ['starter']);
  // The same holds for an expired first payment (incomplete_expired), and a new subscription, even of
  // the same second, is not superseded by the old one's end.
  const next = { tenantId: owner.tenantId, id: 'sub_final_2', customer: sub.customer };
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_final_2', object: 'checkout.session', client_reference_id: owner.tenantId, customer: sub.customer, subscription: 'sub_final_2' }, { created: deletedAt }), 200);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...next, status: 'incomplete' }), { created: deletedAt }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...next, status: 'incomplete_expired' }), { created: deletedAt + 1 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...next, status: 'active' }), { created: deletedAt + 1, id: 'evt_update_after_expiry' }), 200);
  assert.equal((await eventRows('evt_update_after_expiry'))[0].outcome, 'stale');
  view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['starter', 'incomplete_expired', true]);
});

test('unpaid is not final (the processor may still collect it): a customer.subscription.updated of the same subscription turning active, of the same second as its unpaid, applies and the Tenant is active on Team again', async () => {
  const owner = await tenantOwner(t);
  const at = now() - 30;
  const sub = { tenantId: owner.tenantId, id: 'sub_unpaid_then_paid', customer: 'cus_unpaid_then_paid' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at - 10 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'unpaid' }), { created: at }), 200);
  const lapsed = await tenantRow(t, owner.tenantId);
  assert.deepEqual([lapsed.plan, lapsed.subscription_status], ['starter', 'unpaid']);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'active' }), { created: at, id: 'evt_paid_after_unpaid' }), 200);
  assert.equal((await eventRows('evt_paid_after_unpaid'))[0].outcome, 'applied');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['team', 'active', false]);
  const status = await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId);
  assert.equal(status.length, 3);
  assert.equal(status.filter((r) => r.before.subscription_status === 'unpaid' && r.after.subscription_status === 'active').length, 1);
});

test('a Tenant canceled before 0029 recorded which subscription set its status is protected once upgraded (0030): a customer.subscription.updated of the same second delivered after the upgrade is stale; a Tenant whose new checkout has no event of its subscription yet stays unrecorded, and that subscription still applies', async () => {
  // The row as the last release left it (no status_subscription_id), then the migrations after 0029.
  const upgrade = async (tenantId: string) => {
    await sql(t, 'UPDATE tenants SET status_subscription_id = NULL WHERE id = $1', [tenantId]);
    await t.database.scoped('system').transaction(async (tx) => {
      for (const m of loadMigrations().filter((m) => m.version >= '0030')) await tx.exec(m.sql);
    });
  };
  const { owner, sub } = await lapsedOverStarter('sub_pre0029');
  const deletedAt = now() - 30;
  await upgrade(owner.tenantId);
  assert.equal((await tenantRow(t, owner.tenantId)).status_subscription_id, 'sub_pre0029');
  const late = await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'active' }), { created: deletedAt, id: 'evt_pre0029_late' });
  assertStatus(late, 200);
  assert.equal((await eventRows('evt_pre0029_late'))[0].outcome, 'stale');
  let view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['starter', 'canceled', true]);
  assert.deepEqual((await auditRows(t, 'tenant.plan_changed', owner.tenantId)).map((r) => r.after.plan), ['starter']);

  // Active before the upgrade, its checkout delivered after its subscription's event (as the simulator
  // sends them) and its customer.subscription.created missed: delivered after the upgrade, it is stale.
  const live = await tenantOwner(t);
  const at = now() - 10;
  const livesub = { tenantId: live.tenantId, id: 'sub_pre0029_live', customer: 'cus_pre0029_live' };
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...livesub, status: 'active' }), { created: at }), 200);
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_pre0029_live', object: 'checkout.session', client_reference_id: live.tenantId, customer: livesub.customer, subscription: livesub.id }, { created: at }), 200);
  await upgrade(live.tenantId);
  assert.equal((await tenantRow(t, live.tenantId)).status_subscription_id, 'sub_pre0029_live');
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...livesub, status: 'incomplete' }), { created: at, id: 'evt_pre0029_created' }), 200);
  assert.equal((await eventRows('evt_pre0029_created'))[0].outcome, 'stale');
  view = assertStatus(await call(t, 'GET', `/v1/tenants/${live.tenantId}/subscription`, live.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'active']);

  // Canceled, then checked out again before the upgrade: the new subscription's own events come after it.
  const second = await lapsedOverStarter('sub_pre0029_old');
  const fresh = { tenantId: second.owner.tenantId, id: 'sub_pre0029_new', customer: second.sub.customer };
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_pre0029', object: 'checkout.session', client_reference_id: fresh.tenantId, customer: fresh.customer, subscription: fresh.id }, { created: now() - 20 }), 200);
  await upgrade(fresh.tenantId);
  assert.equal((await tenantRow(t, fresh.tenantId)).status_subscription_id, null);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...fresh, status: 'active' }), { created: now() - 20, id: 'evt_pre0029_new' }), 200);
  assert.equal((await eventRows('evt_pre0029_new'))[0].outcome, 'applied');
  view = assertStatus(await call(t, 'GET', `/v1/tenants/${fresh.tenantId}/subscription`, second.owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['team', 'active', false]);
});

test('an invoice of no subscription (a one-off invoice to the same customer) never changes the subscription status: a failed one leaves it active, a paid one leaves it past_due', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_oneoff', customer: 'cus_oneoff' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 60 }), 200);
  // Both invoice shapes: `subscription: null` (older API versions) and `parent: null` (current ones).
  const oneOff = (id: string) => ({ id, object: 'invoice', customer: 'cus_oneoff', subscription: null, parent: null, billing_reason: 'manual' });
  assertStatus(await deliver(t, 'invoice.payment_failed', oneOff('in_oneoff_1'), { created: now() - 50, id: 'evt_oneoff_failed' }), 200);
  assert.equal((await eventRows('evt_oneoff_failed'))[0].outcome, 'ignored');
  assert.deepEqual([(await tenantRow(t, owner.tenantId)).subscription_status, (await tenantRow(t, owner.tenantId)).plan], ['active', 'team']);
  const invoice = { id: 'in_sub_oneoff', object: 'invoice', customer: 'cus_oneoff', parent: { subscription_details: { subscription: 'sub_oneoff', metadata: { tenant_id: owner.tenantId } } } };
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice, { created: now() - 40 }), 200);
  assertStatus(await deliver(t, 'invoice.paid', { ...oneOff('in_oneoff_2'), metadata: { tenant_id: owner.tenantId } }, { created: now() - 30, id: 'evt_oneoff_paid' }), 200);
  assert.equal((await eventRows('evt_oneoff_paid'))[0].outcome, 'ignored');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'past_due']);
  assert.deepEqual((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).map((r) => r.after.subscription_status), ['active', 'past_due']);
});

test('"An invoice that names no subscription (a one-off invoice to the same customer) is ignored": one paid while the subscription is active, or failed while it is past_due, confirms nothing and does not count for the order, so an older event of the subscription delivered after it still applies', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_oneoff_order', customer: 'cus_oneoff_order' };
  const at = now();
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at - 60 }), 200);
  const oneOff = (id: string) => ({ id, object: 'invoice', customer: sub.customer, subscription: null, parent: null, billing_reason: 'manual', metadata: { tenant_id: owner.tenantId } });
  // Paid while active: it states the status in place, but of no subscription.
  assertStatus(await deliver(t, 'invoice.paid', oneOff('in_oneoff_order_1'), { created: at - 10, id: 'evt_oneoff_order_paid' }), 200);
  assert.equal((await eventRows('evt_oneoff_order_paid'))[0].outcome, 'ignored');
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'past_due' }), { created: at - 50, id: 'evt_oneoff_order_past_due' }), 200);
  assert.equal((await eventRows('evt_oneoff_order_past_due'))[0].outcome, 'applied');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200).subscription_status, 'past_due');
  // Failed while past_due: the same.
  assertStatus(await deliver(t, 'invoice.payment_failed', oneOff('in_oneoff_order_2'), { created: at - 5, id: 'evt_oneoff_order_failed' }), 200);
  assert.equal((await eventRows('evt_oneoff_order_failed'))[0].outcome, 'ignored');
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'active' }), { created: at - 40, id: 'evt_oneoff_order_active' }), 200);
  assert.equal((await eventRows('evt_oneoff_order_active'))[0].outcome, 'applied');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'active']);
  assert.deepEqual((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).map((r) => r.after.subscription_status), ['active', 'past_due', 'active']);
});

/** The subscription `sub` created 50 s before `at`, then unpaid 40 s before it. */
async function wentUnpaid(sub: { tenantId: string; id: string; customer: string }, at: number) {
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: at - 50 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'unpaid' }), { created: at - 40 }), 200);
}
const paidInvoice = (sub: { id: string; customer: string }) => ({ id: `in_${sub.id}`, object: 'invoice', customer: sub.customer, subscription: sub.id });

test('an unpaid subscription is still the Tenant\'s: "only an active, trialing or past_due subscription replaces" it, so another subscription turning canceled or incomplete_expired, or created incomplete or paused, is ignored, and paying the unpaid one makes the Tenant active on Team', async () => {
  for (const [status, type] of [
    ['canceled', 'customer.subscription.updated'],
    ['incomplete_expired', 'customer.subscription.updated'],
    ['incomplete', 'customer.subscription.created'],
    ['paused', 'customer.subscription.created'],
  ] as const) {
    const owner = await tenantOwner(t);
    const at = now();
    const first = { tenantId: owner.tenantId, id: `sub_unpaid_${status}`, customer: `cus_unpaid_${status}` };
    const second = { ...first, id: `sub_other_${status}` };
    await wentUnpaid(first, at);
    assertStatus(await deliver(t, type, subscription({ ...second, status }), { created: at - 30, id: `evt_other_${status}` }), 200);
    assert.equal((await eventRows(`evt_other_${status}`))[0].outcome, 'ignored', status);
    let row = await tenantRow(t, owner.tenantId);
    assert.deepEqual([row.plan, row.subscription_status, row.stripe_subscription_id], ['starter', 'unpaid', first.id], status);
    assertStatus(await deliver(t, 'invoice.paid', paidInvoice(first), { created: at - 20 }), 200);
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status], ['team', 'active'], status);
    row = await tenantRow(t, owner.tenantId);
    assert.equal(row.stripe_subscription_id, first.id);
  }
});

test('"A completed checkout is the exception": a checkout completed while the Tenant is unpaid links its new subscription at once, whose own events then set the status, and a later invoice.paid of the unpaid one is another subscription\'s event, ignored', async () => {
  const owner = await tenantOwner(t);
  const at = now();
  const old = { tenantId: owner.tenantId, id: 'sub_unpaid_then_checkout', customer: 'cus_unpaid_then_checkout' };
  await wentUnpaid(old, at);
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_after_unpaid', object: 'checkout.session', client_reference_id: owner.tenantId, customer: 'cus_after_unpaid', subscription: 'sub_after_unpaid' }, { created: at - 30 }), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).stripe_subscription_id, 'sub_after_unpaid');
  assertStatus(await deliver(t, 'invoice.paid', paidInvoice(old), { created: at - 20, id: 'evt_old_paid_after_checkout' }), 200);
  assert.equal((await eventRows('evt_old_paid_after_checkout'))[0].outcome, 'ignored');
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'unpaid');
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: 'sub_after_unpaid', customer: 'cus_after_unpaid' }), { created: at - 10 }), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'active']);
});

test('an event whose metadata.tenant_id names no Tenant (a deleted one, another environment\'s) is still found by its processor subscription id', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_found_by_id', customer: 'cus_found_by_id' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, tenantId: 'tnt_nobody_here', status: 'past_due' }), { id: 'evt_found_by_id' }), 200);
  assert.equal((await eventRows('evt_found_by_id'))[0].outcome, 'applied');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'past_due']);
});

test('the timestamp judged against the 5 minutes is the one that is signed: a header naming a second t= (a fresh one beside a signed one an hour ahead) answers 400 and changes nothing', async () => {
  const owner = await tenantOwner(t);
  const payload = JSON.stringify(processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: 'sub_two_t', customer: 'cus_two_t' })));
  await atOneInstant(t, async () => {
    const ahead = sign(t, payload, { timestamp: now() + 3600 });
    // Two timestamps: which one was signed is ambiguous. A " t=" item is no timestamp (the processor's
    // parser takes keys as written), so the signed one an hour ahead is the header's only timestamp.
    const cases: [string, string][] = [
      [`t=${now()},${ahead}`, 'malformed_signature'],
      [`${ahead},t=${now()}`, 'malformed_signature'],
      [` t=${now()},${ahead}`, 'timestamp_outside_tolerance'],
    ];
    for (const [header, reason] of cases) {
      const error = assertError(await postEvent(t, payload, header), 400, 'invalid_signature');
      assert.equal(error.details.reason, reason, header);
    }
  });
  const tenant = await tenantRow(t, owner.tenantId);
  assert.equal(tenant.plan, 'starter');
  assert.equal(tenant.subscription_status, 'none');
});
