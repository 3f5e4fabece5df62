#!/usr/bin/env node
// node bench/soak.mjs   (or: npm run bench soak)
// LD-5 soak: mixed traffic at a fixed rate for BENCH_DURATION seconds (default 1800, 30 minutes)
// against the compiled service with its workers on, on a private PostgreSQL cluster that preloads
// pg_stat_statements. Every BENCH_SAMPLE seconds: the service's RSS, its connections in
// pg_stat_activity, the outbox backlog, requests and errors. Prints one JSON line to stdout
// (RSS and pool slopes, p50/p99 per request kind, the three slowest statements); progress goes to
// stderr. Exit 1 when the error rate is 0.1 % or more. See bench/README.md.
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Pool } from 'undici';
import { freePort, startService } from './lib/processes.mjs';
import { freshDatabase, LOCAL_POSTGRES_URL } from './lib/storage.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const run = promisify(execFile);
const log = (msg) => process.stderr.write(`[soak] ${msg}\n`);
function num(name, fallback, min = 1) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) throw new Error(`${name} must be a number >= ${min} (got "${raw}")`);
  return n;
}
const round = (n, digits = 2) => (n === null || !Number.isFinite(n) ? null : Number(n.toFixed(digits)));
const pick = (list) => list[Math.floor(Math.random() * list.length)];
const MONITOR = 'soak-monitor'; // application_name and query marker of the bench's own SQL

// ---- PostgreSQL: a private cluster with pg_stat_statements (as test/security/multiprocess/private-postgres.ts) --
function postgresBinaries() {
  if (process.env.PG_BIN) return existsSync(join(process.env.PG_BIN, 'initdb')) ? process.env.PG_BIN : null;
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const versions = readdirSync(base).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
  return versions.map((v) => join(base, v, 'bin')).find((bin) => existsSync(join(bin, 'initdb')) && existsSync(join(bin, 'pg_ctl'))) ?? null;
}

