// Without Stripe settings, the local processor simulator: hosted pages served by the service whose
// buttons sign processor events and send them through the processor-events receiver.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { assertError, assertStatus, auditRows, buildApp, call, caller, sql, tenantOwner, tenantRow } from '../tenancy/support.js';

let t: TestApp;
before(async () => {
  t = await buildApp();
});
after(() => t.close());

const body = { plan: 'team', success_url: 'https://app.example.com/billing/done', cancel_url: 'https://app.example.com/billing' };
const pathOf = (url: string) => new URL(url).pathname;
const page = (path: string) => t.app.inject({ method: 'GET', url: path });
const press = (path: string) => t.app.inject({ method: 'POST', url: path, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: '' });

async function checkout(owner: { tenantId: string; token: string }, key: string) {
  return assertStatus(await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, owner.token, body, { 'idempotency-key': key }), 201);
}

test('without Stripe settings the whole upgrade runs on one machine: checkout URL page → complete → the Tenant plan becomes team', async () => {
  const owner = await tenantOwner(t);
  const session = await checkout(owner, 'sim-1');
  assert.ok(session.url.startsWith(`${t.config.publicUrl}/billing/simulator/checkout/`), session.url);
  const html = await page(pathOf(session.url));
  assert.equal(html.statusCode, 200);
  assert.match(String(html.headers['content-type']), /^text\/html/);
  assert.match(html.body, /Pay and subscribe/);
  assert.ok(html.body.includes(`${pathOf(session.url)}/complete`), 'html.body.includes(`${pathOf(session.url)}/complete`)');
  assert.ok(html.body.includes(owner.tenantId), 'html.body.includes(owner.tenantId)');
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'starter', 'opening the page changes nothing');

  const done = await press(`${pathOf(session.url)}/complete`);
  assert.equal(done.statusCode, 303);
  assert.equal(done.headers.location, body.success_url);
  const sub = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([sub.plan, sub.subscription_status, sub.restricted, sub.cancel_at_period_end], ['team', 'active', false, false]);
  assert.ok(sub.current_period_end > sub.current_period_start, 'sub.current_period_end > sub.current_period_start');
  const events = await sql(t, 'SELECT type, outcome FROM processor_events WHERE tenant_id = $1 ORDER BY type', [owner.tenantId]);
  assert.deepEqual(events, [{ type: 'checkout.session.completed', outcome: 'applied' }, { type: 'customer.subscription.created', outcome: 'applied' }]);
  const changed = await auditRows(t, 'tenant.plan_changed', owner.tenantId);
  assert.equal(changed.length, 1);
  assert.equal(changed[0].actor_type, 'system');
  const row = await tenantRow(t, owner.tenantId);
  assert.match(row.stripe_customer_id, /^cus_sim_/);
  assert.match(row.stripe_subscription_id, /^sub_sim_/);

  // A finished session's page is gone, and a second click applies nothing (it lands on success_url again).
  assert.equal((await page(pathOf(session.url))).statusCode, 404);
  assert.equal((await press(`${pathOf(session.url)}/complete`)).headers.location, body.success_url);
  assert.equal((await auditRows(t, 'tenant.plan_changed', owner.tenantId)).length, 1);
  assertError(await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, owner.token, body, { 'idempotency-key': 'sim-2' }), 409, 'subscription_exists');
});

test('one payable checkout per Tenant: a new simulated checkout expires the Tenant\'s earlier open one (its page 404, Pay and subscribe applies nothing); the new one pays; another Tenant\'s stays open', async () => {
  const owner = await tenantOwner(t);
  const other = await tenantOwner(t);
  const elsewhere = await checkout(other, 'one-1');
  const first = await checkout(owner, 'one-1');
  const second = await checkout(owner, 'one-2');
  assert.equal((await page(pathOf(first.url))).statusCode, 404);
  assert.equal((await press(`${pathOf(first.url)}/complete`)).statusCode, 404);
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'starter');
  assert.equal((await page(pathOf(elsewhere.url))).statusCode, 200);
  assert.equal((await page(pathOf(second.url))).statusCode, 200);
  assert.equal((await press(`${pathOf(second.url)}/complete`)).headers.location, body.success_url);
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'team');
});

test('a retry of the simulated checkout with the same Idempotency-Key returns the same URL', async () => {
  const owner = await tenantOwner(t);
  const first = await checkout(owner, 'sim-same');
  const again = await checkout(owner, 'sim-same');
  assert.equal(again.url, first.url);
  assert.equal(again.expires_at, first.expires_at);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM billing_simulator_sessions WHERE tenant_id = $1', [owner.tenantId]))[0].n, 1);
});

