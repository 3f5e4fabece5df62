// Billing through the real stripe client, pointed (STRIPE_API_BASE) at a fake processor on loopback.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, storageName, type TestApp } from '../helpers/app.js';
import { probeWhileHeld } from '../helpers/locks.js';
import { loadConfig, SIMULATOR_WEBHOOK_SECRET } from '../../src/config.js';
import { assertError, assertStatus, buildApp, call, caller, seedOrganization, seedTenant, sql, tenantOwner, tenantRow } from '../tenancy/support.js';
import { closedPort, deliver, startFakeProcessor, subscription, type FakeProcessor } from './support.js';
import { until } from '../webhooks/support.js';

let t: TestApp;
let processor: FakeProcessor;
const SECRET = 'whsec_test_fake_processor';
before(async () => {
  processor = await startFakeProcessor();
  t = await buildApp({ stripeSecretKey: 'sk_test_x', stripeApiBase: processor.base, stripeWebhookSecret: SECRET });
});
after(async () => {
  await t.close();
  await processor.close();
});

const body = { plan: 'team', success_url: 'https://app.example.com/billing/done', cancel_url: 'https://app.example.com/billing' };
const checkout = (tenantId: string, token: string, key: string | null, payload: Record<string, unknown> = body) =>
  call(t, 'POST', `/v1/tenants/${tenantId}/billing/checkout-sessions`, token, payload, key === null ? {} : { 'idempotency-key': key });
const portal = (tenantId: string, token: string, payload: Record<string, unknown> = { return_url: 'https://app.example.com/settings' }) =>
  call(t, 'POST', `/v1/tenants/${tenantId}/billing/portal-sessions`, token, payload);
const sessionsCreated = () => processor.requests.filter((r) => r.method === 'POST' && r.path === '/v1/checkout/sessions');

test('checkout: the owner gets 201 {url, expires_at} from the processor; the session carries the Tenant id and the price of lookup_key team', async () => {
  const owner = await tenantOwner(t);
  const res = await checkout(owner.tenantId, owner.token, 'co-1');
  const session = assertStatus(res, 201);
  assert.deepEqual(Object.keys(session).sort(), ['expires_at', 'url']);
  assert.match(session.url, /^https:\/\/checkout\.stripe\.test\/c\/pay\/cs_test_/);
  assert.ok(Date.parse(session.expires_at) > Date.now(), 'Date.parse(session.expires_at) > Date.now()');
  const lookup = processor.requests.find((r) => r.path === '/v1/prices')!;
  assert.deepEqual([...lookup.query.entries()].filter(([k]) => k.startsWith('lookup_keys')).map(([, v]) => v), ['team']);
  const sent = sessionsCreated().at(-1)!;
  assert.equal(sent.headers.authorization, 'Bearer sk_test_x');
  assert.equal(sent.form.mode, 'subscription');
  assert.equal(sent.form.client_reference_id, owner.tenantId);
  assert.equal(sent.form['metadata[tenant_id]'], owner.tenantId);
  assert.equal(sent.form['subscription_data[metadata][tenant_id]'], owner.tenantId);
  assert.equal(sent.form['line_items[0][price]'], 'price_team_monthly');
  assert.equal(sent.form['line_items[0][quantity]'], '1');
  assert.equal(sent.form.success_url, body.success_url);
  assert.equal(sent.form.cancel_url, body.cancel_url);
  assert.equal(sent.form.customer_email, owner.user.email);
  assert.match(String(sent.headers['idempotency-key']), /^checkout_[0-9a-f]{64}$/);
  // Returning from checkout proves nothing: the plan waits for the processor's event.
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'starter');
});

test('a checkout retry with the same Idempotency-Key returns the same URL without a second processor session', async () => {
  const owner = await tenantOwner(t);
  const first = await checkout(owner.tenantId, owner.token, 'co-same');
  const count = sessionsCreated().length;
  const again = await checkout(owner.tenantId, owner.token, 'co-same');
  assert.equal(again.statusCode, 201);
  assert.equal(again.body, first.body);
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(sessionsCreated().length, count);
  const other = assertStatus(await checkout(owner.tenantId, owner.token, 'co-other'), 201);
  assert.notEqual(other.url, first.json().url);
  assertError(await checkout(owner.tenantId, owner.token, null), 400, 'idempotency_key_required');
});

// ---- one payable checkout per Tenant (docs/decisions.md) ----------------------------------------

