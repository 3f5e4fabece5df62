// What processor events do to a Tenant: plan, subscription status, period, add-ons, restriction and
// seat-sync. Signatures and the order of events: processor-events-signatures-and-order.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { type TestApp } from '../helpers/app.js';
import { assertError, assertStatus, auditRows, buildApp, call, caller, createApplication, seedOrganization, sql, tenantOwner, tenantRow, type Caller } from '../tenancy/support.js';
import { deliver, lapsedTenantOverStarter, processorEventRows, subscription, unixNow } from './support.js';
import { runSeatSync } from '../../src/modules/billing/jobs.js';
import { accessEvents, addById, effective, newApp, orgGrantApi, orgWithMembers, person } from '../organizations/support.js';

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

test('customer.subscription.created with lookup_key team makes the Tenant team and active, with its period; audited as tenant.plan_changed and tenant.subscription_status_changed by system', async () => {
  const owner = await tenantOwner(t);
  const start = now() - 60;
  const res = await deliver(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: 'sub_a', customer: 'cus_a', start, end: start + 2_592_000 }));
  assert.deepEqual(assertStatus(res, 200), { received: true });
  const sub = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.equal(sub.plan, 'team');
  assert.equal(sub.subscription_status, 'active');
  assert.equal(sub.current_period_start, new Date(start * 1000).toISOString());
  assert.equal(sub.current_period_end, new Date((start + 2_592_000) * 1000).toISOString());
  assert.equal(sub.currency, 'usd');
  const row = await tenantRow(t, owner.tenantId);
  assert.equal(row.stripe_customer_id, 'cus_a');
  assert.equal(row.stripe_subscription_id, 'sub_a');
  const plan = await auditRows(t, 'tenant.plan_changed', owner.tenantId);
  assert.equal(plan.length, 1);
  assert.equal(plan[0].actor_type, 'system');
  assert.deepEqual([plan[0].before, plan[0].after], [{ plan: 'starter' }, { plan: 'team' }]);
  const status = await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId);
  assert.equal(status.length, 1);
  assert.equal(status[0].before.subscription_status, 'none');
  assert.equal(status[0].after.subscription_status, 'active');
});

test('a lapsed subscription drops the Tenant to Starter and restricts it while its usage exceeds Starter; active again lifts it', async () => {
  const { owner, sub } = await lapsedOverStarter('sub_l');
  let view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['starter', 'canceled', true]);
  assert.equal(view.current_period_start, null, 'Starter has no period');
  assert.equal(view.current_period_end, null);
  const lapse = (await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).at(-1)!;
  assert.deepEqual(lapse.after, { subscription_status: 'canceled', restricted: true });
  // A restricted Tenant cannot create (the one plan check answers 402).
  assertError(await call(t, 'POST', '/v1/applications', admin.token, { slug: `r-${Date.now()}`, name: 'R', launch_url: 'https://r.example.com', owner_user_id: owner.user.id }), 402, 'subscription_required');
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...sub, id: 'sub_l2' }), { created: now() - 10 }), 200);
  view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['team', 'active', false]);
  // The audit rows state restricted before and after each transition.
  assert.deepEqual(lapse.before, { subscription_status: 'active', restricted: false });
  const lift = (await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).at(-1)!;
  assert.deepEqual([lift.before, lift.after], [{ subscription_status: 'canceled', restricted: true }, { subscription_status: 'active', restricted: false }]);
});

