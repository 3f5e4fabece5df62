// Queries at scale (docs/conventions.md): the statements a request runs, captured at the database
// handles, planned as the request role plans them (row-level security on) with sequential scans
// discouraged, so a plan shows which conditions an index can serve whatever the table sizes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, userToken, type TestUser } from '../helpers/fixtures.js';
import { call } from '../helpers/http.js';
import { createApplication, createOrganization, grant, orgGrant, rand } from '../users/support.js';
import { grantReq, newApp } from '../access/support.js';
import { createOrgApi, orgGrantReq } from '../organizations/support.js';
import type { Database, Db, Scope, Tx } from '../../src/db/types.js';
import { findLiveUserByEmail } from '../../src/modules/users/store.js';
import { findAndClaim } from '../../src/modules/auth/identities.js';
import { ownsAnyApplication } from '../../src/modules/entitlements/list-store.js';

let t: TestApp;
let admin: { user: TestUser; token: string };

before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
});
after(() => t.close());

interface Statement {
  scope: Scope;
  text: string;
  params: unknown[];
}

/** Every statement `fn` runs on the database, in order, with the scope it ran in. */
async function statementsOf(database: Database, fn: () => Promise<unknown>): Promise<Statement[]> {
  const seen: Statement[] = [];
  const wrapTx = (tx: Tx): Tx => ({
    ...tx,
    query: (text, params) => {
      seen.push({ scope: tx.scope, text, params: params ?? [] });
      return tx.query(text, params);
    },
    transaction: (inner) => inner(wrapTx(tx)),
  });
  const original = database.scoped;
  database.scoped = (scope: Scope): Db => {
    const db = original.call(database, scope);
    return {
      ...db,
      query: (text, params) => {
        seen.push({ scope, text, params: params ?? [] });
        return db.query(text, params);
      },
      transaction: (fn2) => db.transaction((tx) => fn2(wrapTx(tx))),
    };
  };
  try {
    await fn();
  } finally {
    database.scoped = original;
  }
  return seen;
}

/** The plan of a statement in its scope (the request role's row-level security), sequential scans discouraged. */
async function planOf(s: Statement): Promise<string> {
  return t.database.scoped(s.scope).transaction(async (tx) => {
    await tx.exec('SET LOCAL enable_seqscan = off');
    const { rows } = await tx.query<Record<string, string>>(`EXPLAIN ${s.text}`, s.params);
    return rows.map((r) => Object.values(r)[0]).join('\n');
  });
}

/** A handle that records the statements a store function sends and answers each with no rows. */
function recorder(scope: Scope) {
  const seen: Statement[] = [];
  const db = {
    query: async (text: string, params?: unknown[]) => {
      seen.push({ scope, text, params: params ?? [] });
      return { rows: [], rowCount: 0 };
    },
  };
  return { db: db as unknown as Tx, seen };
}

test('the email lookup of sign-up, invitations and the forgot-password route is an index condition under row-level security', async () => {
  const { db, seen } = recorder('live');
  await findLiveUserByEmail(db, 'Someone@Example.com');
  const plan = await planOf(seen[0]);
  assert.doesNotMatch(plan, /Seq Scan on users/, plan);
  assert.match(plan, /Index Cond: .*email_lower = /, plan);
});

test('the sign-in lookup by email is an index condition under row-level security', async () => {
  const { db, seen } = recorder('live');
  await findAndClaim(db, 'Someone@Example.com', new Date());
  const plan = await planOf(seen[0]);
  assert.doesNotMatch(plan, /Seq Scan on users/, plan);
  assert.match(plan, /Index Cond: .*email_lower = /, plan);
});

