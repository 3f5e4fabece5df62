#!/usr/bin/env node
// npm run bench login-overload   (the security test catalog's LD-1)
// Sign-in at 10, 50 and 200 connections (BENCH_LEVELS) against one service process: no 5xx but the
// password pool's 503 shedding, no timeouts, RSS bounded (200 parallel Argon2id hashes would take
// about 3.8 GB), excess load answered at once instead of queueing until clients give up. One JSON
// line per level on stdout; exit status 1 if any answer is neither 200 nor 503, on socket errors or
// timeouts. Storage as for `npm run bench` (bench/lib/storage.mjs). See bench/README.md.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { prepareStorage } from './lib/storage.mjs';
import { startService } from './lib/processes.mjs';
import { measure, percentile } from './lib/load.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const log = (msg) => process.stderr.write(`[login-overload] ${msg}\n`);
const LEVELS = (process.env.BENCH_LEVELS ?? '10,50,200').split(',').map(Number);
const DURATION = Number(process.env.BENCH_DURATION ?? 10);
if (LEVELS.some((n) => !Number.isInteger(n) || n < 1) || !(DURATION > 0)) {
  throw new Error('BENCH_LEVELS must be positive integers separated by commas, BENCH_DURATION a positive number');
}

const round = (n, digits = 1) => (n === null || !Number.isFinite(n) ? null : Number(n.toFixed(digits)));
const rssMb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;

async function post(url, body) {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json().catch(() => null) };
}

/** One account per connection: an account holds at most five unresolved attempts (the lockout slots). */
async function signUpAccounts(serviceUrl, count, password) {
  const tag = randomBytes(4).toString('hex');
  const accounts = [];
  for (let i = 0; i < count; i += 8) {
    const batch = Array.from({ length: Math.min(8, count - i) }, (_, j) => ({ email: `overload${i + j}-${tag}@example.com`, password }));
    for (const res of await Promise.all(batch.map((a) => post(`${serviceUrl}/v1/auth/signup`, a)))) {
      if (res.status !== 201) throw new Error(`signup answered ${res.status}: ${JSON.stringify(res.body)}`);
    }
    accounts.push(...batch);
  }
  return accounts;
}

async function level(service, accounts, connections) {
  const bodies = accounts.slice(0, Math.max(connections, 1)).map((a) => JSON.stringify(a));
  let next = 0;
  const request = {
    method: 'POST',
    path: '/v1/auth/login',
    headers: { 'content-type': 'application/json' },
    body: bodies[0],
    requests: [{ method: 'POST', path: '/v1/auth/login', headers: { 'content-type': 'application/json' }, setupRequest: (req) => ({ ...req, body: bodies[next++ % bodies.length] }) }],
  };
  const pid = service.child.pid;
  const rssBefore = rssMb(pid);
  let rssPeak = rssBefore;
  const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, rssMb(pid))), 100);
  const run = await measure({ baseUrl: service.url, request, connections, duration: DURATION }).finally(() => clearInterval(sampler));
  const sorted = (status) => Float64Array.from(run.latenciesByStatus[status] ?? []).sort();
  const ok = sorted(200);
  const shed = sorted(503);
  const other = Object.entries(run.statusCodes).filter(([s]) => s !== '200' && s !== '503');
  const loginsPerSecond = ok.length / run.seconds;
  return {
    bench: 'login-overload',
    connections,
    duration_s: run.seconds,
    logins_per_s: round(loginsPerSecond),
    logins_per_s_per_core: round(loginsPerSecond / availableParallelism()),
    p50_ms: round(percentile(ok, 50), 2),
    p95_ms: round(percentile(ok, 95), 2),
    p99_ms: round(percentile(ok, 99), 2),
    shed_503: shed.length,
    shed_p99_ms: round(percentile(shed, 99), 2),
    statuses: run.statusCodes,
    other_statuses: Object.fromEntries(other),
    errors: run.errors,
    timeouts: run.timeouts,
    rss_before_mb: round(rssBefore),
    rss_peak_mb: round(rssPeak),
  };
}

async function main() {
  const email = `bench-${randomBytes(4).toString('hex')}@example.com`;
  const password = `Bench-${randomBytes(12).toString('base64url')}`;
  const storage = await prepareStorage(process.env, log);
  let service = null;
  let failed = false;
  try {
    log(`storage: ${storage.storage}`);
    service = await startService({
      root,
      env: { ...storage.serviceEnv, AUTH_RATE_LIMIT_PER_MINUTE: '0', LOG_LEVEL: 'warn', DEV_CLOCK: '0', BOOTSTRAP_ADMIN_EMAIL: email, BOOTSTRAP_ADMIN_PASSWORD: password },
    });
    const accounts = await signUpAccounts(service.url, Math.max(...LEVELS), password);
    log(`${accounts.length} accounts; levels ${LEVELS.join(', ')} connections, ${DURATION} s each`);
    for (const connections of LEVELS) {
      const result = await level(service, accounts, connections);
      process.stdout.write(`${JSON.stringify({ ...result, storage: storage.storage })}\n`);
      const problems = [
        ...Object.entries(result.other_statuses).map(([s, n]) => `${n} answers with status ${s}`),
        ...(result.errors ? [`${result.errors} socket errors`] : []),
        ...(result.timeouts ? [`${result.timeouts} timeouts`] : []),
      ];
      for (const p of problems) log(`warning: ${connections} connections: ${p}`);
      failed ||= problems.length > 0;
      await sleep(2000); // the queue drains before the next level
    }
  } finally {
    await service?.stop();
    await storage.cleanup();
  }
  return failed ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    log(err.stack ?? String(err));
    process.exit(1);
  },
);