/** Opens a checkout (201) and returns its processor session id. */
async function opened(owner: { tenantId: string; token: string }, key: string): Promise<string> {
  return new URL(assertStatus(await checkout(owner.tenantId, owner.token, key), 201).url).pathname.split('/').at(-1)!;
}
const lastSessionCreated = () => [...processor.checkoutSessions.keys()].at(-1)!;
/** The processor's events of session `id`, paid: its subscription sub_<id> (customer cus_<id>) created, and the checkout completed. */
async function paidAndApplied(tenantId: string, id: string): Promise<Record<string, unknown>> {
  const sub = subscription({ tenantId, id: `sub_${id}`, customer: `cus_${id}` });
  assertStatus(await deliver(t, 'customer.subscription.created', sub, { secret: SECRET }), 200);
  const completed = { id, object: 'checkout.session', client_reference_id: tenantId, metadata: { tenant_id: tenantId }, customer: `cus_${id}`, subscription: `sub_${id}` };
  assertStatus(await deliver(t, 'checkout.session.completed', completed, { secret: SECRET }), 200);
  return sub;
}
const expiriesOf = (id: string) => processor.requests.filter((r) => r.method === 'POST' && r.path === `/v1/checkout/sessions/${id}/expire`);

test('a new checkout expires the Tenant\'s earlier open checkout session at the processor before its URL is handed out: one payable checkout per Tenant (a second tab cannot be paid too)', async () => {
  const owner = await tenantOwner(t);
  const first = await opened(owner, 'one-1');
  assert.equal(processor.checkoutSessions.get(first)!.status, 'open');
  const second = await opened(owner, 'one-2');
  assert.equal(processor.checkoutSessions.get(first)!.status, 'expired');
  assert.equal(expiriesOf(first).length, 1);
  assert.equal(processor.checkoutSessions.get(second)!.status, 'open');
  assert.equal(expiriesOf(second).length, 0);
  // Another Tenant's checkout leaves this one's open.
  const other = await tenantOwner(t);
  assertStatus(await checkout(other.tenantId, other.token, 'one-1'), 201);
  assert.equal(processor.checkoutSessions.get(second)!.status, 'open');
  const third = await opened(owner, 'one-3');
  assert.deepEqual([second, third].map((id) => processor.checkoutSessions.get(id)!.status), ['expired', 'open']);
  assert.equal(expiriesOf(first).length, 1, 'an expired session is not expired again');
});

test('a checkout while an earlier one of the Tenant is paid but its event not yet applied: 409 subscription_exists, and the session just opened is expired (the customer cannot pay twice)', async () => {
  const owner = await tenantOwner(t);
  const paid = await opened(owner, 'paid-1');
  processor.checkoutSessions.get(paid)!.status = 'complete';
  assertError(await checkout(owner.tenantId, owner.token, 'paid-2'), 409, 'subscription_exists');
  const refused = lastSessionCreated();
  assert.notEqual(refused, paid);
  assert.equal(processor.checkoutSessions.get(refused)!.status, 'expired', 'the session opened for the refused checkout was expired');
  assert.equal(processor.checkoutSessions.get(paid)!.status, 'complete');
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'none');
  // So is every checkout after it, until the paid one's completion is applied.
  assertError(await checkout(owner.tenantId, owner.token, 'paid-3'), 409, 'subscription_exists');
  assert.equal(processor.checkoutSessions.get(lastSessionCreated())!.status, 'expired');
  await paidAndApplied(owner.tenantId, paid);
  assertError(await checkout(owner.tenantId, owner.token, 'paid-4'), 409, 'subscription_exists');
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'active');
});

// Stripe does not guarantee the order of its events: a paid session's checkout.session.completed can be
// applied before its subscription's customer.subscription.created (the Tenant still `none`).
const completedEvent = (tenantId: string, id: string) =>
  ({ id, object: 'checkout.session', client_reference_id: tenantId, metadata: { tenant_id: tenantId }, customer: `cus_${id}`, subscription: `sub_${id}` });

test('"the plan changes when the processor\'s webhook arrives": a paid checkout\'s checkout.session.completed applied before its customer.subscription.created leaves the Tenant subscribing: a new checkout is 409 subscription_exists and the session it opened is expired (the customer cannot pay twice), until the subscription\'s own event is applied', async () => {
  const owner = await tenantOwner(t);
  const paid = await opened(owner, 'early-1');
  processor.checkoutSessions.get(paid)!.status = 'complete';
  assertStatus(await deliver(t, 'checkout.session.completed', completedEvent(owner.tenantId, paid), { secret: SECRET }), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'none');
  const refused = assertError(await checkout(owner.tenantId, owner.token, 'early-2'), 409, 'subscription_exists');
  assert.deepEqual(refused.details, { subscription_status: 'none', plan: 'starter' });
  const opened2 = lastSessionCreated();
  assert.notEqual(opened2, paid);
  assert.equal(processor.checkoutSessions.get(opened2)!.status, 'expired', 'the session opened for the refused checkout was expired');
  assert.equal(processor.checkoutSessions.get(paid)!.status, 'complete');
  // The subscription's own event arrives: the Tenant is subscribed (409 as for any live subscription);
  // once it lapses, a new checkout goes through.
  const sub = subscription({ tenantId: owner.tenantId, id: `sub_${paid}`, customer: `cus_${paid}` });
  assertStatus(await deliver(t, 'customer.subscription.created', sub, { secret: SECRET }), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'active');
  assertError(await checkout(owner.tenantId, owner.token, 'early-3'), 409, 'subscription_exists');
  assertStatus(await deliver(t, 'customer.subscription.deleted', { ...sub, status: 'canceled' }, { secret: SECRET }), 200);
  const again = await opened(owner, 'early-4');
  assert.equal(processor.checkoutSessions.get(again)!.status, 'open');
  assert.deepEqual(await sql(t, 'SELECT id FROM checkout_sessions WHERE id = $1', [paid]), [], 'the paid session\'s row went with its subscription\'s event');
});

