// The time-driven side of Entitlements: the 5-minute expiry sweep, expiry at resolution time, and
// scheduled starts. The clock only moves forward in this file, so every call uses API keys (which do
// not expire) and every test sets its times relative to the clock.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, TEST_DATABASE_URL, withStoppedClock, type TestApp } from '../helpers/app.js';
import { probeWhileHeld } from '../helpers/locks.js';
import {
  accessEvents, assertStatus, call, createOrg, DAY, effective, entitlementEvents, entRow, grant, HOUR, inSeconds, newApp, outbox, patchEnt, person,
  orgGrant, platformKey, sql, type AppFixture,
} from './support.js';
import { entitlementsModule } from '../../src/modules/entitlements/index.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
});
after(() => t.close());

const sweep = () => t.deps.jobs.runNow('entitlement-expiry');
const starts = () => t.deps.jobs.runNow('scheduled-starts');
const getEnt = async (id: string) => assertStatus(await call(t, 'GET', `/v1/entitlements/${id}`, admin), 200);

test('the expiry sweep is registered every 5 minutes and scheduled starts run as a job', () => {
  const jobs = new Map((entitlementsModule.jobs as any)(t.deps).map((j: { name: string; intervalSeconds: number }) => [j.name, j]));
  assert.equal((jobs.get('entitlement-expiry') as any)?.intervalSeconds, 300);
  assert.ok(jobs.has('scheduled-starts'), 'jobs.has(\'scheduled-starts\')');
});

test('access resolution treats ends_at <= now as expired at once, before the sweep runs', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, HOUR) });
  assert.equal((await effective(t, admin, user.id, app.id)).entitlement_status, 'active');
  t.clock.advance(HOUR);
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.entitlement_status, 'expired');
  assert.deepEqual(result.effective_permissions, []);
  assert.equal(result.access_paths[0].status, 'expired');
  // The row itself still says active until the sweep writes it.
  assert.equal((await getEnt(ent.id)).status, 'active');
  await sweep();
});

test('the sweep moves an active row past ends_at to expired ("ends_at <= now": a sweep at the very instant of ends_at too) and emits entitlement.expired and access.revoked (entitlement_expired) exactly once', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, 2 * HOUR) });
  t.clock.advance(2 * HOUR);
  await atOneInstant(t, sweep, ent.ends_at);
  const row = await getEnt(ent.id);
  assert.equal(row.status, 'expired');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.expired']);
  const [expired] = await outbox(t, { entitlementId: ent.id, types: ['entitlement.expired'] });
  assert.equal(expired.data.entitlement.status, 'expired');
  assert.equal(expired.application_id, app.id);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_expired', 'expired'],
  ]);
  // Running again (or later) writes nothing more.
  t.clock.advance(600);
  await sweep();
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.expired']);
  assert.equal((await accessEvents(t, user.id, app.id)).length, 2);
});

test('a disabled row whose ends_at passes expires: entitlement.expired and its audit row, disabled_reason kept, no access event', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, HOUR) });
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'payment failed' }), 200);
  const before = await accessEvents(t, user.id, app.id);
  assert.deepEqual(before.at(-1), ['access.revoked', 'entitlement_disabled', 'disabled']);
  t.clock.advance(HOUR + 1);
  await sweep();
  const row = await getEnt(ent.id);
  assert.equal(row.status, 'expired');
  assert.equal(row.disabled_reason, 'payment failed');
  assert.deepEqual(await accessEvents(t, user.id, app.id), before);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.expired']);
  const [audit] = await sql(t, `SELECT before, after, actor_type FROM audit_events WHERE action = 'entitlement.expired' AND target_id = $1`, [ent.id]);
  assert.deepEqual([audit?.before.status, audit?.after.status, audit?.actor_type], ['disabled', 'expired', 'system']);
  await sweep();
  assert.equal((await entitlementEvents(t, ent.id)).length, 3, 'once');
});

test('setting ends_at in the past on an active row expires it at the next sweep; access.revoked (entitlement_expired) fires exactly once overall', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { starts_at: inSeconds(t, -2 * HOUR) });
  assertStatus(await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, -60) }), 200);
  await sweep();
  assert.equal((await getEnt(ent.id)).status, 'expired');
  const revoked = (await accessEvents(t, user.id, app.id)).filter(([type]) => type === 'access.revoked');
  assert.deepEqual(revoked, [['access.revoked', 'entitlement_expired', 'expired']]);
  assert.equal((await entitlementEvents(t, ent.id)).filter((e) => e === 'entitlement.expired').length, 1);
});

