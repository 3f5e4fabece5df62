#!/usr/bin/env node
// node bench/webhook-throughput.mjs
// Webhook delivery, measured end to end: events committed to the transactional outbox, relayed and
// delivered by startWebhookWorker (the service's code from dist/) in BENCH_PROCESSES processes on one
// database (this one and forked workers) to a loopback receiver running in its own process. Two phases:
//   throughput — a backlog of BENCH_EVENTS events × BENCH_SUBS subscriptions is committed with the
//                workers stopped, then they start; deliveries per second until all arrived, the
//                largest backlog seen, and whether each (subscription, event) arrived exactly once
//                (the security test catalog's LD-4: 10k events × 10 subscriptions across 2 processes).
//   latency    — events committed at a steady BENCH_RATE deliveries/s for BENCH_SECONDS while the
//                workers run; commit-to-first-attempt latency p50/p99/max.
// Storage: a fresh database on BENCH_DATABASE_URL / DATABASE_URL / the local PostgreSQL
// (postgres://postgres@127.0.0.1:5432/postgres), or BENCH_STORAGE=pglite for embedded PGlite.
// Prints one JSON line per phase to stdout; progress goes to stderr.
import { fork, execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, LOCAL_POSTGRES_URL, reachable } from './lib/storage.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const log = (msg) => process.stderr.write(`[webhook-bench] ${msg}\n`);
const num = (name, fallback) => (process.env[name] ? Number(process.env[name]) : fallback);