test('GET /v1/users?email= and ?q= search by index conditions: the email, and the email or display_name prefix', async () => {
  const user = await createUser(t, { email: `plan-${rand(6)}@example.com` });
  const byEmail = await statementsOf(t.database, async () => {
    const res = await call(t, 'GET', `/v1/users?email=${encodeURIComponent(user.email.toUpperCase())}`, admin.token);
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json().data.map((u: { id: string }) => u.id), [user.id]);
  });
  const listed = byEmail.filter((s) => /FROM users u JOIN profiles p/.test(s.text));
  assert.equal(listed.length, 1);
  assert.match(await planOf(listed[0]), /Index Cond: .*email_lower = /);

  const byPrefix = await statementsOf(t.database, async () => {
    const res = await call(t, 'GET', `/v1/users?q=${encodeURIComponent(user.email.slice(0, 12).toUpperCase())}`, admin.token);
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json().data.map((u: { id: string }) => u.id), [user.id]);
  });
  const searched = byPrefix.filter((s) => /FROM users u JOIN profiles p/.test(s.text));
  assert.equal(searched.length, 1);
  const plan = await planOf(searched[0]);
  assert.doesNotMatch(plan, /Seq Scan on (users|profiles)/, plan);
  assert.match(plan, /Index Cond: .*email_lower ~>=~/, plan);
  assert.match(plan, /Index Cond: .*lower\(display_name\) ~>=~/, plan);
});

test('GET /v1/users runs the same number of statements for a page of 1 and a page of 50', async () => {
  for (let i = 0; i < 3; i++) await createUser(t, {});
  const count = async (limit: number) =>
    (await statementsOf(t.database, async () => assert.equal((await call(t, 'GET', `/v1/users?limit=${limit}`, admin.token)).statusCode, 200))).length;
  assert.equal(await count(1), await count(50));
});