test('a paid checkout\'s completion applied before its subscription\'s event, once that session\'s own expiry has passed: a new checkout is no longer refused for it (201)', async () => {
  const owner = await tenantOwner(t);
  const paid = await opened(owner, 'early-x1');
  processor.checkoutSessions.get(paid)!.status = 'complete';
  assertStatus(await deliver(t, 'checkout.session.completed', completedEvent(owner.tenantId, paid), { secret: SECRET }), 200);
  await sql(t, 'UPDATE checkout_sessions SET expires_at = $2 WHERE id = $1', [paid, new Date(t.clock.now().getTime() - 1000)]);
  const again = await opened(owner, 'early-x2');
  assert.equal(processor.checkoutSessions.get(again)!.status, 'open');
});

test('checkout is allowed only when the Tenant has no subscription or a lapsed one, read again under the Tenant\'s lock: a subscription applied while the checkout opened its processor session makes it 409 subscription_exists, its session expired', async () => {
  const owner = await tenantOwner(t);
  const paid = await opened(owner, 'mid-1');
  processor.checkoutSessions.get(paid)!.status = 'complete';
  let release!: () => void;
  processor.holds.set('/v1/checkout/sessions', new Promise<void>((resolve) => (release = resolve)));
  const before = sessionsCreated().length;
  const pending = checkout(owner.tenantId, owner.token, 'mid-2');
  try {
    await until(() => sessionsCreated().length > before);
    assertStatus(await deliver(t, 'checkout.session.completed', completedEvent(owner.tenantId, paid), { secret: SECRET }), 200);
    assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: `sub_${paid}`, customer: `cus_${paid}` }), { secret: SECRET }), 200);
  } finally {
    processor.holds.delete('/v1/checkout/sessions');
    release();
  }
  const refused = assertError(await pending, 409, 'subscription_exists');
  assert.equal(refused.details.subscription_status, 'active');
  assert.equal(processor.checkoutSessions.get(lastSessionCreated())!.status, 'expired', 'the session opened for the refused checkout was expired');
});

test('a checkout whose checkout.session.completed was applied is not one to expire: once that subscription lapsed, a new checkout goes through (201)', async () => {
  const owner = await tenantOwner(t);
  const paid = await opened(owner, 'lapse-1');
  processor.checkoutSessions.get(paid)!.status = 'complete';
  const sub = await paidAndApplied(owner.tenantId, paid);
  assertStatus(await deliver(t, 'customer.subscription.deleted', { ...sub, status: 'canceled' }, { secret: SECRET }), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).subscription_status, 'canceled');
  const again = await opened(owner, 'lapse-2');
  assert.equal(processor.checkoutSessions.get(again)!.status, 'open');
  assert.equal(expiriesOf(paid).length, 0);
});

test('the earlier session cannot be expired (processor failing): 503 billing_unavailable with Retry-After; a retry with the same Idempotency-Key expires it and returns the new session', async () => {
  const owner = await tenantOwner(t);
  const first = await opened(owner, 'busy-1');
  processor.busy.add(`/v1/checkout/sessions/${first}/expire`);
  try {
    const res = await checkout(owner.tenantId, owner.token, 'busy-2');
    const failed = assertError(res, 503, 'billing_unavailable');
    assert.equal(failed.details.operation, 'checkout.sessions.expire');
    assert.equal(res.headers['retry-after'], '30', 'the 503 carries Retry-After');
  } finally {
    processor.busy.delete(`/v1/checkout/sessions/${first}/expire`);
  }
  assert.equal(processor.checkoutSessions.get(first)!.status, 'open');
  const second = await opened(owner, 'busy-2');
  assert.deepEqual([first, second].map((id) => processor.checkoutSessions.get(id)!.status), ['expired', 'open']);
});

test('a checkout retried with its Idempotency-Key after a 503, once a later checkout has superseded its session: the retry (the processor replays the superseded session) hands out the later, payable session and leaves it open, never the expired one', async () => {
  const owner = await tenantOwner(t);
  const first = await opened(owner, 'rt-1');
  processor.busy.add(`/v1/checkout/sessions/${first}/expire`);
  try {
    assertError(await checkout(owner.tenantId, owner.token, 'rt-2'), 503, 'billing_unavailable');
  } finally {
    processor.busy.delete(`/v1/checkout/sessions/${first}/expire`);
  }
  const failedOne = sessionsCreated().length;
  const later = await opened(owner, 'rt-3');
  const retried = assertStatus(await checkout(owner.tenantId, owner.token, 'rt-2'), 201);
  assert.equal(sessionsCreated().length, failedOne + 2, 'the later checkout and the retry reached the processor');
  assert.equal(new URL(retried.url).pathname.split('/').at(-1), later, 'the retry hands out the later session');
  assert.equal(processor.checkoutSessions.get(later)!.status, 'open', 'the later session stays payable');
  const current = await sql(t, 'SELECT id FROM checkout_sessions WHERE tenant_id = $1 AND superseded_at IS NULL', [owner.tenantId]);
  assert.deepEqual(current.map((r) => r.id), [later]);
});