// ---- receiver process: answers 200 at once, remembers (path, event id, attempt, arrival) -----------
if (process.argv[2] === 'receiver') {
  const seen = [];
  const server = createServer((req, res) => {
    const arrived = Date.now();
    req.resume();
    req.on('end', () => {
      seen.push([req.url, req.headers['platform-event-id'], Number(req.headers['platform-delivery-attempt']), arrived]);
      res.writeHead(200).end();
    });
  });
  server.keepAliveTimeout = 10_000;
  server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  process.on('message', (m) => {
    if (m === 'count') process.send({ count: seen.length });
    if (m === 'dump') process.send({ seen });
    if (m === 'reset') seen.length = 0;
  });
} else if (process.argv[2] === 'worker') {
  // A second service process: its own pools and delivery worker on the bench's database.
  workerProcess().catch((err) => {
    console.error(err);
    process.exit(1);
  });
} else {
  main().then(
    (code) => process.exit(code),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}

const ask = (child, message, key) =>
  new Promise((resolve) => {
    const on = (m) => {
      if (m && key in m) {
        child.off('message', on);
        resolve(m[key]);
      }
    };
    child.on('message', on);
    child.send(message);
  });

async function loadDist() {
  const dist = (p) => import(pathToFileURL(join(root, 'dist/src', p)).href);
  return {
    ...(await dist('config.js')), ...(await dist('clock.js')), ...(await dist('db/pg.js')), ...(await dist('db/pglite.js')),
    ...(await dist('boot.js')), ...(await dist('context.js')), ...(await dist('outbox/emit.js')),
    ...(await dist('modules/webhooks/index.js')), ...(await dist('ids.js')),
  };
}

const serviceConfig = (loadConfig) =>
  Object.freeze({ ...loadConfig({ LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'warn', WEBHOOK_ALLOW_PRIVATE_TARGETS: '1' }), workers: false });

async function workerProcess() {
  const { loadConfig, SystemClock, openPg, boot, startWebhookWorker } = await loadDist();
  const database = await openPg({ url: process.env.BENCH_WORKER_DATABASE_URL });
  const config = serviceConfig(loadConfig);
  const { app, deps } = await boot({ config, database, clock: new SystemClock(), logger: { level: config.logLevel } });
  let worker = null;
  process.on('message', async (m) => {
    if (m === 'start') worker = startWebhookWorker(deps);
    if (m === 'stop') {
      await worker?.stop();
      await app.close();
      await database.close();
      process.exit(0);
    }
  });
  process.send({ ready: true });
}

/**
 * Whether each (subscription path, event id) arrived exactly once: more than one arrival with the same
 * attempt number is a duplicate; a higher attempt number is a retry (none expected: the receiver
 * answers 200 at once).
 */
function exactlyOnce(seen) {
  const arrivals = new Map();
  for (const [path, id, attempt] of seen) {
    const key = `${path} ${id}`;
    arrivals.set(key, [...(arrivals.get(key) ?? []), attempt]);
  }
  let duplicates = 0;
  let retries = 0;
  for (const attempts of arrivals.values()) {
    duplicates += attempts.length - new Set(attempts).size;
    retries += attempts.filter((a) => a > 1).length;
  }
  return { pairs: arrivals.size, duplicates, retries };
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function main() {
  execFileSync(process.execPath, [join(root, 'scripts/build-if-needed.mjs')], { stdio: 'inherit' });
  const { loadConfig, SystemClock, openPg, openPglite, boot, systemCtx, emitMany, startWebhookWorker, newId, newSecret, hashSecret } = await loadDist();

  const subs = num('BENCH_SUBS', 10);
  const events = num('BENCH_EVENTS', 10_000);
  const rate = num('BENCH_RATE', 500);
  const seconds = num('BENCH_SECONDS', 20);

  const serverUrl = process.env.BENCH_DATABASE_URL || process.env.DATABASE_URL || LOCAL_POSTGRES_URL;
  const usePglite = process.env.BENCH_STORAGE === 'pglite' || !(await reachable(serverUrl));
  const fresh = usePglite ? null : await freshDatabase(serverUrl);
  const database = usePglite ? await openPglite(null) : await openPg({ url: fresh.url });
  const storage = usePglite ? 'pglite' : 'postgres';
  // PGlite is one process's database: more processes need PostgreSQL.
  const processes = usePglite ? 1 : num('BENCH_PROCESSES', 2);
  log(`storage: ${storage}; ${processes} worker process(es)`);

  const receiver = fork(fileURLToPath(import.meta.url), ['receiver'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const { port } = await new Promise((resolve) => receiver.once('message', resolve));
  const config = serviceConfig(loadConfig);
  const clock = new SystemClock();
  const { app, deps } = await boot({ config, database, clock, logger: { level: config.logLevel } });
  let worker = null;
  const others = [];
  try {
    for (let i = 1; i < processes; i++) {
      const child = fork(fileURLToPath(import.meta.url), ['worker'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, BENCH_WORKER_DATABASE_URL: fresh.url } });
      others.push(child);
      await new Promise((resolve, reject) => {
        child.once('message', resolve);
        child.once('exit', (code) => reject(new Error(`worker process exited with ${code}`)));
      });
    }
    // Subscriptions through the API, with a platform key.
    const secret = newSecret('plat_live_');
    await database.scoped('system').query(
      `INSERT INTO api_keys (id, name, scope, permissions, test_mode, intended_use, restrict_destructive, secret_hash, secret_hint, created_by_user_id, created_at, updated_at)
       VALUES ($1, 'bench', 'platform', ARRAY['webhooks.manage'], false, 'service', false, $2, 'xxxx', 'usr_bench', now(), now())`,
      [newId('key'), hashSecret(secret)],
    );
    for (let i = 0; i < subs; i++) {
      const res = await app.inject({ method: 'POST', url: '/v1/webhooks', headers: { authorization: `Bearer ${secret}` }, payload: { scope: 'platform', url: `http://127.0.0.1:${port}/s${i}`, events: ['*'] } });
      if (res.statusCode !== 201) throw new Error(`subscribe: ${res.statusCode} ${res.body}`);
    }
    const commit = async (n) => {
      const ctx = systemCtx(deps);
      await ctx.db.transaction((tx) =>
        emitMany(tx, { ...ctx, db: tx, now: clock.now() }, Array.from({ length: n }, (_, i) => ({ type: 'user.reactivated', data: { user_id: `usr_${i}` } }))),
      );
      return Date.now();
    };

    // Phase 1: throughput from a backlog.
    for (let done = 0; done < events; done += 200) await commit(Math.min(200, events - done));
    const expected = events * subs;
    log(`backlog: ${events} events × ${subs} subscriptions = ${expected} deliveries`);
    const started = Date.now();
    worker = startWebhookWorker(deps);
    for (const child of others) child.send('start');
    // The backlog: deliveries not yet made, i.e. events not relayed (one delivery per subscription
    // each) plus pending delivery rows.
    const backlog = async () =>
      Number((await database.scoped('system').query(
        `SELECT (SELECT count(*) FROM outbox_events WHERE relayed_at IS NULL) * $1 + (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending') AS n`,
        [subs],
      )).rows[0].n);
    for (;;) {
      const count = await ask(receiver, 'count', 'count');
      if (count >= expected) break;
      if (Date.now() - started > 300_000) throw new Error(`only ${count} of ${expected} after 300 s`);
      await sleep(50);
    }
    const elapsed = (Date.now() - started) / 1000;
    // Every (subscription, event) once: more than one arrival with the same attempt number is a
    // duplicate; a higher attempt number is a retry (none expected: the receiver answers 200 at once).
    await sleep(1000);
    const once = exactlyOnce(await ask(receiver, 'dump', 'seen'));
    const rowsByStatus = async () =>
      Object.fromEntries((await database.scoped('system').query(`SELECT status, count(*)::int AS n FROM webhook_deliveries GROUP BY status ORDER BY status`)).rows.map((r) => [r.status, r.n]));
    console.log(JSON.stringify({
      phase: 'throughput', storage, processes, events, subscriptions: subs, deliveries: expected, drain_s: Number(elapsed.toFixed(2)),
      deliveries_per_s: Math.round(expected / elapsed), missing: expected - once.pairs, duplicates: once.duplicates, retries: once.retries,
      delivery_rows: await rowsByStatus(),
    }));
    let ok = once.pairs === expected && once.duplicates === 0;
    receiver.send('reset');

    // Phase 2: latency at a steady rate (events every 50 ms, each fanned out to every subscription).
    const commits = new Map();
    const perTick = Math.max(1, Math.round((rate / subs) * 0.05));
    const ticks = Math.round(seconds / 0.05);
    const ctx = systemCtx(deps);
    const t0 = Date.now();
    let maxBacklog = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        maxBacklog = Math.max(maxBacklog, await backlog());
        await sleep(250);
      }
    })();
    for (let k = 0; k < ticks; k++) {
      const batch = Array.from({ length: perTick }, (_, i) => ({ type: 'user.reactivated', data: { user_id: `usr_l${k}_${i}` } }));
      let ids = [];
      await ctx.db.transaction(async (tx) => {
        await emitMany(tx, { ...ctx, db: tx, now: clock.now() }, batch);
        ids = (await tx.query(`SELECT id FROM outbox_events WHERE relayed_at IS NULL AND data->>'user_id' = ANY($1::text[])`, [batch.map((b) => b.data.user_id)])).rows.map((r) => r.id);
      });
      const at = Date.now();
      for (const id of ids) commits.set(id, at);
      const next = t0 + (k + 1) * 50;
      if (next > Date.now()) await sleep(next - Date.now());
    }
    const want = commits.size * subs;
    for (const end = Date.now() + 30_000; Date.now() < end; await sleep(100)) if ((await ask(receiver, 'count', 'count')) >= want) break;
    sampling = false;
    await sampler;
    await sleep(1000);
    const seen = await ask(receiver, 'dump', 'seen');
    const steady = exactlyOnce(seen);
    ok &&= steady.pairs === want && steady.duplicates === 0;
    const latencies = seen.filter(([, id, attempt]) => attempt === 1 && commits.has(id)).map(([, id, , at]) => at - commits.get(id)).sort((a, b) => a - b);
    const span = (Date.now() - t0) / 1000;
    console.log(JSON.stringify({
      phase: 'latency', storage, target_deliveries_per_s: perTick * subs * 20, delivered: latencies.length, expected: want,
      achieved_deliveries_per_s: Math.round(latencies.length / seconds), p50_ms: pct(latencies, 50), p99_ms: pct(latencies, 99), max_ms: latencies[latencies.length - 1], wall_s: Number(span.toFixed(1)),
      max_backlog: maxBacklog, missing: want - steady.pairs, duplicates: steady.duplicates, retries: steady.retries, processes,
    }));
    return ok && latencies.length === want ? 0 : 1;
  } finally {
    await worker?.stop();
    await Promise.all(others.map((child) => new Promise((resolve) => {
      child.once('exit', resolve);
      child.send('stop');
      setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
    })));
    await app.close();
    await database.close();
    receiver.kill();
    await fresh?.drop();
  }
}