test('a user with another active path keeps access when one row expires: no access.revoked', async () => {
  const user = await person(t);
  const other = await newApp(t, admin);
  // Personal trial expiring, plus an organization-wide grant.
  const org = await createOrg(t, [{ userId: user.id }]);
  await orgGrant(t, org, other.id);
  const ent = await grant(t, admin, user.id, other.id, { source: 'trial', ends_at: inSeconds(t, HOUR) });
  t.clock.advance(HOUR + 1);
  await sweep();
  assert.equal((await getEnt(ent.id)).status, 'expired');
  assert.deepEqual(await accessEvents(t, user.id, other.id), []);
  assert.equal((await effective(t, admin, user.id, other.id)).allowed, true);
});

test('an organization-wide grant expiring revokes access once per member whose last path it was; entitlement.expired names the Organization', async () => {
  const other = await newApp(t, admin);
  const [a, b, c] = [await person(t), await person(t), await person(t)];
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }, { userId: c.id }]);
  const id = await orgGrant(t, org, other.id, { endsAt: new Date(t.clock.now().getTime() + HOUR * 1000) });
  await grant(t, admin, c.id, other.id);
  t.clock.advance(HOUR + 1);
  await sweep();
  assert.equal((await getEnt(id)).status, 'expired');
  for (const u of [a, b]) assert.deepEqual(await accessEvents(t, u.id, other.id), [['access.revoked', 'entitlement_expired', 'expired']]);
  assert.deepEqual(await accessEvents(t, c.id, other.id), [], 'c had access through the org grant and keeps it through the personal row');
  const events = await outbox(t, { entitlementId: id });
  assert.deepEqual(events.map((e) => e.type), ['entitlement.expired']);
  assert.equal(events[0].data.entitlement.user_id, null);
  assert.equal(events[0].data.entitlement.organization_id, org);
});

test('a grant with a future starts_at is created active but resolves as scheduled: no access.granted at creation', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, 3 * HOUR) });
  assert.equal(ent.status, 'active');
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.entitlement_status, 'scheduled');
  assert.deepEqual(result.access_paths, [{ source: 'purchase', entitlement_id: ent.id, status: 'scheduled' }]);
  assert.deepEqual(await accessEvents(t, user.id, app.id), []);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
  await starts();
  assert.deepEqual(await accessEvents(t, user.id, app.id), [], 'nothing before starts_at');
});

test('a grant whose whole window is in the past is created active, as a past ends_at on an active row is expired at the next sweep: it resolves as expired at once (no access.granted), and the sweep expires it with entitlement.expired and no access.revoked', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, -2 * DAY), ends_at: inSeconds(t, -DAY) });
  assert.equal(ent.status, 'active');
  const result = await effective(t, admin, user.id, app.id);
  assert.equal(result.allowed, false);
  assert.equal(result.entitlement_status, 'expired');
  assert.deepEqual(await accessEvents(t, user.id, app.id), []);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
  await sweep();
  assert.equal((await getEnt(ent.id)).status, 'expired');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.expired']);
  assert.deepEqual(await accessEvents(t, user.id, app.id), []);
});

test('once starts_at passes, scheduled-starts emits access.granted with reason entitlement_started exactly once', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, HOUR) });
  t.clock.advance(HOUR + 1);
  // Resolution is live: allowed as soon as starts_at passed.
  assert.equal((await effective(t, admin, user.id, app.id)).entitlement_status, 'active');
  await starts();
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'entitlement_started', 'active']]);
  await starts();
  t.clock.advance(120);
  await starts();
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'entitlement_started', 'active']]);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
});

test('a scheduled grant for a user who already has access through another path starts without an access event', async () => {
  const user = await person(t);
  const other = await newApp(t, admin);
  const org = await createOrg(t, [{ userId: user.id }]);
  await orgGrant(t, org, other.id);
  await grant(t, admin, user.id, other.id, { source: 'purchase', starts_at: inSeconds(t, HOUR) });
  t.clock.advance(HOUR + 1);
  await starts();
  assert.deepEqual(await accessEvents(t, user.id, other.id), []);
});

test('a trial expiring after a renewal PATCH (ends_at moved forward) does not expire at the old time', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, HOUR) });
  assertStatus(await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, 10 * DAY) }), 200);
  t.clock.advance(HOUR + 1);
  await sweep();
  assert.equal((await getEnt(ent.id)).status, 'active');
  assert.equal((await effective(t, admin, user.id, app.id)).allowed, true);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).map(([type]) => type), ['access.granted']);
});

