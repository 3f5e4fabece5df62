#!/usr/bin/env node
// npm run bench [scenario…]
// Starts the service (dist/src/main.js) and the baseline (bench/baseline.mjs) as child processes on
// the same database, loads each scenario with autocannon from this process, first against the
// service and then against its baseline, and prints one JSON line per scenario to stdout.
// Progress and the children's logs go to stderr. See bench/README.md.
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { prepareStorage } from './lib/storage.mjs';
import { startBaseline, startService } from './lib/processes.mjs';
import { BASELINES } from './lib/baselines.mjs';
import { measure, measureLoop, probe, rs256SignRate, summarize } from './lib/load.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const log = (msg) => process.stderr.write(`[bench] ${msg}\n`);

function envNumber(name, { integer = false, min = 0 } = {}) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return null;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || (integer && !Number.isInteger(n))) throw new Error(`${name} must be ${integer ? 'an integer' : 'a number'} >= ${min} (got "${raw}")`);
  return n;
}

async function loadScenarios() {
  const dir = join(here, 'scenarios');
  const scenarios = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.mjs')).sort()) {
    const m = await import(pathToFileURL(join(dir, file)).href);
    const problems = [];
    if (typeof m.name !== 'string' || !m.name) problems.push('name');
    if (typeof m.request !== 'function') problems.push('request()');
    if (!Number.isInteger(m.connections) || m.connections < 1) problems.push('connections');
    if (typeof m.duration !== 'number' || m.duration <= 0) problems.push('duration');
    if (typeof m.baselineRequest !== 'function' && !BASELINES[m.baseline]) problems.push(`baseline (one of ${Object.keys(BASELINES).join(', ')})`);
    if (m.companion !== undefined && (typeof m.companion?.path !== 'string' || !Number.isInteger(m.companion?.connections))) problems.push('companion {path, connections}');
    if (problems.length) throw new Error(`bench/scenarios/${file}: missing or invalid export(s): ${problems.join(', ')}`);
    scenarios.push(m);
  }
  return scenarios;
}

function selectScenarios(all, names) {
  if (names.length === 0) return all;
  const byName = new Map(all.map((s) => [s.name, s]));
  const unknown = names.filter((n) => !byName.has(n));
  if (unknown.length) throw new Error(`unknown scenario(s): ${unknown.join(', ')}; available: ${all.map((s) => s.name).join(', ')}`);
  return names.map((n) => byName.get(n));
}

const round = (n, digits) => (n === null || !Number.isFinite(n) ? null : Number(n.toFixed(digits)));

// Standalone benches (their own process, their own storage): `npm run bench org-grant`.
const STANDALONE = { 'org-grant': 'org-grant.mjs', 'webhook-throughput': 'webhook-throughput.mjs', soak: 'soak.mjs', 'login-overload': 'login-overload.mjs' };