/** initdb + pg_ctl start in a temp dir on a free port; the release functions are pushed onto `cleanups` first. */
async function startPrivateCluster(cleanups) {
  const bin = postgresBinaries();
  if (!bin) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql (set PG_BIN)');
  const dir = mkdtempSync(join(tmpdir(), 'soak-pg-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  let asUser = [];
  if (process.getuid?.() === 0) {
    // PostgreSQL refuses to run as root.
    const id = async (flag) => Number((await run('id', [flag, 'postgres'])).stdout);
    chownSync(dir, await id('-u'), await id('-g'));
    asUser = ['runuser', '-u', 'postgres', '--'];
  }
  const data = join(dir, 'data');
  const tool = async (name, args) => {
    const [cmd, ...rest] = [...asUser, join(bin, name), ...args];
    try {
      await run(cmd, rest, { cwd: dir, timeout: 60_000 });
    } catch (err) {
      const tail = existsSync(join(dir, 'server.log')) ? readFileSync(join(dir, 'server.log'), 'utf8').slice(-800) : '';
      throw new Error(`${name} failed: ${err.message}\n${err.stderr ?? ''}${tail}`);
    }
  };
  const port = await freePort();
  await tool('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync']);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100 -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top`;
  cleanups.push(() => tool('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']).catch(() => tool('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'])));
  await tool('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-o', options, '-w', 'start']);
  log(`private PostgreSQL (${bin}) on port ${port}, data in ${dir}`);
  return `postgres://postgres@127.0.0.1:${port}/postgres`;
}

/** A fresh database with pg_stat_statements on the private cluster; else on the machine's server without it. */
async function prepareDatabase(cleanups) {
  let storage = 'private-cluster';
  let db;
  try {
    db = await freshDatabase(await startPrivateCluster(cleanups));
  } catch (err) {
    log(`private cluster unavailable, falling back to the machine's server: ${err.message.split('\n')[0]}`);
    storage = 'postgres-shared';
    db = await freshDatabase(process.env.BENCH_DATABASE_URL || LOCAL_POSTGRES_URL);
    cleanups.push(db.drop);
  }
  const monitor = new pg.Client({ connectionString: db.url, application_name: MONITOR });
  monitor.on('error', () => undefined); // the cluster stopping under Ctrl-C must not crash the cleanup
  await monitor.connect();
  cleanups.push(() => monitor.end());
  let statements = true;
  try {
    await monitor.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await monitor.query(`SELECT 1 /* ${MONITOR} */ FROM pg_stat_statements LIMIT 1`);
  } catch (err) {
    statements = false;
    log(`the SQL figure is unavailable (pg_stat_statements: ${err.message})`);
  }
  return { url: db.url, name: db.name, monitor, statements, storage };
}

// ---- the world: admin, platform key, webhook receiver, Applications, users with Entitlements -----------
async function buildWorld(serviceUrl, admin, hookUrl, { users, apps }) {
  const api = async (method, path, { token, body, headers = {}, expect }) => {
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (token) headers.authorization = `Bearer ${token}`;
    const res = await fetch(serviceUrl + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (res.status !== expect) throw new Error(`setup ${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
    return text ? JSON.parse(text) : null;
  };
  const tag = randomBytes(3).toString('hex');
  const password = `Soak-${randomBytes(12).toString('base64url')}`;
  const adminToken = (await api('POST', '/v1/auth/login', { body: admin, expect: 200 })).access_token;
  const key = await api('POST', '/v1/api-keys', {
    token: adminToken,
    expect: 201,
    body: { name: 'soak', scope: 'platform', restrict_destructive: false, permissions: ['users.list', 'users.manage', 'entitlements.manage', 'audit.view', 'webhooks.manage'] },
  });
  const webhook = await api('POST', '/v1/webhooks', { token: key.secret, expect: 201, body: { scope: 'platform', url: hookUrl, events: ['*'] } });
  const signup = async (name) => {
    const email = `${name}-${tag}@example.com`;
    const s = await api('POST', '/v1/auth/signup', { body: { email, password }, expect: 201 });
    return { email, password, id: s.user_id, session: s };
  };
  // One owner per Application: a user's Starter Tenant holds one.
  const appIds = [];
  for (let i = 0; i < apps; i++) {
    const owner = await signup(`owner${i}`);
    const slug = `soak${tag}${i}`;
    await api('POST', '/v1/applications', {
      token: adminToken,
      expect: 201,
      body: { slug, name: `Soak ${i}`, launch_url: 'https://soak.example', owner_user_id: owner.id, permissions: [{ key: `app.${slug}.read`, description: 'read' }], available_app_roles: ['reader'], default_app_role: 'reader' },
    });
    await api('PATCH', `/v1/roles/role_${slug}_reader`, { token: adminToken, expect: 200, body: { permissions: [`app.${slug}.read`] } });
    appIds.push(`app_${slug}`);
  }
  const grant = (userId, appId) =>
    api('POST', `/v1/users/${userId}/entitlements`, { token: key.secret, expect: 201, headers: { 'idempotency-key': `soak-${userId}-${appId}` }, body: { application_id: appId, source: 'admin_grant' } });
  // Traffic users keep their Entitlements; churn users' Entitlements are the ones toggled.
  const traffic = [];
  for (let i = 0; i < users; i++) {
    const u = await signup(`user${i}`);
    for (const appId of appIds) await grant(u.id, appId);
    const login = await api('POST', '/v1/auth/login', { body: { email: u.email, password }, expect: 200 });
    const sessions = [u.session, login].map((s) => ({ refresh: s.refresh_token, access: s.access_token, busy: false }));
    traffic.push({ email: u.email, password, id: u.id, sessions, logins: 0 });
  }
  const toggles = [];
  for (let i = 0; i < Math.max(2, Math.ceil(users / 2)); i++) {
    const u = await signup(`churn${i}`);
    for (const appId of appIds) toggles.push({ id: (await grant(u.id, appId)).id, status: 'active', busy: false });
  }
  return { key: key.secret, webhookId: webhook.id, appIds, traffic, toggles };
}

// ---- request kinds: weight (share of BENCH_RATE) and the request, given the world -----------------------
const bearer = (token) => ({ authorization: `Bearer ${token}` });
const json = (body) => ({ headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const liveSession = (w) => {
  const sessions = pick(w.traffic).sessions.filter((s) => !s.dead);
  return sessions.length ? pick(sessions) : (w.traffic.flatMap((u) => u.sessions).find((s) => !s.dead) ?? w.traffic[0].sessions[0]);
};
const KINDS = {
  login: {
    weight: 2, // Argon2id: the expensive one
    make: (w) => {
      const u = pick(w.traffic);
      if (u.logins >= 2) return null; // at most five unresolved attempts per account, keep well below
      u.logins++;
      return {
        method: 'POST', path: '/v1/auth/login', ...json({ email: u.email, password: u.password }),
        done: (ok, body) => {
          u.logins--;
          if (!ok) return;
          // The new session replaces a dead one or else the oldest idle one, which is abandoned (as a
          // closed browser would be); each user keeps at most three.
          u.sessions = u.sessions.filter((s) => s.busy || !s.dead);
          const idle = u.sessions.findIndex((s) => !s.busy);
          if (idle >= 0 && u.sessions.length >= 3) u.sessions.splice(idle, 1);
          u.sessions.push({ refresh: body.refresh_token, access: body.access_token, busy: false });
        },
      };
    },
  },
  refresh: {
    weight: 10,
    make: (w) => {
      const s = pick(w.traffic).sessions.find((x) => !x.busy && !x.dead);
      if (!s) return null;
      s.busy = true;
      return {
        method: 'POST', path: '/v1/auth/token/refresh', ...json({ refresh_token: s.refresh }),
        done: (ok, body) => {
          s.busy = false;
          // A failed or timed-out rotation may have used the token: presenting it again would be reuse.
          if (ok) Object.assign(s, { refresh: body.refresh_token, access: body.access_token });
          else s.dead = true;
        },
      };
    },
  },
  users_me: { weight: 18, make: (w) => ({ method: 'GET', path: '/v1/users/me', headers: bearer(liveSession(w).access) }) },
  effective_permissions: { weight: 20, make: (w) => ({ method: 'GET', path: `/v1/users/me/apps/${pick(w.appIds)}/effective-permissions`, headers: bearer(liveSession(w).access) }) },
  app_tokens: { weight: 15, make: (w) => ({ method: 'POST', path: '/v1/auth/app-tokens', headers: { ...bearer(liveSession(w).access), 'content-type': 'application/json' }, body: JSON.stringify({ application_id: pick(w.appIds) }) }) },
  entitlement_toggle: {
    weight: 5, // active ↔ disabled: access flips, outbox events, webhook deliveries
    make: (w) => {
      const e = pick(w.toggles.filter((t) => !t.busy));
      if (!e) return null;
      e.busy = true;
      const body = e.status === 'active' ? { status: 'disabled', disabled_reason: 'soak' } : { status: 'active' };
      return {
        method: 'PATCH', path: `/v1/entitlements/${e.id}`, headers: { ...bearer(w.key), 'content-type': 'application/json' }, body: JSON.stringify(body),
        done: (ok, res) => {
          e.busy = false;
          if (ok) e.status = res.status;
          else e.status = 'unknown'; // resynced below before the next toggle
        },
      };
    },
  },
  profile_patch: { weight: 5, make: (w) => ({ method: 'PATCH', path: '/v1/users/me/profile', headers: { ...bearer(liveSession(w).access), 'content-type': 'application/json' }, body: JSON.stringify({ display_name: `Soak ${randomBytes(3).toString('hex')}` }) }) },
  list_users: { weight: 5, make: (w) => ({ method: 'GET', path: '/v1/users?limit=20', headers: bearer(w.key) }) },
  list_entitlements: { weight: 5, make: (w) => ({ method: 'GET', path: '/v1/entitlements?limit=20', headers: bearer(w.key) }) },
  list_my_entitlements: { weight: 7, make: (w) => ({ method: 'GET', path: '/v1/users/me/entitlements', headers: bearer(liveSession(w).access) }) },
  list_audit_events: { weight: 5, make: (w) => ({ method: 'GET', path: '/v1/audit-events?limit=20', headers: bearer(w.key) }) },
  list_webhook_deliveries: { weight: 3, make: (w) => ({ method: 'GET', path: `/v1/webhooks/${w.webhookId}/deliveries?limit=20`, headers: bearer(w.key) }) },
};
const TOTAL_WEIGHT = Object.values(KINDS).reduce((s, k) => s + k.weight, 0);
function chooseKind() {
  let r = Math.random() * TOTAL_WEIGHT;
  for (const [name, k] of Object.entries(KINDS)) if ((r -= k.weight) < 0) return name;
  return 'users_me';
}

// ---- measuring -------------------------------------------------------------------------------------
const percentile = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] : null);
/** Least-squares slope of y over t (seconds), per hour. */
function slopePerHour(points) {
  if (points.length < 2) return null;
  const tm = points.reduce((s, p) => s + p.t, 0) / points.length;
  const ym = points.reduce((s, p) => s + p.y, 0) / points.length;
  const den = points.reduce((s, p) => s + (p.t - tm) ** 2, 0);
  return den > 0 ? (points.reduce((s, p) => s + (p.t - tm) * (p.y - ym), 0) / den) * 3600 : null;
}
const rssMb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;

async function sample(monitor, database, pid, t) {
  const { rows: [row] } = await monitor.query(
    `SELECT /* ${MONITOR} */ (SELECT count(*)::int FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2) AS pool,
            (SELECT count(*)::int FROM outbox_events WHERE relayed_at IS NULL) AS outbox,
            (SELECT count(*)::int FROM webhook_deliveries WHERE status = 'pending') AS deliveries`,
    [database, MONITOR],
  );
  return { t, rss: rssMb(pid), ...row };
}

async function slowestStatements(monitor) {
  const { rows } = await monitor.query(
    `SELECT /* ${MONITOR} */ query, mean_exec_time, calls FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE $1
      ORDER BY mean_exec_time DESC LIMIT 3`,
    [`%${MONITOR}%`],
  );
  return rows.map((r) => ({ query: r.query.replace(/\s+/g, ' ').slice(0, 120), mean_exec_time_ms: round(r.mean_exec_time, 3), calls: Number(r.calls) }));
}

/** Sends requests on one undici pool and keeps, per kind, latencies of 200s and the failures. */
function loadClient(serviceUrl, { connections, timeoutMs }) {
  const http = new Pool(serviceUrl, { connections, keepAliveTimeout: 30_000 });
  const stats = Object.fromEntries(Object.keys(KINDS).map((k) => [k, { latencies: [], errors: 0, statuses: {} }]));
  const client = { http, stats, inflight: 0, firstErrors: [] };
  client.send = async (kind, req, measured = true) => {
    client.inflight++;
    const started = performance.now();
    let status = 'error';
    let body = null;
    try {
      const res = await http.request({ method: req.method, path: req.path, headers: req.headers, body: req.body, signal: AbortSignal.timeout(timeoutMs) });
      const text = await res.body.text();
      status = res.statusCode;
      body = text && status === 200 ? JSON.parse(text) : text;
    } catch (err) {
      status = err.name === 'TimeoutError' || err.name === 'AbortError' ? 'timeout' : `socket:${err.code ?? err.name}`;
    } finally {
      client.inflight--;
    }
    req.done?.(status === 200, body);
    if (!measured) return;
    const s = stats[kind];
    if (status === 200) s.latencies.push(performance.now() - started);
    else {
      s.errors++;
      s.statuses[status] = (s.statuses[status] ?? 0) + 1;
      if (client.firstErrors.length < 5) client.firstErrors.push({ kind, path: req.path, status, body: typeof body === 'string' ? body.slice(0, 200) : body });
    }
  };
  client.requests = () => Object.values(stats).reduce((n, k) => n + k.latencies.length + k.errors, 0);
  client.errors = () => Object.values(stats).reduce((n, k) => n + k.errors, 0);
  return client;
}

/** Open-loop issue at `rate` req/s for `duration` s (shedding beyond maxInflight), sampling every `every` s. */
async function soak({ world, client, rate, duration, every, takeSample, serviceGone, received }) {
  const resync = async (e) => {
    e.busy = true;
    await client.send('entitlement_toggle', { method: 'GET', path: `/v1/entitlements/${e.id}`, headers: bearer(world.key), done: (ok, b) => ok && (e.status = b.status) }, false);
    e.busy = false;
  };
  const t0 = performance.now();
  const elapsed = () => (performance.now() - t0) / 1000;
  const samples = [await takeSample(0)];
  const maxInflight = Math.max(64, rate * 2);
  let issued = 0;
  let shed = 0;
  let nextSample = every;
  while (elapsed() < duration) {
    if (serviceGone()) throw new Error(`service exited during the soak (${serviceGone()})`);
    for (const e of world.toggles) if (e.status === 'unknown' && !e.busy) void resync(e);
    for (const due = Math.min(duration, elapsed()) * rate; issued < due; issued++) {
      if (client.inflight >= maxInflight) {
        shed++;
        continue;
      }
      let kind = chooseKind();
      let req = KINDS[kind].make(world);
      if (!req) [kind, req] = ['users_me', KINDS.users_me.make(world)];
      void client.send(kind, req);
    }
    if (elapsed() >= nextSample) {
      const s = await takeSample(round(elapsed(), 1));
      samples.push(s);
      nextSample += every;
      log(`t=${Math.round(s.t)}s requests=${client.requests()} errors=${client.errors()} inflight=${client.inflight} shed=${shed} rss=${s.rss.toFixed(1)}MB pool=${s.pool} outbox=${s.outbox} deliveries_pending=${s.deliveries} webhooks_received=${received()}`);
    }
    await sleep(10);
  }
  for (const until = Date.now() + 15_000; client.inflight > 0 && Date.now() < until; ) await sleep(20);
  const wall = elapsed();
  samples.push(await takeSample(round(wall, 1)));
  return { samples, wall, shed };
}

function summarize({ client, samples, wall, shed, rate, duration }) {
  const requests = client.requests();
  const errors = client.errors();
  const steady = samples.filter((s) => s.t >= duration * 0.1); // the first 10 % is warm-up
  const pools = samples.map((s) => s.pool);
  const kinds = Object.fromEntries(
    Object.entries(client.stats).map(([k, s]) => {
      const sorted = Float64Array.from(s.latencies).sort();
      return [k, { count: sorted.length + s.errors, p50_ms: round(percentile(sorted, 50)), p99_ms: round(percentile(sorted, 99)), errors: s.errors, ...(s.errors ? { error_statuses: s.statuses } : {}) }];
    }),
  );
  return {
    bench: 'soak',
    duration_s: round(wall, 1),
    target_rate: rate,
    achieved_rate: round(requests / wall, 1),
    requests,
    errors,
    error_rate: requests ? round(errors / requests, 6) : 1,
    shed,
    rss_start_mb: round(samples[0].rss, 1),
    rss_end_mb: round(samples.at(-1).rss, 1),
    rss_max_mb: round(Math.max(...samples.map((s) => s.rss)), 1),
    rss_slope_mb_per_h: round(slopePerHour(steady.map((s) => ({ t: s.t, y: s.rss })))),
    pool_connections_min: Math.min(...pools),
    pool_connections_max: Math.max(...pools),
    pool_slope_per_h: round(slopePerHour(steady.map((s) => ({ t: s.t, y: s.pool })))),
    outbox_pending_max: Math.max(...samples.map((s) => s.outbox)),
    samples: samples.length,
    kinds,
  };
}

async function main() {
  const duration = num('BENCH_DURATION', 1800);
  const rate = num('BENCH_RATE', 150);
  const every = num('BENCH_SAMPLE', 10);
  const timeoutMs = num('BENCH_TIMEOUT', 10) * 1000;
  const shape = { users: num('BENCH_USERS', 8), apps: num('BENCH_APPS', 3) };
  execFileSync(process.execPath, [join(root, 'scripts/build-if-needed.mjs')], { stdio: 'inherit' });

  const cleanups = [];
  let cleaning = null;
  const cleanup = () =>
    (cleaning ??= (async () => {
      for (const release of cleanups.reverse()) await Promise.resolve().then(release).catch((err) => log(`cleanup: ${err.message}`));
    })());
  for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => (log(`${signal}: stopping`), cleanup().finally(() => process.exit(130))));

  try {
    const db = await prepareDatabase(cleanups);
    let received = 0;
    const receiver = createServer((req, res) => req.resume().on('end', () => (received++, res.writeHead(200).end())));
    await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => receiver.close(resolve)));

    const admin = { email: `soak-${randomBytes(4).toString('hex')}@example.com`, password: `Soak-${randomBytes(12).toString('base64url')}` };
    const env = { DATABASE_URL: db.url, AUTH_RATE_LIMIT_PER_MINUTE: '0', LOG_LEVEL: 'warn', DEV_CLOCK: '0', WORKERS: '1', WEBHOOK_ALLOW_PRIVATE_TARGETS: '1', BOOTSTRAP_ADMIN_EMAIL: admin.email, BOOTSTRAP_ADMIN_PASSWORD: admin.password };
    const service = await startService({ root, env });
    cleanups.push(service.stop);
    let exited = null;
    service.child.once('exit', (code, signal) => (exited = `code ${code}, signal ${signal}`));
    log(`service on ${service.url} (pid ${service.child.pid}); storage ${db.storage}`);

    const world = await buildWorld(service.url, admin, `http://127.0.0.1:${receiver.address().port}/hook`, shape);
    log(`world: ${world.appIds.length} applications, ${world.traffic.length} users, ${world.toggles.length} toggled entitlements, 1 webhook`);
    const client = loadClient(service.url, { connections: num('BENCH_CONNECTIONS', 32), timeoutMs });
    cleanups.push(() => client.http.destroy());
    // Every kind once before the clock starts: a wrong status here is a setup fault, not a soak result.
    for (const kind of Object.keys(KINDS)) {
      await client.send(kind, KINDS[kind].make(world));
      if (client.stats[kind].errors) throw new Error(`probe ${kind}: ${JSON.stringify(client.firstErrors)}`);
      client.stats[kind].latencies.length = 0;
    }

    // Statement statistics of the soak only (setup and migrations are reset away).
    if (db.statements) await db.monitor.query(`SELECT /* ${MONITOR} */ pg_stat_statements_reset()`);
    log(`soak: ${rate} req/s for ${duration} s, samples every ${every} s`);
    const takeSample = (t) => sample(db.monitor, db.name, service.child.pid, t);
    const run = await soak({ world, client, rate, duration, every, takeSample, serviceGone: () => exited, received: () => received });
    const { rows: [deliveries] } = await db.monitor.query(
      `SELECT /* ${MONITOR} */ count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded, count(*) FILTER (WHERE status = 'pending')::int AS pending,
              count(*) FILTER (WHERE status = 'failed')::int AS failed FROM webhook_deliveries`,
    );
    const result = {
      ...summarize({ client, ...run, rate, duration }),
      outbox_pending_end: run.samples.at(-1).outbox,
      webhooks: { received, ...deliveries },
      top3_slowest_sql: db.statements ? await slowestStatements(db.monitor) : null,
      ...(db.statements ? {} : { sql_note: 'pg_stat_statements unavailable on this server' }),
      storage: db.storage,
    };
    if (client.firstErrors.length) log(`first errors: ${JSON.stringify(client.firstErrors)}`);
    process.stdout.write(JSON.stringify(result) + '\n');
    const failed = result.requests === 0 || result.error_rate >= 0.001;
    if (failed) log(`FAIL: error rate ${(result.error_rate * 100).toFixed(3)} % (limit 0.1 %)`);
    return failed ? 1 : 0;
  } finally {
    await cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    log(`failed: ${err?.stack ?? err}`);
    process.exit(1);
  },
);