for (const status of ['incomplete', 'paused']) {
  test(`restricted stays true once a subscription lapsed while usage exceeds Starter: a new ${status} subscription keeps it (402 subscription_required for a new seat, seat-sync too) until it is active on Team`, async () => {
    const { owner, apps, sub } = await lapsedOverStarter(`sub_r_${status}`);
    assert.equal((await tenantRow(t, owner.tenantId)).restricted, true);
    const next = { ...sub, id: `sub_r_${status}_2` };
    assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...next, status }), { created: now() - 20 }), 200);
    let view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['starter', status, true]);
    const audited = (await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).filter((r) => r.after.subscription_status === status);
    assert.deepEqual(audited.map((r) => r.after), [{ subscription_status: status, restricted: true }]);
    assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/usage`, owner.token), 200).fits_plans, ['team', 'enterprise']);
    // A new seat and a creation on the restricted Tenant are refused, and nothing is written.
    const seatless = await caller(t);
    const grant = () => call(t, 'POST', `/v1/users/${seatless.user.id}/entitlements`, admin.token, { application_id: apps[0].appId, source: 'admin_grant' }, { 'idempotency-key': `k-${status}-${now()}-${Math.random()}` });
    assertError(await grant(), 402, 'subscription_required');
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [seatless.user.id]))[0].n, 0);
    assertError(await call(t, 'POST', '/v1/applications', admin.token, { slug: `r-${status}-${Date.now()}`, name: 'R', launch_url: 'https://r.example.com', owner_user_id: owner.user.id }), 402, 'subscription_required');
    // seat-sync keeps it while usage still exceeds Starter.
    await t.deps.jobs.runNow('seat-sync');
    assert.equal((await tenantRow(t, owner.tenantId)).restricted, true);
    // Paid: the plan becomes Team, which the usage fits, and the restriction lifts.
    assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...next, status: 'active' }), { created: now() - 10 }), 200);
    view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['team', 'active', false]);
    assertStatus(await grant(), 201);
  });
}

/**
 * Runs seat-sync with `race` run once just before it writes the seat count of `tenantId` (after it
 * read the Tenant and counted its usage); returns whether `race` ran.
 */
async function seatSyncRacedBy(tenantId: string, race: () => Promise<void>): Promise<boolean> {
  const system = t.deps.database.scoped('system');
  let raced = false;
  const racing = {
    ...system,
    query: async (text: string, params?: unknown[]) => {
      if (!raced && text.includes('UPDATE tenants SET seats_synced') && params?.[0] === tenantId) {
        raced = true;
        await race();
      }
      return system.query(text, params);
    },
  } as typeof system;
  const database = { ...t.deps.database, scoped: (scope: Parameters<typeof t.deps.database.scoped>[0]) => (scope === 'system' ? racing : t.deps.database.scoped(scope)) };
  await runSeatSync({ ...t.deps, database });
  return raced;
}

test('seat-sync never undoes a processor event it raced: a Tenant paid (active on Team) while seat-sync was counting its lapsed usage stays unrestricted', async () => {
  const { owner, sub } = await lapsedOverStarter('sub_race');
  assert.equal((await tenantRow(t, owner.tenantId)).restricted, true, 'precondition: lapsed with usage over Starter');
  // The payment lands after seat-sync read the Tenant and counted its usage, before it writes.
  const raced = await seatSyncRacedBy(owner.tenantId, async () => {
    assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...sub, id: 'sub_race_2' }), { created: now() - 10 }), 200);
  });
  assert.ok(raced, 'the payment was delivered between the read and the write');
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.restricted], ['team', 'active', false]);
  assert.ok(row.seats_last_synced_at, 'the seat count itself is still recorded');
});

test('seat-sync: a Tenant whose seat count cannot be written does not hold back the Tenants after it (in id order): they are synced in the same run, and the run then fails naming it', async () => {
  const failing = await tenantOwner(t);
  const after = await tenantOwner(t);
  assert.ok(failing.tenantId < after.tenantId, 'precondition: the failing Tenant comes first');
  const system = t.deps.database.scoped('system');
  const faulty = {
    ...system,
    query: async (text: string, params?: unknown[]) => {
      if (text.includes('UPDATE tenants SET seats_synced') && params?.[0] === failing.tenantId) throw new Error('a data fault');
      return system.query(text, params);
    },
  } as typeof system;
  const database = { ...t.deps.database, scoped: (scope: Parameters<typeof t.deps.database.scoped>[0]) => (scope === 'system' ? faulty : t.deps.database.scoped(scope)) };
  await assert.rejects(runSeatSync({ ...t.deps, database }), (err: Error) => err.message.includes(failing.tenantId) && err.message.includes('a data fault'));
  assert.equal((await tenantRow(t, failing.tenantId)).seats_last_synced_at, null);
  assert.ok((await tenantRow(t, after.tenantId)).seats_last_synced_at, 'the Tenant after it is synced in the same run');
});

test('seat-sync writes restricted "only if the subscription status and flag it read are still the row\'s": a processor event that lifted the restriction of a lapsed Tenant (its usage found to fit Starter) while seat-sync was counting keeps it lifted, the status unchanged', async () => {
  const owner = await tenantOwner(t);
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  // Two live webhooks: more than Starter's one.
  for (const n of [1, 2]) {
    await sql(
      t,
      `INSERT INTO webhook_subscriptions (id, scope, application_id, url, events, status, signing_secret, api_version, test_mode, created_at, updated_at)
       VALUES ($1, $2, $2, 'https://hooks.example.com/x', ARRAY['*'], 'healthy', 'whsec_x', '2026-01-01', false, now(), now())`,
      [`whk_flag_race_${n}_${appId}`, appId],
    );
  }
  const sub = { tenantId: owner.tenantId, id: 'sub_flag_race', customer: 'cus_flag_race' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 30 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' }), { created: now() - 20 }), 200);
  assert.deepEqual([(await tenantRow(t, owner.tenantId)).subscription_status, (await tenantRow(t, owner.tenantId)).restricted], ['canceled', true], 'precondition: lapsed over Starter');
  // After seat-sync counted the two webhooks, one is deleted and a processor event applied to the
  // Tenant (a new checkout linking its ids, the status still canceled) finds the usage fits Starter.
  const raced = await seatSyncRacedBy(owner.tenantId, async () => {
    assertStatus(await call(t, 'DELETE', `/v1/webhooks/whk_flag_race_2_${appId}`, admin.token), 204);
    assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_flag_race', object: 'checkout.session', client_reference_id: owner.tenantId, customer: sub.customer, subscription: 'sub_flag_race_2' }, { created: now() - 10 }), 200);
    const lifted = await tenantRow(t, owner.tenantId);
    assert.deepEqual([lifted.subscription_status, lifted.restricted], ['canceled', false], 'the event lifted the restriction');
  });
  assert.ok(raced, 'the event was delivered between the read and the write');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['starter', 'canceled', false]);
});

test('a lapse while usage fits Starter leaves the Tenant unrestricted', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_f', customer: 'cus_f' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'unpaid' })), 200);
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.restricted], ['starter', 'unpaid', false]);
});

test('a lapse counts usage in the Tenant\'s own mode: a live Tenant whose live usage fits Starter is not restricted by test-mode webhooks, and seat-sync agrees', async () => {
  const owner = await tenantOwner(t);
  const { appId } = await createApplication(t, admin, { owner_user_id: owner.user.id });
  for (const testMode of [false, true]) {
    await sql(
      t,
      `INSERT INTO webhook_subscriptions (id, scope, application_id, url, events, status, signing_secret, api_version, test_mode, created_at, updated_at)
       VALUES ($1, $2, $2, 'https://hooks.example.com/x', ARRAY['*'], 'healthy', 'whsec_x', '2026-01-01', $3, now(), now())`,
      [`whk_mode_${testMode}_${appId}`, appId, testMode],
    );
  }
  assert.ok(assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/usage`, owner.token), 200).fits_plans.includes('starter'), 'one live webhook fits Starter');
  const sub = { tenantId: owner.tenantId, id: 'sub_mode', customer: 'cus_mode' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' })), 200);
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.restricted], ['starter', 'canceled', false]);
  await t.deps.jobs.runNow('seat-sync');
  assert.equal((await tenantRow(t, owner.tenantId)).restricted, false);
});

