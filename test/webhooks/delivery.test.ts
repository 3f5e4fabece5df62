// Delivery (Part B Events): the envelope and headers, the signature checked by our verifier and by
// the stripe package as an outside client, the retry schedule on the service clock, what counts as
// success, redirects, the 5-second deadline, rotation overlap, api_version pinning. Test calls,
// redelivery and the logs: delivery-log.test.ts; the clock stepping back: delivery-clock.test.ts.
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import Stripe from 'stripe';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { verifySignature } from '../../src/modules/webhooks/index.js';
import {
  assertStatus, call, deliveriesOf, emitEvent, grant, newApp, person, Receiver, runDelivery, sql, startReceiverApp, stopReceiverApp, subscribePlatform, until,
} from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
const stripe = new Stripe('sk_test_platform_outside_client');
before(async () => ({ t, admin, receiver } = await startReceiverApp()));
after(() => stopReceiverApp({ t, receiver }));

const subscribe = (c: TestContext, events: string[], path?: string) => subscribePlatform(c, t, admin, receiver, events, path);
const unix = () => Math.floor(t.clock.now().getTime() / 1000);

test('a delivery is a POST of the documented envelope and headers, signed so that our verifier and stripe.webhooks.constructEvent accept it', async (c) => {
  const sub = await subscribe(c, ['entitlement.granted']);
  const application = await newApp(t, admin);
  const user = await person(t);
  const ent = await grant(t, admin, user.id, application.id);
  await runDelivery(t);
  const [got] = receiver.at(sub.path);
  assert.ok(got, 'delivered');
  assert.equal(receiver.at(sub.path).length, 1);
  const [event] = await sql(t, `SELECT id, created_at FROM outbox_events WHERE type = 'entitlement.granted' AND data->'entitlement'->>'id' = $1`, [ent.id]);
  assert.deepEqual(Object.keys(got.body).sort(), ['api_version', 'application_id', 'created_at', 'data', 'id', 'test_mode', 'type']);
  assert.equal(got.body.id, event.id);
  assert.match(got.body.id, /^wev_/);
  assert.equal(got.body.type, 'entitlement.granted');
  assert.equal(got.body.api_version, sub.api_version);
  assert.equal(got.body.application_id, application.id);
  assert.equal(got.body.test_mode, false);
  assert.equal(got.body.created_at, event.created_at.toISOString());
  assert.equal(got.body.data.entitlement.id, ent.id);
  assert.equal(got.headers['content-type'], 'application/json');
  assert.equal(got.headers['user-agent'], 'Platform-Webhooks/1.0');
  assert.equal(got.headers['platform-event-id'], event.id);
  assert.equal(got.headers['platform-event-type'], 'entitlement.granted');
  assert.match(String(got.headers['platform-delivery-id']), /^dlv_/);
  assert.equal(got.headers['platform-delivery-attempt'], '1');
  const signature = String(got.headers['platform-signature']);
  assert.match(signature, /^t=\d+,v1=[0-9a-f]{64}$/);
  assert.equal(verifySignature(signature, sub.secret, got.raw, unix()), true);
  const parsed = stripe.webhooks.constructEvent(got.raw, signature, sub.secret, 300, undefined, t.clock.now().getTime());
  assert.equal((parsed as unknown as { id: string }).id, event.id);
  assert.throws(() => stripe.webhooks.constructEvent(got.raw, signature, 'whsec_wrong', 300, undefined, t.clock.now().getTime()));

  const [row] = await deliveriesOf(t, sub.id);
  assert.equal(row.status, 'succeeded');
  assert.equal(row.attempt, 1);
  assert.equal(row.response_status, 200);
  const listed = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, admin), 200);
  assert.deepEqual(Object.keys(listed.data[0]).sort(), ['attempt', 'created_at', 'duration_ms', 'error', 'event_id', 'event_type', 'id', 'next_retry_at', 'response_status', 'status']);
  assert.equal(listed.data[0].id, got.headers['platform-delivery-id']);
  assert.deepEqual([listed.data[0].status, listed.data[0].response_status, listed.data[0].error], ['succeeded', 200, null]);
  assert.ok(Number.isInteger(listed.data[0].duration_ms) && listed.data[0].duration_ms >= 0, `an attempt records its duration_ms, got ${listed.data[0].duration_ms}`);
  assert.notEqual(assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 200).last_delivery_at, null);
});

