// Part A, Users: the erasure cascade's races with other writes and reads: what each sees when the
// cascade comes due while it runs (most on PostgreSQL only: the embedded database runs one transaction at a time).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, TEST_DATABASE_URL, type TestApp } from '../helpers/app.js';
import { blockedBy, client, commitWhileWaiting, endedOrWaiting, probeWhileHeld, transactionsInSchema, withTransactionStatements } from '../helpers/locks.js';
import { createUser, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import {
  assertError, assertStatus, auditFor, call, createApplication, createOrganization, DAY, orgGrant, sql, userRow,
  type InjectResponse,
} from './support.js';
import { privacyCalls } from './privacy-support.js';

let t: TestApp;
let adminUser: TestUser;

before(async () => {
  t = await buildTestApp();
  adminUser = await createUser(t, { roles: ['superadmin'] });
});
after(() => t.close());

const { asAdmin, exportOf, requestErasure, count } = privacyCalls(() => ({ t, adminUser }));

if (TEST_DATABASE_URL) test('the erasure cascade locks the user\'s Organizations, then the user, before it deletes a membership (src/access/locks.ts): a member removal of the same user at the same time (Organization, user, membership) cannot deadlock with it. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const user = await createUser(t);
  const orgId = await createOrganization(t, [user.id]);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(7 * DAY + 1);
  const { probeLocked, result } = await probeWhileHeld(
    t,
    ['SELECT 1 FROM users WHERE id = $1 FOR NO KEY UPDATE', [user.id]],
    () => t.deps.jobs.runNow('erasure-cascade'),
    ['SELECT 1 FROM organization_members WHERE organization_id = $1 AND user_id = $2 FOR UPDATE NOWAIT', [orgId, user.id]],
  );
  assert.equal(probeLocked, true, 'the cascade waited for the user before touching the membership');
  assert.deepEqual(result, { erased: 1 });
  assert.notEqual((await userRow(t, user.id))!.erased_at, null);
  assert.equal(await count('organization_members', 'user_id = $1', [user.id]), 0);
});

/**
 * Runs the erasure cascade with a pause after its first statement containing `fragment`: `meanwhile`
 * starts operations with `start`, which returns once each has ended or waits for the cascade; the
 * cascade then goes on and commits. Operations start from the test, outside the cascade's transaction.
 * PostgreSQL only.
 */
async function cascadePausedAfter(fragment: string, meanwhile: (start: (what: string, op: () => Promise<unknown>) => Promise<void>) => Promise<void>) {
  const watcher = await client(t);
  let paused = false;
  let reached!: () => void;
  let resume!: () => void;
  const atPause = new Promise<void>((r) => (reached = r));
  const resumed = new Promise<void>((r) => (resume = r));
  try {
    const cascade = withTransactionStatements(t, async (run, text) => {
      const result = await run();
      if (!paused && text.includes(fragment)) {
        paused = true;
        reached();
        await resumed;
      }
      return result;
    }, () => t.deps.jobs.runNow('erasure-cascade'));
    await Promise.race([atPause, cascade]);
    assert.ok(paused, `the cascade ran no statement containing ${fragment}`);
    const [cascadePid, ...others] = await transactionsInSchema(watcher);
    assert.deepEqual(others, [], 'the cascade is the only transaction under way');
    const waiting = async () => (await watcher.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [cascadePid])).rows.map((r) => r.pid);
    await meanwhile(async (what, op) => {
      const known = await waiting();
      await endedOrWaiting(watcher, op(), [cascadePid], known, what);
    });
    resume();
    return await cascade;
  } finally {
    resume();
    await watcher.end();
  }
}

if (TEST_DATABASE_URL) test('an erased user is left no membership: while the erasure cascade runs, after it listed the user\'s Organizations and before it locked them or once it holds its locks, an add by user_id into an Organization it did not lock (with a grant: a seat and an access path) is 404 user_not_found and an invitation by email to their address invites a new User; the user is soft-deleted from the request on and every membership write refuses a deleted user. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const app = await createApplication(t);
  for (const [when, fragment] of [
    ['after the list', 'SELECT organization_id FROM organization_members WHERE user_id = $1 ORDER BY organization_id'],
    ['under the locks', "FROM erasure_requests WHERE user_id = $1 AND status = 'scheduled' AND scheduled_for <= $2 FOR UPDATE"],
  ]) {
    // Erasures of earlier tests come due first: run now, so the pause is in this user's cascade.
    t.clock.advance(7 * DAY + 1);
    await t.deps.jobs.runNow('erasure-cascade');
    const user = await createUser(t);
    await createOrganization(t, [user.id]);
    const joined = await createOrganization(t, [(await createUser(t)).id]);
    const invited = await createOrganization(t, [(await createUser(t)).id]);
    await orgGrant(t, joined, app.id);
    assertStatus(await requestErasure(user.id, await asAdmin()), 202);
    t.clock.advance(7 * DAY + 1);
    const admin = await asAdmin();
    let [adding, inviting]: Promise<InjectResponse>[] = [];
    const result = await cascadePausedAfter(fragment, async (start) => {
      await start('the invitation', () => (inviting = call(t, 'POST', `/v1/organizations/${invited}/members`, admin, { email: user.email })));
      await start('the add', () => (adding = call(t, 'POST', `/v1/organizations/${joined}/members`, admin, { user_id: user.id })));
    });
    assert.deepEqual(result, { erased: 1 }, when);
    assert.notEqual((await userRow(t, user.id))!.erased_at, null, when);
    const [added, invitation] = await Promise.all([adding, inviting]);
    assert.equal(await count('organization_members', 'user_id = $1', [user.id]), 0, when);
    assert.deepEqual(await sql(t, `SELECT type FROM outbox_events WHERE type = 'organization.member_added' AND data->>'user_id' = $1`, [user.id]), [], when);
    assertError(added, 404, 'user_not_found');
    assert.notEqual(assertStatus(invitation, 201).user_id, user.id, `${when}: the invitation is another User's`);
  }
});

