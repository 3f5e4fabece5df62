// Part B: checkout is the Tenant owner's ("owner (checkout)"), and an Organization's Tenant is owned by
// its org_admins. A role change or removal locks the Organization first; a checkout reads the caller's
// right again under a lock of it that the change waits for, so an admin demoted (or removed) while the
// checkout waited gets what a stranger gets (404 tenant_not_found) and supersedes nothing. Two
// transactions at once need PostgreSQL: only the PostgreSQL pass registers these.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { storageName, type TestApp } from '../helpers/app.js';
import { blockedBy, client, commitWhileWaiting, probeWhileHeld } from '../helpers/locks.js';
import { assertError, assertStatus, buildApp, call, caller, seedOrganization, seedTenant, sql, tenantOwner, tenantRow, type Caller } from '../tenancy/support.js';
import { startFakeProcessor, type FakeProcessor } from './support.js';

let sim: TestApp;
let stripe: TestApp;
let processor: FakeProcessor;

const body = { plan: 'team', success_url: 'https://app.example.com/billing/done', cancel_url: 'https://app.example.com/billing' };
const checkout = (t: TestApp, tenantId: string, who: Caller, key: string) =>
  call(t, 'POST', `/v1/tenants/${tenantId}/billing/checkout-sessions`, who.token, body, { 'idempotency-key': key });

/**
 * An Organization's Tenant with two org_admins (the one staying has opened a checkout), and the
 * statements of a concurrent Tenant write (holding the Tenant, as another checkout does) during which
 * `leaving` is demoted or removed as the membership write does it: the Organization locked first.
 */
