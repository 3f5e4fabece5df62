// Webhook retries when the clock steps back (docs/decisions.md, "Clocks of several processes"). The
// delivery itself and its retry schedule: delivery.test.ts.
import { test, before, after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { assertStatus, call, deliveriesOf, person, Receiver, runDelivery, startReceiverApp, stopReceiverApp, subscribePlatform } from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => ({ t, admin, receiver } = await startReceiverApp()));
after(() => stopReceiverApp({ t, receiver }));

const subscribe = (c: TestContext, events: string[], path?: string) => subscribePlatform(c, t, admin, receiver, events, path);

// The clock stepping back (docs/decisions.md, "Clocks of several processes"): a retry is set at its
// attempt's start plus the back-off; one lying further ahead than its attempt's back-off plus the skew
// bound was set before the clock stepped back.
async function failingThenSuspended(c: TestContext) {
  const sub = await subscribe(c, ['user.suspended']);
  receiver.routes.set(sub.path, (_req, res) => res.writeHead(500).end('down'));
  const user = await person(t);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/suspend`, admin, {}), 200);
  const sent = () => receiver.at(sub.path).filter((r) => r.body.data.user_id === user.id);
  return { sub, sent };
}

test('a retry set before the clock stepped back an hour goes out at the next run of the delivery worker, not an hour later (a next attempt further ahead than its attempt\'s back-off plus the skew bound is due at once); the schedule then keeps its back-offs on the clock as it now reads', async (c) => {
  await withStoppedClock(t, async () => {
    const { sub, sent } = await failingThenSuspended(c);
    await runDelivery(t);
    assert.equal(sent().length, 1, 'the first attempt failed: retried 1 minute later');
    t.clock.advance(-3600);
    try {
      await runDelivery(t);
      assert.equal(sent().length, 2, 'attempt 2 at the next run, not an hour later');
      assert.equal(sent()[1].headers['platform-delivery-attempt'], '2');
      const [row] = await deliveriesOf(t, sub.id);
      assert.deepEqual([row.status, row.attempt], ['pending', 2]);
      assert.equal(row.next_attempt_at!.getTime(), t.clock.now().getTime() + 300_000, 'attempt 3 is 5 minutes after attempt 2, on the clock as it now reads');
      t.clock.advance(299);
      await runDelivery(t);
      assert.equal(sent().length, 2, 'attempt 3 not before +5 m');
      t.clock.advance(1);
      receiver.routes.set(sub.path, (_req, res) => res.writeHead(204).end());
      await runDelivery(t);
      assert.equal(sent().length, 3, 'attempt 3 at +5 m');
      const [listed] = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, admin), 200).data;
      assert.deepEqual([listed.status, listed.attempt, listed.next_retry_at], ['succeeded', 3, null]);
    } finally {
      t.clock.advance(3600);
    }
  });
});

test('the bound is per attempt: a retry waiting its 2-hour back-off after attempt 4 is due at once after the clock stepped back an hour (a step shorter than the longest back-off, 12 hours)', async (c) => {
  await withStoppedClock(t, async () => {
    const { sub, sent } = await failingThenSuspended(c);
    await runDelivery(t);
    for (const delay of [60, 300, 1800]) {
      t.clock.advance(delay);
      await runDelivery(t);
    }
    assert.equal(sent().length, 4);
    const [waiting] = await deliveriesOf(t, sub.id);
    assert.equal(waiting.next_attempt_at!.getTime(), t.clock.now().getTime() + 7200_000, 'attempt 5 waits 2 hours');
    t.clock.advance(-3600);
    try {
      await runDelivery(t);
      assert.equal(sent().length, 5, 'attempt 5 at the next run, not 3 hours later');
      assert.equal(sent()[4].headers['platform-delivery-attempt'], '5');
      const [row] = await deliveriesOf(t, sub.id);
      assert.equal(row.next_attempt_at!.getTime(), t.clock.now().getTime() + 43200_000, 'attempt 6 is 12 hours after attempt 5');
    } finally {
      t.clock.advance(3600);
    }
  });
});

test('a retry set by a process whose clock is ahead by less than the skew bound (9 s of 10) still waits its back-off: it is sent at its slot on that clock, not before', async (c) => {
  await withStoppedClock(t, async () => {
    const { sub, sent } = await failingThenSuspended(c);
    t.clock.advance(9);
    await runDelivery(t);
    t.clock.advance(-9);
    assert.equal(sent().length, 1);
    const [row] = await deliveriesOf(t, sub.id);
    assert.equal(row.next_attempt_at!.getTime(), t.clock.now().getTime() + 69_000, 'set 60 s after an attempt stamped 9 s ahead');
    await runDelivery(t);
    assert.equal(sent().length, 1, 'not due at once');
    t.clock.advance(68);
    await runDelivery(t);
    assert.equal(sent().length, 1, 'attempt 2 not before its slot');
    t.clock.advance(1);
    await runDelivery(t);
    assert.equal(sent().length, 2, 'attempt 2 at its slot');
  });
});