if (TEST_DATABASE_URL) test('the erasure cascade reads the request again under the user\'s lock ("a cancel or a repeated request may have come first"): a cancel, another run\'s completed erasure, or a new request after a cancel (scheduled 7 days on) that commits while the cascade waits for the user leaves the user unerased by this run (no user.erased). PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  for (const [status, days] of [['cancelled', 0], ['completed', 0], ['scheduled', 7]] as const) {
    const user = await createUser(t);
    assertStatus(await requestErasure(user.id, await asAdmin()), 202);
    t.clock.advance(7 * DAY + 1);
    const result = await commitWhileWaiting(
      t,
      [
        ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [user.id]],
        [`UPDATE erasure_requests SET status = $2, scheduled_for = scheduled_for + make_interval(days => $3) WHERE user_id = $1`, [user.id, status, days]],
      ],
      () => t.deps.jobs.runNow('erasure-cascade'),
    );
    assert.deepEqual(result, { erased: 0 }, status);
    assert.equal((await userRow(t, user.id))!.erased_at, null, status);
    assert.equal((await auditFor(t, user.id, 'user.erased')).length, 0, status);
  }
});

/**
 * Runs the erasure cascade for `userId` (due) held at its re-read of the erasure request (after it
 * locked the user), starts `op` once the cascade waits, and lets the cascade commit once `op` waits
 * for it: `op` found the user before the cascade and takes the user's lock after it. PostgreSQL only.
 */
async function whileCascadeErases<T>(userId: string, op: () => Promise<T>): Promise<T> {
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM erasure_requests WHERE user_id = $1 FOR UPDATE', [userId]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const cascade = t.deps.jobs.runNow('erasure-cascade');
    const cascadePid = await blockedBy(watcher, rows[0].pid, 'the cascade');
    const running = op();
    await blockedBy(watcher, cascadePid, 'the operation');
    await holder.query('COMMIT');
    await cascade;
    assert.notEqual((await userRow(t, userId))!.erased_at, null, 'precondition: the cascade erased the user');
    return await running;
  } finally {
    await holder.end();
    await watcher.end();
  }
}

if (TEST_DATABASE_URL) test('"404 user_not_found after the erasure cascade finished": an erasure request that waited for the cascade erasing the same user answers 404 and schedules nothing (the completed request stays completed; no second cascade, no second user.erased). PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const admin = await asAdmin();
  const user = await createUser(t);
  assertStatus(await requestErasure(user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  const again = await asAdmin();
  const res = await whileCascadeErases(user.id, () => requestErasure(user.id, again));
  assertError(res, 404, 'user_not_found');
  assert.deepEqual(await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]), [{ status: 'completed' }]);
  t.clock.advance(8 * DAY);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await auditFor(t, user.id, 'user.erased')).length, 1);
  assert.equal((await auditFor(t, user.id, 'user.erasure_requested')).length, 1);
});

