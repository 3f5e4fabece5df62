// FT-1 [MP]: kill -9 under write load. Two server processes (workers on) share one PostgreSQL;
// clients create users, grant Entitlements, assign Roles, suspend and reactivate, each call with an
// Idempotency-Key, while one process at a time is SIGKILLed at random and restarted. A failed call
// is retried with the same key on the other process. At the end every acknowledged change must have
// exactly one audit event and one outbox event, delivered at least once to a loopback receiver,
// and nothing else may exist: no event for a change that was not committed, no row per retry.
// A retry that meets the claim of a killed process (409 idempotency_key_in_flight) moves the
// shared development clock past the documented 60-second lease instead of waiting for it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, sleep } from './cluster.js';
import { adminKey, Budget, expectStatus, mapLimit, newApp, seconds, settled, signup } from './fixtures.js';
import { Receiver } from './receiver.js';
import { countMismatches, reconcileSources } from './reconcile.js';
import { LEASE_SECONDS, WriteLoad } from './write-load.js';

/**
 * Catalog: 10 kills. Each costs a restart (about 1.6 s of CPU, 3–15 s on a busy 2-core machine), so
 * the kills stop early once the load has run 35 s (at least 2 kills); the count reached is printed.
 */
const KILLS = Number(process.env.MP_FT1_KILLS ?? 10);
const MIN_KILLS = Math.min(KILLS, 2);
const CLIENTS = 4;

let cluster: Cluster;
let receiver: Receiver;
let admin: string;
let apps: string[];
before(async () => {
  receiver = await Receiver.start();
  cluster = await Cluster.start({ workers: true, env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: '1' } });
  admin = await adminKey(cluster);
  const owners = await mapLimit([0, 1, 2], 3, (_, i) => signup(cluster.node(i)));
  apps = (await mapLimit(owners, 3, (o, i) => newApp(cluster.node(i), admin, o.id))).map((a) => a.id);
  expectStatus(await settled(() => cluster.a.call('POST', '/v1/webhooks', { token: admin, body: { scope: 'platform', url: receiver.url(), events: ['*'] } })), 201);
});
after(async () => {
  await cluster?.close();
  await receiver?.close();
});

/** SIGKILLs a random process after a random 0.3–1 s of load and restarts it, while the budget allows. */
async function killRepeatedly(c: Cluster, load: WriteLoad, budget: Budget): Promise<string[]> {
  const kills: string[] = [];
  for (let k = 0; budget.more(k); k++) {
    await sleep(300 + Math.random() * 700);
    const victim = c.nodes[Math.floor(Math.random() * c.nodes.length)];
    const writes = load.inFlight.get(victim.name) ?? 0;
    await victim.kill();
    const down = Date.now();
    await victim.start();
    kills.push(`${victim.name} (${writes} in flight, down ${seconds(Date.now() - down)} s)`);
  }
  return kills;
}

/** Relays and delivers everything; deliveries claimed by a killed worker need their lease to lapse. */
async function drain(c: Cluster): Promise<{ pending: number; failed: number; ms: number }> {
  const started = Date.now();
  const pending = async () =>
    Number((await c.sql<{ n: number }>(`SELECT (SELECT count(*) FROM outbox_events WHERE relayed_at IS NULL) + (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending') AS n`))[0].n);
  for (let i = 0; i < 30 && (await pending()) > 0; i++) {
    if (i > 0) await c.advanceClock(LEASE_SECONDS);
    // The call waits while the other process runs the job (src/jobs/runner.ts); on a loaded machine that
    // outlasted the client's 30 s headers timeout once. The run goes on either way: the next round looks again.
    await c.a.call('POST', '/_dev/jobs/webhook-delivery').catch((err: { code?: string }) => {
      if (err?.code !== 'UND_ERR_HEADERS_TIMEOUT') throw err;
    });
    await sleep(200);
  }
  const failed = (await c.sql<{ n: number }>(`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'failed'`))[0].n;
  return { pending: await pending(), failed, ms: Date.now() - started };
}

