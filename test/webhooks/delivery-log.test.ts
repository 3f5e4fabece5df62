// Test calls and redeliveries (sent outside the retry schedule, at most 10 waiting), the delivery log
// and its filters, per-attempt pino logs, and the first 1 KB of an error body kept. The delivery
// itself: delivery.test.ts.
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pino from 'pino';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import {
  assertError, assertStatus, call, deliveriesOf, emitEvent, newApp, Receiver, runDelivery, sql, startReceiverApp, stopReceiverApp, subscribePlatform,
} from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => ({ t, admin, receiver } = await startReceiverApp()));
after(() => stopReceiverApp({ t, receiver }));

const subscribe = (c: TestContext, events: string[], path?: string) => subscribePlatform(c, t, admin, receiver, events, path);

test('webhook.test goes out regardless of the events filter and of a disabled status, and never counts toward health', async (c) => {
  const sub = await subscribe(c, ['user.suspended']);
  receiver.routes.set(sub.path, (_req, res) => res.writeHead(500).end('down'));
  await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = $2, consecutive_failures = 2 WHERE id = $1`, [sub.id, t.clock.now()]);
  // A bystander subscribed to every event: the test call is for `sub` only.
  const bystander = await subscribe(c, ['*']);
  const accepted = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
  assert.match(accepted.id, /^dlv_/);
  assert.equal(accepted.event_type, 'webhook.test');
  await runDelivery(t);
  const [got] = receiver.at(sub.path);
  assert.equal(got.body.type, 'webhook.test');
  assert.equal(typeof got.body.data.message, 'string');
  assert.equal(got.headers['platform-delivery-id'], accepted.id);
  const [row] = await deliveriesOf(t, sub.id);
  assert.equal(row.status, 'failed', 'one attempt, no retries');
  const after = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 200);
  assert.equal(after.status, 'disabled');
  assert.equal(after.consecutive_failures, 2);
  const others = await sql(t, `SELECT count(*)::int AS n FROM webhook_deliveries WHERE event_id = $1`, [row.event_id]);
  assert.equal(others[0].n, 1, 'the test event reaches this subscription only');
  assert.deepEqual(receiver.at(bystander.path), [], 'a subscription to * receives no other subscription\'s webhook.test');
});

test('redeliver: 202, the same event id under a new delivery id, sent once outside the schedule; unknown or older than 30 days: 404 delivery_not_found', async (c) => {
  const sub = await subscribe(c, ['application.review_status_changed']);
  const eventId = await emitEvent(t, 'application.review_status_changed', { application_id: 'app_x', review_status: 'approved', review_notes: null });
  await runDelivery(t);
  const [original] = await deliveriesOf(t, sub.id);
  const again = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${original.id}/redeliver`, admin), 202);
  assert.notEqual(again.id, original.id);
  assert.equal(again.event_id, eventId);
  await runDelivery(t);
  const got = receiver.at(sub.path);
  assert.equal(got.length, 2);
  assert.equal(got[1].body.id, eventId);
  assert.equal(got[1].headers['platform-event-id'], eventId);
  assert.equal(got[1].headers['platform-delivery-id'], again.id);
  assert.equal(got[1].headers['platform-delivery-attempt'], '1');
  assert.equal(got[1].raw, got[0].raw, 'the same payload');
  const byEvent = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries?event_id=${eventId}`, admin), 200);
  assert.equal(byEvent.data.length, 2);
  assertError(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/dlv_01J0000000000000000000000/redeliver`, admin), 404, 'delivery_not_found');

  t.clock.advance(31 * 86400);
  assertError(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${original.id}/redeliver`, admin), 404, 'delivery_not_found');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, admin), 200).data, [], 'the log keeps 30 days');
  const swept = await t.deps.jobs.runNow('webhook-health');
  assert.ok((swept.deliveries_pruned as number) >= 2, '(swept.deliveries_pruned as number) >= 2');
  assert.equal((await deliveriesOf(t, sub.id)).length, 0);
});

test('redeliver "within the 30-day window" to the second: a delivery exactly 30 days old, still in the log, is redelivered (202, the same event id); a second later it is 404 delivery_not_found, as the log no longer lists it', async (c) => {
  const sub = await subscribe(c, ['user.suspended']);
  const eventId = await withStoppedClock(t, async () => {
    const eventId = await emitEvent(t, 'user.suspended', { user_id: 'usr_window_edge' });
    await runDelivery(t);
    const [original] = await deliveriesOf(t, sub.id);
    t.clock.advance(30 * 86400);
    const listed = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, admin), 200).data;
    assert.deepEqual(listed.map((d: any) => d.id), [original.id], 'exactly 30 days old: still in the log');
    const again = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${original.id}/redeliver`, admin), 202);
    assert.equal(again.event_id, eventId);
    t.clock.advance(1);
    assertError(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${original.id}/redeliver`, admin), 404, 'delivery_not_found');
    return eventId;
  });
  await runDelivery(t);
  assert.deepEqual(receiver.at(sub.path).map((r) => r.body.id), [eventId, eventId], 'the first delivery and its one redelivery');
});

test('test calls and redeliveries pile up without bound no more (API4:2023 Unrestricted Resource Consumption): at most 10 wait to be sent per subscription; the 11th, parallel calls included, answers 429 rate_limited with Retry-After and writes nothing; another subscription is not held up; once they are sent there is room again', async (c) => {
  const app = await newApp(t, admin);
  const owner = app.owner.token;
  const path = '/manual';
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', owner, { scope: app.id, url: receiver.url(path), events: ['*'] }), 201);
  c.after(() => sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]).then(() => undefined));
  const other = await subscribe(c, ['user.suspended']);
  const tries = await Promise.all(Array.from({ length: 15 }, () => call(t, 'POST', `/v1/webhooks/${sub.id}/test`, owner)));
  assert.deepEqual(tries.map((r) => r.statusCode).sort(), [...Array(10).fill(202), ...Array(5).fill(429)]);
  const refused = await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, owner);
  assert.equal(refused.statusCode, 429, refused.body);
  assert.equal(refused.json().error.code, 'rate_limited');
  assert.equal(refused.headers['retry-after'], '5');
  const first = (await deliveriesOf(t, sub.id))[0];
  const redelivery = await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${first.id}/redeliver`, owner);
  assert.equal(redelivery.statusCode, 429, redelivery.body);
  assert.equal((await deliveriesOf(t, sub.id)).length, 10, 'nothing written beyond the 10');
  const audited = await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action IN ('webhook.test_sent', 'webhook.redelivered') AND target_id = $1`, [sub.id]);
  assert.equal(audited[0].n, 10);
  assertStatus(await call(t, 'POST', `/v1/webhooks/${other.id}/test`, admin), 202);

  await runDelivery(t);
  assert.equal(receiver.at(path).length, 10);
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, owner), 202);
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${first.id}/redeliver`, owner), 202);
});

