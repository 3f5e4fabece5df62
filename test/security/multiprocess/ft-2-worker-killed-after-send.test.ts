// FT-2 [MP]: kill -9 a delivery worker after it sent the POST and before it recorded the outcome.
// Two server processes with workers share one PostgreSQL. Each round suspends a user (one
// `user.suspended` event to a platform subscription); the loopback receiver leaves the first attempt
// unanswered, so the process that sent it (found by the attempt's TCP port) holds the claim, and that
// process is SIGKILLed. The other process must not send the delivery while the claim's lease runs
// (the shared development clock is not moved for 2 s of real time), and must send it once the lease
// has lapsed (the clock moved past CLAIM_LEASE_SECONDS): the same delivery and event id, the same
// signed bytes under a fresh timestamp, attempt 2; then the delivery is recorded as succeeded. At no
// moment may two requests for one delivery be open at the receiver.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, sleep, socketPorts, type ServerProcess } from './cluster.js';
import { adminKey, Budget, expectStatus, seconds, settled } from './fixtures.js';
import { Receiver, type Delivery } from './receiver.js';
import { CLAIM_LEASE_SECONDS } from '../../../src/modules/webhooks/dispatch.js';
import { verifySignature } from '../../../src/modules/webhooks/signature.js';

/** Each round costs a restart of the killed process (about 2–10 s on a busy 2-core machine). */
const ROUNDS = 3;
/** Real time the surviving worker gets to (wrongly) take the claimed delivery: 20 of its idle polls. */
const LEASE_WATCH_MS = 2000;

let cluster: Cluster;
let receiver: Receiver;
let admin: string;
let secret: string;
before(async () => {
  receiver = await Receiver.start();
  cluster = await Cluster.start({ workers: true, env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: '1' } });
  admin = await adminKey(cluster);
  const sub = expectStatus(
    await settled(() => cluster.a.call('POST', '/v1/webhooks', { token: admin, body: { scope: 'platform', url: receiver.url(), events: ['user.suspended'] } })),
    201,
  );
  secret = sub.signing_secret;
});
after(async () => {
  await cluster?.close();
  await receiver?.close();
});

/** The process whose open sockets include the sender's port of `d`. */
function senderOf(d: Delivery): ServerProcess | undefined {
  return cluster.nodes.find((n) => n.alive && socketPorts(n.pid).has(d.remotePort));
}

const tOf = (d: Delivery) => Number(/(?:^|,)t=(\d+)/.exec(String(d.headers['platform-signature']))?.[1]);

interface DeliveryRow {
  status: string;
  attempt: number;
  claim_token: string | null;
  claimed_until: Date | null;
}
const deliveryRow = async (id: string) =>
  (await cluster.sql<DeliveryRow>('SELECT status, attempt, claim_token, claimed_until FROM webhook_deliveries WHERE id = $1', [id]))[0];

test(`FT-2 a delivery worker killed after sending the POST and before recording it: another process re-claims the delivery once its lease lapses (same event id, attempt + 1), never while it runs, and never two workers on one delivery at once (${ROUNDS} kills)`, async () => {
  const budget = new Budget(ROUNDS, 2, 50);
  const redeliveryMs: number[] = [];
  let rounds = 0;
  for (; budget.more(rounds); rounds++) {
    // One event: a new user, suspended. Its first attempt is held unanswered.
    const user = expectStatus(await settled(() => cluster.a.call('POST', '/v1/users', { token: admin, body: { email: `ft2-${Date.now()}-${rounds}@example.com`, status: 'active' } })), 201);
    const held = new Set<string>();
    receiver.hold = (d) => d.data?.user_id === user.id && d.attempt === 1 && (held.add(d.headers['platform-delivery-id'] as string), true);
    expectStatus(await cluster.b.call('POST', `/v1/users/${user.id}/suspend`, { token: admin, body: { reason: 'FT-2' } }), 200);
    const first = await receiver.next((d) => d.data?.user_id === user.id, 15_000);
    assert.ok(first, `round ${rounds}: no delivery of the user.suspended event arrived`);
    const deliveryId = first.headers['platform-delivery-id'] as string;
    assert.equal(first.attempt, 1);
    assert.ok(held.has(deliveryId), 'held.has(deliveryId)');

    // The sender holds the claim; kill it before the attempt's 5 s deadline lets it record anything.
    const sender = senderOf(first);
    assert.ok(sender, `round ${rounds}: no process owns the sending port ${first.remotePort}`);
    const survivor = cluster.other(sender);
    await sender.kill();
    const claimed = await deliveryRow(deliveryId);
    assert.equal(claimed.status, 'pending');
    assert.equal(claimed.attempt, 1, 'the claim counted the attempt');
    assert.ok(claimed.claim_token, 'the killed worker still holds the claim');

    // While the lease runs, the surviving worker leaves the delivery alone.
    await sleep(LEASE_WATCH_MS);
    const during = receiver.deliveries.filter((d) => d.headers['platform-delivery-id'] === deliveryId);
    assert.equal(during.length, 1, `round ${rounds}: the delivery was sent again while the killed worker's lease ran`);

    // The lease lapses: the survivor re-claims and sends attempt 2 of the same delivery.
    const lapsed = Date.now();
    await cluster.advanceClock(CLAIM_LEASE_SECONDS + 1);
    const second = await receiver.next((d) => d.headers['platform-delivery-id'] === deliveryId && d.attempt === 2, 20_000);
    assert.ok(second, `round ${rounds}: the delivery was not re-sent after the lease lapsed`);
    redeliveryMs.push(second.receivedAt - lapsed);
    assert.equal(senderOf(second), survivor, 'the surviving process sent the re-claimed attempt');
    assert.equal(second.id, first.id, 'the same wev_ event id');
    assert.equal(second.headers['platform-event-id'], first.headers['platform-event-id']);
    assert.equal(second.body, first.body, 'the same signed bytes');
    assert.ok(tOf(second) >= tOf(first) + CLAIM_LEASE_SECONDS, `a fresh signature timestamp (${tOf(first)} → ${tOf(second)})`);
    const now = Math.floor((await cluster.now()).getTime() / 1000);
    assert.ok(verifySignature(String(second.headers['platform-signature']), secret, second.body, now), 'attempt 2 verifies with the subscription secret');

    // Attempt 2 was answered 200: recorded as succeeded, the claim released.
    const deadline = Date.now() + 10_000;
    let row = await deliveryRow(deliveryId);
    while (row.status === 'pending' && Date.now() < deadline) {
      await sleep(50);
      row = await deliveryRow(deliveryId);
    }
    assert.deepEqual({ status: row.status, attempt: row.attempt, claim_token: row.claim_token }, { status: 'succeeded', attempt: 2, claim_token: null });
    assert.equal(receiver.deliveries.filter((d) => d.headers['platform-delivery-id'] === deliveryId).length, 2, 'exactly two attempts reached the receiver');
    await sender.start();
  }
  receiver.hold = null;
  assert.equal(receiver.maxConcurrentPerDelivery, 1, 'two requests for one delivery were open at once');
  assert.deepEqual(cluster.unexpectedExits(), []);
  console.log(
    `FT-2: kills ${budget.describe(rounds)}; time to redelivery after the lease lapsed ${redeliveryMs.map((ms) => seconds(ms)).join(' / ')} s; concurrent sends of one delivery 0`,
  );
});