/** Holds the processor's answer to the expiry of session `id` until the returned release is called. */
function holdExpiry(id: string): () => void {
  const path = `/v1/checkout/sessions/${id}/expire`;
  let release!: () => void;
  processor.holds.set(path, new Promise<void>((resolve) => (release = resolve)));
  return () => {
    processor.holds.delete(path);
    release();
  };
}

test('two checkouts of one Tenant at once: both clients get the one payable session\'s URL, never an expired one', async () => {
  const owner = await tenantOwner(t);
  const earlier = await opened(owner, 'race-0');
  const count = processor.checkoutSessions.size;
  // Both are held at the earlier session's expiry, each with its own session recorded: the one
  // recorded first has been superseded by the other before it answers.
  const release = holdExpiry(earlier);
  const both = Promise.all(['race-1', 'race-2'].map((key) => checkout(owner.tenantId, owner.token, key)));
  try {
    await until(() => expiriesOf(earlier).length === 2, 5000, "both checkouts at the earlier session's expiry");
  } finally {
    release();
  }
  const [a, b] = (await both).map((res) => assertStatus(res, 201));
  assert.deepEqual(b, a, 'both clients are handed the same session');
  const payable = new URL(a.url).pathname.split('/').at(-1)!;
  const racing = [...processor.checkoutSessions.keys()].slice(count);
  assert.equal(racing.length, 2);
  assert.ok(racing.includes(payable), `the URL is of a session one of the two opened (${payable})`);
  const open = [earlier, ...racing].filter((id) => processor.checkoutSessions.get(id)!.status === 'open');
  assert.deepEqual(open, [payable], 'one session open at the processor: the one handed out');
  const rows = await sql(t, 'SELECT id, url, superseded_at, closed_at FROM checkout_sessions WHERE tenant_id = $1 ORDER BY created_at, id', [owner.tenantId]);
  assert.deepEqual(rows.filter((r) => r.closed_at === null).map((r) => [r.id, r.url, r.superseded_at]), [[payable, a.url, null]]);
  // The others are closed (expired at the processor), kept until their own expiry for a replay to find.
  assert.deepEqual(rows.filter((r) => r.closed_at !== null).map((r) => r.id).sort(), [earlier, ...racing.filter((id) => id !== payable)].sort());
});

test('a checkout superseded at once by one whose URL is not recorded (the release before 0040, during a deploy): 409 subscription_exists, not its own expired URL; the other stays payable and a retry with the same key replays the 409', async () => {
  const owner = await tenantOwner(t);
  const earlier = await opened(owner, 'deploy-0');
  const previous = `cs_test_previous_${owner.tenantId}`;
  const release = holdExpiry(earlier);
  const pending = checkout(owner.tenantId, owner.token, 'deploy-1');
  try {
    await until(() => expiriesOf(earlier).length === 1, 5000, "the checkout at the earlier session's expiry");
    // The previous release records its session as 0039 had it, without a url, superseding this one.
    processor.checkoutSessions.set(previous, { status: 'open' });
    const now = t.clock.now();
    await sql(t, 'UPDATE checkout_sessions SET superseded_at = $2 WHERE tenant_id = $1 AND superseded_at IS NULL', [owner.tenantId, now]);
    await sql(t, 'INSERT INTO checkout_sessions (id, tenant_id, created_at, expires_at) VALUES ($1, $2, $3, $4)', [previous, owner.tenantId, now, new Date(now.getTime() + 86_400_000)]);
  } finally {
    release();
  }
  const refused = assertError(await pending, 409, 'subscription_exists');
  assert.deepEqual(refused.details, { subscription_status: 'none', plan: 'starter' });
  assert.equal(processor.checkoutSessions.get(previous)!.status, 'open', 'the payable session stays payable');
  const current = await sql(t, 'SELECT id FROM checkout_sessions WHERE tenant_id = $1 AND superseded_at IS NULL', [owner.tenantId]);
  assert.deepEqual(current.map((r) => r.id), [previous]);
  // A 409 is recorded for its key: the retry cannot open (or hand out) the expired session again.
  const count = sessionsCreated().length;
  const again = await checkout(owner.tenantId, owner.token, 'deploy-1');
  assertError(again, 409, 'subscription_exists');
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(sessionsCreated().length, count);
});