test('the delivery log filters by status, event_id and since', async (c) => {
  const sub = await subscribe(c, ['access.granted']);
  const first = await emitEvent(t, 'access.granted', { user_id: 'usr_a', application_id: 'app_a', reason: 'entitlement_granted', entitlement_status: 'active' });
  await runDelivery(t);
  t.clock.advance(10);
  const boundary = t.clock.now().toISOString();
  receiver.routes.set(sub.path, (_req, res) => res.writeHead(503).end());
  const second = await emitEvent(t, 'access.granted', { user_id: 'usr_b', application_id: 'app_a', reason: 'entitlement_granted', entitlement_status: 'active' });
  await runDelivery(t);
  const list = async (q: string) => assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries?${q}`, admin), 200).data.map((d: any) => d.event_id);
  assert.deepEqual(await list(''), [second, first]);
  assert.deepEqual(await list('status=succeeded'), [first]);
  assert.deepEqual(await list('status=pending'), [second]);
  assert.deepEqual(await list(`event_id=${first}`), [first]);
  assert.deepEqual(await list(`since=${encodeURIComponent(boundary)}`), [second]);
  // docs/conventions.md: `since` of webhook deliveries is inclusive: a delivery created at that very instant is listed.
  const [row] = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries?event_id=${second}`, admin), 200).data;
  assert.deepEqual(await list(`since=${encodeURIComponent(row.created_at)}`), [second], 'since is inclusive');
  assert.deepEqual(await list(`since=${encodeURIComponent(new Date(Date.parse(row.created_at) + 1).toISOString())}`), [], 'a millisecond later: nothing');
});