test('invoice.payment_failed moves an active subscription to past_due; invoice.paid brings it back to active', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_i', customer: 'cus_i' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  const invoice = { id: 'in_1', object: 'invoice', customer: 'cus_i', parent: { subscription_details: { subscription: 'sub_i', metadata: { tenant_id: owner.tenantId } } } };
  assertStatus(await deliver(t, 'invoice.payment_failed', invoice, { created: now() - 5 }), 200);
  assert.deepEqual([(await tenantRow(t, owner.tenantId)).subscription_status, (await tenantRow(t, owner.tenantId)).plan], ['past_due', 'team']);
  // Found by the processor subscription id alone.
  assertStatus(await deliver(t, 'invoice.paid', { id: 'in_2', object: 'invoice', customer: 'cus_i', subscription: 'sub_i' }), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'active');
});

test('checkout.session.completed links the processor customer by client_reference_id; an Enterprise subscription brings its add-ons', async () => {
  const owner = await tenantOwner(t);
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_1', object: 'checkout.session', client_reference_id: owner.tenantId, customer: 'cus_e', subscription: 'sub_e' }, { created: now() - 10 }), 200);
  const linked = await tenantRow(t, owner.tenantId);
  assert.deepEqual([linked.stripe_customer_id, linked.stripe_subscription_id, linked.plan], ['cus_e', 'sub_e', 'starter']);
  const ent = subscription({ tenantId: null, id: 'sub_e', customer: 'cus_e', plan: 'enterprise', addOns: [{ code: 'dedicated_region_tenancy', unitAmount: 150000 }] });
  assertStatus(await deliver(t, 'customer.subscription.updated', ent), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.equal(view.plan, 'enterprise');
  assert.deepEqual(view.add_ons, [{ code: 'dedicated_region_tenancy', amount: 150000 }]);
  assert.equal(view.seats.included, null);
});

test('Enterprise is sales-led: a subscription the processor starts for the Tenant\'s customer without metadata.tenant_id (a new subscription id) is found by the customer and makes the Tenant enterprise, with its add-ons', async () => {
  const owner = await tenantOwner(t);
  const old = { tenantId: owner.tenantId, id: 'sub_before_sales', customer: 'cus_sales' };
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_before_sales', object: 'checkout.session', client_reference_id: owner.tenantId, customer: 'cus_sales', subscription: 'sub_before_sales' }, { created: now() - 30 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(old), { created: now() - 30 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...old, status: 'canceled' }), { created: now() - 20 }), 200);
  const sales = subscription({ tenantId: null, id: 'sub_sales', customer: 'cus_sales', plan: 'enterprise', addOns: [{ code: 'isolated_tenancy', unitAmount: 90000 }] });
  assertStatus(await deliver(t, 'customer.subscription.created', sales, { created: now() - 10, id: 'evt_sales_created' }), 200);
  assert.equal((await eventRows('evt_sales_created'))[0].outcome, 'applied');
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.add_ons], ['enterprise', 'active', [{ code: 'isolated_tenancy', amount: 90000 }]]);
  const changes = await auditRows(t, 'tenant.plan_changed', owner.tenantId);
  assert.deepEqual(changes.map((r) => r.after.plan), ['team', 'starter', 'enterprise']);
});

