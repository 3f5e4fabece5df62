// WH-3: delivery rules on the service clock. The retry schedule, 3 exhausted deliveries →
// unhealthy, 5 days → disabled with the owner mailed, PATCH healthy without backfill, 410, a 302 and
// an answer at 5.1 s are proven in test/webhooks/delivery.test.ts and health.test.ts. This file adds
// DELETE dropping retries already under way, the other redirect codes, and test calls that fail or
// succeed on a healthy, unhealthy and disabled subscription without touching its health.
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import {
  assertStatus, call, DAY, deliveriesOf, emitEvent, Receiver, RETRY_SCHEDULE, runDelivery, sql, startReceiverApp, stopReceiverApp, type TestApp,
} from '../../webhooks/support.js';
import { figure } from './support.js';
import { withStoppedClock } from '../../helpers/app.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => ({ t, admin, receiver } = await startReceiverApp()));
after(() => stopReceiverApp({ t, receiver }));

const fail500 = (path: string) => receiver.routes.set(path, (_req, res) => res.writeHead(500).end('down'));
const statusOf = async (id: string) => assertStatus(await call(t, 'GET', `/v1/webhooks/${id}`, admin), 200);

/** A platform subscription on its own receiver path, removed after the test if still there. */
async function subscribe(c: TestContext, path: string, events: string[]): Promise<string> {
  const { id } = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url(path), events }), 201);
  c.after(() => sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [id]).then(() => undefined));
  return id;
}

const attemptStarts = async (id: string, eventId: string) =>
  (await sql<{ last_attempt_at: Date }>(t, 'SELECT last_attempt_at FROM webhook_deliveries WHERE subscription_id = $1 AND event_id = $2', [id, eventId]))[0].last_attempt_at.getTime();

test('WH-3 [CLK] a receiver answering 500: attempts at 0, +1 m, +5 m, +30 m, +2 h, +12 h, then `failed`; "DELETE drops queued retries": a subscription deleted after its first attempt gets no retry and nothing new', async (c) => {
  // On a stopped clock: the test's own run time (over a second on a loaded machine between the first
  // attempt and the first advance) must not count toward a retry's delay.
  await withStoppedClock(t, async () => {
    const kept = await subscribe(c, '/wh3-kept', ['user.deleted']);
    const dropped = await subscribe(c, '/wh3-dropped', ['user.deleted']);
    fail500('/wh3-kept');
    fail500('/wh3-dropped');
    const eventId = await emitEvent(t, 'user.deleted', { user_id: 'usr_wh3_schedule' });
    await runDelivery(t);
    const [queued] = await deliveriesOf(t, dropped);
    assert.deepEqual([queued.status, queued.attempt], ['pending', 1], 'a retry is queued for the subscription about to be deleted');
    assert.equal((await call(t, 'DELETE', `/v1/webhooks/${dropped}`, admin)).statusCode, 204);
    assert.equal((await deliveriesOf(t, dropped)).length, 0, 'its queued retry is gone');
    await emitEvent(t, 'user.deleted', { user_id: 'usr_wh3_after_delete' });

    const deviationsMs: number[] = [];
    let previous = await attemptStarts(kept, eventId);
    for (const [i, delay] of RETRY_SCHEDULE.entries()) {
      t.clock.advance(delay - 1);
      await runDelivery(t);
      assert.equal(receiver.at('/wh3-kept').filter((r) => r.body.data.user_id === 'usr_wh3_schedule').length, i + 1, `attempt ${i + 2} not before +${delay} s`);
      t.clock.advance(1);
      await runDelivery(t);
      const got = receiver.at('/wh3-kept').filter((r) => r.body.data.user_id === 'usr_wh3_schedule');
      assert.equal(got.length, i + 2, `attempt ${i + 2} at +${delay} s`);
      assert.equal(got.at(-1)!.headers['platform-delivery-attempt'], String(i + 2));
      const started = await attemptStarts(kept, eventId);
      deviationsMs.push(Math.abs(started - previous - delay * 1000));
      previous = started;
    }
    const row = (await deliveriesOf(t, kept)).find((d) => d.event_id === eventId)!;
    assert.deepEqual([row.status, row.attempt, row.next_attempt_at, row.response_status], ['failed', 6, null, 500]);
    t.clock.advance(DAY);
    await runDelivery(t);
    assert.equal(receiver.at('/wh3-kept').filter((r) => r.body.data.user_id === 'usr_wh3_schedule').length, 6, 'no seventh attempt');
    assert.equal(receiver.at('/wh3-dropped').length, 1, 'the deleted subscription got its first attempt only');
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = $1', [dropped]))[0].n, 0, 'nothing new enqueued');
    const worst = Math.max(...deviationsMs);
    figure('WH-3', `schedule deviation ${Math.round(worst / 1000)} s (worst ${worst} ms of test run time over 5 retries); requests to the deleted subscription after DELETE 0`);
    assert.ok(worst < 1000, `each retry started within 1 s of its slot (${deviationsMs.join(', ')} ms)`);
  });
});

