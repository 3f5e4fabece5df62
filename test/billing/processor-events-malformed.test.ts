// Signed processor events whose content the service cannot store or show as the spec has it: 400 in
// the error envelope (the processor retries, nothing is half-applied), never a 500, nothing changed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { TestApp } from '../helpers/app.js';
import { assertError, assertStatus, buildApp, call, tenantOwner, tenantRow } from '../tenancy/support.js';
import { postEvent, processorEvent, processorEventRows, sign, subscription } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildApp();
});
after(() => t.close());

const eventRows = (id: string) => processorEventRows(t, id);

test('a signed event whose instants (created, a period start or end) lie outside the dates the service stores answers 400 in the error envelope, never a 500, and changes nothing', async () => {
  const owner = await tenantOwner(t);
  const base = subscription({ tenantId: owner.tenantId });
  const cases: [string, ReturnType<typeof processorEvent>][] = [
    ['created 1e308', { ...processorEvent(t, 'customer.subscription.created', base), created: 1e308 }],
    ['created in year 10000', { ...processorEvent(t, 'customer.subscription.created', base), created: 253402300800 }],
    ['period end 1e308', processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, end: 1e308 }))],
    ['period start before year 1', processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, start: -1e14 }))],
  ];
  for (const [label, event] of cases) {
    const payload = JSON.stringify(event);
    const error = assertError(await postEvent(t, payload, sign(t, payload)), 400, 'bad_request');
    assert.doesNotMatch(error.message, /unexpected/i, label);
    assert.equal((await eventRows(event.id)).length, 0, label);
  }
  const tenant = await tenantRow(t, owner.tenantId);
  assert.equal(tenant.plan, 'starter');
  assert.equal(tenant.subscription_status, 'none');
  assert.equal(tenant.updated_at.getTime(), tenant.created_at.getTime());
});

test('a signed event whose processor ids (event, subscription, customer) are longer than 255 characters answers 400 in the error envelope, never a 500, and changes nothing; ids of exactly 255 characters apply', async () => {
  const owner = await tenantOwner(t);
  const long = randomBytes(3000).toString('hex');
  const cases: [string, ReturnType<typeof processorEvent>][] = [
    ['event id', processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId }), { id: `evt_${long}` })],
    ['subscription id', processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: `sub_${long}` }))],
    ['customer id', processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, customer: `cus_${long}` }))],
    ['checkout customer', processorEvent(t, 'checkout.session.completed', { id: 'cs_1', object: 'checkout.session', client_reference_id: owner.tenantId, customer: { id: `cus_${long}` }, subscription: 'sub_1' })],
  ];
  for (const [label, event] of cases) {
    const payload = JSON.stringify(event);
    assertError(await postEvent(t, payload, sign(t, payload)), 400, 'bad_request');
    assert.equal((await eventRows(event.id)).length, 0, label);
  }
  const tenant = await tenantRow(t, owner.tenantId);
  assert.equal(tenant.subscription_status, 'none');
  assert.equal(tenant.stripe_customer_id, null);
  assert.equal(tenant.updated_at.getTime(), tenant.created_at.getTime());
  // At most 255 is allowed: ids of exactly 255 characters are the processor's and apply.
  const at255 = (prefix: string) => `${prefix}${long}`.slice(0, 255);
  const event = processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: at255('sub_'), customer: at255('cus_') }), { id: at255('evt_') });
  const payload = JSON.stringify(event);
  assert.deepEqual(assertStatus(await postEvent(t, payload, sign(t, payload)), 200), { received: true });
  assert.equal((await eventRows(event.id))[0].outcome, 'applied');
  const applied = await tenantRow(t, owner.tenantId);
  assert.deepEqual([applied.plan, applied.subscription_status, applied.stripe_subscription_id, applied.stripe_customer_id], ['team', 'active', at255('sub_'), at255('cus_')]);
});

