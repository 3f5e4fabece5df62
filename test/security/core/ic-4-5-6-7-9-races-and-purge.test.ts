// IC-4, IC-5, IC-6, IC-7, IC-9 in one process: uniqueness and cap races, write skew between two org
// admins (raced at the database boundary so both read before either writes), If-Match, idempotent
// state changes under concurrency, and the test-purge age guard. The two-process variants are [MP].
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { createUser } from '../../helpers/fixtures.js';
import { assertError, assertStatus, call, grant, grantReq, newApp, outbox, person, platformKey, rand, slugOf, sql, type InjectResponse, type Person } from '../../access/support.js';
import { figure, raceTransactions } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp({ webhookAllowPrivateTargets: true });
  admin = await platformKey(t);
});
after(() => t.close());

const DAY = 86400;
const idem = () => ({ 'idempotency-key': `k${rand(6)}` });
const statuses = (rs: InjectResponse[]) => rs.map((r) => r.statusCode).sort().join(',');
/** Exactly `n` answers are 201; every other one is this status and code. */
function assertWinners(rs: InjectResponse[], n: number, status: number, code: string): void {
  assert.equal(rs.filter((r) => r.statusCode === 201).length, n, statuses(rs));
  for (const r of rs) if (r.statusCode !== 201) assertError(r, status, code);
}

test('IC-4 "exactly the allowed number succeed": 20 concurrent personal grants with different keys, 10 app creations on a Starter owner (cap 1), 8 creations of one slug, 14 org creations (10 per day), webhook creations past the Starter cap', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  assertWinners(await Promise.all(Array.from({ length: 20 }, () => grantReq(t, admin, u.id, { application_id: app.id, source: 'admin_grant' }))), 1, 409, 'entitlement_already_exists');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1 AND application_id = $2', [u.id, app.id]))[0].n, 1);

  const createApp = (slug: string, ownerId: string) => call(t, 'POST', '/v1/applications', admin, { slug, name: 'A', launch_url: 'https://a.example.com', owner_user_id: ownerId }, idem());
  const owner = await person(t);
  assertWinners(await Promise.all(Array.from({ length: 10 }, () => createApp(slugOf(), owner.id))), 1, 409, 'plan_limit_reached');
  const slug = slugOf('s');
  const owners = await Promise.all(Array.from({ length: 8 }, () => person(t)));
  assertWinners(await Promise.all(owners.map((o) => createApp(slug, o.id))), 1, 409, 'slug_taken');

  const creator = await person(t);
  const orgs = await Promise.all(Array.from({ length: 14 }, (_, i) => call(t, 'POST', '/v1/organizations', creator.token, { name: `O${i}` }, idem())));
  assertWinners(orgs, 10, 429, 'rate_limited');

  const capped = await newApp(t, admin);
  const limit = assertStatus(await call(t, 'GET', `/v1/tenants/${capped.tenant_id}/usage`, capped.owner!.token), 200).limits.webhooks.limit;
  assert.equal(typeof limit, 'number', 'Starter caps webhooks');
  const hooks = await Promise.all(Array.from({ length: limit + 5 }, (_, i) =>
    call(t, 'POST', '/v1/webhooks', capped.owner!.token, { scope: capped.id, url: `http://127.0.0.1:9/h${i}`, events: ['*'] }, idem())));
  assertWinners(hooks, limit, 409, 'plan_limit_reached');
  figure('IC-4', 'over-allocation: 0 (grants 1/20, apps 1/10, slug 1/8, orgs 10/14, webhooks at the cap)');
});