test('WH-3 "3xx → failure and the Location target receives 0 requests" for 300, 301, 303, 307 and 308 (302: delivery.test.ts): each attempt fails with its status and is retried', async (c) => {
  const codes = [300, 301, 303, 307, 308];
  const subs = new Map<number, string>();
  for (const code of codes) {
    subs.set(code, await subscribe(c, `/wh3-${code}`, ['user.reactivated']));
    receiver.routes.set(`/wh3-${code}`, (_req, res) => res.writeHead(code, { location: receiver.url('/wh3-location') }).end());
  }
  await emitEvent(t, 'user.reactivated', { user_id: 'usr_wh3_redirect' });
  await runDelivery(t);
  for (const code of codes) {
    const [row] = await deliveriesOf(t, subs.get(code)!);
    assert.deepEqual([row.status, row.attempt, row.response_status], ['pending', 1, code], `${code}: a failed attempt, retried later`);
    assert.match(row.error!, new RegExp(`^redirect ${code} not followed`));
    assert.equal(receiver.at(`/wh3-${code}`).length, 1);
  }
  assert.equal(receiver.at('/wh3-location').length, 0, 'no Location was requested');
});

test('WH-3 "/test works while disabled and does not count toward health": failing test calls leave a healthy subscription\'s count, a succeeding one leaves an unhealthy one unhealthy, and a disabled one still gets them', async (c) => {
  const id = await subscribe(c, '/wh3-health', ['user.suspended']);
  fail500('/wh3-health');
  const exhaust = async (n: number) => {
    await emitEvent(t, 'user.suspended', { user_id: `usr_wh3_h${n}` });
    await runDelivery(t);
    for (const delay of RETRY_SCHEDULE) {
      t.clock.advance(delay);
      await runDelivery(t);
    }
  };
  const testCall = async () => assertStatus(await call(t, 'POST', `/v1/webhooks/${id}/test`, admin), 202).id as string;
  const health = async () => {
    const s = await statusOf(id);
    return [s.status, s.consecutive_failures];
  };
  await exhaust(1);
  await exhaust(2);
  assert.deepEqual(await health(), ['healthy', 2]);

  for (let i = 0; i < 3; i++) await testCall();
  await runDelivery(t);
  const tests = (await deliveriesOf(t, id)).filter((d) => d.kind === 'test');
  assert.deepEqual(tests.map((d) => [d.status, d.response_status]), [['failed', 500], ['failed', 500], ['failed', 500]], 'three failed test calls, no retries');
  assert.deepEqual(await health(), ['healthy', 2], 'failed test calls are not counted');

  await exhaust(3);
  assert.deepEqual(await health(), ['unhealthy', 3], 'a third exhausted event delivery is');

  receiver.routes.set('/wh3-health', (_req, res) => res.writeHead(200).end());
  const ok = await testCall();
  await runDelivery(t);
  assert.equal((await deliveriesOf(t, id)).find((d) => d.id === ok)!.status, 'succeeded');
  assert.deepEqual(await health(), ['unhealthy', 3], 'a succeeding test call does not make it healthy');

  t.clock.advance(5 * DAY);
  await t.deps.jobs.runNow('webhook-health');
  assert.deepEqual(await health(), ['disabled', 3]);
  const seen = receiver.at('/wh3-health').length;
  const whileDisabled = await testCall();
  await runDelivery(t);
  const got = receiver.at('/wh3-health');
  assert.equal(got.length, seen + 1, 'the test call went out while disabled');
  assert.equal(got.at(-1)!.body.type, 'webhook.test');
  assert.equal(got.at(-1)!.headers['platform-delivery-id'], whileDisabled);
  assert.deepEqual(await health(), ['disabled', 3], 'and changed nothing');
});