test('cancelling the simulated checkout returns to cancel_url and changes nothing', async () => {
  const owner = await tenantOwner(t);
  const session = await checkout(owner, 'sim-cancel');
  const res = await press(`${pathOf(session.url)}/cancel`);
  assert.equal(res.statusCode, 303);
  assert.equal(res.headers.location, body.cancel_url);
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.stripe_customer_id], ['starter', 'none', null]);
  assert.equal((await press(`${pathOf(session.url)}/complete`)).statusCode, 404);
});

test('the simulated portal: cancel at period end, a failed and a paid invoice, then cancel now lapses the Tenant to Starter', async () => {
  const owner = await tenantOwner(t);
  const noAccount = await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, owner.token, { return_url: 'http://localhost:3000/settings' });
  assertError(noAccount, 409, 'no_billing_account');
  await press(`${pathOf((await checkout(owner, 'sim-portal')).url)}/complete`);
  const portal = assertStatus(await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, owner.token, { return_url: 'http://localhost:3000/settings' }), 201);
  const path = pathOf(portal.url);
  assert.ok(path.startsWith('/billing/simulator/portal/'), portal.url);
  const html = await page(path);
  assert.equal(html.statusCode, 200);
  assert.match(html.body, /Cancel at period end/);
  assert.match(html.body, /http:\/\/localhost:3000\/settings/);

  const act = async (action: string) => {
    const res = await press(`${path}/${action}`);
    assert.equal(res.statusCode, 303, res.body);
    assert.equal(res.headers.location, path);
    return tenantRow(t, owner.tenantId);
  };
  assert.equal((await act('cancel_at_period_end')).cancel_at_period_end, true);
  assert.equal((await act('resume')).cancel_at_period_end, false);
  assert.equal((await act('payment_failed')).subscription_status, 'past_due');
  assert.equal((await act('payment_succeeded')).subscription_status, 'active');
  const lapsed = await act('cancel_now');
  assert.deepEqual([lapsed.plan, lapsed.subscription_status, lapsed.restricted], ['starter', 'canceled', false]);
  const statuses = (await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).map((r) => r.after.subscription_status);
  assert.deepEqual(statuses, ['active', 'past_due', 'active', 'canceled']);
  // A lapsed Tenant may check out again.
  await checkout(owner, 'sim-again');
});

test('an unknown simulator session is a 404 page; an unknown portal action 422', async () => {
  const res = await page('/billing/simulator/checkout/cs_sim_unknown');
  assert.equal(res.statusCode, 404);
  assert.match(String(res.headers['content-type']), /^text\/html/);
  assert.equal((await press('/billing/simulator/portal/bps_sim_unknown/cancel_now')).statusCode, 404);
  assert.equal((await press('/billing/simulator/portal/bps_sim_unknown/refund_everything')).statusCode, 422);
});

test('the OpenAPI document describes the tenancy and billing operations, marks tier-change creation destructive and lists the simulator pages under their own tag', async () => {
  const doc = assertStatus(await t.app.inject({ method: 'GET', url: '/v1/openapi.json' }), 200);
  const expected: [string, string][] = [
    ['get', '/v1/tenants'], ['get', '/v1/tenants/{id}'], ['post', '/v1/tenants/{id}/tier-change-requests'], ['get', '/v1/tenants/{id}/tier-change-requests'],
    ['get', '/v1/tenants/{id}/tier-change-requests/{requestId}'], ['patch', '/v1/tenants/{id}/tier-change-requests/{requestId}'], ['get', '/v1/tenants/{id}/subscription'],
    ['get', '/v1/tenants/{id}/usage'], ['post', '/v1/tenants/{id}/billing/checkout-sessions'], ['post', '/v1/tenants/{id}/billing/portal-sessions'], ['post', '/v1/billing/processor-events'],
  ];
  for (const [method, path] of expected) assert.ok(doc.paths[path]?.[method], `${method} ${path}`);
  assert.equal(doc.paths['/v1/tenants/{id}/tier-change-requests'].post['x-platform-destructive'], 'always');
  assert.deepEqual(doc.paths['/v1/billing/processor-events'].post.security, []);
  assert.equal(doc.paths['/v1/tenants/{id}/billing/checkout-sessions'].post.parameters.find((p: any) => p.name === 'Idempotency-Key').required, true);
  const simulator = Object.entries<any>(doc.paths).filter(([p]) => p.startsWith('/billing/simulator/'));
  assert.ok(simulator.length >= 4, 'simulator.length >= 4');
  for (const [, item] of simulator) for (const op of Object.values<any>(item)) assert.deepEqual(op.tags, ['Billing simulator']);
});