test('a scheduled grant disabled before it starts and enabled after: access.granted fires exactly once (entitlement_enabled), the start job adds none', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, HOUR) });
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'hold' }), 200);
  t.clock.advance(HOUR + 1);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
  await starts();
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'entitlement_enabled', 'active']]);
});

test('a user suspended before a scheduled start and reactivated after it gets exactly one access.granted (user_reactivated)', async () => {
  const user = await person(t);
  await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, HOUR) });
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/suspend`, admin, {}), 200);
  t.clock.advance(HOUR + 1);
  assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, admin, { status: 'active' }), 200);
  await starts();
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'user_reactivated', 'active']]);
});

test('a user suspended before ends_at and reactivated after it, before the sweep: one access.revoked (user_suspended), none from the sweep', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, HOUR) });
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/suspend`, admin, {}), 200);
  t.clock.advance(HOUR + 1);
  assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, admin, { status: 'active' }), 200);
  await sweep();
  assert.equal((await getEnt(ent.id)).status, 'expired');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'user_suspended', 'active'],
  ]);
});

test('resolution treats ends_at <= now as expired at once: a PATCH or a suspend that runs first after ends_at announces access.revoked with reason entitlement_expired, once overall', async () => {
  const [patched, suspended] = [await person(t), await person(t)];
  const viaPatch = await grant(t, admin, patched.id, app.id, { source: 'trial', ends_at: inSeconds(t, 60) });
  const viaSuspend = await grant(t, admin, suspended.id, app.id, { source: 'trial', ends_at: inSeconds(t, 60) });
  t.clock.advance(61);
  assertStatus(await patchEnt(t, admin, viaPatch.id, { order_id: `ord-${viaPatch.id}` }), 200);
  assertStatus(await call(t, 'POST', `/v1/users/${suspended.id}/suspend`, admin, {}), 200);
  await sweep();
  for (const [user, ent] of [[patched, viaPatch], [suspended, viaSuspend]]) {
    assert.equal((await getEnt(ent.id)).status, 'expired');
    assert.deepEqual(await accessEvents(t, user.id, app.id), [
      ['access.granted', 'entitlement_granted', 'active'],
      ['access.revoked', 'entitlement_expired', 'expired'],
    ]);
  }
});

test('"ends_at <= now" at the very instant: a suspend at exactly ends_at announces access.revoked with the time-driven reason entitlement_expired, not user_suspended', async () => {
  const user = await person(t);
  await withStoppedClock(t, async () => {
    await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, 60) });
    t.clock.advance(60);
    assertStatus(await call(t, 'POST', `/v1/users/${user.id}/suspend`, admin, {}), 200);
  });
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_expired', 'expired'],
  ]);
});

test('a grant whose starts_at and ends_at both pass between job runs: access.granted (entitlement_started) then access.revoked (entitlement_expired), whichever job runs first', async () => {
  for (const order of [['scheduled-starts', 'entitlement-expiry'], ['entitlement-expiry', 'scheduled-starts']]) {
    const user = await person(t);
    await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, 20), ends_at: inSeconds(t, 40) });
    t.clock.advance(60);
    for (const job of order) await t.deps.jobs.runNow(job);
    for (const job of order) await t.deps.jobs.runNow(job);
    assert.deepEqual(await accessEvents(t, user.id, app.id), [
      ['access.granted', 'entitlement_started', 'active'],
      ['access.revoked', 'entitlement_expired', 'expired'],
    ], order.join(' before '));
  }
});

test('a scheduled grant deleted after starts_at, before scheduled-starts ran: access.granted (entitlement_started), then access.revoked with the deletion\'s reason entitlement_deleted; the job adds none', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, 10) });
  t.clock.advance(11);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  await starts();
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_started', 'active'],
    ['access.revoked', 'entitlement_deleted', 'none'],
  ]);
  // Part B delivery semantics 4 (receivers drop an older created_at): the two flips, written by one
  // request at one instant, are dated 1 ms apart in the order they happened.
  const rows = await sql<{ created_at: Date }>(
    t,
    `SELECT created_at FROM outbox_events WHERE type IN ('access.granted', 'access.revoked') AND data->>'user_id' = $1 AND application_id = $2 ORDER BY seq`,
    [user.id, app.id],
  );
  assert.equal(new Date(rows[1]!.created_at).getTime() - new Date(rows[0]!.created_at).getTime(), 1);
});