test('the subscription shows currency as a lowercase code, whatever case the processor sends', async () => {
  const owner = await tenantOwner(t);
  assertStatus(await deliver(t, 'customer.subscription.created', { ...subscription({ tenantId: owner.tenantId, id: 'sub_upper_ccy', customer: 'cus_upper_ccy' }), currency: 'EUR' }), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.currency], ['team', 'eur']);
});

test('a subscription event that states no currency leaves the currency shown as it was (absent fields keep their stored values)', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_keep_ccy', customer: 'cus_keep_ccy' };
  assertStatus(await deliver(t, 'customer.subscription.created', { ...subscription(sub), currency: 'eur' }, { created: now() - 10 }), 200);
  const bare = subscription({ ...sub, cancelAtPeriodEnd: true });
  delete (bare as Record<string, unknown>).currency;
  assertStatus(await deliver(t, 'customer.subscription.updated', bare), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.cancel_at_period_end, view.currency], ['team', true, 'eur']);
});

test('the subscription\'s period is its plan\'s: an Enterprise subscription listing an add-on item (of another period) before its plan item shows the plan item\'s current_period_start and current_period_end', async () => {
  const owner = await tenantOwner(t);
  const start = 1_760_000_000;
  const sub = subscription({ tenantId: owner.tenantId, id: 'sub_plan_period', customer: 'cus_plan_period', plan: 'enterprise', start, addOns: [{ code: 'isolated_tenancy', unitAmount: 50000 }] }) as any;
  sub.items.data.reverse();
  sub.items.data[0].current_period_start = start + 86_400;
  sub.items.data[0].current_period_end = start + 10 * 86_400;
  assertStatus(await deliver(t, 'customer.subscription.created', sub), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.current_period_start, view.current_period_end], ['enterprise', new Date(start * 1000).toISOString(), new Date((start + 30 * 86_400) * 1000).toISOString()]);
  assert.deepEqual(view.add_ons, [{ code: 'isolated_tenancy', amount: 50000 }]);
});

