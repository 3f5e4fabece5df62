// FT-5: TCP cut mid-transaction through a Node proxy. The service runs in-process on PostgreSQL
// reached through CuttableProxy; clients sign up, create Organizations (User tokens) and create
// Applications (a platform key) while every proxied connection is destroyed, several times, at
// random moments when transactions are open. Afterwards a direct connection (not the proxy) checks
// that each creation is whole or absent: a User with exactly one Profile, Settings row, `member`
// Role (and the rest of signup's transaction); an Organization with its creator as active org_admin;
// an Application with its Tenant and seeded app Roles; each with its `*.created` audit row (and, for
// an Organization, the organization.member_added audit row and outbox event, Part B). Every 2xx
// names a resource that exists; every failure is the error envelope, a 5xx only 503 with Retry-After.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { serverDatabaseUrl } from './cluster.js';
import { figure } from '../core/support.js';
import { CuttableProxy, freshSchemaName, sleep } from '../../foundation/support/ops.js';
import { dropSchema, testConfig, type TestApp } from '../../helpers/app.js';
import { createApiKey, PASSWORD, uniqueEmail } from '../../helpers/fixtures.js';
import { call, sql, type InjectResponse } from '../../helpers/http.js';
import { boot } from '../../../src/boot.js';
import { SystemClock } from '../../../src/clock.js';
import { openPg } from '../../../src/db/pg.js';
import type { Database, Db, Scope } from '../../../src/db/types.js';

/** Catalog: "several" cuts; MP_FT5_CUTS asks for more (each costs about a second of load). */
const CUTS = Number(process.env.MP_FT5_CUTS ?? 8);
const CLIENTS = 8;
const APP_ROLES = ['viewer', 'editor', 'owner'];

interface Write {
  kind: 'signup' | 'organization' | 'application';
  status: number;
  body: any;
  retryAfter: string | undefined;
  requestId: string | undefined;
  /** The resource a 2xx names. */
  id: string | null;
}

const cleanup: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const step of cleanup.reverse()) await step().catch(() => undefined);
});

/** `database` that counts transactions whose body is running (after BEGIN, before COMMIT). */
function countingTransactions(database: Database): { database: Database; open: () => number } {
  let open = 0;
  const scoped = (scope: Scope): Db => {
    const db = database.scoped(scope);
    return {
      ...db,
      transaction: (fn) =>
        db.transaction(async (tx) => {
          open++;
          try {
            return await fn(tx);
          } finally {
            open--;
          }
        }),
    };
  };
  return { database: { ...database, scoped }, open: () => open };
}