if (TEST_DATABASE_URL) test('the expiry sweep and scheduled starts lock an organization-wide grant\'s Organization before the row, one row at a time (src/access/locks.ts): a PATCH of the grant at the same time (Organization, then row) cannot deadlock with them', async () => {
  const member = await person(t);
  const orgId = await createOrg(t, [{ userId: member.id }]);
  const ended = await orgGrant(t, orgId, app.id, { endsAt: new Date(t.clock.now().getTime() - 1000) });
  const expiry = await probeWhileHeld(
    t,
    ['SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [orgId]],
    sweep,
    ['SELECT 1 FROM entitlements WHERE id = $1 FOR UPDATE NOWAIT', [ended]],
  );
  assert.equal(expiry.probeLocked, true, 'the sweep waited for the Organization without holding the row');
  assert.equal((await entRow(t, ended))!.status, 'expired');
  const other = await newApp(t, admin);
  const started = await orgGrant(t, orgId, other.id);
  await sql(t, 'UPDATE entitlements SET start_notified_at = NULL WHERE id = $1', [started]);
  const start = await probeWhileHeld(
    t,
    ['SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [orgId]],
    starts,
    ['SELECT 1 FROM entitlements WHERE id = $1 FOR UPDATE NOWAIT', [started]],
  );
  assert.equal(start.probeLocked, true, 'scheduled starts waited for the Organization without holding the row');
  assert.notEqual((await entRow(t, started))!.start_notified_at, null);
});

test('a row the expiry sweep cannot write does not hold back the rows due after it: they expire in the same run, the run reports failure naming the row, and the row expires once it can be written', async () => {
  const [first, second] = [await person(t), await person(t)];
  const stuck = await grant(t, admin, first.id, app.id, { source: 'trial', ends_at: inSeconds(t, HOUR) });
  const next = await grant(t, admin, second.id, app.id, { source: 'trial', ends_at: inSeconds(t, HOUR + 60) });
  // The row due first fails every time it is written (a data fault, say).
  await sql(t, `CREATE FUNCTION refuse_stuck_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'stuck row'; END $$`);
  await sql(t, `CREATE TRIGGER refuse_stuck_row BEFORE UPDATE ON entitlements FOR EACH ROW WHEN (OLD.id = '${stuck.id}') EXECUTE FUNCTION refuse_stuck_row()`);
  try {
    t.clock.advance(HOUR + 61);
    await assert.rejects(sweep(), (err: Error) => err.message.includes(stuck.id) && err.message.includes('stuck row'));
    assert.equal((await getEnt(next.id)).status, 'expired', 'the row behind it expired in the same run');
    assert.deepEqual(await entitlementEvents(t, next.id), ['entitlement.granted', 'entitlement.expired']);
    assert.equal((await getEnt(stuck.id)).status, 'active');
  } finally {
    await sql(t, 'DROP TRIGGER refuse_stuck_row ON entitlements');
    await sql(t, 'DROP FUNCTION refuse_stuck_row()');
  }
  await sweep();
  assert.equal((await getEnt(stuck.id)).status, 'expired');
  assert.deepEqual(await entitlementEvents(t, stuck.id), ['entitlement.granted', 'entitlement.expired']);
});

test('the jobs write a test-mode row\'s events and audit in test mode (Part A convention 10: test rows are seen only by test credentials): access.granted at its start, entitlement.expired and access.revoked at its end, all test_mode', async () => {
  const testAdmin = await platformKey(t, undefined, 'test');
  const user = await person(t, { mode: 'test' });
  const ent = await grant(t, testAdmin, user.id, app.id, { source: 'trial', starts_at: inSeconds(t, 60), ends_at: inSeconds(t, 120) });
  assert.equal(ent.test_mode, true);
  t.clock.advance(61);
  await starts();
  t.clock.advance(60);
  await sweep();
  const access = await outbox(t, { userId: user.id, applicationId: app.id });
  assert.deepEqual(access.map((e) => [e.type, e.data.reason, e.test_mode]), [
    ['access.granted', 'entitlement_started', true],
    ['access.revoked', 'entitlement_expired', true],
  ]);
  const rowEvents = await outbox(t, { entitlementId: ent.id });
  assert.deepEqual(rowEvents.map((e) => [e.type, e.test_mode]), [['entitlement.granted', true], ['entitlement.expired', true]]);
  const audit = await sql<{ action: string; test_mode: boolean }>(t, `SELECT action, test_mode FROM audit_events WHERE target_id = $1 ORDER BY created_at, id`, [ent.id]);
  assert.deepEqual(audit.map((a) => [a.action, a.test_mode]), [['entitlement.granted', true], ['entitlement.expired', true]]);
  assert.equal((await call(t, 'GET', `/v1/entitlements/${ent.id}`, testAdmin)).json().status, 'expired');
});