for (const status of ['canceled', 'unpaid', 'incomplete_expired']) {
  test(`canceled, unpaid and incomplete_expired drop to Starter: a subscription turning ${status} while usage exceeds Starter makes the Tenant starter and restricted (402 subscription_required for a creation)`, async () => {
    const owner = await tenantOwner(t);
    await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [owner.tenantId]);
    for (let i = 0; i < 2; i++) await createApplication(t, admin, { owner_user_id: owner.user.id });
    const sub = { tenantId: owner.tenantId, id: `sub_lapse_${status}`, customer: `cus_lapse_${status}` };
    assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
    assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status })), 200);
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['starter', status, true]);
    const changed = await auditRows(t, 'tenant.plan_changed', owner.tenantId);
    assert.deepEqual(changed.at(-1)!.after, { plan: 'starter' });
    assertError(await call(t, 'POST', '/v1/applications', admin.token, { slug: `l-${status.replace('_', '-')}-${Date.now()}`, name: 'L', launch_url: 'https://l.example.com', owner_user_id: owner.user.id }), 402, 'subscription_required');
  });
}

test('active, trialing and past_due take the plan from the price\'s lookup_key: a subscription created in any of them makes a Starter Tenant team', async () => {
  for (const status of ['active', 'trialing', 'past_due']) {
    const owner = await tenantOwner(t);
    assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: `sub_ent_${status}`, customer: `cus_ent_${status}`, status })), 200);
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status], ['team', status], status);
  }
});

test('an Enterprise subscription lists its add-ons, isolated_tenancy and dedicated_region_tenancy, with their amounts in cents', async () => {
  const owner = await tenantOwner(t);
  const addOns = [{ code: 'isolated_tenancy', unitAmount: 50000 }, { code: 'dedicated_region_tenancy', unitAmount: 150000 }];
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: 'sub_addons', customer: 'cus_addons', plan: 'enterprise', addOns })), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.equal(view.plan, 'enterprise');
  assert.deepEqual(view.add_ons, [{ code: 'isolated_tenancy', amount: 50000 }, { code: 'dedicated_region_tenancy', amount: 150000 }]);
});

test('invoice.payment_failed moves a trialing subscription to past_due, keeping its plan', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_trial', customer: 'cus_trial', status: 'trialing' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  assertStatus(await deliver(t, 'invoice.payment_failed', { id: 'in_trial', object: 'invoice', customer: 'cus_trial', subscription: 'sub_trial' }), 200);
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status], ['team', 'past_due']);
  const status = (await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).at(-1)!;
  assert.deepEqual([status.before.subscription_status, status.after.subscription_status], ['trialing', 'past_due']);
});

test('invoice.paid moves an unpaid or incomplete subscription to active, and the Tenant takes the plan of its price\'s lookup_key', async () => {
  for (const status of ['unpaid', 'incomplete']) {
    const owner = await tenantOwner(t);
    const sub = { tenantId: owner.tenantId, id: `sub_paid_${status}`, customer: `cus_paid_${status}` };
    if (status === 'unpaid') assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 20 }), 200);
    assertStatus(await deliver(t, status === 'unpaid' ? 'customer.subscription.updated' : 'customer.subscription.created', subscription({ ...sub, status }), { created: now() - 10 }), 200);
    assert.deepEqual([(await tenantRow(t, owner.tenantId)).plan, (await tenantRow(t, owner.tenantId)).subscription_status], ['starter', status]);
    assertStatus(await deliver(t, 'invoice.paid', { id: `in_paid_${status}`, object: 'invoice', customer: sub.customer, subscription: sub.id }), 200);
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status], ['team', 'active'], status);
  }
});