test('checkout validation: enterprise is 422 plan_requires_sales; starter, and non-https URLs, are 422 validation_failed', async () => {
  const owner = await tenantOwner(t);
  assertError(await checkout(owner.tenantId, owner.token, 'v-1', { ...body, plan: 'enterprise' }), 422, 'plan_requires_sales');
  assertError(await checkout(owner.tenantId, owner.token, 'v-2', { ...body, plan: 'starter' }), 422, 'validation_failed');
  const http = assertError(await checkout(owner.tenantId, owner.token, 'v-3', { ...body, success_url: 'http://app.example.com/ok' }), 422, 'validation_failed');
  assert.equal(http.details.fields[0].path, 'success_url');
  const bad = assertError(await checkout(owner.tenantId, owner.token, 'v-4', { ...body, cancel_url: 'not a url' }), 422, 'validation_failed');
  assert.equal(bad.details.fields[0].path, 'cancel_url');
  // A URL the hosted page later puts in a Location header: a CR/LF or credentials are refused up front.
  const crlf = assertError(await checkout(owner.tenantId, owner.token, 'v-5', { ...body, cancel_url: 'https://app.example.com/\r\nSet-Cookie: a=1' }), 422, 'validation_failed');
  assert.equal(crlf.details.fields[0].path, 'cancel_url');
  const creds = assertError(await checkout(owner.tenantId, owner.token, 'v-6', { ...body, success_url: 'https://user:pw@app.example.com/ok' }), 422, 'validation_failed');
  assert.equal(creds.details.fields[0].path, 'success_url');
});

test('checkout is allowed only without a live subscription (none, canceled, incomplete_expired, unpaid); otherwise 409 subscription_exists', async () => {
  for (const status of ['none', 'canceled', 'incomplete_expired', 'unpaid']) {
    const owner = await tenantOwner(t, { subscriptionStatus: status });
    assertStatus(await checkout(owner.tenantId, owner.token, `ok-${status}`), 201);
  }
  for (const status of ['active', 'trialing', 'past_due', 'incomplete', 'paused']) {
    const owner = await tenantOwner(t, { plan: 'team', subscriptionStatus: status });
    const error = assertError(await checkout(owner.tenantId, owner.token, `no-${status}`), 409, 'subscription_exists');
    assert.equal(error.details.subscription_status, status);
  }
});

test('a Tenant that paid before checks out again as the same processor customer', async () => {
  const owner = await tenantOwner(t, { subscriptionStatus: 'canceled', stripeCustomerId: 'cus_returning' });
  assertStatus(await checkout(owner.tenantId, owner.token, 'again-1'), 201);
  const sent = sessionsCreated().at(-1)!;
  assert.equal(sent.form.customer, 'cus_returning');
  assert.equal(sent.form.customer_email, undefined);
});

test('checkout is for the owner only: billing.manage gets 403 forbidden, anyone else 404 tenant_not_found', async () => {
  const owner = await tenantOwner(t);
  assertError(await checkout(owner.tenantId, (await caller(t, ['billing_admin'])).token, 'a-1'), 403, 'forbidden');
  assertError(await checkout(owner.tenantId, (await caller(t)).token, 'a-2'), 404, 'tenant_not_found');
});

test('checkout: a stranger asking for enterprise gets 404 tenant_not_found, not plan_requires_sales (an unauthorized reader learns nothing)', async () => {
  const owner = await tenantOwner(t);
  const enterprise = { ...body, plan: 'enterprise' };
  assertError(await checkout(owner.tenantId, (await caller(t)).token, 'e-1', enterprise), 404, 'tenant_not_found');
  assertError(await checkout('tnt_00000000000000000000000000', owner.token, 'e-2', enterprise), 404, 'tenant_not_found');
  assertError(await checkout(owner.tenantId, (await caller(t, ['billing_admin'])).token, 'e-3', enterprise), 403, 'forbidden');
  assertError(await checkout(owner.tenantId, owner.token, 'e-4', enterprise), 422, 'plan_requires_sales');
});

