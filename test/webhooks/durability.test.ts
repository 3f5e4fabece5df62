// Durability and isolation of delivery: concurrent workers in two "processes" never send one attempt
// twice (SKIP LOCKED + lease); a worker that dies holding a claim is taken over after the lease with
// attempt + 1; a hanging receiver never delays another subscription. (Crash after commit: crash.test.ts.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { secondProcess } from '../foundation/support/ops.js';
import { runDeliveryPass, startWebhookWorker } from '../../src/modules/webhooks/index.js';
import { claimDue } from '../../src/modules/webhooks/dispatch.js';
import { closeWebhookTransport } from '../../src/modules/webhooks/transport.js';
import { buildApp, call, createWebhook, deliveriesOf, emitEvent, platformKey, Receiver, runDelivery, sql, until } from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => {
  t = await buildApp();
  admin = await platformKey(t);
  receiver = await Receiver.start();
});
after(async () => {
  await closeWebhookTransport(t.deps);
  await receiver.close();
  await t.close();
});

test('workers of two processes, four passes at once, deliver each attempt exactly once', async () => {
  const second = await secondProcess(t);
  try {
    const sub = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/race'), events: ['user.reactivated'] });
    for (let i = 0; i < 120; i++) await emitEvent(t, 'user.reactivated', { user_id: `usr_race${i}` });
    const passes = [t.deps, second.deps, t.deps, second.deps].map((deps) => runDeliveryPass(deps, { batchSize: 10 }));
    const results = await Promise.all(passes);
    assert.equal(results.reduce((n, r) => n + r.relayed, 0), 120, 'each event relayed once');
    assert.equal(results.reduce((n, r) => n + r.attempted, 0), 120, 'each delivery attempted once');
    const got = receiver.at('/race');
    assert.equal(got.length, 120);
    assert.equal(new Set(got.map((g) => g.headers['platform-delivery-id'])).size, 120, 'no delivery sent twice');
    assert.ok(got.every((g) => g.headers['platform-delivery-attempt'] === '1'), 'got.every((g) => g.headers[\'platform-delivery-attempt\'] === \'1\')');
    const rows = await deliveriesOf(t, sub.id);
    assert.equal(rows.length, 120);
    assert.ok(rows.every((r) => r.status === 'succeeded' && r.attempt === 1), 'rows.every((r) => r.status === \'succeeded\' && r.attempt === 1)');
    await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
  } finally {
    await closeWebhookTransport(second.deps);
    await second.close();
  }
});

