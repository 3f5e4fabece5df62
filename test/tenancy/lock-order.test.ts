// The lock order of access changes (src/access/locks.ts: the Organization, the Tenants whose seats it
// counts, read under a KEY SHARE lock of their Application, the entitlement row, the users) on one
// Application, PostgreSQL only: its ownership moving back and forth between two owners' Starter
// Tenants (FOR UPDATE of the Application, then both Tenants) at the same time as personal grants and
// revokes on it, members joining and leaving an Organization granted it, and the seat-limit-release
// job. A deadlock among them is run again by the database layer (src/db/pg.ts), so the answers alone
// would not show one: withDeadlockCount counts the deadlock victims. The embedded database runs one
// transaction at a time: its pass registers no test here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { withDeadlockCount } from '../helpers/locks.js';
import {
  accessEvents, addById, assertError, assertStatus, call, effective, newApp, orgGrantApi, orgWithMembers, patchEnt, person, platformKey, rand, sql,
  type Person,
} from '../organizations/support.js';

/** Rounds of concurrent changes: bounded, each one batch at once, the next after it has ended. */
const ROUNDS = 12;
/** Personal seats inserted on the Application: with the Organization's owner and a first member, Starter's 1,000. */
const BULK_SEATS = 998;
/** Members joining the full Tenant before the rounds (seat_limit), staying: freed seats go to them first. */
const WAITING = 2;