if (TEST_DATABASE_URL) test('"404 user_not_found after the erasure cascade finished": an admin PATCH /v1/users/{id} of the soft-deleted user that waited for the cascade erasing them answers 404 and writes nothing: the tombstone keeps its address, no verification mail goes out, no user.email_changed. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const admin = await asAdmin();
  const user = await createUser(t);
  assertStatus(await requestErasure(user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  const email = uniqueEmail('after-erasure');
  const again = await asAdmin();
  const res = await whileCascadeErases(user.id, () => call(t, 'PATCH', `/v1/users/${user.id}`, again, { email }));
  assertError(res, 404, 'user_not_found');
  assert.equal((await userRow(t, user.id))!.email, `erased+${user.id.toLowerCase()}@erased.invalid`);
  assert.equal(await count('emails', 'lower(to_address) = lower($1)', [email]), 0);
  assert.equal((await auditFor(t, user.id, 'user.email_changed')).length, 0);
});

test('"404 user_not_found after the erasure cascade finished": an admin PATCH /v1/users/{id}/settings of the soft-deleted user that found them before the cascade erased them and went on after it answers 404 and writes nothing: the kept global Settings stay as they were and no settings.updated audit row with unredacted snapshots is left about the erased user', async () => {
  const admin = await asAdmin();
  const user = await createUser(t);
  assertStatus(await requestErasure(user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  const before = await sql(t, 'SELECT theme, timezone, locale, notifications, updated_at FROM settings WHERE user_id = $1', [user.id]);
  const again = await asAdmin();
  const erase = async () => {
    assert.equal(Number((await t.deps.jobs.runNow('erasure-cascade')).erased), 1);
  };
  // The PATCH reads the user (soft-deleted, visible to users.manage), the cascade erases them, the PATCH goes on.
  const res = await pausedAfter(t, 'FROM users u WHERE u.id = $1', erase, () => call(t, 'PATCH', `/v1/users/${user.id}/settings`, again, { theme: 'dark', timezone: 'Europe/Paris' }), 'live');
  assert.notEqual((await userRow(t, user.id))!.erased_at, null, 'precondition: the cascade erased the user');
  assertError(res, 404, 'user_not_found');
  assert.deepEqual(await sql(t, 'SELECT theme, timezone, locale, notifications, updated_at FROM settings WHERE user_id = $1', [user.id]), before);
  assert.equal((await auditFor(t, user.id, 'settings.updated')).length, 0);
  assert.equal(await count('audit_events', `target_user_id = $1 AND ((before IS NOT NULL AND before <> '{"redacted": true}') OR (after IS NOT NULL AND after <> '{"redacted": true}'))`, [user.id]), 0);
});

test('"404 user_not_found after the erasure cascade finished": an admin GET /v1/users/{id}/export of the soft-deleted user that found them before the cascade erased them and read the bundle after it answers 404, not a bundle holding the erased address, nor a 500', async () => {
  const admin = await asAdmin();
  const user = await createUser(t);
  assertStatus(await requestErasure(user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  const again = await asAdmin();
  const erase = async () => {
    assert.equal(Number((await t.deps.jobs.runNow('erasure-cascade')).erased), 1);
  };
  const res = await pausedAfter(t, 'FROM users u WHERE u.id = $1', erase, () => exportOf(user.id, again), 'live');
  assert.notEqual((await userRow(t, user.id))!.erased_at, null, 'precondition: the cascade erased the user');
  assert.ok(!res.body.includes(user.email), res.body);
  assertError(res, 404, 'user_not_found');
});

if (TEST_DATABASE_URL) test('"404 user_not_found after the erasure cascade finished", the other way round: an admin GET /v1/users/{id}/export that holds the soft-deleted user (its bundle read under way) when the cascade comes due is read whole, the cascade waiting for it, and the user is erased after it: not a 500, nor a bundle of the old address with the rest erased. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const admin = await asAdmin();
  const user = await createUser(t);
  assertStatus(await requestErasure(user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  const again = await asAdmin();
  const watcher = await client(t);
  let cascade: Promise<Record<string, unknown>> | undefined;
  let reached!: () => void;
  let resume!: () => void;
  const atPause = new Promise<void>((r) => (reached = r));
  const resumed = new Promise<void>((r) => (resume = r));
  try {
    let paused = false;
    // The export pauses once it holds the user; the cascade starts then (from the test, outside the
    // export's transaction), and either waits for it or ends; then the export goes on.
    const exporting = withTransactionStatements(t, async (run, text) => {
      const result = await run();
      if (!paused && text.includes('FOR KEY SHARE OF u')) {
        paused = true;
        reached();
        await resumed;
      }
      return result;
    }, () => exportOf(user.id, again));
    await Promise.race([atPause, exporting]);
    const [holding, ...others] = await transactionsInSchema(watcher);
    assert.deepEqual(others, [], 'the export is the only transaction under way');
    cascade = t.deps.jobs.runNow('erasure-cascade');
    await endedOrWaiting(watcher, cascade, [holding], [], 'the cascade');
    resume();
    const res = await exporting;
    assert.ok(paused, 'precondition: the export held the user');
    const bundle = assertStatus(res, 200);
    assert.equal(bundle.user.email, user.email);
    assert.equal(bundle.profile.user_id, user.id);
    assert.equal(bundle.identities.length, 1);
    assert.deepEqual(await cascade, { erased: 1 });
    assert.notEqual((await userRow(t, user.id))!.erased_at, null, 'the cascade erased the user after the export');
  } finally {
    resume();
    await cascade?.catch(() => undefined);
    await watcher.end();
  }
});