const count = async (c: Cluster, sql: string, params: unknown[] = []) => (await c.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${sql}`, params))[0].n;

test(`FT-1 kill -9 of one of two processes (up to ${KILLS}×) under idempotent write load loses no audit or webhook event and leaves no orphan`, async () => {
  const c = cluster;
  const before = {
    audit: new Set((await c.sql<{ id: string }>('SELECT id FROM audit_events')).map((r) => r.id)),
    outbox: new Set((await c.sql<{ id: string }>('SELECT id FROM outbox_events')).map((r) => r.id)),
  };
  const load = new WriteLoad(c, admin, apps);
  const budget = new Budget(KILLS, MIN_KILLS, 35);
  const started = Date.now();
  const running = load.run(CLIENTS);
  const kills = await killRepeatedly(c, load, budget);
  load.stop();
  await running;
  const loadMs = Date.now() - started;
  const drained = await drain(c);

  const result = await reconcileSources(c, before, receiver, load.expected);
  const ids = load.users.filter((u) => u.id).map((u) => u.id!);
  const rows = {
    users: (await count(c, `users WHERE email LIKE 'ft1-%'`)) - (load.acknowledged.create ?? 0),
    entitlements: (await count(c, 'entitlements WHERE user_id = ANY($1)', [ids])) - (load.acknowledged.grant ?? 0),
    roles: (await count(c, `role_assignments WHERE user_id = ANY($1) AND role_id <> 'role_platform_member'`, [ids])) - (load.acknowledged.assign ?? 0),
  };
  const statuses = await c.sql<{ id: string; status: string }>('SELECT id, status FROM users WHERE id = ANY($1)', [ids]);
  const wrongStatus = statuses.filter((s) => s.status !== load.users.find((u) => u.id === s.id)!.status).length;

  console.log(`[FT-1] kills: ${budget.describe(kills.length)} — ${kills.join(', ')}; unexpected process exits: ${c.unexpectedExits().length}`);
  console.log(`[FT-1] load ${seconds(loadMs)} s, ${CLIENTS} clients: ${load.total} writes acknowledged ${JSON.stringify(load.acknowledged)}; retries ${load.retried} (network errors ${load.networkErrors}, 503 service_unavailable ${load.unavailable}, claims of killed processes released ${load.strandedClaims}); answered by replay ${load.replayed}`);
  console.log(`[FT-1] other 5xx answers: ${load.serverErrors.length}; unexpected answers: ${load.unexpected.length}`);
  console.log(`[FT-1] lost events: audit ${result.audit.lost}, outbox ${result.outbox.lost}, delivered ${result.delivered.lost}`);
  console.log(`[FT-1] orphan events: audit ${result.audit.orphans}, outbox ${result.outbox.orphans}, delivered ${result.delivered.orphans}`);
  console.log(`[FT-1] duplicate deliveries: ${result.duplicateDeliveries} (${result.deliveries} deliveries of ${result.distinctDelivered} distinct events); not delivered after ${seconds(drained.ms)} s of draining: ${drained.pending} pending, ${drained.failed} failed`);
  console.log(`[FT-1] rows minus distinct acknowledged keys: users ${rows.users}, entitlements ${rows.entitlements}, role assignments ${rows.roles}; users in the wrong final status: ${wrongStatus}`);
  for (const line of [...load.serverErrors, ...load.unexpected, ...result.details].slice(0, 20)) console.log(`[FT-1]   ${line}`);
  if (load.serverErrors.length) for (const node of [c.a, c.b]) console.log(`[FT-1] ${node.name} errors logged:\n${node.output.split('\n').filter((l) => l.includes('"level":50')).slice(-5).join('\n')}`);

  assert.ok(kills.length >= MIN_KILLS, `${kills.length} kills`);
  assert.deepEqual(c.unexpectedExits(), []);
  assert.deepEqual(load.serverErrors, []);
  assert.deepEqual(load.unexpected, []);
  assert.deepEqual(countMismatches(result), { lost: 0, orphans: 0 });
  assert.deepEqual([drained.pending, drained.failed], [0, 0]);
  assert.deepEqual(rows, { users: 0, entitlements: 0, roles: 0 });
  assert.equal(wrongStatus, 0);
});