test('an invoice event moves only the statuses docs/decisions.md names ("invoice.payment_failed moves active/trialing to past_due, invoice.paid moves past_due/unpaid/incomplete to active"): the paid $0 invoice of a trial leaves it trialing, a paused subscription stays paused either way, and a failed invoice leaves an incomplete one incomplete', async () => {
  const cases: [string, string][] = [['trialing', 'invoice.paid'], ['paused', 'invoice.paid'], ['paused', 'invoice.payment_failed'], ['incomplete', 'invoice.payment_failed']];
  for (const [status, type] of cases) {
    const label = `${type} while ${status}`;
    const owner = await tenantOwner(t);
    const sub = { tenantId: owner.tenantId, id: `sub_${status}_${type}`, customer: `cus_${status}_${type}` };
    if (status === 'paused') assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 20 }), 200);
    assertStatus(await deliver(t, status === 'paused' ? 'customer.subscription.updated' : 'customer.subscription.created', subscription({ ...sub, status }), { created: now() - 10 }), 200);
    const before = await tenantRow(t, owner.tenantId);
    assert.equal(before.subscription_status, status, label);
    const audited = (await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).length;
    const invoice = { id: `in_${status}_${type}`, object: 'invoice', customer: sub.customer, subscription: sub.id };
    assert.deepEqual(assertStatus(await deliver(t, type, invoice), 200), { received: true }, label);
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status], [before.plan, status], label);
    assert.equal((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).length, audited, `${label}: no status change audited`);
  }
});

test('Part B: current_period_start and current_period_end are "both null for Starter", also while a Starter Tenant\'s new subscription is incomplete (its period stored but not paid for); paid, the Tenant is Team and shows the period', async () => {
  const owner = await tenantOwner(t);
  const start = now() - 100;
  const sub = { tenantId: owner.tenantId, id: 'sub_unpaid_period', customer: 'cus_unpaid_period', start, end: start + 2_592_000 };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ ...sub, status: 'incomplete' }), { created: now() - 10 }), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).current_period_end.getTime(), (start + 2_592_000) * 1000, 'the period is stored');
  let view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.current_period_start, view.current_period_end], ['starter', 'incomplete', null, null]);
  assertStatus(await deliver(t, 'invoice.paid', { id: 'in_unpaid_period', object: 'invoice', customer: sub.customer, subscription: sub.id }), 200);
  view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual(
    [view.plan, view.subscription_status, view.current_period_start, view.current_period_end],
    ['team', 'active', new Date(start * 1000).toISOString(), new Date((start + 2_592_000) * 1000).toISOString()],
  );
});

test('an invoice event changes only the subscription status: the plan, period and Enterprise add-ons stay', async () => {
  const owner = await tenantOwner(t);
  const start = now() - 100;
  const sub = { tenantId: owner.tenantId, id: 'sub_keep', customer: 'cus_keep', plan: 'enterprise', start, end: start + 2_592_000, addOns: [{ code: 'isolated_tenancy', unitAmount: 50000 }] };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  const before = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assertStatus(await deliver(t, 'invoice.payment_failed', { id: 'in_keep', object: 'invoice', customer: 'cus_keep', subscription: 'sub_keep' }), 200);
  const after = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.equal(after.subscription_status, 'past_due');
  assert.deepEqual({ ...after, subscription_status: before.subscription_status }, before);
  assert.equal(after.current_period_end, new Date((start + 2_592_000) * 1000).toISOString());
  assert.deepEqual(after.add_ons, [{ code: 'isolated_tenancy', amount: 50000 }]);
});

test('a lapse leaves the Tenant on Starter, which has no processor subscription: no period, no cancel_at_period_end and no add-ons', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_end', customer: 'cus_end', plan: 'enterprise', cancelAtPeriodEnd: true, addOns: [{ code: 'dedicated_region_tenancy', unitAmount: 150000 }] };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  const live = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([live.plan, live.cancel_at_period_end, live.add_ons.length], ['enterprise', true, 1]);
  // The subscription ends at its period's end: the deleted subscription still reads cancel_at_period_end.
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' })), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual(
    [view.plan, view.subscription_status, view.current_period_start, view.current_period_end, view.cancel_at_period_end, view.add_ons],
    ['starter', 'canceled', null, null, false, []],
  );
});