test('a signed subscription event whose currency is no three-letter code, whose status is no processor status or whose add-on amount is no whole number of cents from 0 answers 400 in the error envelope, never a 500, and changes nothing: the subscription shows "currency (lowercase code)" and "amount in cents"', async () => {
  const owner = await tenantOwner(t);
  const base = () => subscription({ tenantId: owner.tenantId, id: 'sub_shapes', customer: 'cus_shapes', plan: 'enterprise', addOns: [{ code: 'isolated_tenancy', unitAmount: 50000 }] }) as any;
  const withAddOn = (price: Record<string, unknown>, quantity: unknown = 1) => {
    const sub = base();
    sub.items.data[1] = { ...sub.items.data[1], quantity, price: { ...sub.items.data[1].price, ...price } };
    return sub;
  };
  const cases: [string, Record<string, unknown>][] = [
    ['a 500-character currency', { ...base(), currency: 'x'.repeat(500) }],
    ['a two-letter currency', { ...base(), currency: 'us' }],
    ['a currency with a symbol', { ...base(), currency: 'u$d' }],
    ['a 300-character status', { ...base(), status: 's'.repeat(300) }],
    ['a status with capitals and punctuation', { ...base(), status: 'Active!' }],
    ['an amount of 1e30 cents', withAddOn({ unit_amount: 1e30 })],
    ['a negative amount', withAddOn({ unit_amount: -5.5 })],
    ['an amount that is text', withAddOn({ unit_amount: 'abc' })],
    ['a decimal amount that is no number', withAddOn({ unit_amount: null, unit_amount_decimal: 'abc' })],
    ['a negative quantity', withAddOn({}, -1)],
    ['a fractional quantity', withAddOn({}, 1.5)],
  ];
  for (const [label, object] of cases) {
    const event = processorEvent(t, 'customer.subscription.created', object);
    const payload = JSON.stringify(event);
    const error = assertError(await postEvent(t, payload, sign(t, payload)), 400, 'bad_request');
    assert.match(error.message, /^The event is malformed: /, label);
    assert.equal((await eventRows(event.id)).length, 0, label);
  }
  const tenant = await tenantRow(t, owner.tenantId);
  assert.deepEqual([tenant.plan, tenant.subscription_status, tenant.stripe_subscription_id], ['starter', 'none', null]);
  assert.equal(tenant.updated_at.getTime(), tenant.created_at.getTime());

  // The processor's own forms apply: an upper-case code is shown lowercase, a status added later is
  // kept as sent, and a price that is not a whole number of cents (unit_amount null, unit_amount_decimal
  // stated) times its quantity is rounded to cents.
  const event = processorEvent(t, 'customer.subscription.created', { ...withAddOn({ unit_amount: null, unit_amount_decimal: '1234.5' }, 3), currency: 'EUR', status: 'active' });
  const payload = JSON.stringify(event);
  assertStatus(await postEvent(t, payload, sign(t, payload)), 200);
  const view = assertStatus(await call(t, 'GET', `/v1/tenants/${owner.tenantId}/subscription`, owner.token), 200);
  assert.deepEqual([view.plan, view.subscription_status, view.currency, view.add_ons], ['enterprise', 'active', 'eur', [{ code: 'isolated_tenancy', amount: 3704 }]]);
});

test('a correctly signed body that is not JSON, or not an event (no string id or type, no number created, no data.object), answers 400 in the error envelope, never a 500, and records and changes nothing', async () => {
  const owner = await tenantOwner(t);
  const event = processorEvent(t, 'customer.subscription.created', subscription({ tenantId: owner.tenantId, id: 'sub_shape', customer: 'cus_shape' }));
  const { data: _data, ...noData } = event;
  const cases: [string, string, string][] = [
    ['not JSON', '{"id": "evt_cut", "type": "customer.subscription.created", ', 'malformed_json'],
    ['JSON null', 'null', 'bad_request'],
    ['a JSON array', JSON.stringify([event]), 'bad_request'],
    ['an id that is a number', JSON.stringify({ ...event, id: 42 }), 'bad_request'],
    ['no type', JSON.stringify({ ...event, type: undefined }), 'bad_request'],
    ['created as text', JSON.stringify({ ...event, created: String(event.created) }), 'bad_request'],
    ['no data', JSON.stringify(noData), 'bad_request'],
    ['data without object', JSON.stringify({ ...event, data: {} }), 'bad_request'],
    ['data.object null', JSON.stringify({ ...event, data: { object: null } }), 'bad_request'],
    ['data.object text', JSON.stringify({ ...event, data: { object: 'sub_shape' } }), 'bad_request'],
  ];
  for (const [label, payload, code] of cases) {
    assertError(await postEvent(t, payload, sign(t, payload)), 400, code);
    assert.equal((await eventRows(event.id)).length, 0, label);
  }
  const tenant = await tenantRow(t, owner.tenantId);
  assert.deepEqual([tenant.plan, tenant.subscription_status, tenant.stripe_subscription_id], ['starter', 'none', null]);
  assert.equal(tenant.updated_at.getTime(), tenant.created_at.getTime());
  // The same event, whole, applies.
  const payload = JSON.stringify(event);
  assertStatus(await postEvent(t, payload, sign(t, payload)), 200);
  assert.equal((await tenantRow(t, owner.tenantId)).plan, 'team');
});