test('IC-5 "at least one admin remains": two org admins demote or remove each other with both requests past their checks before either writes; the last member role removed twice concurrently is kept', async () => {
  const runs = 4;
  let breaks = 0;
  let raced = 0;
  for (const mode of ['demote', 'remove', 'mixed'] as const) {
    for (let i = 0; i < runs; i++) {
      const [a, b] = [await person(t), await person(t)];
      const org = assertStatus(await call(t, 'POST', '/v1/organizations', a.token, { name: 'O' }), 201);
      assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: b.id, role: 'org_admin' }), 201);
      const op = (actor: Person, target: Person, kind: 'demote' | 'remove') => kind === 'demote'
        ? call(t, 'PATCH', `/v1/organizations/${org.id}/members/${target.id}`, actor.token, { role: 'member' })
        : call(t, 'DELETE', `/v1/organizations/${org.id}/members/${target.id}`, actor.token);
      const race = raceTransactions(t.database, 2);
      const rs = await Promise.all([op(a, b, mode === 'remove' ? 'remove' : 'demote'), op(b, a, mode === 'demote' ? 'demote' : 'remove')]).finally(() => race.restore());
      if (race.arrived() === 2) raced++;
      const admins = await sql(t, `SELECT user_id FROM organization_members WHERE organization_id = $1 AND role = 'org_admin' AND membership_status = 'active'`, [org.id]);
      if (admins.length < 1) breaks++;
      // The loser is refused: it is no admin any more (403 / 404) or the last one (409).
      const losers = rs.filter((r) => r.statusCode >= 400);
      assert.equal(losers.length, 1, `${mode}: ${statuses(rs)}`);
      assert.ok(['403 forbidden', '404 organization_not_found', '404 member_not_found', '409 last_org_admin'].includes(`${losers[0].statusCode} ${losers[0].json().error.code}`), losers[0].body);
    }
  }
  const u = await person(t);
  const twice = await Promise.all([0, 1].map(() => call(t, 'DELETE', `/v1/users/${u.id}/roles/role_platform_member`, admin)));
  for (const r of twice) assertError(r, 409, 'member_role_required');
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM role_assignments WHERE user_id = $1 AND role_id = 'role_platform_member'`, [u.id]))[0].n, 1);
  figure('IC-5', `invariant breaks: ${breaks} / ${3 * runs} runs (${raced} raced at the database boundary)`);
  assert.equal(breaks, 0);
});

test('IC-6 two PATCHes of one entitlement with the same If-Match: "one 200, one 412"; one audit event whose after is the stored row', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id);
  const etag = String((await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag);
  const endsAt = (days: number) => new Date(t.clock.now().getTime() + days * DAY * 1000).toISOString();
  const rs = await Promise.all([10, 20].map((days) => call(t, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { ends_at: endsAt(days) }, { 'if-match': etag })));
  assert.equal(statuses(rs), '200,412', rs.map((r) => r.body.slice(0, 120)).join(' | '));
  assertError(rs.find((r) => r.statusCode === 412)!, 412, 'precondition_failed');
  const winner = rs.find((r) => r.statusCode === 200)!.json();
  const audits = await sql(t, `SELECT before, after FROM audit_events WHERE target_id = $1 AND action = 'entitlement.updated'`, [ent.id]);
  figure('IC-6', `lost updates: ${audits.length === 1 ? 0 : audits.length - 1}`);
  assert.equal(audits.length, 1);
  assert.equal(Date.parse(audits[0].after.ends_at), Date.parse(winner.ends_at));
  assert.equal(audits[0].before.ends_at ?? null, null);
  const [row] = await sql(t, 'SELECT ends_at FROM entitlements WHERE id = $1', [ent.id]);
  assert.equal(row.ends_at.getTime(), Date.parse(winner.ends_at));
});

test('IC-7 "one state change; exactly one user.suspended, one role.assigned and one access.granted per flipped app; the others get 200 with no event": 10 suspends, 10 assignments of one role, 5 accepts of one invitation', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  const suspends = await Promise.all(Array.from({ length: 10 }, () => call(t, 'POST', `/v1/users/${u.id}/suspend`, admin, { reason: 'r' })));
  assert.ok(suspends.every((r) => r.statusCode === 200), statuses(suspends));
  const counts: Record<string, number> = {};
  counts['user.suspended'] = (await outbox(t, { types: ['user.suspended'], userId: u.id })).length;
  counts['access.revoked'] = (await outbox(t, { types: ['access.revoked'], userId: u.id })).length;
  counts['audit user.suspended'] = (await sql(t, `SELECT 1 FROM audit_events WHERE target_id = $1 AND action = 'user.suspended'`, [u.id])).length;

  const v = await person(t);
  const role = 'role_platform_support';
  const assigns = await Promise.all(Array.from({ length: 10 }, () => call(t, 'POST', `/v1/users/${v.id}/roles/${role}`, admin, {})));
  assert.equal(assigns.filter((r) => r.statusCode === 201).length, 1, statuses(assigns));
  assert.ok(assigns.every((r) => r.statusCode === 200 || r.statusCode === 201), statuses(assigns));
  counts['role.assigned'] = (await outbox(t, { types: ['role.assigned'], userId: v.id })).length;
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM role_assignments WHERE user_id = $1 AND role_id = $2', [v.id, role]))[0].n, 1);

  const orgAdmin = await person(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgAdmin.token, { name: 'O' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: app.id }, idem()), 201);
  const w = await person(t);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgAdmin.token, { email: w.email }), 201);
  const accepts = await Promise.all(Array.from({ length: 5 }, () => call(t, 'POST', `/v1/organizations/${org.id}/members/me/accept`, w.token, {})));
  assert.ok(accepts.every((r) => r.statusCode === 200), statuses(accepts));
  counts['organization.member_added'] = (await outbox(t, { types: ['organization.member_added'], userId: w.id })).length;
  counts['access.granted'] = (await outbox(t, { types: ['access.granted'], userId: w.id })).length;
  const duplicates = Object.values(counts).reduce((sum, n) => sum + n - 1, 0);
  figure('IC-7', `duplicate events: ${duplicates}`);
  assert.deepEqual(counts, Object.fromEntries(Object.keys(counts).map((k) => [k, 1])));
});

test('IC-9 test-purge at 29 and 31 days: "live rows untouched; only test rows older than 30 days are gone"', async () => {
  const live = await createUser(t, { mode: 'live' });
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(2 * DAY);
  const young = await createUser(t, { mode: 'test' });
  t.clock.advance(29 * DAY); // live and old: 31 days; young: 29 days
  await t.deps.jobs.runNow('test-purge');
  const exists = async (table: string, column: string, id: string) => (await sql(t, `SELECT count(*)::int AS n FROM ${table} WHERE ${column} = $1`, [id]))[0].n > 0;
  assert.equal(await exists('users', 'id', old.id), false, '31-day test user purged');
  for (const table of ['profiles', 'settings', 'role_assignments', 'identities']) assert.equal(await exists(table, 'user_id', old.id), false, `${table} of the purged user`);
  let liveDeleted = 0;
  for (const [user, label] of [[live, 'live'], [young, '29-day test']] as const) {
    assert.equal(await exists('users', 'id', user.id), true, `${label} user kept`);
    for (const table of ['profiles', 'settings', 'role_assignments', 'identities']) {
      const kept = await exists(table, 'user_id', user.id);
      if (!kept && user === live) liveDeleted++;
      assert.ok(kept, `${label}: ${table} kept`);
    }
  }
  figure('IC-9', `live rows deleted: ${liveDeleted}`);
});

test('IC-9 test-purge with rows hanging off users in both modes (an Entitlement, an Organization with its member row, a webhook subscription, a session, audit and outbox rows): "live rows untouched; only test rows older than 30 days are gone"; the shared Application stays', async () => {
  const testAdmin = await platformKey(t, undefined, 'test');
  const app = await newApp(t, admin);
  const seed = async (mode: 'live' | 'test') => {
    const key = mode === 'live' ? admin : testAdmin;
    const u = await person(t, { mode });
    const ent = await grant(t, key, u.id, app.id);
    const org = assertStatus(await call(t, 'POST', '/v1/organizations', u.token, { name: `O-${mode}` }), 201);
    const hook = assertStatus(await call(t, 'POST', '/v1/webhooks', key, { scope: 'platform', url: 'http://127.0.0.1:9/ic9', events: ['*'] }), 201);
    return { u, ent, org, hook };
  };
  const n = async (text: string, params: unknown[]) => (await sql(t, `SELECT count(*)::int AS n FROM ${text}`, params))[0].n;
  let purgedAt = new Date('2999-01-01T00:00:00Z');
  const rowsOf = async (s: Awaited<ReturnType<typeof seed>>) => ({
    users: await n('users WHERE id = $1', [s.u.id]),
    entitlements: await n('entitlements WHERE id = $1', [s.ent.id]),
    organizations: await n('organizations WHERE id = $1', [s.org.id]),
    members: await n('organization_members WHERE organization_id = $1', [s.org.id]),
    webhooks: await n('webhook_subscriptions WHERE id = $1', [s.hook.id]),
    sessions: await n('sessions WHERE user_id = $1', [s.u.id]),
    // Written before the purge ran (it announces the grants, memberships and Role assignments it deletes, below).
    audit: await n('audit_events WHERE target_id = ANY($1::text[]) AND created_at < $2', [[s.u.id, s.ent.id, s.org.id, s.hook.id], purgedAt]),
    outbox: await n(`outbox_events WHERE data->>'user_id' = $1 AND created_at < $2`, [s.u.id, purgedAt]),
  });
  const live = await seed('live');
  const old = await seed('test');
  t.clock.advance(2 * DAY);
  const young = await seed('test');
  const before = { live: await rowsOf(live), young: await rowsOf(young) };
  assert.ok(Object.values(await rowsOf(old)).every((count) => count > 0), 'every kind of row was seeded');
  t.clock.advance(29 * DAY); // live and old: 31 days; young: 29 days
  purgedAt = t.clock.now();
  await t.deps.jobs.runNow('test-purge');
  const live31 = await rowsOf(live);
  figure('IC-9', `live rows deleted with their dependants: ${Object.entries(before.live).filter(([k, v]) => live31[k as keyof typeof live31] !== v).length}`);
  assert.deepEqual(live31, before.live, 'live rows untouched');
  assert.deepEqual(await rowsOf(young), before.young, '29-day test rows untouched');
  assert.deepEqual(Object.entries(await rowsOf(old)).filter(([, count]) => count !== 0), [], '31-day test rows gone');
  const announced = await sql(t, `SELECT action, actor_type, test_mode FROM audit_events WHERE target_id = ANY($1::text[]) AND created_at >= $2 ORDER BY action`, [[old.u.id, old.ent.id, old.org.id, old.hook.id], purgedAt]);
  assert.deepEqual(announced, [{ action: 'entitlement.deleted', actor_type: 'system', test_mode: true }, { action: 'organization.member_removed', actor_type: 'system', test_mode: true }],
    'the purged test grant and membership are announced as hard deletes');
  const sent = await sql(t, `SELECT type, test_mode, data FROM outbox_events WHERE data->>'user_id' = $1 AND created_at >= $2 ORDER BY type`, [old.u.id, purgedAt]);
  assert.deepEqual(sent, [
    { type: 'organization.member_removed', test_mode: true, data: { organization_id: old.org.id, user_id: old.u.id, role: 'org_admin' } },
  ], 'and so is its membership (its platform member Role goes with the user record)');
  assert.equal(await n('applications WHERE id = $1', [app.id]), 1, 'the shared Application stays');
});