test('every attempt is logged through pino with the delivery, event, attempt, status and duration', async (c) => {
  const sub = await subscribe(c, ['entitlement.deleted']);
  const lines: any[] = [];
  const original = t.deps.log;
  t.deps.log = pino({ level: 'info' }, new Writable({ write: (chunk, _e, done) => (lines.push(JSON.parse(String(chunk))), done()) })) as never;
  c.after(() => {
    t.deps.log = original;
  });
  await emitEvent(t, 'entitlement.deleted', { entitlement: { id: 'ent_log' } });
  await runDelivery(t);
  const line = lines.find((l) => l.subscription_id === sub.id);
  assert.ok(line, 'a log line for the attempt');
  assert.equal(line.msg, 'webhook attempt succeeded');
  assert.equal(line.attempt, 1);
  assert.equal(line.response_status, 200);
  assert.equal(line.event_type, 'entitlement.deleted');
  assert.match(line.webhook_delivery_id, /^dlv_/);
  assert.equal(typeof line.duration_ms, 'number');
});

test('redeliver is sent "outside the retry schedule": one attempt, a failing redelivery is not retried', async (c) => {
  const sub = await subscribe(c, ['entitlement.revoked']);
  const eventId = await emitEvent(t, 'entitlement.revoked', { entitlement: { id: 'ent_redeliver_once' } });
  await runDelivery(t);
  const [original] = await deliveriesOf(t, sub.id);
  receiver.routes.set(sub.path, (_req, res) => res.writeHead(500).end('down'));
  const again = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${original.id}/redeliver`, admin), 202);
  await runDelivery(t);
  for (const delay of [60, 300, 1800, 7200, 43200]) {
    t.clock.advance(delay);
    await runDelivery(t);
  }
  const sent = receiver.at(sub.path).filter((r) => r.headers['platform-delivery-id'] === again.id);
  assert.equal(sent.length, 1, 'one attempt only');
  const row = (await deliveriesOf(t, sub.id)).find((d) => d.id === again.id)!;
  assert.deepEqual([row.event_id, row.status, row.attempt, row.next_attempt_at, row.response_status], [eventId, 'failed', 1, null, 500]);
});

test('"Only the first 1 KB of an error body is kept" also for a redirect answer with a long body', async (c) => {
  const sub = await subscribe(c, ['user.suspended']);
  receiver.routes.set(sub.path, (_req, res) => res.writeHead(302, { location: receiver.url('/elsewhere-long') }).end('r'.repeat(3000)));
  await emitEvent(t, 'user.suspended', { user_id: 'usr_long_redirect' });
  await runDelivery(t);
  const [row] = await deliveriesOf(t, sub.id);
  assert.equal(row.response_status, 302);
  assert.match(row.error!, /^redirect 302 not followed: r+$/);
  assert.equal(row.error!.length, 1024, 'at most 1 KB kept');
  const listed = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, admin), 200).data[0];
  assert.equal(listed.error.length, 1024);
  assert.equal(receiver.at('/elsewhere-long').length, 0);
});

test('"Only the first 1 KB of an error body is kept" cuts between characters: a body of 4-byte characters keeps the whole ones within 1 KB, never a U+FFFD the receiver did not send', async (c) => {
  const sub = await subscribe(c, ['user.reactivated']);
  const redirect = await subscribe(c, ['user.reactivated']);
  receiver.routes.set(sub.path, (_req, res) => res.writeHead(500).end('a' + '\u{1F600}'.repeat(600)));
  receiver.routes.set(redirect.path, (_req, res) => res.writeHead(302, { location: receiver.url('/elsewhere-emoji') }).end('r'.repeat(996) + '\u{1F600}'.repeat(7)));
  await emitEvent(t, 'user.reactivated', { user_id: 'usr_multibyte_body' });
  await runDelivery(t);
  const [row] = await deliveriesOf(t, sub.id);
  assert.equal(row.response_status, 500);
  assert.equal(row.error, 'a' + '\u{1F600}'.repeat(255), '1 + 255 * 4 = 1,021 bytes: the 256th character would not fit whole');
  const listed = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, admin), 200).data[0];
  assert.equal(listed.error, 'a' + '\u{1F600}'.repeat(255));
  const [cut] = await deliveriesOf(t, redirect.id);
  assert.equal(cut.response_status, 302);
  // 27 + 996 UTF-16 units of text, then a character of two: the 1,024-unit cut would keep half of it.
  assert.equal(cut.error, 'redirect 302 not followed: ' + 'r'.repeat(996), 'no half character (a lone surrogate, stored as U+FFFD) at the end');
});