test("a lapse drops an Organization's Tenant to what it can drop to, the Team plan it began on without a subscription (not Starter): not restricted while its usage fits Team, no period, and tenant.plan_changed enterprise to team", async () => {
  const orgAdmin = await caller(t);
  const orgId = await seedOrganization(t, [{ userId: orgAdmin.user.id, role: 'org_admin' }]);
  const apps = [await createApplication(t, admin, { owner_organization_id: orgId }), await createApplication(t, admin, { owner_organization_id: orgId })];
  const tenantId = apps[0].tenantId;
  assert.equal((await tenantRow(t, tenantId)).plan, 'team', 'an Organization\'s Tenant begins on Team');
  const sub = { tenantId, id: 'sub_org_lapse', customer: 'cus_org_lapse', plan: 'enterprise' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 20 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' }), { created: now() - 10 }), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/subscription`, orgAdmin.token), 200);
  assert.deepEqual(
    [view.plan, view.subscription_status, view.restricted, view.current_period_start, view.current_period_end, view.cancel_at_period_end],
    ['team', 'canceled', false, null, null, false],
  );
  assert.deepEqual((await auditRows(t, 'tenant.plan_changed', tenantId)).map((r) => [r.before.plan, r.after.plan]), [['team', 'enterprise'], ['enterprise', 'team']]);
  // Team's caps apply, not Starter's: a third Application is created (Starter allows one).
  await createApplication(t, admin, { owner_organization_id: orgId });
  await t.deps.jobs.runNow('seat-sync');
  assert.equal((await tenantRow(t, tenantId)).restricted, false);
});

test('a plan change frees seats at once: a Tenant paid out of its restriction gives access to the organization members waiting as seat_limit, with access.granted', async () => {
  const app = await newApp(t, admin.token);
  const org = await orgWithMembers(t, admin.token, 0);
  await orgGrantApi(t, admin.token, org.id, app.id);
  await sql(t, `UPDATE tenants SET subscription_status = 'canceled', restricted = true WHERE id = $1`, [app.tenant_id]);
  const late = await person(t);
  assertStatus(await addById(t, admin.token, org.id, late.id), 201);
  const waiting = await effective(t, admin.token, late.id, app.id);
  assert.equal(waiting.allowed, false, 'no access while restricted');
  assert.deepEqual(await accessEvents(t, late.id, app.id), []);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: app.tenant_id, id: 'sub_release', customer: 'cus_release' })), 200);
  const row = await tenantRow(t, app.tenant_id);
  assert.deepEqual([row.plan, row.restricted], ['team', false]);
  // No job ran: the plan change itself released the seat.
  assert.equal((await effective(t, admin.token, late.id, app.id)).allowed, true);
  assert.deepEqual(await accessEvents(t, late.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
});

test('a plan change without a status change (an active subscription moved from enterprise to team) is audited tenant.plan_changed alone', async () => {
  const owner = await tenantOwner(t);
  const sub = { tenantId: owner.tenantId, id: 'sub_down', customer: 'cus_down', plan: 'enterprise' };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 10 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, plan: 'team' })), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.seats.included], ['team', 'active', 25]);
  const plans = await auditRows(t, 'tenant.plan_changed', owner.tenantId);
  assert.deepEqual(plans.map((r) => [r.before.plan, r.after.plan, r.actor_type]), [['starter', 'enterprise', 'system'], ['enterprise', 'team', 'system']]);
  assert.equal((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).length, 1, 'only none → active');
});

test('a subscription event without a status leaves subscription_status as it was (subscription_status mirrors the processor; it never reads "undefined")', async () => {
  const owner = await tenantOwner(t);
  const s = subscription({ tenantId: owner.tenantId, id: 'sub_no_status', customer: 'cus_no_status' });
  delete (s as Record<string, unknown>).status;
  assertStatus(await deliver(t, 'customer.subscription.created', s), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.subscription_status, view.plan], ['none', 'starter']);
  assert.deepEqual(await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId), [], 'no status change audited');
});