test('portal: a Tenant that never paid gets 409 no_billing_account; after payment the owner or billing.manage gets 201 {url, expires_at}', async () => {
  const owner = await tenantOwner(t);
  assertError(await portal(owner.tenantId, owner.token), 409, 'no_billing_account');
  await sql(t, `UPDATE tenants SET stripe_customer_id = 'cus_portal' WHERE id = $1`, [owner.tenantId]);
  const session = assertStatus(await portal(owner.tenantId, owner.token), 201);
  assert.match(session.url, /^https:\/\/billing\.stripe\.test\/p\/session\//);
  assert.ok(Date.parse(session.expires_at) > t.clock.now().getTime(), 'Date.parse(session.expires_at) > t.clock.now().getTime()');
  const sent = processor.requests.filter((r) => r.path === '/v1/billing_portal/sessions').at(-1)!;
  assert.equal(sent.form.customer, 'cus_portal');
  assert.equal(sent.form.return_url, 'https://app.example.com/settings');
  assertStatus(await portal(owner.tenantId, (await caller(t, ['billing_admin'])).token), 201);
  assertError(await portal(owner.tenantId, (await caller(t)).token), 404, 'tenant_not_found');
  assertError(await portal(owner.tenantId, owner.token, { return_url: 'nope' }), 422, 'validation_failed');
});

test('the whole upgrade: checkout, then the processor signs its events with STRIPE_WEBHOOK_SECRET and the Tenant becomes team', async () => {
  const owner = await tenantOwner(t);
  assertStatus(await checkout(owner.tenantId, owner.token, 'flow-1'), 201);
  const sub = subscription({ tenantId: owner.tenantId, id: 'sub_flow', customer: 'cus_flow' });
  assertError(await deliver(t, 'customer.subscription.created', sub, { secret: 'whsec_platform_local_simulator' }), 400, 'invalid_signature'); // the simulator's secret is not this processor's
  assertStatus(await deliver(t, 'customer.subscription.created', sub, { secret: SECRET }), 200);
  assertStatus(await deliver(t, 'checkout.session.completed', { id: 'cs_flow', object: 'checkout.session', client_reference_id: owner.tenantId, metadata: { tenant_id: owner.tenantId }, customer: 'cus_flow', subscription: 'sub_flow' }, { secret: SECRET }), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status], ['team', 'active']);
  assertError(await checkout(owner.tenantId, owner.token, 'flow-2'), 409, 'subscription_exists');
  assertStatus(await portal(owner.tenantId, owner.token), 201);
});

test('without Stripe settings the simulator pages are not served when a processor is configured', async () => {
  const res = await call(t, 'GET', '/billing/simulator/checkout/cs_sim_x', null);
  assert.equal(res.statusCode, 404);
  assert.equal(res.json().error.code, 'not_found');
});