test('double submit on the simulated checkout: a second "Pay and subscribe" (a double click, back and resubmit) lands on success_url again and applies nothing twice; a second "Cancel" lands on cancel_url; a cancelled checkout cannot be paid', async () => {
  const owner = await tenantOwner(t);
  const paid = pathOf((await checkout(owner, 'sim-double')).url);
  const [first, second] = [await press(`${paid}/complete`), await press(`${paid}/complete`)];
  for (const res of [first, second]) {
    assert.equal(res.statusCode, 303, res.body);
    assert.equal(res.headers.location, body.success_url);
  }
  assert.equal((await auditRows(t, 'tenant.plan_changed', owner.tenantId)).length, 1);
  const events = await sql(t, 'SELECT type FROM processor_events WHERE tenant_id = $1 ORDER BY type', [owner.tenantId]);
  assert.deepEqual(events.map((e) => e.type), ['checkout.session.completed', 'customer.subscription.created'], 'one subscription, not two');
  assert.equal((await press(`${paid}/cancel`)).statusCode, 404, 'a paid checkout cannot be cancelled');

  const other = await tenantOwner(t);
  const dropped = pathOf((await checkout(other, 'sim-double-cancel')).url);
  for (let i = 0; i < 2; i++) {
    const res = await press(`${dropped}/cancel`);
    assert.equal(res.statusCode, 303, res.body);
    assert.equal(res.headers.location, body.cancel_url);
  }
  assert.equal((await press(`${dropped}/complete`)).statusCode, 404, 'a cancelled checkout cannot be paid');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM processor_events WHERE tenant_id = $1', [other.tenantId]))[0].n, 0);
});

test('the simulator pages keep the session id (their only credential) out of Referer and are not sniffed: Referrer-Policy no-referrer, X-Content-Type-Options nosniff, base-uri none', async () => {
  const owner = await tenantOwner(t);
  const path = pathOf((await checkout(owner, 'sim-headers')).url);
  for (const res of [await page(path), await page('/billing/simulator/checkout/cs_sim_unknown')]) {
    assert.equal(res.headers['referrer-policy'], 'no-referrer');
    assert.equal(res.headers['x-content-type-options'], 'nosniff');
    assert.match(String(res.headers['content-security-policy']), /frame-ancestors 'none'; base-uri 'none'/);
  }
  const done = await press(`${path}/complete`);
  assert.equal(done.statusCode, 303);
  assert.equal(done.headers['referrer-policy'], 'no-referrer', 'the redirect to success_url sends no Referer either');
});

test('a simulated checkout is valid a day: expires_at is a day ahead, and from it the page and its buttons are 404 and nothing changes', async () => {
  const owner = await tenantOwner(t);
  await withStoppedClock(t, async () => {
    const session = await checkout(owner, 'sim-expiry');
    assert.equal(session.expires_at, new Date(t.clock.now().getTime() + 24 * 3600_000).toISOString());
    const path = pathOf(session.url);
    t.clock.advance(24 * 3600 - 1);
    try {
      assert.equal((await page(path)).statusCode, 200, 'still open a second before the day is over');
      t.clock.advance(1);
      assert.equal((await page(path)).statusCode, 404, 'expired at the very instant of expires_at');
      assert.equal((await press(`${path}/complete`)).statusCode, 404);
      assert.equal((await press(`${path}/cancel`)).statusCode, 404);
    } finally {
      t.clock.advance(-(24 * 3600));
    }
  });
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.stripe_customer_id], ['starter', 'none', null]);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM processor_events WHERE tenant_id = $1', [owner.tenantId]))[0].n, 0);
});

test('a simulated portal lives an hour (docs/decisions.md "Simulator": "portal an hour"): expires_at is an hour ahead, and from it the page and its buttons are 404 and nothing changes', async () => {
  const owner = await tenantOwner(t);
  await press(`${pathOf((await checkout(owner, 'sim-portal-expiry')).url)}/complete`);
  await withStoppedClock(t, async () => {
    const portal = assertStatus(await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, owner.token, { return_url: 'http://localhost:3000/settings' }), 201);
    assert.equal(portal.expires_at, new Date(t.clock.now().getTime() + 3600_000).toISOString());
    const path = pathOf(portal.url);
    t.clock.advance(3600 - 1);
    try {
      assert.equal((await page(path)).statusCode, 200, 'still open a second before the hour is over');
      t.clock.advance(1);
      assert.equal((await page(path)).statusCode, 404, 'expired at the very instant of expires_at');
      for (const action of ['cancel_at_period_end', 'payment_failed', 'cancel_now']) {
        assert.equal((await press(`${path}/${action}`)).statusCode, 404, action);
      }
    } finally {
      t.clock.advance(-3600);
    }
  });
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.cancel_at_period_end], ['team', 'active', false]);
  assert.deepEqual((await auditRows(t, 'tenant.subscription_status_changed', owner.tenantId)).map((r) => r.after.subscription_status), ['active']);
});