async function orgTenant(t: TestApp, change: 'demoted' | 'removed') {
  const [leaving, staying] = [await caller(t), await caller(t)];
  const orgId = await seedOrganization(t, [{ userId: leaving.user.id, role: 'org_admin' }, { userId: staying.user.id, role: 'org_admin' }]);
  const tenantId = await seedTenant(t, { ownerOrganizationId: orgId });
  const open = new URL(assertStatus(await checkout(t, tenantId, staying, 'staying-1'), 201).url).pathname.split('/').at(-1)!;
  const statements: [string, unknown[]][] = [
    ['SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [orgId]],
    ['SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [tenantId]],
    change === 'demoted'
      ? [`UPDATE organization_members SET role = 'member' WHERE organization_id = $1 AND user_id = $2`, [orgId, leaving.user.id]]
      : ['DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2', [orgId, leaving.user.id]],
  ];
  return { leaving, orgId, tenantId, open, statements };
}

if (storageName === 'postgres') {
  // Inside the block: on embedded storage the file registers no test, and hooks without a test would
  // leave the apps they start open.
  before(async () => {
    processor = await startFakeProcessor();
    sim = await buildApp();
    stripe = await buildApp({ stripeSecretKey: 'sk_test_x', stripeApiBase: processor.base, stripeWebhookSecret: 'whsec_test_fake_processor' });
  });
  after(async () => {
    await sim.close();
    await stripe.close();
    await processor.close();
  });

  test('a checkout waits for the Organization before it takes the Tenant (the order of a membership write, which holds the Organization and then locks its grants\' Tenants): the two at once never deadlock', async () => {
    const { leaving, tenantId } = await orgTenant(sim, 'demoted');
    const [orgId] = (await sql(sim, 'SELECT owner_organization_id FROM tenants WHERE id = $1', [tenantId])).map((r) => r.owner_organization_id);
    const { probeLocked, result } = await probeWhileHeld(
      sim,
      ['SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [orgId]],
      () => checkout(sim, tenantId, leaving, 'order-1'),
      ['SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE NOWAIT', [tenantId]],
    );
    assert.equal(probeLocked, true, 'the checkout waited for the Organization without holding the Tenant');
    assertStatus(result, 201);
  });

  for (const [label, app] of [['simulated checkout', () => sim], ['checkout through the processor', () => stripe]] as const) {
    test(`a ${label} under way when a tier-change migration of the Tenant committed gets 503 service_unavailable (decisions.md: checkout pauses while migrating) and supersedes nothing`, async () => {
      const t = app();
      const { leaving: owner, orgId, tenantId, open } = await orgTenant(t, 'demoted');
      const before = new Set(processor.checkoutSessions.keys());
      // The migration commits once the checkout is past its first look at the Tenant (the status write
      // alone does not block that read), while it waits for the Organization a membership write holds.
      const res = await commitWhileWaiting(
        t,
        [
          ['SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [orgId]],
          [`UPDATE tenants SET status = 'migrating' WHERE id = $1`, [tenantId]],
        ],
        () => checkout(t, tenantId, owner, 'migrating-1'),
      );
      const error = assertError(res, 503, 'service_unavailable');
      assert.equal(error.details.reason, 'tenant_migrating');
      assert.equal(res.headers['retry-after'], '60');
      if (t === sim) {
        const sessions = await sql(t, `SELECT id FROM billing_simulator_sessions WHERE tenant_id = $1 AND kind = 'checkout' AND status = 'open' AND expires_at > $2`, [tenantId, t.clock.now()]);
        assert.deepEqual(sessions.map((r) => r.id), [open]);
      } else {
        const opened = [...processor.checkoutSessions.keys()].filter((id) => !before.has(id));
        assert.deepEqual(opened.map((id) => processor.checkoutSessions.get(id)!.status), ['expired'], 'the session opened for it is not left payable');
        assert.equal(processor.checkoutSessions.get(open)!.status, 'open');
        // A 503 releases the Idempotency-Key: once the migration is over, the retry with it gets the
        // expired session back from the processor, and hands out the Tenant's payable one instead.
        await sql(t, `UPDATE tenants SET status = 'active' WHERE id = $1`, [tenantId]);
        const retry = assertStatus(await checkout(t, tenantId, owner, 'migrating-1'), 201);
        assert.equal(new URL(retry.url).pathname.split('/').at(-1), open);
        assert.equal(processor.checkoutSessions.get(open)!.status, 'open');
      }
    });
  }

  test('"the plan changes when the processor\'s webhook arrives": a simulated checkout paid, its subscription\'s event not applied yet, leaves the Tenant subscribing: a new simulated checkout is 409 subscription_exists and opens no session (the customer cannot pay twice)', async () => {
    const owner = await tenantOwner(sim);
    const path = new URL(assertStatus(await checkout(sim, owner.tenantId, owner, 'paying-1'), 201).url).pathname;
    const [holder, watcher] = [await client(sim), await client(sim)];
    try {
      // The simulator's events wait to be recorded (the session is already paid): the window between
      // "Pay and subscribe" and the subscription's event applied.
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE processor_events IN EXCLUSIVE MODE');
      const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const paying = sim.app.inject({ method: 'POST', url: `${path}/complete`, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: '' });
      await blockedBy(watcher, rows[0].pid, 'the simulated payment');
      assert.equal((await tenantRow(sim, owner.tenantId)).subscription_status, 'none');
      const res = await checkout(sim, owner.tenantId, owner, 'paying-2');
      await holder.query('COMMIT');
      assert.equal((await paying).statusCode, 303);
      assertError(res, 409, 'subscription_exists');
      const open = await sql(sim, `SELECT id FROM billing_simulator_sessions WHERE tenant_id = $1 AND kind = 'checkout' AND status = 'open' AND expires_at > $2`, [owner.tenantId, sim.clock.now()]);
      assert.deepEqual(open, [], 'no payable simulated session');
      assert.equal((await tenantRow(sim, owner.tenantId)).subscription_status, 'active');
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      await holder.end();
      await watcher.end();
    }
  });

  for (const change of ['demoted', 'removed'] as const) {
    test(`an org_admin ${change} while their simulated checkout waited for the Tenant gets 404 tenant_not_found: no session, and the staying admin's checkout stays payable`, async () => {
      const { leaving, tenantId, open, statements } = await orgTenant(sim, change);
      const res = await commitWhileWaiting(sim, statements, () => checkout(sim, tenantId, leaving, 'leaving-1'));
      assertError(res, 404, 'tenant_not_found');
      const sessions = await sql(sim, `SELECT id FROM billing_simulator_sessions WHERE tenant_id = $1 AND kind = 'checkout' AND status = 'open' AND expires_at > $2`, [tenantId, sim.clock.now()]);
      assert.deepEqual(sessions.map((r) => r.id), [open]);
    });

    test(`an org_admin ${change} while their checkout waited for the Tenant gets 404 tenant_not_found: the processor session opened for it is expired, the staying admin's stays open and payable`, async () => {
      const { leaving, tenantId, open, statements } = await orgTenant(stripe, change);
      const before = new Set(processor.checkoutSessions.keys());
      const res = await commitWhileWaiting(stripe, statements, () => checkout(stripe, tenantId, leaving, 'leaving-1'));
      assertError(res, 404, 'tenant_not_found');
      const opened = [...processor.checkoutSessions.keys()].filter((id) => !before.has(id));
      assert.equal(opened.length, 1, 'one processor session was opened before the right was read again');
      assert.equal(processor.checkoutSessions.get(opened[0])!.status, 'expired');
      assert.equal(processor.checkoutSessions.get(open)!.status, 'open');
      const current = await sql(stripe, 'SELECT id FROM checkout_sessions WHERE tenant_id = $1 AND superseded_at IS NULL AND closed_at IS NULL', [tenantId]);
      assert.deepEqual(current.map((r) => r.id), [open]);
    });
  }

  for (const change of ['demoted', 'removed'] as const) {
    test(`an org_admin ${change} while the processor opened their billing portal session gets 404 tenant_not_found and no URL (Part B: the portal is the owner's or billing.manage's; the portal can cancel the subscription)`, async () => {
      const [leaving, staying] = [await caller(stripe), await caller(stripe)];
      const orgId = await seedOrganization(stripe, [{ userId: leaving.user.id, role: 'org_admin' }, { userId: staying.user.id, role: 'org_admin' }]);
      const tenantId = await seedTenant(stripe, { ownerOrganizationId: orgId, plan: 'team', subscriptionStatus: 'active', stripeCustomerId: `cus_portal_${change}` });
      const portal = (who: Caller) => call(stripe, 'POST', `/v1/tenants/${tenantId}/billing/portal-sessions`, who.token, { return_url: 'https://app.example.com/billing' });
      let release!: () => void;
      processor.holds.set('/v1/billing_portal/sessions', new Promise<void>((resolve) => (release = resolve)));
      const arrived = processor.requests.length;
      const pending = portal(leaving);
      try {
        while (!processor.requests.slice(arrived).some((r) => r.path === '/v1/billing_portal/sessions')) await new Promise((r) => setTimeout(r, 10));
        await sql(
          stripe,
          change === 'demoted'
            ? `UPDATE organization_members SET role = 'member' WHERE organization_id = $1 AND user_id = $2`
            : 'DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2',
          [orgId, leaving.user.id],
        );
      } finally {
        processor.holds.delete('/v1/billing_portal/sessions');
        release();
      }
      const res = await pending;
      assertError(res, 404, 'tenant_not_found');
      assert.doesNotMatch(res.body, /billing\.stripe\.test/);
      assert.ok(String(assertStatus(await portal(staying), 201).url).startsWith('https://billing.stripe.test/'), 'the admin who stays still gets one');
    });
  }
}