test('processor unreachable: checkout and portal answer 503 billing_unavailable with Retry-After, within a bounded time', async () => {
  const down = await buildApp({ stripeSecretKey: 'sk_test_x', stripeApiBase: `http://127.0.0.1:${await closedPort()}` });
  try {
    const owner = await tenantOwner(down, { stripeCustomerId: 'cus_down' });
    const started = Date.now();
    const res = await down.app.inject({ method: 'POST', url: `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, headers: { authorization: `Bearer ${owner.token}`, 'idempotency-key': 'down-1' }, payload: body });
    const error = assertError(res, 503, 'billing_unavailable');
    assert.equal(error.details.reason, 'unreachable');
    assert.ok(Number(res.headers['retry-after']) > 0, 'Number(res.headers[\'retry-after\']) > 0');
    assert.ok(Date.now() - started < 15_000, 'bounded');
    const p = await down.app.inject({ method: 'POST', url: `/v1/tenants/${owner.tenantId}/billing/portal-sessions`, headers: { authorization: `Bearer ${owner.token}` }, payload: { return_url: 'https://a.example.com' } });
    assert.equal(assertError(p, 503, 'billing_unavailable').details.reason, 'unreachable');
    assert.ok(Number(p.headers['retry-after']) > 0, `the portal's 503 carries Retry-After too (${p.headers['retry-after']})`);
    // The 5xx released the key: a retry runs again (and fails again while the processor is down).
    const retry = await down.app.inject({ method: 'POST', url: `/v1/tenants/${owner.tenantId}/billing/checkout-sessions`, headers: { authorization: `Bearer ${owner.token}`, 'idempotency-key': 'down-1' }, payload: body });
    assertError(retry, 503, 'billing_unavailable');
    assert.equal(retry.headers['idempotent-replayed'], undefined, 'the 503 was not recorded: the retry ran again');
    assert.ok(Number(retry.headers['retry-after']) > 0, 'the retry\'s own 503 carries Retry-After');
  } finally {
    await down.close();
  }
});

test('STRIPE_SECRET_KEY without STRIPE_WEBHOOK_SECRET: processor events are refused (400 invalid_signature), never verified with the public simulator secret, and change nothing', async (c) => {
  assert.equal(loadConfig({ PUBLIC_URL: 'http://localhost:8080', STRIPE_SECRET_KEY: 'sk_test_x' }).stripeWebhookSecret, null);
  assert.equal(loadConfig({ PUBLIC_URL: 'http://localhost:8080' }).stripeWebhookSecret, SIMULATOR_WEBHOOK_SECRET);
  const misconfigured = await buildApp({ stripeSecretKey: 'sk_test_x', stripeApiBase: processor.base, stripeWebhookSecret: null });
  c.after(() => misconfigured.close());
  const owner = await tenantOwner(misconfigured);
  const forged = await deliver(misconfigured, 'customer.subscription.created', subscription({ tenantId: owner.tenantId }), { secret: SIMULATOR_WEBHOOK_SECRET });
  assert.equal(assertError(forged, 400, 'invalid_signature').details.reason, 'webhook_secret_not_configured');
  const tenant = await tenantRow(misconfigured, owner.tenantId);
  assert.equal(tenant.plan, 'starter');
  assert.equal(tenant.subscription_status, 'none');
});

test('checkout: cancel_url must be https too (422 validation_failed); nothing is sent to the processor', async () => {
  const owner = await tenantOwner(t);
  const count = sessionsCreated().length;
  const error = assertError(await checkout(owner.tenantId, owner.token, 'v-http-cancel', { ...body, cancel_url: 'http://app.example.com/billing' }), 422, 'validation_failed');
  assert.equal(error.details.fields[0].path, 'cancel_url');
  assert.equal(sessionsCreated().length, count);
});

test('checkout is a write: on a migrating Tenant it answers 503 service_unavailable with Retry-After and no processor session is created', async () => {
  const owner = await tenantOwner(t, { status: 'migrating' });
  const count = sessionsCreated().length;
  const res = await checkout(owner.tenantId, owner.token, 'migrating-1');
  assertError(res, 503, 'service_unavailable');
  assert.equal(res.headers['retry-after'], '60');
  assert.equal(sessionsCreated().length, count);
});

test('a portal session reports expires_at five minutes from now', async () => {
  const owner = await tenantOwner(t, { stripeCustomerId: 'cus_portal_5m' });
  await atOneInstant(t, async () => {
    const session = assertStatus(await portal(owner.tenantId, owner.token), 201);
    assert.equal(session.expires_at, new Date(t.clock.now().getTime() + 5 * 60_000).toISOString());
  });
});

test('the Idempotency-Key sent to the processor is derived from the caller, the Tenant and the client\'s key: two owners using the same key get two processor sessions', async () => {
  const a = await caller(t);
  const b = await caller(t);
  const orgId = await seedOrganization(t, [{ userId: a.user.id, role: 'org_admin' }, { userId: b.user.id, role: 'org_admin' }]);
  const tenantId = await seedTenant(t, { ownerOrganizationId: orgId });
  const count = sessionsCreated().length;
  const first = assertStatus(await checkout(tenantId, a.token, 'same-client-key'), 201);
  const second = assertStatus(await checkout(tenantId, b.token, 'same-client-key'), 201);
  const sent = sessionsCreated().slice(count);
  assert.equal(sent.length, 2);
  assert.notEqual(sent[0].headers['idempotency-key'], sent[1].headers['idempotency-key']);
  assert.notEqual(first.url, second.url);
  assert.deepEqual(sent.map((r) => r.form.customer_email), [a.user.email, b.user.email]);
});

test('no active processor price with lookup_key team: checkout answers 503 billing_unavailable with Retry-After: 30 and creates no session', async () => {
  const owner = await tenantOwner(t);
  processor.prices.delete('team');
  try {
    const count = sessionsCreated().length;
    const res = await checkout(owner.tenantId, owner.token, 'no-price-1');
    const error = assertError(res, 503, 'billing_unavailable');
    assert.equal(res.headers['retry-after'], '30');
    // The details of every billing_unavailable: the processor operation and a reason.
    assert.deepEqual(error.details, { operation: 'prices.list', reason: 'processor_error' });
    assert.equal(sessionsCreated().length, count);
  } finally {
    processor.prices.set('team', 'price_team_monthly');
  }
});

test('docs/decisions.md "Any Stripe failure is 503 billing_unavailable with Retry-After: 30": a checkout session the processor creates without a URL is one too (details operation checkout.sessions.create)', async () => {
  const owner = await tenantOwner(t);
  processor.checkoutWithoutUrl.on = true;
  try {
    const res = await checkout(owner.tenantId, owner.token, 'no-url-1');
    assert.deepEqual(assertError(res, 503, 'billing_unavailable').details, { operation: 'checkout.sessions.create', reason: 'processor_error' });
    assert.equal(res.headers['retry-after'], '30');
  } finally {
    processor.checkoutWithoutUrl.on = false;
  }
});

test('any processor failure, an error answer as well as no answer, is 503 billing_unavailable with Retry-After: 30', async () => {
  const owner = await tenantOwner(t, { stripeCustomerId: 'cus_refused' });
  processor.refuse.add('/v1/billing_portal/sessions');
  processor.refuse.add('/v1/checkout/sessions');
  try {
    const p = await portal(owner.tenantId, owner.token);
    assert.equal(assertError(p, 503, 'billing_unavailable').details.reason, 'processor_error');
    assert.equal(p.headers['retry-after'], '30');
    const c = await checkout(owner.tenantId, owner.token, 'refused-1');
    assert.equal(assertError(c, 503, 'billing_unavailable').details.reason, 'processor_error');
    assert.equal(c.headers['retry-after'], '30');
  } finally {
    processor.refuse.clear();
  }
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'starter');
});

test('"Any Stripe failure is 503 billing_unavailable with Retry-After: 30 (one retry, 5 s timeout)" (docs/decisions.md, Processor): a failure the processor marks retryable is sent again once, not more, then answers 503', async () => {
  const owner = await tenantOwner(t, { stripeCustomerId: 'cus_busy' });
  assertStatus(await portal(owner.tenantId, owner.token), 201);
  const sent = () => processor.requests.filter((r) => r.method === 'POST' && r.path === '/v1/billing_portal/sessions' && r.form.customer === 'cus_busy');
  const before = sent().length;
  processor.busy.add('/v1/billing_portal/sessions');
  try {
    const p = await portal(owner.tenantId, owner.token);
    assert.equal(assertError(p, 503, 'billing_unavailable').details.reason, 'processor_error');
    assert.equal(p.headers['retry-after'], '30');
  } finally {
    processor.busy.clear();
  }
  const attempts = sent().slice(before);
  assert.equal(attempts.length, 2, 'the request and one retry');
  assert.equal(attempts[1].headers['idempotency-key'], attempts[0].headers['idempotency-key'], 'the retry is the same request');
});

test('the portal allows payment method update, invoice view and cancel at period end, not plan switching: portal sessions open under one processor configuration saying so', async () => {
  const owner = await tenantOwner(t, { stripeCustomerId: 'cus_portal_features' });
  assertStatus(await portal(owner.tenantId, owner.token), 201);
  assertStatus(await portal(owner.tenantId, owner.token), 201);
  const created = processor.requests.filter((r) => r.method === 'POST' && r.path === '/v1/billing_portal/configurations');
  assert.equal(created.length, 1, 'one configuration, reused by later sessions');
  const features = Object.fromEntries(Object.entries(created[0].form).filter(([k]) => k.startsWith('features[')));
  assert.deepEqual(features, {
    'features[payment_method_update][enabled]': 'true',
    'features[invoice_history][enabled]': 'true',
    'features[subscription_cancel][enabled]': 'true',
    'features[subscription_cancel][mode]': 'at_period_end',
    'features[subscription_update][enabled]': 'false',
    'features[customer_update][enabled]': 'false',
  });
  const sessions = processor.requests.filter((r) => r.path === '/v1/billing_portal/sessions').slice(-2);
  assert.match(sessions[0].form.configuration ?? '', /^bpc_test_/);
  assert.equal(sessions[1].form.configuration, sessions[0].form.configuration);
});

test('a portal configuration deactivated at the processor after this process found it (an operator in the dashboard) is taken up again: the next portal session answers 201 under it, reactivated, not 503 until a restart', async () => {
  const owner = await tenantOwner(t, { stripeCustomerId: 'cus_portal_deactivated' });
  assertStatus(await portal(owner.tenantId, owner.token), 201);
  const ours = processor.configurations.filter((c) => c.metadata.platform_portal === 'platform_portal_v1');
  assert.equal(ours.length, 1);
  ours[0].active = false;
  assertStatus(await portal(owner.tenantId, owner.token), 201);
  assert.equal(ours[0].active, true, 'the configuration is active again');
  assert.equal(processor.configurations.filter((c) => c.metadata.platform_portal === 'platform_portal_v1').length, 1, 'no second configuration');
  const last = processor.requests.filter((r) => r.path === '/v1/billing_portal/sessions' && r.form.customer === 'cus_portal_deactivated').at(-1)!;
  assert.equal(last.form.configuration, ours[0].id);
  assertStatus(await portal(owner.tenantId, owner.token), 201);
});

// Lock order needs two transactions at once: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('checkout.session.completed takes the Tenant before the checkout session row it marks completed or drops, in the order a checkout takes them (the Tenant, then its sessions), so the two at once cannot deadlock (PostgreSQL): while a checkout holds the Tenant the event waits holding no session row, then applies (200)', async () => {
  const owner = await tenantOwner(t);
  const paid = await opened(owner, 'order-1');
  const completed = { id: paid, object: 'checkout.session', client_reference_id: owner.tenantId, metadata: { tenant_id: owner.tenantId }, customer: `cus_${paid}`, subscription: `sub_${paid}` };
  const { probeLocked, result } = await probeWhileHeld(
    t,
    ['SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE', [owner.tenantId]],
    () => deliver(t, 'checkout.session.completed', completed, { secret: SECRET }),
    ['SELECT 1 FROM checkout_sessions WHERE id = $1 FOR UPDATE NOWAIT', [paid]],
  );
  assertStatus(result, 200);
  assert.equal(probeLocked, true, 'the event waited for the Tenant without holding the session row');
  // Applied before its subscription's own event (the processor's order is not guaranteed), the completion
  // keeps the row, marked completed (the Tenant is subscribing); that event drops it.
  assert.deepEqual(await sql(t, 'SELECT id, subscription_id, completed_at IS NOT NULL AS completed FROM checkout_sessions WHERE id = $1', [paid]), [{ id: paid, subscription_id: `sub_${paid}`, completed: true }]);
  assert.equal((await tenantRow(t, owner.tenantId)).stripe_customer_id, `cus_${paid}`);
  assertStatus(await deliver(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: `sub_${paid}`, customer: `cus_${paid}` }), { secret: SECRET }), 200);
  assert.deepEqual(await sql(t, 'SELECT id FROM checkout_sessions WHERE id = $1', [paid]), [], 'the completed session is dropped');
});