test(
  'FT-5 TCP cut mid-transaction through a Node proxy during signup, org creation and app creation: no half-created user, profile, settings and member role (one transaction); every user has exactly one profile, settings row and `member` role',
  async () => {
    const started = Date.now();
    const serverUrl = serverDatabaseUrl();
    const target = new URL(serverUrl);
    const proxy = new CuttableProxy(target.hostname, Number(target.port || 5432));
    await proxy.open();
    cleanup.push(() => proxy.cut());
    const schema = freshSchemaName('ft5');
    cleanup.push(() => dropSchema(schema));
    const proxied = countingTransactions(await openPg({ url: proxy.urlFor(serverUrl), schema, poolSize: 6 }));
    cleanup.push(() => proxied.database.close());
    // Error lines name what a 5xx came from (matched to a response by its request id).
    const logs: Array<{ reqId?: string; err?: { message?: string; code?: string; stack?: string } }> = [];
    const stream = new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split('\n').filter(Boolean)) logs.push(JSON.parse(line));
        done();
      },
    });
    const config = testConfig();
    const clock = new SystemClock();
    const { app, deps } = await boot({ config, database: proxied.database, clock, logger: { level: 'error', stream } });
    cleanup.push(async () => {
      await app.close();
      await deps.jobs.stop();
    });
    await app.ready();
    const direct = await openPg({ url: serverUrl, schema, poolSize: 2 });
    cleanup.push(() => direct.close());
    // The test app seen through a direct connection: fixtures and every check bypass the proxy.
    const t: TestApp = { app, deps, clock, database: direct, config, schema, close: async () => undefined };
    const admin = (await createApiKey(t, { scope: 'platform', permissions: ['applications.manage'] })).secret;

    const writes: Write[] = [];
    const users: Array<{ id: string; token: string; orgAttempts: number; ownerUsed: boolean }> = [];
    const orgs: Array<{ id: string; appAttempts: number }> = [];
    const record = (kind: Write['kind'], res: InjectResponse, id: (body: any) => string): Write => {
      const body = res.body ? JSON.parse(res.body) : null;
      const w: Write = {
        kind,
        status: res.statusCode,
        body,
        retryAfter: res.headers['retry-after'] as string | undefined,
        requestId: res.headers['request-id'] as string | undefined,
        id: res.statusCode < 300 ? id(body) : null,
      };
      writes.push(w);
      return w;
    };
    const pick = <T>(list: T[]): T | undefined => list[Math.floor(Math.random() * list.length)];

    const signup = async () => {
      const res = await call(t, 'POST', '/v1/auth/signup', null, { email: uniqueEmail('ft5'), password: PASSWORD, display_name: 'FT-5' });
      const w = record('signup', res, (b) => b.user_id);
      if (w.id) users.push({ id: w.id, token: w.body.access_token, orgAttempts: 0, ownerUsed: false });
      return w;
    };
    // At most 5 attempts per user: under the 10-a-day quota even if every failed attempt committed.
    const createOrganization = async (user = pick(users.filter((u) => u.orgAttempts < 5))) => {
      if (!user) return signup();
      user.orgAttempts++;
      const w = record('organization', await call(t, 'POST', '/v1/organizations', user.token, { name: `FT-5 org ${user.orgAttempts}` }), (b) => b.id);
      if (w.id) orgs.push({ id: w.id, appAttempts: 0 });
      return w;
    };
    // A user owns at most one attempt (Starter: 1 Application), an Organization four (Team: 5).
    const createApplication = async (owner?: { owner_user_id: string } | { owner_organization_id: string }) => {
      if (!owner) {
        const org = Math.random() < 0.5 ? pick(orgs.filter((o) => o.appAttempts < 4)) : undefined;
        const user = org ? undefined : pick(users.filter((u) => !u.ownerUsed));
        if (org) org.appAttempts++;
        if (user) user.ownerUsed = true;
        if (!org && !user) return signup();
        owner = org ? { owner_organization_id: org.id } : { owner_user_id: user!.id };
      }
      const roles = APP_ROLES.filter(() => Math.random() < 0.5);
      const slug = `ft5-${Math.random().toString(36).slice(2, 12)}`;
      const res = await call(t, 'POST', '/v1/applications', admin, { slug, name: 'FT-5 app', launch_url: 'https://app.example.com/launch', available_app_roles: roles, ...owner });
      return record('application', res, (b) => b.id);
    };

    for (let i = 0; i < 4; i++) assert.equal((await signup()).status, 201, 'a signup before any cut');

    // ---- the load, and the cuts ----------------------------------------------------------------
    let running = true;
    const client = async () => {
      while (running) {
        const r = Math.random();
        const w = await (r < 0.34 ? signup() : r < 0.67 ? createOrganization() : createApplication());
        if (w.status === 503) await sleep(20);
      }
    };
    const load = Promise.all(Array.from({ length: CLIENTS }, client));
    const openAtCuts: number[] = [];
    for (let k = 0; k < CUTS; k++) {
      await sleep(200 + Math.random() * 500);
      // The cut lands while at least one transaction is between BEGIN and COMMIT (waits ≤ 1 s for one).
      const deadline = Date.now() + 1000;
      while (proxied.open() === 0 && Date.now() < deadline) await new Promise((r) => setImmediate(r));
      openAtCuts.push(proxied.open());
      await proxy.cut();
      await sleep(30 + Math.random() * 200);
      await proxy.open();
    }
    await sleep(700);
    running = false;
    await load;

    // Back to normal without a restart: one of each succeeds once the connections are back.
    const fresh = await signup();
    assert.equal(fresh.status, 201, `signup after the cuts: ${JSON.stringify(fresh.body)}`);
    const org = await createOrganization(users.find((u) => u.id === fresh.id));
    assert.equal(org.status, 201, `organization creation after the cuts: ${JSON.stringify(org.body)}`);
    const created = await createApplication({ owner_organization_id: org.id! });
    assert.equal(created.status, 201, `application creation after the cuts: ${JSON.stringify(created.body)}`);

    // ---- answers -------------------------------------------------------------------------------
    const tally: Record<string, number> = {};
    const badAnswers: string[] = [];
    for (const w of writes) {
      const key = `${w.kind} ${w.status}${w.status >= 300 ? ` ${w.body?.error?.code}` : ''}`;
      tally[key] = (tally[key] ?? 0) + 1;
      if (w.status < 300) continue;
      const e = w.body?.error;
      const envelope = typeof e?.code === 'string' && typeof e.message === 'string' && typeof e.details === 'object' && e.details !== null;
      if (envelope && w.status === 503 && e.code === 'service_unavailable' && Number(w.retryAfter) > 0) continue;
      const logged = logs.find((l) => l.reqId === w.requestId)?.err;
      badAnswers.push(`${w.kind} → ${w.status} ${JSON.stringify(w.body)}; logged: ${logged?.code ?? ''} ${logged?.message ?? '(nothing)'}`);
    }

    // ---- invariants, read directly -------------------------------------------------------------
    const violations: string[] = [];
    // One violation per resource, naming each of its counts that is not exactly 1.
    const expectOne = (what: string, row: Record<string, unknown>, columns: string[]) => {
      const wrong = columns.filter((c) => row[c] !== 1).map((c) => `${c} = ${row[c]}`);
      if (wrong.length > 0) violations.push(`${what} ${row.id}: ${wrong.join(', ')} (expected 1 each)`);
    };
    const userRows = await sql(
      t,
      `SELECT u.id,
         (SELECT count(*) FROM profiles p WHERE p.user_id = u.id)::int AS profiles,
         (SELECT count(*) FROM settings s WHERE s.user_id = u.id)::int AS settings,
         (SELECT count(*) FROM role_assignments r WHERE r.user_id = u.id AND r.role_id = 'role_platform_member' AND r.application_id IS NULL)::int AS member_role,
         (SELECT count(*) FROM role_assignments r WHERE r.user_id = u.id)::int AS role_assignments,
         (SELECT count(*) FROM identities i WHERE i.user_id = u.id AND i.method = 'password')::int AS password_identities,
         (SELECT count(*) FROM one_time_tokens o WHERE o.user_id = u.id AND o.kind = 'email_verification')::int AS verification_tokens,
         (SELECT count(*) FROM emails e WHERE e.user_id = u.id AND e.template = 'email_verification')::int AS verification_mails,
         (SELECT count(*) FROM sessions s WHERE s.user_id = u.id)::int AS sessions,
         (SELECT count(*) FROM audit_events a WHERE a.action = 'user.created' AND a.target_user_id = u.id)::int AS created_audits
       FROM users u WHERE u.status <> 'deleted'`,
    );
    for (const row of userRows) {
      expectOne('user', row, ['profiles', 'settings', 'member_role', 'role_assignments', 'password_identities', 'verification_tokens', 'verification_mails', 'sessions', 'created_audits']);
    }
    const orgRows = await sql(
      t,
      `SELECT o.id,
         (SELECT count(*) FROM organization_members m WHERE m.organization_id = o.id)::int AS memberships,
         (SELECT count(*) FROM organization_members m WHERE m.organization_id = o.id AND m.user_id = o.created_by
            AND m.role = 'org_admin' AND m.membership_status = 'active')::int AS creator_active_admin,
         (SELECT count(*) FROM audit_events a WHERE a.action = 'organization.created' AND a.target_id = o.id)::int AS created_audits,
         (SELECT count(*) FROM audit_events a WHERE a.action = 'organization.member_added' AND a.organization_id = o.id AND a.target_user_id = o.created_by)::int AS member_added_audits,
         (SELECT count(*) FROM outbox_events e WHERE e.type = 'organization.member_added' AND e.data->>'organization_id' = o.id
            AND e.data->>'user_id' = o.created_by)::int AS member_added_events
       FROM organizations o`,
    );
    for (const row of orgRows) expectOne('organization', row, ['memberships', 'creator_active_admin', 'created_audits', 'member_added_audits', 'member_added_events']);
    const appRows = await sql(
      t,
      `SELECT a.id, a.slug, a.available_app_roles AS wanted,
         ARRAY(SELECT r.id FROM roles r WHERE r.scope = a.id ORDER BY r.id) AS seeded,
         (t.id IS NOT NULL AND t.owner_user_id IS NOT DISTINCT FROM a.owner_user_id
            AND t.owner_organization_id IS NOT DISTINCT FROM a.owner_organization_id)::int AS owner_tenant,
         (SELECT count(*) FROM audit_events e WHERE e.action = 'application.created' AND e.target_id = a.id)::int AS created_audits
       FROM applications a LEFT JOIN tenants t ON t.id = a.tenant_id`,
    );
    for (const row of appRows) {
      const wanted = (row.wanted as string[]).map((n) => `role_${row.slug}_${n}`).sort();
      row.seeded_app_roles = JSON.stringify(row.seeded) === JSON.stringify(wanted) ? 1 : `${JSON.stringify(row.seeded)} of ${JSON.stringify(wanted)}`;
      expectOne('application', row, ['owner_tenant', 'seeded_app_roles', 'created_audits']);
    }
    // Rows of a creation whose resource does not exist (the transaction was cut between them).
    const orphans = await sql<{ what: string; id: string }>(
      t,
      `SELECT 'user.created audit' AS what, target_user_id AS id FROM audit_events a WHERE action = 'user.created' AND NOT EXISTS (SELECT 1 FROM users u WHERE u.id = a.target_user_id)
       UNION ALL SELECT 'verification mail', user_id FROM emails e WHERE user_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM users u WHERE u.id = e.user_id)
       UNION ALL SELECT 'organization audit', organization_id FROM audit_events a WHERE action LIKE 'organization.%' AND NOT EXISTS (SELECT 1 FROM organizations o WHERE o.id = a.organization_id)
       UNION ALL SELECT 'organization event', data->>'organization_id' FROM outbox_events e WHERE type LIKE 'organization.%' AND NOT EXISTS (SELECT 1 FROM organizations o WHERE o.id = e.data->>'organization_id')
       UNION ALL SELECT 'application.created audit', target_id FROM audit_events a WHERE action = 'application.created' AND NOT EXISTS (SELECT 1 FROM applications p WHERE p.id = a.target_id)
       UNION ALL SELECT 'tenant without an application', id FROM tenants t WHERE NOT EXISTS (SELECT 1 FROM applications p WHERE p.tenant_id = t.id)
       UNION ALL SELECT 'app role without its application', id FROM roles r WHERE r.scope <> 'platform' AND NOT EXISTS (SELECT 1 FROM applications p WHERE p.id = r.scope)`,
    );
    for (const o of orphans) violations.push(`${o.what} ${o.id}: its resource does not exist`);
    // Every 2xx names a resource that exists.
    const existing = new Set([...userRows, ...orgRows, ...appRows].map((r) => r.id as string));
    for (const w of writes) if (w.id && !existing.has(w.id)) violations.push(`${w.kind} answered ${w.status} with ${w.id}, which does not exist`);
    const acknowledged = new Set(writes.filter((w) => w.id).map((w) => w.id));
    const unacknowledged = existing.size - [...existing].filter((id) => acknowledged.has(id)).length;

    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    figure('FT-5', `answers: ${JSON.stringify(tally)}`);
    figure('FT-5', `transactions open at each cut: ${openAtCuts.join(' ')}; committed but answered with an error (the cut took the reply): ${unacknowledged}`);
    figure('FT-5', `users ${userRows.length}, organizations ${orgRows.length}, applications ${appRows.length}; answers outside the envelope or other than 503: ${badAnswers.length}`);
    for (const line of [...violations, ...badAnswers].slice(0, 20)) figure('FT-5', `  ${line}`);
    figure('FT-5', `invariant violations: ${violations.length} / ${writes.length} writes, cuts: ${openAtCuts.length} (${seconds} s)`);

    assert.equal(openAtCuts.length, CUTS);
    assert.ok(openAtCuts.some((n) => n > 0), 'at least one cut landed inside a transaction');
    assert.ok(writes.some((w) => w.status === 503), 'the cuts failed some writes');
    assert.deepEqual(violations, [], 'every creation is whole or absent, and every 2xx names a resource that exists');
    assert.deepEqual(badAnswers, [], 'every failed write is the error envelope: 503 service_unavailable with Retry-After');
  },
);