test('a worker that died holding a claim (after sending, before recording) is taken over after the lease: same event id, attempt + 1; its late write is ignored', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/lease'), events: ['user.deleted'] });
  const eventId = await emitEvent(t, 'user.deleted', { user_id: 'usr_lease' });
  await runDeliveryPass(t.deps, { maxRounds: 0 }); // relay only
  const [claimed] = await claimDue(t.deps, 10, 'dead-worker');
  assert.equal(claimed.event_id, eventId);
  await runDelivery(t);
  assert.equal(receiver.at('/lease').length, 0, 'still claimed by the dead worker');
  t.clock.advance(61);
  await runDelivery(t);
  const [got] = receiver.at('/lease');
  assert.equal(got.headers['platform-event-id'], eventId);
  assert.equal(got.headers['platform-delivery-attempt'], '2');
  const { recordOutcomes } = await import('../../src/modules/webhooks/outcomes.js');
  await recordOutcomes(t.deps, [{ delivery: claimed, token: 'dead-worker', result: { ok: false, responseStatus: 500, durationMs: 1, error: 'late' } }]);
  const [row] = await deliveriesOf(t, sub.id);
  assert.equal(row.status, 'succeeded');
  assert.equal(row.attempt, 2);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('a worker that died holding the 6th and last attempt: the attempt is sent again after the lease as attempt 6 (Platform-Delivery-Attempt stays within 1 to 6), and its failure ends the delivery', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/last-lease'), events: ['user.deleted'] });
  const eventId = await emitEvent(t, 'user.deleted', { user_id: 'usr_lastlease' });
  await runDeliveryPass(t.deps, { maxRounds: 0 }); // relay only
  await sql(t, 'UPDATE webhook_deliveries SET attempt = 5 WHERE subscription_id = $1', [sub.id]);
  const [claimed] = await claimDue(t.deps, 10, 'dead-worker');
  assert.equal(claimed.event_id, eventId);
  assert.equal(claimed.attempt, 6);
  receiver.routes.set('/last-lease', (_req, res) => res.writeHead(500).end());
  t.clock.advance(61);
  await runDelivery(t);
  const got = receiver.at('/last-lease');
  assert.deepEqual(got.map((g) => g.headers['platform-delivery-attempt']), ['6']);
  const [row] = await deliveriesOf(t, sub.id);
  assert.deepEqual({ status: row.status, attempt: row.attempt }, { status: 'failed', attempt: 6 });
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

// Ordinal, not timed: commit-to-first-attempt latency is measured by `npm run bench webhook-throughput`
// (a latency bound here failed on a loaded CI machine). A worker that waited for its attempts before
// claiming again would send the next fast delivery only once the hanging one had ended at 5 s.
// The waits are long (30 s) on purpose: the claim is the ordinal check below, not the wait, and a
// 4 s wait for one delivery was tighter than the 5 s hanging attempt the test compares against
// (a loaded machine failed the wait, not the claim).
test('the worker delivers concurrently: a hanging receiver never delays another subscription: every later delivery to a fast one is made while the hanging attempt is still open, and the hanging one ends by its 5 s deadline', async () => {
  const hang = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/hang'), events: ['entitlement.updated'] });
  const fast = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/fast'), events: ['entitlement.updated', 'entitlement.revoked'] });
  let hangClosed: number | undefined;
  receiver.routes.set('/hang', (_req, res) => res.on('close', () => (hangClosed = Date.now()))); // never answers
  const worker = startWebhookWorker(t.deps, { idleMs: 50 });
  const later = 3; // few: every one must arrive within the 5 s the hanging attempt stays open, on a loaded machine too
  const openAtArrival: boolean[] = [];
  try {
    await emitEvent(t, 'entitlement.updated', { entitlement: { id: 'ent_h0' }, changed_fields: ['ends_at'] });
    await until(() => receiver.at('/fast').length === 1 && receiver.at('/hang').length === 1, 30_000, 'both receivers');
    for (let i = 1; i <= later; i++) {
      await emitEvent(t, 'entitlement.revoked', { entitlement: { id: `ent_f${i}` } });
      await until(() => receiver.at('/fast').length === i + 1, 30_000, `fast delivery ${i}`);
      openAtArrival.push(hangClosed === undefined || hangClosed > receiver.at('/fast')[i].at);
    }
    assert.equal(receiver.at('/hang').length, 1, 'the hanging receiver got its one request');
    const [pending] = await deliveriesOf(t, hang.id);
    assert.equal(pending.status, 'pending');
    assert.deepEqual(openAtArrival, new Array(later).fill(true), 'each fast delivery was made while the hanging attempt was open');
  } finally {
    await worker.stop();
  }
  const [hung] = await deliveriesOf(t, hang.id);
  assert.match(hung.error ?? '', /timeout/, 'the hanging attempt ended by its 5 s deadline');
  assert.equal((await deliveriesOf(t, fast.id)).filter((r) => r.status === 'succeeded').length, later + 1);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = ANY($1::text[])', [[hang.id, fast.id]]);
});

test('the worker remembers a bounded number of subscriptions: after 40 failing subscriptions were deleted, its claim statement names at most the bound, not every subscription it ever sent to', async () => {
  // The claim statement's per-subscription room ($5) is what a worker sends to the database several
  // times a second; it named every subscription ever held below the start, deleted ones included.
  const named: number[] = [];
  const scoped = t.deps.database.scoped.bind(t.deps.database);
  t.deps.database.scoped = (scope) => {
    const db = scoped(scope);
    return {
      ...db,
      query: (text: string, params?: unknown[]) => {
        if (text.includes('UPDATE webhook_deliveries d SET claim_token')) named.push(Object.keys(JSON.parse(String(params![4]))).length);
        return db.query(text, params);
      },
    } as typeof db;
  };
  receiver.routes.set('/gone', (_req, res) => res.writeHead(500).end('gone'));
  const subs: { id: string }[] = [];
  for (let i = 0; i < 40; i++) subs.push(await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/gone'), events: ['organization.member_removed'] }));
  const worker = startWebhookWorker(t.deps, { idleMs: 20, rememberedSubscriptions: 10 });
  try {
    await emitEvent(t, 'organization.member_removed', { organization: { id: 'org_gone' }, user: { id: 'usr_gone' } });
    await until(() => receiver.at('/gone').length === 40, 60_000, '40 failed attempts');
    await until(async () => (await sql(t, "SELECT 1 FROM webhook_deliveries WHERE subscription_id = ANY($1::text[]) AND attempt = 1 AND claim_token IS NULL AND error IS NOT NULL", [subs.map((s) => s.id)])).length === 40, 30_000, 'outcomes recorded');
    for (const sub of subs) assert.equal((await call(t, 'DELETE', `/v1/webhooks/${sub.id}`, admin)).statusCode, 204);
    const seen = named.length;
    await until(() => named.length > seen + 2, 30_000, 'later claims');
    assert.ok(Math.max(...named.slice(seen)) <= 10, `the claim statement names ${Math.max(...named.slice(seen))} subscriptions`);
  } finally {
    await worker.stop();
    t.deps.database.scoped = scoped;
  }
});

/** Rows a statement read from webhook_deliveries, from its EXPLAIN ANALYZE (run in a transaction that is rolled back). */
async function rowsRead(t: TestApp, text: string, params: unknown[]): Promise<number> {
  let read = 0;
  const walk = (node: any) => {
    if (node['Relation Name'] === 'webhook_deliveries') {
      read += (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0)) * node['Actual Loops'];
    }
    for (const child of node.Plans ?? []) walk(child);
  };
  await t.deps.database.scoped('system').transaction(async (tx) => {
    const { rows } = await tx.query<{ 'QUERY PLAN': any }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params);
    const plan = rows[0]['QUERY PLAN'];
    walk((typeof plan === 'string' ? JSON.parse(plan) : plan)[0].Plan);
    throw new RollBack();
  }).catch((err) => { if (!(err instanceof RollBack)) throw err; });
  return read;
}
class RollBack extends Error {}

test('a receiver that hangs with a backlog never delays another subscription (WH-8): with 5,000 due deliveries waiting for a subscription that has no room, a claim reads a bounded number of rows, not the backlog, and gives the other subscriptions their oldest deliveries, up to their room', async () => {
  const hang = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/backlog'), events: ['user.reactivated'] });
  const others = [
    await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/other-a'), events: ['user.reactivated'] }),
    await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/other-b'), events: ['user.reactivated'] }),
  ];
  const now = t.clock.now();
  const insert = (sub: string, prefix: string, n: number, secondsAgo: (g: string) => string) => sql(t,
    `INSERT INTO webhook_deliveries (id, subscription_id, event_id, event_type, kind, test_mode, status, attempt, max_attempts, next_attempt_at, created_at)
     SELECT $2 || g, $1, 'evt_' || $2 || g, 'user.reactivated', 'event', false, 'pending', 0, 6, $3::timestamptz - (${secondsAgo('g')}) * interval '1 second', $3
       FROM generate_series(1, $4::int) g`,
    [sub, prefix, now, n]);
  // The backlog is older than anything else waiting (it piled up while the receiver hung).
  await insert(hang.id, 'whd_backlog', 5000, (g) => `20000 - ${g}`);
  await insert(others[0].id, 'whd_othera', 5, (g) => `10 - ${g}`);
  await insert(others[1].id, 'whd_otherb', 5, (g) => `10 - ${g}`);
  await sql(t, 'ANALYZE webhook_deliveries'); // as autovacuum (PostgreSQL) or the analyze job (embedded) keeps it
  const claims: { text: string; params: unknown[] }[] = [];
  const scoped = t.deps.database.scoped.bind(t.deps.database);
  t.deps.database.scoped = (scope) => {
    const db = scoped(scope);
    return { ...db, query: (text: string, params?: unknown[]) => {
      if (text.includes('UPDATE webhook_deliveries d SET claim_token')) claims.push({ text, params: params! });
      return db.query(text, params);
    } } as typeof db;
  };
  try {
    const room = { left: { [hang.id]: 0 }, fresh: 2 };
    const claimed = await claimDue(t.deps, 100, 'backlog-test', room);
    assert.deepEqual(claimed.map((d) => d.id).sort(), ['whd_othera1', 'whd_othera2', 'whd_otherb1', 'whd_otherb2'],
      'each other subscription gets its two oldest (its room), none of the backlog');
    await sql(t, `UPDATE webhook_deliveries SET claim_token = NULL, claimed_until = NULL, attempt = 0 WHERE claim_token = 'backlog-test'`);
    const read = await rowsRead(t, claims[0].text, claims[0].params);
    assert.ok(read < 1000, `the claim read ${read} rows of webhook_deliveries with a backlog of 5,000`);
  } finally {
    t.deps.database.scoped = scoped;
    await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = ANY($1::text[])', [[hang.id, ...others.map((o) => o.id)]]);
  }
});