test("an app-scoped key's GET /v1/users (its application_id filter, forced) reads its Application's users from the Application's Entitlements by their application index, not by testing an access path on every user newest first", async () => {
  const app = await createApplication(t);
  const [personal, member, other] = [await createUser(t, {}), await createUser(t, {}), await createUser(t, {})];
  await grant(t, personal.id, app.id);
  await orgGrant(t, await createOrganization(t, [member.id]), app.id);
  const key = await createApiKey(t, { scope: app.id, permissions: ['users.list'] });
  const run = await statementsOf(t.database, async () => {
    const res = await call(t, 'GET', '/v1/users', key.secret);
    assert.equal(res.statusCode, 200, res.body);
    assert.deepEqual(res.json().data.map((u: { id: string }) => u.id).sort(), [personal.id, member.id].sort());
  });
  assert.ok(!run.some((s) => s.params.includes(other.id)));
  const listed = run.filter((s) => /FROM users u JOIN profiles p/.test(s.text));
  assert.equal(listed.length, 1);
  const plan = await planOf(listed[0]);
  // Was a walk of every user newest first (users_list_idx) filtering each by the access-path EXISTS
  // (hashed subqueries): at 100k users, an Application 10 of them reach took 24 ms, growing with the platform.
  assert.doesNotMatch(plan, /Filter: .*SubPlan/, plan);
  assert.match(plan, /Index Cond: .*\(?id = ANY /, plan);
  const reach = run.filter((s) => /organization_members m/.test(s.text) && !/FROM users u JOIN profiles p/.test(s.text));
  assert.equal(reach.length, 1);
  const reachPlan = await planOf(reach[0]);
  assert.match(reachPlan, /Index Cond: \(application_id = /, reachPlan);
  assert.doesNotMatch(reachPlan, /Seq Scan/, reachPlan);
});

test('GET /v1/audit-events filters by actor, target, application, organization and action through their indexes', async () => {
  const filters: [string, RegExp][] = [
    ['actor_id=usr_01HZZZZZZZZZZZZZZZZZZZZZZZ', /audit_events_actor_idx/],
    ['target_id=usr_01HZZZZZZZZZZZZZZZZZZZZZZZ', /audit_events_target_idx/],
    ['application_id=app_nothing_here', /audit_events_application_idx/],
    ['organization_id=org_01HZZZZZZZZZZZZZZZZZZZZZZZ', /audit_events_organization_idx/],
    ['action=nothing.happened', /audit_events_action_idx/],
  ];
  for (const [query, index] of filters) {
    const run = await statementsOf(t.database, async () => assert.equal((await call(t, 'GET', `/v1/audit-events?${query}`, admin.token)).statusCode, 200));
    const listed = run.filter((s) => /FROM audit_events e WHERE/.test(s.text));
    assert.equal(listed.length, 1, query);
    const plan = await planOf(listed[0]);
    assert.match(plan, index, `${query}\n${plan}`);
  }
});

test("GET /v1/roles counts each Role's holders of the reader's mode from an index, without reading their users", async () => {
  const run = await statementsOf(t.database, async () => assert.equal((await call(t, 'GET', '/v1/roles?limit=100', admin.token)).statusCode, 200));
  const listed = run.filter((s) => /assignment_count/.test(s.text));
  assert.equal(listed.length, 1);
  const plan = await planOf(listed[0]);
  assert.doesNotMatch(plan, / on users/, plan);
  assert.match(plan, /Index Only Scan using role_assignments_role_mode_idx/, plan);
});

test("GET /v1/users/{id}/entitlements finds the user's own rows and their Organizations' grants by index conditions, not by reading every entitlement", async () => {
  const user = await createUser(t, {});
  const run = await statementsOf(t.database, async () => assert.equal((await call(t, 'GET', `/v1/users/${user.id}/entitlements`, admin.token)).statusCode, 200));
  const listed = run.filter((s) => /FROM entitlements e LEFT JOIN organization_members m/.test(s.text));
  assert.equal(listed.length, 1);
  const plan = await planOf(listed[0]);
  // Both sides of `user_id = $1 OR organization_id = ANY(…)` are index conditions; an `IN (SELECT …)`
  // was a hashed subquery filtering the newest-first walk of every entitlement (200 ms at 270k rows).
  assert.doesNotMatch(plan, /hashed SubPlan/, plan);
  assert.match(plan, /Index Cond: \(user_id = /, plan);
  assert.match(plan, /Index Cond: \(organization_id = ANY /, plan);
});

test("GET /v1/tenants for a user finds the Tenants they own, by their user and their Organizations', through index conditions, not by reading every Tenant", async () => {
  const owner = await userToken(t);
  const run = await statementsOf(t.database, async () => assert.equal((await call(t, 'GET', '/v1/tenants', owner.token)).statusCode, 200));
  const listed = run.filter((s) => /FROM tenants t WHERE/.test(s.text));
  assert.equal(listed.length, 1);
  const plan = await planOf(listed[0]);
  // As GET /v1/users/{id}/entitlements (below): an `IN (SELECT …)` over the user's Organizations was a
  // hashed subquery filtering the newest-first walk of every Tenant (docs/conventions.md, Queries at scale).
  assert.doesNotMatch(plan, /hashed SubPlan/, plan);
  assert.match(plan, /Index Cond: \(owner_user_id = /, plan);
  assert.match(plan, /Index Cond: \(owner_organization_id = ANY /, plan);
});

test("whether a user owns any Application (asked on every user's GET /v1/entitlements) is answered through the owner indexes, not by reading every Application", async () => {
  const { db, seen } = recorder('live');
  await ownsAnyApplication(db, 'usr_01HZZZZZZZZZZZZZZZZZZZZZZZ').catch(() => false); // the recorder answers no row
  const plan = await planOf(seen[0]);
  // The owned Applications (src/access/ownership.ts): `owner_organization_id IN (SELECT …)` was a hashed
  // subquery filtering every Application; as `= ANY (ARRAY(SELECT …))` both owners are index conditions.
  assert.doesNotMatch(plan, /hashed SubPlan/, plan);
  assert.match(plan, /Index Cond: \(owner_user_id = /, plan);
  assert.match(plan, /Index Cond: \(owner_organization_id = ANY /, plan);
});

test('GET /v1/entitlements?order_id= finds the order\'s rows through an index on order_id', async () => {
  const run = await statementsOf(t.database, async () => assert.equal((await call(t, 'GET', '/v1/entitlements?order_id=ord_nothing_here', admin.token)).statusCode, 200));
  const listed = run.filter((s) => /FROM entitlements e WHERE/.test(s.text));
  assert.equal(listed.length, 1);
  const plan = await planOf(listed[0]);
  assert.match(plan, /Index Cond: \(order_id = /, plan);
  assert.match(plan, /entitlements_order_idx/, plan);
});

test("a grant of a new seat on a Tenant without a seat cap (Team, Enterprise) does not count the Tenant's seats; at Starter's cap it does", async () => {
  const app = await newApp(t, admin.token);
  const countsSeats = async () => {
    const user = await createUser(t, {});
    const run = await statementsOf(t.database, async () => {
      const res = await grantReq(t, admin.token, user.id, { application_id: app.id, source: 'admin_grant' });
      assert.equal(res.statusCode, 201, res.body);
    });
    return run.some((s) => /SELECT count\(\*\)::int AS n FROM \(\s*SELECT e\.user_id FROM entitlements e/.test(s.text));
  };
  assert.equal(await countsSeats(), true, 'Starter: 1,000 seats at most, so the count is needed');
  await t.database.scoped('system').query(`UPDATE tenants SET plan = 'team' WHERE id = $1`, [app.tenant_id]);
  assert.equal(await countsSeats(), false, 'Team: no seat cap');
  await t.database.scoped('system').query(`UPDATE tenants SET plan = 'enterprise' WHERE id = $1`, [app.tenant_id]);
  assert.equal(await countsSeats(), false, 'Enterprise: no seat cap');
});

test('the test-purge job finds the test users who stay but lose a path with joins (an anti-join for the purged, one set of users reached), not subqueries per test user', async () => {
  const run = await statementsOf(t.database, () => t.deps.jobs.runNow('test-purge'));
  const staying = run.filter((s) => /^\s*SELECT u\.id FROM users u WHERE u\.test_mode AND /.test(s.text));
  assert.equal(staying.length, 1);
  const plan = await planOf(staying[0]);
  // Was a filter on every test user: `NOT (hashed SubPlan) AND (hashed SubPlan OR hashed SubPlan OR
  // hashed SubPlan)`, estimated at 600k, so PostgreSQL compiled it with JIT: 1-4 s for 10k test users.
  assert.doesNotMatch(plan, /SubPlan[^\n]* OR /, plan);
  assert.match(plan.split('\n')[0], /Join/, plan);
  assert.match(plan, /Anti Join/, plan);
});

test("an organization-wide grant's included member count and the Tenant's seat count decide the members against one hash of the grant's member_overrides, not each member against every override", async () => {
  const app = await newApp(t, admin.token);
  const { org, owner } = await createOrgApi(t);
  const run = await statementsOf(t.database, async () => {
    const res = await orgGrantReq(t, admin.token, org.id, { application_id: app.id, member_scope: 'allowlist', member_overrides: [owner.id] });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal(res.json().included_member_count, 1);
  });
  const included = run.filter((s) => /AS n FROM entitlements e WHERE e\.id = \$1/.test(s.text));
  const seats = run.filter((s) => /SELECT count\(\*\)::int AS n FROM \(\s*SELECT e\.user_id FROM entitlements e/.test(s.text));
  assert.equal(included.length, 1);
  assert.ok(seats.length >= 1, 'Starter: the grant counts the seats');
  for (const s of [included[0], seats[0]]) {
    const plan = await planOf(s);
    // Was `NOT (m.user_id = ANY (COALESCE(e.member_overrides, '{}')))` in the filter of every member:
    // members × overrides comparisons (1.5-20 s for 5,000-20,000 members and 10,000 overrides).
    assert.doesNotMatch(plan, /= ANY \(COALESCE\(\w+\.member_overrides/, plan);
    // Each scope's test reads a hashed subplan (shown as `hashed SubPlan 1` up to PostgreSQL 16, as
    // `ANY ((e.id = (hashed SubPlan 1).col1) AND …)` later), built once from the unnested overrides.
    assert.match(plan, /'allowlist'::text\) AND \(NOT \([^']*hashed SubPlan \d+/, plan);
    assert.match(plan, /'denylist'::text\) AND \([^']*hashed SubPlan \d+/, plan);
    assert.match(plan, /Function Scan on unnest/, plan);
  }
});