/** `count` live users holding an active personal grant of the Application (rows inserted directly); their entitlement ids. */
async function bulkSeats(t: TestApp, appId: string, count: number): Promise<string[]> {
  const now = t.clock.now();
  const prefix = `usr_lock${rand(6)}_`;
  await sql(t, `INSERT INTO users (id, email, status, test_mode, created_at, updated_at)
                SELECT $1 || g, $1 || g || '@example.com', 'active', false, $2, $2 FROM generate_series(1, $3::int) g`, [prefix, now, count]);
  const rows = await sql<{ id: string }>(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
                SELECT 'ent_' || $1 || g, $1 || g, $3, 'active', 'admin_grant', $2, false, $2, $2 FROM generate_series(1, $4::int) g ORDER BY g RETURNING id`,
    [prefix, now, appId, count]);
  return rows.map((r) => r.id);
}

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('the lock order of access changes holds on one Application at its Tenant\'s 1,000-seat cap (PostgreSQL): its ownership moving back and forth between two Starter Tenants, personal grants and revokes of it, members joining and leaving an Organization granted it, a seat freed by time and seat-limit-release, at once for 12 rounds, never deadlock (no deadlock victim), every answer is an expected one (no 500), and the Application ends in its last owner\'s Tenant holding exactly the seats the answers account for, at most 1,000, a seat_limit member only while it is full', async (ctx) => {
  const t = await buildTestApp({}, ctx);
  const admin = await platformKey(t);
  const app = await newApp(t, admin);
  const owners: Person[] = [app.owner!, await person(t)];
  const move = (to: Person) => call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: to.id, owner_organization_id: null });
  // A first move there and back, one at a time, creates the second owner's (Starter, shared) Tenant.
  const tenants = [app.tenant_id, assertStatus(await move(owners[1]), 200).tenant_id];
  assert.notEqual(tenants[1], tenants[0]);
  assert.equal(assertStatus(await move(owners[0]), 200).tenant_id, tenants[0]);
  assert.deepEqual((await sql(t, 'SELECT plan, tier FROM tenants WHERE id = ANY($1::text[])', [tenants])).map((r) => [r.plan, r.tier]), [['starter', 'shared'], ['starter', 'shared']]);

  const bulk = await bulkSeats(t, app.id, BULK_SEATS);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  let previousJoiner = await person(t);
  assertStatus(await addById(t, admin, org.id, previousJoiner.id), 201);
  const usageOf = async (i: number) => assertStatus(await call(t, 'GET', `/v1/tenants/${tenants[i]}/usage`, owners[i].token), 200).limits.seats;
  assert.deepEqual(await usageOf(0), { limit: 1000, current: 1000, included: 1000 });
  const waiting: Person[] = [];
  for (let i = 0; i < WAITING; i++) {
    waiting.push(await person(t));
    assertStatus(await addById(t, admin, org.id, waiting[i].id), 201);
  }
  const decisionOf = async (userId: string) => {
    const view = await effective(t, admin, userId, app.id);
    const decision = view.access_paths.find((p: any) => p.source === 'org_seat')?.member_decision;
    assert.equal(view.allowed, decision === 'included', `${userId}: ${decision}`);
    return decision;
  };
  for (const w of waiting) assert.equal(await decisionOf(w.id), 'seat_limit');

  const granted: string[] = [];
  const removed: Person[] = [];
  // Answers other than the expected ones are collected, so the deadlock count is reported first.
  const unexpected: string[] = [];
  const expect = (context: string, check: () => void) => {
    try {
      check();
    } catch (err) {
      unexpected.push(`${context}: ${(err as Error).message}`);
    }
  };
  const { victims } = await withDeadlockCount(t, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const to = (round + 1) % 2;
      const [grantees, joiner] = [[await person(t), await person(t), await person(t)], await person(t)];
      const leaver = previousJoiner;
      // Three seats are freed (a revoke, a member leaving, one by time that only a change or the job
      // gives back) and four wanted (three personal grants, a member joining): the Tenant stays at its cap.
      const now = t.clock.now().getTime();
      await sql(t, 'UPDATE entitlements SET starts_at = $2, ends_at = $3 WHERE id = $1', [bulk[ROUNDS + round], new Date(now - 5000), new Date(now - 1000)]);
      // One batch at once: each change takes the Application's Tenant (seats) and, past it, the users.
      const [join, moved, revoke, leave, job, ...grants] = await Promise.all([
        addById(t, admin, org.id, joiner.id),
        move(owners[to]),
        patchEnt(t, admin, bulk[round], { status: 'revoked', disabled_reason: 'refunded' }),
        call(t, 'DELETE', `/v1/organizations/${org.id}/members/${leaver.id}`, admin),
        t.deps.jobs.runNow('seat-limit-release').catch((err: Error) => ({ failed: err.message })),
        ...grantees.map((g) => call(t, 'POST', `/v1/users/${g.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` })),
      ]);
      expect(`round ${round}, move`, () => assert.equal(assertStatus(moved, 200).tenant_id, tenants[to]));
      for (const grant of grants) {
        if (grant.statusCode === 201) granted.push(assertStatus(grant, 201).id);
        else expect(`round ${round}, grant`, () => assert.equal(assertError(grant, 409, 'plan_limit_reached').details.resource, 'seats'));
      }
      expect(`round ${round}, revoke`, () => assert.equal(assertStatus(revoke, 200).status, 'revoked'));
      expect(`round ${round}, join`, () => assert.equal(assertStatus(join, 201).membership_status, 'active'));
      expect(`round ${round}, leave`, () => assertStatus(leave, 204));
      expect(`round ${round}, seat-limit-release`, () => assert.ok(!('failed' in job), JSON.stringify(job)));
      removed.push(leaver);
      previousJoiner = joiner;
    }
  });
  assert.equal(victims, 0, `no statement was a deadlock victim: every change took its locks in the one order (answers: ${unexpected.length ? unexpected.join('\n') : 'as expected'})`);
  assert.deepEqual(unexpected, [], 'every answer was an expected one');

  // The Application is in its last owner's Tenant; the other holds nothing of it.
  const last = ROUNDS % 2;
  const [row] = await sql(t, 'SELECT tenant_id, owner_user_id, owner_organization_id FROM applications WHERE id = $1', [app.id]);
  assert.deepEqual(row, { tenant_id: tenants[last], owner_user_id: owners[last].id, owner_organization_id: null });
  assert.equal((await usageOf(1 - last)).current, 0);
  // Its seats are the ones the answers account for: the personal ones neither revoked nor ended, the
  // granted ones, the Organization's owner and its members but those waiting as seat_limit; and a
  // member waits only while the Tenant is full.
  const members = [...waiting, previousJoiner];
  const decisions = new Map<string, string>();
  for (const m of members) decisions.set(m.id, await decisionOf(m.id));
  const marked = members.filter((m) => decisions.get(m.id) === 'seat_limit').map((m) => m.id);
  assert.equal(marked.length + members.filter((m) => decisions.get(m.id) === 'included').length, members.length, JSON.stringify([...decisions]));
  const seats = await usageOf(last);
  assert.equal(seats.current, BULK_SEATS - 2 * ROUNDS + 1 + granted.length + members.length - marked.length, `${granted.length} granted, ${JSON.stringify([...decisions])}`);
  assert.ok(seats.current <= 1000, `${seats.current} seats`);
  if (marked.length) assert.equal(seats.current, 1000, 'every freed seat went back to a waiting member');
  assert.deepEqual((await sql(t, 'SELECT DISTINCT user_id FROM org_seat_limits ORDER BY user_id')).map((r) => r.user_id), marked.sort());
  assert.equal(await decisionOf(org.owner.id), 'included', 'the Organization\'s owner keeps its seat');
  const rows = await sql(t, 'SELECT id, status FROM entitlements WHERE id = ANY($1::text[]) ORDER BY id', [[...bulk.slice(0, ROUNDS), ...granted]]);
  assert.deepEqual(rows.map((r) => r.status).sort(), [...Array(ROUNDS).fill('revoked'), ...Array(granted.length).fill('active')].sort());
  // Each access flip was announced once: a member's access once if included, and every member who left
  // either never had access or was granted it once and had it revoked once.
  for (const m of members) assert.deepEqual((await accessEvents(t, m.id, app.id)).map(([type]) => type), decisions.get(m.id) === 'included' ? ['access.granted'] : [], m.id);
  for (const m of removed) {
    const types = (await accessEvents(t, m.id, app.id)).map(([type]) => type);
    assert.ok(types.length === 0 || (types.length === 2 && types[0] === 'access.granted' && types[1] === 'access.revoked'), `${m.id}: ${types}`);
  }
});