test('"restricted becomes true once a subscription lapsed": a paid Team subscription turning paused or incomplete is no lapse, so a Tenant whose usage exceeds Starter stays unrestricted, also after seat-sync, and may still create', async () => {
  for (const status of ['paused', 'incomplete']) {
    const owner = await tenantOwner(t);
    await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [owner.tenantId]);
    for (let i = 0; i < 2; i++) await createApplication(t, admin, { owner_user_id: owner.user.id });
    const sub = { tenantId: owner.tenantId, id: `sub_over_${status}`, customer: `cus_over_${status}` };
    assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 20 }), 200);
    assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status }), { created: now() - 10 }), 200);
    assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/usage`, owner.token), 200).fits_plans, ['team', 'enterprise'], `${status}: usage exceeds Starter`);
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['team', status, false], status);
    await t.deps.jobs.runNow('seat-sync');
    assert.equal((await tenantRow(t, owner.tenantId)).restricted, false, `${status}: seat-sync`);
    assertStatus(await call(t, 'POST', '/v1/applications', admin.token, { slug: `ov-${status}-${Date.now()}`, name: 'Over', launch_url: 'https://over.example.com', owner_user_id: owner.user.id }), 201);
  }
});

test('"Other statuses (a new subscription still incomplete, or paused) keep the plan": an active Team subscription turning paused or incomplete leaves the Tenant on Team, unrestricted, audited tenant.subscription_status_changed alone', async () => {
  for (const status of ['paused', 'incomplete']) {
    const owner = await tenantOwner(t);
    const sub = { tenantId: owner.tenantId, id: `sub_keep_${status}`, customer: `cus_keep_${status}` };
    assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 20 }), 200);
    assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status }), { created: now() - 10 }), 200);
    const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
    assert.deepEqual([view.plan, view.subscription_status, view.restricted], ['team', status, false], status);
    assert.deepEqual((await auditRows(t, 'tenant.plan_changed', owner.tenantId)).map((r) => r.after.plan), ['team'], status);
    assert.deepEqual((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).map((r) => r.after.subscription_status), ['active', status], status);
  }
});

test('an add-on\'s amount in cents is its price times its quantity, also for a price the processor states only as unit_amount_decimal (fractional cents, rounded once)', async () => {
  const owner = await tenantOwner(t);
  const sub = subscription({ tenantId: owner.tenantId, id: 'sub_decimal', customer: 'cus_decimal', plan: 'enterprise', addOns: [{ code: 'isolated_tenancy', unitAmount: 50000 }] }) as any;
  // The processor leaves unit_amount null when the price is not a whole number of cents.
  sub.items.data[1].quantity = 2;
  sub.items.data[1].price = { id: 'price_isolated_decimal', lookup_key: 'isolated_tenancy', unit_amount: null, unit_amount_decimal: '12345.5' };
  assertStatus(await deliver(t, 'customer.subscription.created', sub), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.equal(view.plan, 'enterprise');
  assert.deepEqual(view.add_ons, [{ code: 'isolated_tenancy', amount: 24691 }]);
});

test('"There are no outbound billing events": a subscription created, past due, paid again and deleted writes its tenant.plan_changed and tenant.subscription_status_changed audit rows and no webhook event', async () => {
  const owner = await tenantOwner(t);
  await createApplication(t, admin, { owner_user_id: owner.user.id });
  const outboxCount = async () => (await sql(t, 'SELECT count(*)::int AS n FROM outbox_events'))[0].n as number;
  const before = await outboxCount();
  const sub = { tenantId: owner.tenantId, id: `sub_${randomBytes(4).toString('hex')}`, customer: `cus_${randomBytes(4).toString('hex')}` };
  assertStatus(await deliver(t, 'customer.subscription.created', subscription(sub), { created: now() - 40 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription({ ...sub, status: 'past_due' }), { created: now() - 30 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.updated', subscription(sub), { created: now() - 20 }), 200);
  assertStatus(await deliver(t, 'customer.subscription.deleted', subscription({ ...sub, status: 'canceled' }), { created: now() - 10 }), 200);
  assert.deepEqual((await auditRows(t, 'tenant.plan_changed', owner.tenantId)).map((r) => r.after.plan), ['team', 'starter']);
  assert.deepEqual((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).map((r) => r.after.subscription_status), ['active', 'past_due', 'active', 'canceled']);
  assert.equal(await outboxCount(), before, 'no outbound billing events');
});
