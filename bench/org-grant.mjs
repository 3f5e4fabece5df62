#!/usr/bin/env node
// node bench/org-grant.mjs [members]   (after `npm run build`; `npm run bench` builds too)
// Issue 6: an organization-wide grant for an Organization of 10,000 members, with its access flips and
// outbox rows, commits in under 2 seconds on embedded storage and on PostgreSQL. Boots the service in
// this process (no HTTP listener: app.inject) on a fresh PGlite and on a fresh database of the local
// PostgreSQL (LOCAL_POSTGRES_URL, skipped when unreachable), seeds the members with SQL, then times
// POST /v1/organizations/{id}/entitlements on a Team Tenant (every member gets a seat and access) and
// on a Starter Tenant (1,000-seat cap: the rest are marked seat_limit). One JSON line per run.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { freshDatabase, LOCAL_POSTGRES_URL, reachable } from './lib/storage.mjs';

const dist = (path) => new URL(`../dist/src/${path}`, import.meta.url).href;
const [{ loadConfig }, { boot }, { SystemClock }, { openPglite }, { openPg }] = await Promise.all([
  import(dist('config.js')), import(dist('boot.js')), import(dist('clock.js')), import(dist('db/pglite.js')), import(dist('db/pg.js')),
]);

const MEMBERS = Number(process.argv[2] ?? 10_000);
const log = (msg) => process.stderr.write(`[org-grant] ${msg}\n`);

async function run(storage, database) {
  const email = `bench-${randomBytes(4).toString('hex')}@example.com`;
  const password = `Bench-${randomBytes(12).toString('base64url')}`;
  const config = Object.freeze({
    ...loadConfig({ PUBLIC_URL: 'http://localhost:8080', LOG_LEVEL: 'silent', BOOTSTRAP_ADMIN_EMAIL: email, BOOTSTRAP_ADMIN_PASSWORD: password }),
    authRateLimitPerMinute: 0,
    workers: false,
  });
  const { app, deps } = await boot({ config, database, clock: new SystemClock(), logger: false });
  await app.ready();
  const system = database.scoped('system');
  const call = async (method, url, token, payload, headers = {}) => {
    const res = await app.inject({ method, url, payload, headers: { authorization: `Bearer ${token}`, ...headers } });
    if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
    return res.json();
  };
  try {
    const login = (await app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password } })).json();
    const token = login.access_token;
    for (const plan of ['team', 'starter']) {
      const owner = await call('POST', '/v1/users', token, { email: `owner-${randomBytes(4).toString('hex')}@example.com` }).catch(() => null);
      const ownerId = owner?.id ?? login.user_id;
      const slug = `orggrant${randomBytes(3).toString('hex')}`;
      const application = await call('POST', '/v1/applications', token, { slug, name: 'Org grant bench', launch_url: 'https://bench.example', owner_user_id: ownerId, visibility: 'public' });
      await system.query('UPDATE tenants SET plan = $2 WHERE id = $1', [application.tenant_id, plan]);
      const org = await call('POST', '/v1/organizations', token, { name: `Bench ${plan}` });
      const prefix = `usr_b${randomBytes(5).toString('hex')}_`;
      const now = new Date();
      await system.query(
        `INSERT INTO users (id, email, status, test_mode, created_at, updated_at)
         SELECT $1 || g, $1 || g || '@bench.example', 'active', false, $2, $2 FROM generate_series(1, $3::int) g`,
        [prefix, now, MEMBERS - 1],
      );
      await system.query(
        `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at)
         SELECT $1, $2 || g, 'member', 'active', $3, $3 FROM generate_series(1, $4::int) g`,
        [org.id, prefix, now, MEMBERS - 1],
      );
      await system.query('ANALYZE');
      const started = performance.now();
      const grant = await call('POST', `/v1/organizations/${org.id}/entitlements`, token, { application_id: application.id }, { 'idempotency-key': `bench-${randomBytes(6).toString('hex')}` });
      const ms = performance.now() - started;
      const { rows } = await system.query(`SELECT count(*)::int AS n FROM outbox_events WHERE type = 'access.granted' AND data->>'application_id' = $1`, [application.id]);
      process.stdout.write(
        JSON.stringify({ bench: 'org-grant', storage, plan, members: MEMBERS, commit_ms: Math.round(ms), included_member_count: grant.included_member_count, access_granted_events: rows[0].n, under_2s: ms < 2000 }) + '\n',
      );
    }
  } finally {
    await app.close();
    await deps.jobs.stop();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'org-grant-'));
try {
  log('embedded PostgreSQL (PGlite)');
  const pglite = await openPglite(join(dir, 'pglite'));
  await run('pglite', pglite).finally(() => pglite.close());
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const adminUrl = process.env.LOCAL_POSTGRES_URL ?? LOCAL_POSTGRES_URL;
if (await reachable(adminUrl)) {
  const db = await freshDatabase(adminUrl);
  log(`PostgreSQL (${db.name})`);
  try {
    const database = await openPg({ url: db.url });
    await run('postgres', database).finally(() => database.close());
  } finally {
    await db.drop();
  }
} else {
  log(`PostgreSQL at ${adminUrl} unreachable: skipped`);
}