test('retries: attempts at 0, +1 m, +5 m, +30 m, +2 h and +12 h on the service clock, each signed fresh with the same event id; then failed with the first 1 KB of the error body', async (c) => {
  // On a stopped clock: the test's own run time on a loaded machine must not count toward the limits.
  await withStoppedClock(t, async () => {
    const sub = await subscribe(c, ['role.assigned']);
    receiver.routes.set(sub.path, (_req, res) => res.writeHead(500).end('e'.repeat(3000)));
    const eventId = await emitEvent(t, 'role.assigned', { user_id: 'usr_x', role_id: 'role_x', application_id: null });
    await runDelivery(t);
    assert.equal(receiver.at(sub.path).length, 1);
    for (const [n, delay] of [[2, 60], [3, 300], [4, 1800], [5, 7200], [6, 43200]]) {
      t.clock.advance(delay - 1);
      await runDelivery(t);
      assert.equal(receiver.at(sub.path).length, n - 1, `attempt ${n} not before +${delay} s`);
      t.clock.advance(1);
      await runDelivery(t);
      assert.equal(receiver.at(sub.path).length, n, `attempt ${n} at +${delay} s`);
      const [row] = await deliveriesOf(t, sub.id);
      assert.equal(row.attempt, n);
      assert.equal(row.status, n < 6 ? 'pending' : 'failed');
    }
    const got = receiver.at(sub.path);
    assert.deepEqual(got.map((g) => g.headers['platform-delivery-attempt']), ['1', '2', '3', '4', '5', '6']);
    assert.ok(got.every((g) => g.headers['platform-event-id'] === eventId && g.body.id === eventId), 'got.every((g) => g.headers[\'platform-event-id\'] === eventId && g.body.id === eventId)');
    assert.equal(new Set(got.map((g) => g.headers['platform-delivery-id'])).size, 1);
    const stamps = got.map((g) => Number(/t=(\d+)/.exec(String(g.headers['platform-signature']))![1]));
    assert.equal(new Set(stamps).size, 6, 'a fresh t on every attempt');
    assert.ok(got.every((g) => verifySignature(String(g.headers['platform-signature']), sub.secret, g.raw, Number(/t=(\d+)/.exec(String(g.headers['platform-signature']))![1]))), 'got.every((g) => verifySignature(String(g.headers[\'platform-signature\']), sub.secret, g.raw, Number(/t=(\\d+)/.exec(String(g.headers[\'platform-signature\']))![1])))');

    t.clock.advance(86400);
    await runDelivery(t);
    assert.equal(receiver.at(sub.path).length, 6, 'no seventh attempt');
    const [listed] = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries?status=failed`, admin), 200).data;
    assert.equal(listed.status, 'failed');
    assert.equal(listed.attempt, 6);
    assert.equal(listed.response_status, 500);
    assert.equal(listed.next_retry_at, null);
    assert.equal(listed.error, 'e'.repeat(1024));
    assert.equal(assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 200).consecutive_failures, 1);
  });
});

test('success is a 2xx: 204 and 299 succeed; a 300 and a 302 fail and a Location is never requested', async (c) => {
  const ok = await subscribe(c, ['user.reactivated']);
  const last2xx = await subscribe(c, ['user.reactivated']);
  const first3xx = await subscribe(c, ['user.reactivated']);
  const moved = await subscribe(c, ['user.reactivated']);
  receiver.routes.set(ok.path, (_req, res) => res.writeHead(204).end());
  receiver.routes.set(last2xx.path, (_req, res) => res.writeHead(299).end());
  receiver.routes.set(first3xx.path, (_req, res) => res.writeHead(300, { location: `${receiver.url('/elsewhere')}` }).end());
  receiver.routes.set(moved.path, (_req, res) => res.writeHead(302, { location: `${receiver.url('/elsewhere')}` }).end());
  await emitEvent(t, 'user.reactivated', { user_id: 'usr_redirect' });
  await runDelivery(t);
  assert.equal((await deliveriesOf(t, ok.id))[0].status, 'succeeded');
  const [edge] = await deliveriesOf(t, last2xx.id);
  assert.deepEqual([edge.status, edge.response_status], ['succeeded', 299]);
  const [choices] = await deliveriesOf(t, first3xx.id);
  assert.deepEqual([choices.status, choices.response_status, choices.error], ['pending', 300, 'redirect 300 not followed'], 'a 300 is a redirect: failed, retried later');
  const [redirected] = await deliveriesOf(t, moved.id);
  assert.equal(redirected.status, 'pending', 'a failed attempt, retried later');
  assert.equal(redirected.response_status, 302);
  assert.match(redirected.error!, /redirect 302 not followed/);
  assert.equal(receiver.at('/elsewhere').length, 0);
});

test('an answer after 5 seconds is a failure (the deadline is 5 s per attempt)', async (c) => {
  const slow = await subscribe(c, ['user.deleted']);
  receiver.routes.set(slow.path, (_req, res) => setTimeout(() => res.writeHead(200).end('late'), 5100));
  await emitEvent(t, 'user.deleted', { user_id: 'usr_slow' });
  const started = Date.now();
  await runDelivery(t);
  const elapsed = Date.now() - started;
  const [row] = await deliveriesOf(t, slow.id);
  assert.equal(row.status, 'pending');
  assert.equal(row.response_status, null);
  assert.match(row.error!, /timeout/);
  // Not cut before the deadline; a deadline later than the answer (5.1 s) would have taken it (status
  // pending and no response_status above), so no upper bound on a loaded machine's wall clock here.
  assert.ok(elapsed >= 4900, `ended by the deadline, not before (${elapsed} ms)`);
});

test('a hostile receiver streaming a huge error body: only the first 1 KB is read and kept, and the attempt ends at once', async (c) => {
  const flood = await subscribe(c, ['entitlement.member_scope_changed']);
  let sent = 0;
  let open: { from: number; to?: number } | undefined;
  receiver.routes.set(flood.path, (_req, res) => {
    open = { from: Date.now() };
    res.on('close', () => (open!.to = Date.now()));
    res.writeHead(500, { 'content-type': 'text/plain' });
    const chunk = Buffer.alloc(64 * 1024, 'x');
    const pump = () => {
      while (sent < 50 * 1024 * 1024 && res.write(chunk)) sent += chunk.length;
      if (sent >= 50 * 1024 * 1024) res.end();
    };
    res.on('drain', pump);
    res.on('close', () => res.off('drain', pump));
    pump();
  });
  await emitEvent(t, 'entitlement.member_scope_changed', { entitlement: { id: 'ent_flood' } });
  await runDelivery(t);
  const [row] = await deliveriesOf(t, flood.id);
  assert.equal(row.response_status, 500);
  assert.equal(row.error, 'x'.repeat(1024));
  assert.ok(sent < 50 * 1024 * 1024, `the body was cut off (${sent} bytes written)`);
  // "At once": how long the receiver's connection stayed open, from its request to the close (not the
  // whole run, whose database work is what a loaded machine slows): some milliseconds, hundreds on a
  // loaded machine; an attempt that held the connection to its deadline, 5,000. 2,500 is far from both.
  await until(() => open?.to !== undefined, 30_000, 'the receiver to see the connection close');
  assert.ok(open!.to! - open!.from < 2500, `the connection stayed open ${open!.to! - open!.from} ms`);
});

test('"Only the first 1 KB of an error body is kept": a body with a NUL byte is kept (U+FFFD in its place) and the other subscriptions\' attempts in the batch are recorded', async (c) => {
  const hostile = await subscribe(c, ['entitlement.expired']);
  const healthy = await subscribe(c, ['entitlement.expired']);
  receiver.routes.set(hostile.path, (_req, res) => res.writeHead(500).end('bad\u0000body'));
  receiver.routes.set(healthy.path, (_req, res) => res.writeHead(200).end('ok'));
  const eventId = await emitEvent(t, 'entitlement.expired', { entitlement: { id: 'ent_nul_body' } });
  await runDelivery(t);
  const [bad] = await deliveriesOf(t, hostile.id);
  assert.deepEqual([bad.event_id, bad.status, bad.attempt, bad.response_status, bad.error], [eventId, 'pending', 1, 500, 'bad\uFFFDbody']);
  const listed = assertStatus(await call(t, 'GET', `/v1/webhooks/${hostile.id}/deliveries`, admin), 200).data[0];
  assert.equal(listed.error, 'bad\uFFFDbody');
  const [good] = await deliveriesOf(t, healthy.id);
  assert.deepEqual([good.event_id, good.status, good.attempt, good.response_status], [eventId, 'succeeded', 1, 200]);
  // After the retry delay and the claim lease: the hostile one is retried, the delivered one never again.
  t.clock.advance(120);
  await runDelivery(t);
  assert.equal(receiver.at(healthy.path).length, 1, 'the delivered event is not sent again');
  assert.equal(receiver.at(hostile.path).length, 2);
  assert.equal((await deliveriesOf(t, hostile.id))[0].attempt, 2);
});

test('a subscription whose signing secret cannot be opened (sealed with a key this process lacks) gets a failed attempt, retried on the schedule, and nothing is sent to it; the other subscriptions\' attempts in the batch are recorded and never sent again', async (c) => {
  const unopenable = await subscribe(c, ['entitlement.expired']);
  const healthy = await subscribe(c, ['entitlement.expired']);
  receiver.routes.set(unopenable.path, (_req, res) => res.writeHead(200).end('ok'));
  receiver.routes.set(healthy.path, (_req, res) => res.writeHead(200).end('ok'));
  await sql(t, `UPDATE webhook_subscriptions SET signing_secret = 'enc:v1:unknownkid:AAAAAAAAAAAAAAAA:AAAAAAAAAAAAAAAAAAAAAAAA' WHERE id = $1`, [unopenable.id]);
  const eventId = await emitEvent(t, 'entitlement.expired', { entitlement: { id: 'ent_sealed_away' } });
  await runDelivery(t);
  const [bad] = await deliveriesOf(t, unopenable.id);
  assert.deepEqual([bad.event_id, bad.status, bad.attempt, bad.response_status], [eventId, 'pending', 1, null]);
  assert.match(bad.error ?? '', /signing secret cannot be opened/);
  const [good] = await deliveriesOf(t, healthy.id);
  assert.deepEqual([good.event_id, good.status, good.attempt, good.response_status], [eventId, 'succeeded', 1, 200]);
  // After the retry delay and the claim lease: the failed one is tried again, the delivered one never again.
  t.clock.advance(120);
  await runDelivery(t);
  assert.equal(receiver.at(healthy.path).length, 1, 'the delivered event is not sent again');
  assert.equal(receiver.at(unopenable.path).length, 0, 'nothing goes out unsigned');
  assert.equal((await deliveriesOf(t, unopenable.id))[0].attempt, 2);
});

test('rotate-secret: deliveries carry two v1 entries (new and old secret) for 24 hours, then one', async (c) => {
  // On a stopped clock: the 24 hours are judged to the second.
  await withStoppedClock(t, () => rotationOverlap(c));
});
async function rotationOverlap(c: TestContext): Promise<void> {
  const sub = await subscribe(c, ['organization.member_added']);
  const rotated = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/rotate-secret`, admin), 200);
  await emitEvent(t, 'organization.member_added', { organization_id: 'org_x', user_id: 'usr_r', role: 'member' });
  await runDelivery(t);
  const [first] = receiver.at(sub.path);
  const header = String(first.headers['platform-signature']);
  assert.match(header, /^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
  assert.equal(verifySignature(header, rotated.signing_secret, first.raw, unix()), true);
  assert.equal(verifySignature(header, sub.secret, first.raw, unix()), true);
  stripe.webhooks.constructEvent(first.raw, header, sub.secret, 300, undefined, t.clock.now().getTime());
  stripe.webhooks.constructEvent(first.raw, header, rotated.signing_secret, 300, undefined, t.clock.now().getTime());

  t.clock.advance(24 * 3600 - 1);
  await emitEvent(t, 'organization.member_added', { organization_id: 'org_x', user_id: 'usr_r1', role: 'member' });
  await runDelivery(t);
  const lastSecond = receiver.at(sub.path)[1];
  assert.match(String(lastSecond.headers['platform-signature']), /^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/, 'a second before the 24 hours end: two');
  assert.equal(verifySignature(String(lastSecond.headers['platform-signature']), sub.secret, lastSecond.raw, unix()), true);

  t.clock.advance(1);
  await emitEvent(t, 'organization.member_added', { organization_id: 'org_x', user_id: 'usr_r2', role: 'member' });
  await runDelivery(t);
  const second = receiver.at(sub.path)[2];
  const later = String(second.headers['platform-signature']);
  assert.match(later, /^t=\d+,v1=[0-9a-f]{64}$/, 'at 24 hours: one');
  assert.equal(verifySignature(later, rotated.signing_secret, second.raw, unix()), true);
  assert.equal(verifySignature(later, sub.secret, second.raw, unix()), false);
}

test('api_version is pinned per subscription: payloads carry the subscription\'s version, and PATCH moves it forward', async (c) => {
  const sub = await subscribe(c, ['entitlement.expired']);
  await sql(t, `UPDATE webhook_subscriptions SET api_version = '2025-06-01' WHERE id = $1`, [sub.id]); // as if created under an older version
  await emitEvent(t, 'entitlement.expired', { entitlement: { id: 'ent_v1' } });
  await runDelivery(t);
  assert.equal(receiver.at(sub.path)[0].body.api_version, '2025-06-01');
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { api_version: '2026-01-01' }), 200).api_version, '2026-01-01');
  await emitEvent(t, 'entitlement.expired', { entitlement: { id: 'ent_v2' } });
  await runDelivery(t);
  assert.equal(receiver.at(sub.path)[1].body.api_version, '2026-01-01');
});

test('"reject when t is more than 5 minutes old": verifySignature accepts a delivery\'s header exactly 300 s after t and rejects it at 301 s', async (c) => {
  const sub = await subscribe(c, ['organization.member_removed']);
  await emitEvent(t, 'organization.member_removed', { organization_id: 'org_tol', user_id: 'usr_tol', role: 'member' });
  await runDelivery(t);
  const [sent] = receiver.at(sub.path);
  const header = String(sent.headers['platform-signature']);
  const ts = Number(/^t=(\d+),/.exec(header)![1]);
  assert.equal(verifySignature(header, sub.secret, sent.raw, ts + 300), true, '5 minutes old: accepted');
  assert.equal(verifySignature(header, sub.secret, sent.raw, ts + 301), false, 'more than 5 minutes old: rejected');
});