test('a simulated checkout page that has expired is deleted by the idempotency-prune job with the caller\'s email it holds (GDPR Art. 5(1)(e)); until its day is over it stays and opens', async () => {
  const owner = await tenantOwner(t);
  const session = await checkout(owner, 'sim-prune');
  const path = pathOf(session.url);
  const rows = () => sql(t, 'SELECT customer_email FROM billing_simulator_sessions WHERE id = $1', [path.split('/').pop()]);
  assert.deepEqual(await rows(), [{ customer_email: owner.user.email }]);
  t.clock.advance(24 * 3600 - 60);
  try {
    await t.deps.jobs.runNow('idempotency-prune');
    assert.equal((await page(path)).statusCode, 200, 'kept while it can be used');
    t.clock.advance(61);
    const result = await t.deps.jobs.runNow('idempotency-prune');
    assert.ok((result.billing_simulator_sessions as number) >= 1, JSON.stringify(result));
    assert.deepEqual(await rows(), []);
    assert.equal((await page(path)).statusCode, 404);
  } finally {
    t.clock.advance(-(24 * 3600 + 1));
  }
});

test('checkout is for the owner only, also through the simulator: a portal session (open to billing.manage) is not a checkout, so its id on the checkout buttons is 404 and subscribes nothing', async () => {
  const owner = await tenantOwner(t, { subscriptionStatus: 'canceled', stripeCustomerId: 'cus_sim_lapsed' });
  const billing = await caller(t, ['billing_admin']);
  const portal = assertStatus(await call(t, 'POST', `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, billing.token, { return_url: 'https://app.example.com/settings' }), 201);
  const id = pathOf(portal.url).split('/').at(-1)!;
  assert.equal((await page(`/billing/simulator/checkout/${id}`)).statusCode, 404);
  assert.equal((await press(`/billing/simulator/checkout/${id}/complete`)).statusCode, 404);
  assert.equal((await press(`/billing/simulator/checkout/${id}/cancel`)).statusCode, 404);
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status], ['starter', 'canceled']);
  // The portal itself still works.
  assert.equal((await page(pathOf(portal.url))).statusCode, 200);
});

test('a Tenant that paid before checks out again through the simulator as the same processor customer', async () => {
  const owner = await tenantOwner(t, { subscriptionStatus: 'canceled', stripeCustomerId: 'cus_sim_returning' });
  const session = await checkout(owner, 'sim-returning');
  assert.equal((await press(`${pathOf(session.url)}/complete`)).statusCode, 303);
  const row = await tenantRow(t, owner.tenantId);
  assert.deepEqual([row.plan, row.subscription_status, row.stripe_customer_id], ['team', 'active', 'cus_sim_returning']);
});

test('PUBLIC_URL "optionally with a path" is "the base of every link": behind a path the simulator pages\' buttons post under it and the portal\'s 303 returns under it', async () => {
  const prefixed = await buildApp({ publicUrl: 'http://localhost:8080/platform' });
  try {
    const owner = await tenantOwner(prefixed);
    const session = assertStatus(await call(prefixed, 'POST', `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, owner.token, body, { 'idempotency-key': 'sim-prefixed' }), 201);
    const url = new URL(session.url);
    assert.ok(url.pathname.startsWith('/platform/billing/simulator/checkout/'), session.url);
    // The reverse proxy serves PUBLIC_URL's path: the service sees the path without it.
    const served = url.pathname.slice('/platform'.length);
    const buttons = (html: string) => [...html.matchAll(/<form method="post" action="([^"]+)">/g)].map((m) => m[1]);
    const checkoutPage = await prefixed.app.inject({ method: 'GET', url: served });
    assert.deepEqual(buttons(checkoutPage.body), [`${url.pathname}/complete`, `${url.pathname}/cancel`]);
    await prefixed.app.inject({ method: 'POST', url: `${served}/complete`, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: '' });

    const portal = assertStatus(await call(prefixed, 'POST', `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, owner.token, { return_url: 'https://app.example.com/settings' }), 201);
    const portalPath = new URL(portal.url).pathname;
    const portalServed = portalPath.slice('/platform'.length);
    const portalPage = await prefixed.app.inject({ method: 'GET', url: portalServed });
    assert.ok(buttons(portalPage.body).length > 0, portalPage.body);
    for (const action of buttons(portalPage.body)) assert.ok(action.startsWith(`${portalPath}/`), action);
    const acted = await prefixed.app.inject({ method: 'POST', url: `${portalServed}/cancel_at_period_end`, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: '' });
    assert.equal(acted.statusCode, 303);
    assert.equal(acted.headers.location, portalPath);
  } finally {
    await prefixed.close();
  }
});