async function main() {
  let args = process.argv.slice(2);
  for (const name of args.filter((a) => STANDALONE[a])) {
    const { spawnSync } = await import('node:child_process');
    const result = spawnSync(process.execPath, [join(here, STANDALONE[name])], { stdio: 'inherit' });
    if (result.status !== 0) return 1;
  }
  args = args.filter((a) => !STANDALONE[a]);
  if (process.argv.length > 2 && args.length === 0) return 0;
  const all = await loadScenarios();
  if (args.includes('-h') || args.includes('--help')) {
    process.stderr.write(`usage: npm run bench [scenario…]\nscenarios: ${all.map((s) => s.name).join(', ')}\nsee bench/README.md\n`);
    return 0;
  }
  const scenarios = selectScenarios(all, args);
  const durationOverride = envNumber('BENCH_DURATION', { min: 1 });
  const connectionsOverride = envNumber('BENCH_CONNECTIONS', { integer: true, min: 1 });
  const warmup = envNumber('BENCH_WARMUP', { min: 0 }) ?? 2;
  const rounds = envNumber('BENCH_ROUNDS', { integer: true, min: 1 }) ?? 2;

  const email = `bench-${randomBytes(4).toString('hex')}@example.com`;
  const password = `Bench-${randomBytes(12).toString('base64url')}`;

  const resources = [];
  let cleaning = null;
  const cleanup = () =>
    (cleaning ??= (async () => {
      for (const release of resources.reverse()) {
        try {
          await release();
        } catch (err) {
          log(`cleanup: ${err.message}`);
        }
      }
    })());
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, () => {
      log(`${signal}: stopping`);
      cleanup().finally(() => process.exit(130));
    });
  }

  let failures = 0;
  try {
    const storage = await prepareStorage(process.env, log);
    resources.push(storage.cleanup);
    log(`storage: ${storage.storage}`);

    const service = await startService({
      root,
      env: {
        ...storage.serviceEnv,
        AUTH_RATE_LIMIT_PER_MINUTE: '0',
        LOG_LEVEL: 'warn',
        DEV_CLOCK: '0',
        BOOTSTRAP_ADMIN_EMAIL: email,
        BOOTSTRAP_ADMIN_PASSWORD: password,
      },
    });
    resources.push(service.stop);
    log(`service on ${service.url}`);

    const jwks = await (await fetch(`${service.url}/.well-known/jwks.json`)).json();
    const loginRes = await fetch(`${service.url}/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password }),
    });
    const session = await loginRes.json();
    if (loginRes.status !== 200) throw new Error(`bootstrap admin login failed (${loginRes.status}): ${JSON.stringify(session)}`);

    const baseline = await startBaseline({
      script: join(here, 'baseline.mjs'),
      setup: {
        ...storage.baseline,
        jwks,
        issuer: service.url,
        audience: 'platform',
        poolSize: 10,
        seed: storage.shared ? null : { userId: session.user_id, email, password },
      },
    });
    resources.push(baseline.stop);
    log(`baseline on ${baseline.url}`);

    const api = async (method, path, { body, token } = {}) => {
      const headers = {};
      if (body !== undefined) headers['content-type'] = 'application/json';
      if (token) headers.authorization = `Bearer ${token}`;
      const res = await fetch(service.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : null };
    };
    const baseCtx = {
      serviceUrl: service.url,
      baselineUrl: baseline.url,
      email,
      password,
      userId: session.user_id,
      accessToken: session.access_token,
      session,
      api,
      // The database both sides use, when it is a PostgreSQL server the bench can reach (else null).
      databaseUrl: storage.shared ? storage.serviceEnv.DATABASE_URL : null,
    };

    for (const scenario of scenarios) {
      const ctx = { ...baseCtx, ...((await scenario.setup?.(baseCtx)) ?? {}) };
      const connections = connectionsOverride ?? scenario.connections;
      const duration = durationOverride ?? scenario.duration;
      const expectStatus = scenario.expectStatus ?? 200;
      const baselineName = scenario.baselineRequest ? (scenario.baseline ?? 'custom') : scenario.baseline;
      const baselineDef = BASELINES[scenario.baseline];
      const loop = !scenario.baselineRequest && baselineDef?.loop;
      const targets = [
        { label: 'service', url: service.url, request: await scenario.request(ctx), expectStatus },
        { label: `baseline ${baselineName}`, url: baseline.url, loop: !!loop, request: loop ? null : await (scenario.baselineRequest ?? baselineDef.request)(ctx), expectStatus: 200 },
      ];
      const run = (t, seconds) =>
        t.loop
          ? measureLoop({ baseUrl: t.url, request: loop(ctx, { seconds, connections }) })
          : measure({ baseUrl: t.url, request: t.request, connections, duration: seconds, expectStatus: t.expectStatus });
      for (const t of targets) {
        if (!t.loop) await probe(t.url, t.request, t.expectStatus);
        if (warmup > 0) await run(t, warmup);
      }
      // A companion request (e.g. GET /health) measured with a few connections while the service is
      // under the scenario's load, and once alone for comparison.
      const companion = scenario.companion ? { method: 'GET', path: scenario.companion.path } : null;
      const companionRuns = [];
      const companionIdle = companion ? summarize([await measure({ baseUrl: service.url, request: companion, connections: scenario.companion.connections, overallRate: scenario.companion.rate, duration: 2 })]) : null;
      // Alternate service and baseline in `rounds` slices, so a change of background load during
      // the run affects both sides alike rather than only the one that happened to run then.
      log(`${scenario.name}: service vs baseline ${baselineName}, ${connections} connections, ${duration} s each in ${rounds} round(s)`);
      const runs = targets.map(() => []);
      for (let round = 0; round < rounds; round++) {
        for (const [i, t] of targets.entries()) {
          const seconds = duration / rounds;
          const beside = companion && i === 0 ? measure({ baseUrl: service.url, request: companion, connections: scenario.companion.connections, overallRate: scenario.companion.rate, duration: seconds }) : null;
          runs[i].push(await run(t, seconds));
          if (beside) companionRuns.push(await beside);
          await sleep(200);
        }
      }
      const results = runs.map(summarize);
      const signCeiling = scenario.signsPerRequest ? (await rs256SignRate({ concurrency: connections })) / scenario.signsPerRequest : null;
      const companionLoaded = companion ? summarize(companionRuns) : null;
      for (const [i, r] of results.entries()) {
        if (r.unexpected || r.errors || r.timeouts) {
          failures++;
          log(`WARNING ${scenario.name} (${targets[i].label}): ${r.unexpected} unexpected responses, ${r.errors} errors, ${r.timeouts} timeouts; status codes ${JSON.stringify(r.statusCodes)}`);
        }
      }
      // A scenario's own checks of what the load did (e.g. token-refresh: no refresh token rotated twice).
      const verified = (await scenario.verify?.(ctx)) ?? { fields: {}, problems: [] };
      for (const problem of verified.problems) {
        failures++;
        log(`WARNING ${scenario.name}: ${problem}`);
      }
      const [svc, base] = results;
      process.stdout.write(
        JSON.stringify({
          scenario: scenario.name,
          connections,
          duration_s: duration,
          req_per_s: round(svc.reqPerSec, 1),
          p50_ms: round(svc.p50, 2),
          p99_ms: round(svc.p99, 2),
          baseline_req_per_s: round(base.reqPerSec, 1),
          baseline_p99_ms: round(base.p99, 2),
          ratio: base.reqPerSec > 0 ? round(svc.reqPerSec / base.reqPerSec, 3) : null,
          baseline: baselineName,
          ...(signCeiling
            ? {
                rs256_ceiling_req_per_s: round(signCeiling, 1),
                ceiling_ratio: round(signCeiling / base.reqPerSec, 3),
                // A route doing the baseline's whole work plus its signatures on the same CPUs: the
                // per-request costs add up, so this is the ratio it could reach at best.
                ratio_bound: round(signCeiling / (signCeiling + base.reqPerSec), 3),
              }
            : {}),
          ...(companion
            ? {
                companion: companion.path,
                companion_p99_ms_idle: round(companionIdle.p99, 2),
                companion_p99_ms_under_load: round(companionLoaded.p99, 2),
                companion_req_per_s_under_load: round(companionLoaded.reqPerSec, 1),
              }
            : {}),
          ...verified.fields,
          storage: storage.storage,
        }) + '\n',
      );
    }
  } finally {
    await cleanup();
  }
  return failures > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    log(`failed: ${err?.stack ?? err}`);
    process.exit(1);
  },
);
