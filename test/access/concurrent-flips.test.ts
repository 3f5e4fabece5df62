// Access events under concurrency (Part B, derived access events): "fire once per user whose resolved
// access actually flips" and "no event fires for users whose resolved access does not flip". On
// PostgreSQL the two requests of each round run at the same time on two connections; on PGlite they
// queue, and the same assertions hold.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { blockedBy, client, endedOrWaiting } from '../helpers/locks.js';
import { accessEvents, assertError, assertStatus, call, grant, grantReq, newApp, orgGrantApi, orgWithMembers, person, platformKey, sql } from '../organizations/support.js';

const ROUNDS = 6;
let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

/** An Application and an Organization (no members yet) holding an all_members grant to it. */
async function appGrantedToOrganization() {
  const app = await newApp(t, admin);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  return { app, org };
}

async function newMember(orgId: string) {
  const u = await person(t);
  assertStatus(await call(t, 'POST', `/v1/organizations/${orgId}/members`, admin, { user_id: u.id }), 201);
  return u;
}

const allowed = async (userId: string, appId: string) =>
  assertStatus(await call(t, 'GET', `/v1/users/${userId}/apps/${appId}/effective-permissions`, admin), 200).allowed as boolean;

test('a personal grant at the same time as joining an Organization that grants the Application: exactly one access.granted', async () => {
  const { app, org } = await appGrantedToOrganization();
  for (let i = 0; i < ROUNDS; i++) {
    const u = await person(t);
    const [g, m] = await Promise.all([
      grantReq(t, admin, u.id, { application_id: app.id, source: 'admin_grant' }),
      call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: u.id }),
    ]);
    assert.deepEqual([g.statusCode, m.statusCode], [201, 201], `round ${i}: ${g.body} ${m.body}`);
    const granted = (await accessEvents(t, u.id, app.id)).filter((e) => e[0] === 'access.granted');
    assert.equal(granted.length, 1, `round ${i}: ${JSON.stringify(granted)}`);
  }
});

test('disabling the personal grant at the same time as leaving the granting Organization: exactly one access.revoked', async () => {
  const { app, org } = await appGrantedToOrganization();
  for (let i = 0; i < ROUNDS; i++) {
    const u = await newMember(org.id);
    const ent = await grant(t, admin, u.id, app.id);
    const [p, d] = await Promise.all([
      call(t, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { status: 'disabled', disabled_reason: 'Concurrent change' }),
      call(t, 'DELETE', `/v1/organizations/${org.id}/members/${u.id}`, admin),
    ]);
    assert.deepEqual([p.statusCode, d.statusCode], [200, 204], `round ${i}: ${p.body} ${d.body}`);
    assert.equal(await allowed(u.id, app.id), false);
    const revoked = (await accessEvents(t, u.id, app.id)).filter((e) => e[0] === 'access.revoked');
    assert.equal(revoked.length, 1, `round ${i}: ${JSON.stringify(revoked)}`);
  }
});

test('a member joining while the Organization grant is being disabled: access.granted is followed by access.revoked, or neither fires', async () => {
  const app = await newApp(t, admin);
  const org = await orgWithMembers(t, admin, 0);
  for (let i = 0; i < ROUNDS; i++) {
    const grantRow = await orgGrantApi(t, admin, org.id, app.id);
    const u = await person(t);
    const [p, m] = await Promise.all([
      call(t, 'PATCH', `/v1/entitlements/${grantRow.id}`, admin, { status: 'revoked', disabled_reason: 'Concurrent change' }),
      call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: u.id }),
    ]);
    assert.deepEqual([p.statusCode, m.statusCode], [200, 201], `round ${i}: ${p.body} ${m.body}`);
    assert.equal(await allowed(u.id, app.id), false);
    const events = (await accessEvents(t, u.id, app.id)).map((e) => e[0]);
    assert.ok(events.length === 0 || (events.length === 2 && events[0] === 'access.granted' && events[1] === 'access.revoked'), `round ${i}: ${JSON.stringify(events)}`);
    const [state] = await sql(t, 'SELECT allowed FROM access_states WHERE user_id = $1 AND application_id = $2', [u.id, app.id]);
    assert.notEqual(state?.allowed, true, 'what subscribers were last told matches the resolver');
  }
});

test('the same member removed twice at the same time: one 204, one 404 member_not_found, one organization.member_removed and one access.revoked', async () => {
  const { app, org } = await appGrantedToOrganization();
  for (let i = 0; i < ROUNDS; i++) {
    const u = await newMember(org.id);
    const res = await Promise.all([0, 1].map(() => call(t, 'DELETE', `/v1/organizations/${org.id}/members/${u.id}`, admin)));
    assert.deepEqual(res.map((r) => r.statusCode).sort(), [204, 404], `round ${i}`);
    assertError(res.find((r) => r.statusCode === 404)!, 404, 'member_not_found');
    const removed = await sql(t, `SELECT 1 FROM audit_events WHERE action = 'organization.member_removed' AND target_user_id = $1`, [u.id]);
    assert.equal(removed.length, 1);
    const revoked = (await accessEvents(t, u.id, app.id)).filter((e) => e[0] === 'access.revoked');
    assert.equal(revoked.length, 1, `round ${i}: ${JSON.stringify(revoked)}`);
  }
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('a suspended user joining a granting Organization while being reactivated (PostgreSQL): neither change alone gives access, both together do, and exactly one access.granted fires: the reactivation waits for the join (which holds the user, src/access/locks.ts) and sees the membership', async () => {
  const { app, org } = await appGrantedToOrganization();
  const u = await person(t);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/suspend`, admin), 200);
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    // The pair's record is held, so the join stops after it has resolved the user's access
    // (suspended: none) and before it records it; the reactivation starts then.
    await holder.query('BEGIN');
    await holder.query('INSERT INTO access_states (user_id, application_id, allowed, updated_at) VALUES ($1, $2, false, now())', [u.id, app.id]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const joining = call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: u.id });
    const joinPid = await blockedBy(watcher, holderPid, 'the join');
    const reactivating = call(t, 'PATCH', `/v1/users/${u.id}`, admin, { status: 'active' });
    // It waits for the join; were the user held by neither (the join's lock, the reactivation's FOR
    // UPDATE against the membership's foreign-key check), it would end first, and nobody would announce.
    await endedOrWaiting(watcher, reactivating, [holderPid, joinPid], [joinPid], 'the reactivation');
    await holder.query('ROLLBACK');
    assertStatus(await joining, 201);
    assertStatus(await reactivating, 200);
  } finally {
    for (const c of [holder, watcher]) await c.end();
  }
  assert.equal(await allowed(u.id, app.id), true);
  const events = await accessEvents(t, u.id, app.id);
  assert.deepEqual(events.map((e) => e[0]), ['access.granted'], JSON.stringify(events));
  const [state] = await sql(t, 'SELECT allowed FROM access_states WHERE user_id = $1 AND application_id = $2', [u.id, app.id]);
  assert.equal(state?.allowed, true, 'what subscribers were last told matches the resolver');
});
