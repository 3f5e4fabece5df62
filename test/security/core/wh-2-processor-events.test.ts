// WH-2: inbound processor events arriving out of order and twice. Bad signatures (missing, wrong,
// malformed, older than 300 s), a single duplicate and a stale subscription event are proven in
// test/billing/processor-events-signatures-and-order.test.ts; this file adds invoice events that
// arrive out of order and every order of one subscription's history, each event delivered twice.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../../helpers/app.js';
import { toUnixSeconds } from '../../../src/clock.js';
import { createUser } from '../../helpers/fixtures.js';
import { buildApp, seedTenant, sql, tenantRow } from '../../tenancy/support.js';
import { deliver, subscription } from '../../billing/support.js';
import { assertStatus, figure } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildApp();
});
after(() => t.close());

const now = () => toUnixSeconds(t.clock.now());
const outcomeOf = async (id: string) => (await sql(t, 'SELECT outcome FROM processor_events WHERE id = $1', [id]))[0]?.outcome;
const stateChanges = async (tenantId: string) =>
  (await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE tenant_id = $1 AND action IN ('tenant.plan_changed', 'tenant.subscription_status_changed')`, [tenantId]))[0].n;

interface HistoryEvent {
  id: string;
  type: string;
  created: number;
  /** The subscription status this event states as of `created`. */
  implies: string;
  object: Record<string, unknown>;
}

/** A Tenant on Team whose processor subscription `sub_<n>` was created (applied) at `base`. */
async function subscribedTenant(n: string, base: number): Promise<{ tenantId: string; sub: { tenantId: string; id: string; customer: string } }> {
  const tenantId = await seedTenant(t, { ownerUserId: (await createUser(t)).id });
  const sub = { tenantId, id: `sub_wh2_${n}`, customer: `cus_wh2_${n}` };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: base, id: `evt_wh2_${n}_created` }), 200);
  assert.equal((await tenantRow(t, tenantId)).subscription_status, 'active');
  return { tenantId, sub };
}

const invoice = (sub: { tenantId: string; id: string; customer: string }, id: string) => ({
  id, object: 'invoice', customer: sub.customer, parent: { subscription_details: { subscription: sub.id, metadata: { tenant_id: sub.tenantId } } },
});

test('WH-2 out-of-order invoice events: invoice.paid (newer) received before invoice.payment_failed (older): "the status never moves backwards on a stale event"; the older one is recorded stale', async () => {
  const base = now() - 60;
  const { tenantId, sub } = await subscribedTenant('inv', base);
  assertStatus(await deliver(t, 'invoice.paid', invoice(sub, 'in_wh2_2'), { created: base + 20, id: 'evt_wh2_inv_paid' }), 200);
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice(sub, 'in_wh2_1'), { created: base + 10, id: 'evt_wh2_inv_failed' }), 200);
  const row = await tenantRow(t, tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.restricted], ['team', 'active', false]);
  assert.equal(await outcomeOf('evt_wh2_inv_paid'), 'applied', 'it confirms the active status and counts as applied for the order');
  assert.equal(await outcomeOf('evt_wh2_inv_failed'), 'stale');
  assert.equal(await stateChanges(tenantId), 2, 'only the creation changed plan and status');
  // The mirror image: a newer failure received before an older payment leaves it past_due.
  const later = await subscribedTenant('inv2', base);
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice(later.sub, 'in_wh2_3'), { created: base + 10, id: 'evt_wh2_inv2_failed' }), 200);
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice(later.sub, 'in_wh2_5'), { created: base + 30, id: 'evt_wh2_inv2_failed_again' }), 200);
  assertStatus(await deliver(t, 'invoice.paid', invoice(later.sub, 'in_wh2_4'), { created: base + 20, id: 'evt_wh2_inv2_paid' }), 200);
  assert.equal((await tenantRow(t, later.tenantId)).subscription_status, 'past_due');
  assert.equal(await outcomeOf('evt_wh2_inv2_paid'), 'stale');
});

/** Every order of `items`. */
function permutations<T>(items: T[]): T[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((x, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [x, ...rest]));
}

test('WH-2 every order of a subscription\'s history (payment_failed, paid, updated past_due, paid), each event delivered twice: "one state change per event id"; "the status never moves backwards on a stale event" (after each delivery the status is the one the newest event received states)', async () => {
  const base = now() - 600;
  let orders = 0;
  let redeliveries = 0;
  const duplicateChanges: string[] = [];
  const backwards: string[] = [];
  for (const order of permutations([0, 1, 2, 3])) {
    const n = `p${orders++}`;
    const { tenantId, sub } = await subscribedTenant(n, base);
    const history: HistoryEvent[] = [
      { id: `evt_wh2_${n}_1`, type: 'invoice.payment_failed', created: base + 10, implies: 'past_due', object: invoice(sub, `in_${n}_1`) },
      { id: `evt_wh2_${n}_2`, type: 'invoice.paid', created: base + 20, implies: 'active', object: invoice(sub, `in_${n}_1`) },
      { id: `evt_wh2_${n}_3`, type: 'customer.subscription.updated', created: base + 30, implies: 'past_due', object: subscription({ ...sub, status: 'past_due' }) },
      { id: `evt_wh2_${n}_4`, type: 'invoice.paid', created: base + 40, implies: 'active', object: invoice(sub, `in_${n}_2`) },
    ];
    let newest: HistoryEvent | null = null;
    for (const i of order) {
      const e = history[i];
      assertStatus(await deliver(t, e.type, e.object, { created: e.created, id: e.id }), 200);
      if (!newest || e.created > newest.created) newest = e;
      const status = (await tenantRow(t, tenantId)).subscription_status;
      if (status !== newest.implies) backwards.push(`order ${order.join('')}: after ${e.type}@${e.created - base} the status is ${status}, the newest event states ${newest.implies}`);
      // The processor retries: the same event again, signed afresh a few seconds later.
      const [rowBefore, changesBefore] = [await tenantRow(t, tenantId), await stateChanges(tenantId)];
      t.clock.advance(3);
      assertStatus(await deliver(t, e.type, e.object, { created: e.created, id: e.id }), 200);
      redeliveries++;
      const [rowAfter, changesAfter] = [await tenantRow(t, tenantId), await stateChanges(tenantId)];
      if (changesAfter !== changesBefore || JSON.stringify(rowAfter) !== JSON.stringify(rowBefore)) duplicateChanges.push(`order ${order.join('')}: ${e.id}`);
    }
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM processor_events WHERE tenant_id = $1', [tenantId]))[0].n, 5, 'one row per event id');
  }
  figure('WH-2', `duplicate state changes ${duplicateChanges.length} / ${redeliveries} redeliveries; backward moves ${backwards.length} over ${orders} orders (${orders * 4} out-of-order deliveries)`);
  assert.deepEqual(duplicateChanges, []);
  assert.deepEqual(backwards, []);
});
