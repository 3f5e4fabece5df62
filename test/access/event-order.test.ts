// Part B delivery semantics 4: "No ordering guarantee; events are independent. Use created_at (and the
// entitlement's updated_at) to drop stale events". A request's instant is taken when it starts; two
// changes to one pair run one after the other under its locks, so the one that started first may
// commit second. Here the clock stands still and steps back between the two requests, which gives
// the committed rows exactly what that race gives them (over HTTP, 40 rounds of a disable and an
// enable of one grant sent at once put the row's updated_at back 2 times and announced the pair's
// access out of created_at order 2 times).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { assertStatus, call, customPlatformRole, effective, grant, newApp, patchEnt, person, platformKey, sql } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

/** A receiver's view: the events of `types` about the pair, in the order they were written (commit order). */
async function written(userId: string, applicationId: string, types: string[]) {
  return sql<{ type: string; created_at: Date; data: any }>(
    t,
    `SELECT type, created_at, data FROM outbox_events WHERE type = ANY($1::text[]) AND data->>'user_id' = $2 AND application_id = $3 ORDER BY seq`,
    [types, userId, applicationId],
  );
}

/** What a receiver that drops events older (by created_at) than the last one it applied ends up with. */
function receiverState<T>(events: T[], stamp: (e: T) => number): T | undefined {
  let held: T | undefined;
  for (const e of events) if (held === undefined || stamp(e) >= stamp(held)) held = e;
  return held;
}

test('Part B delivery semantics 4: a change that started first but committed after another is dated after it (access.* created_at, entitlement updated_at), so dropping stale events keeps the last one', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id);
  await withStoppedClock(t, async () => {
    t.clock.advance(1);
    const disabled = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'Payment failed' }), 200);
    // B started 10 s later and committed first; A (the disable) started 5 s later and committed after it.
    t.clock.advance(10);
    const enabled = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
    t.clock.advance(-5);
    const again = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'Chargeback' }), 200);
    assert.ok(Date.parse(disabled.updated_at) < Date.parse(enabled.updated_at));
    assert.ok(Date.parse(again.updated_at) > Date.parse(enabled.updated_at), `updated_at went back: ${enabled.updated_at} then ${again.updated_at}`);
  });
  assert.equal((await effective(t, admin, u.id, app.id)).allowed, false);

  const access = await written(u.id, app.id, ['access.granted', 'access.revoked']);
  assert.deepEqual(access.map((e) => e.type), ['access.granted', 'access.revoked', 'access.granted', 'access.revoked']);
  for (let i = 1; i < access.length; i++) {
    assert.ok(access[i].created_at.getTime() > access[i - 1].created_at.getTime(), `event ${i} dated ${access[i].created_at.toISOString()}, not after ${access[i - 1].created_at.toISOString()}`);
  }
  assert.equal(receiverState(access, (e) => e.created_at.getTime())?.type, 'access.revoked', 'the receiver keeps the user signed in');

  const [lastSeen] = await sql<{ allowed: boolean; updated_at: Date }>(t, 'SELECT allowed, updated_at FROM access_states WHERE user_id = $1 AND application_id = $2', [u.id, app.id]);
  assert.deepEqual(lastSeen, { allowed: false, updated_at: access.at(-1)!.created_at });

  const ents = (await sql<{ type: string; data: any }>(t, `SELECT type, data FROM outbox_events WHERE type LIKE 'entitlement.%' AND data->'entitlement'->>'id' = $1 ORDER BY seq`, [ent.id]));
  assert.deepEqual(ents.map((e) => e.type), ['entitlement.granted', 'entitlement.disabled', 'entitlement.granted', 'entitlement.disabled']);
  const last = receiverState(ents, (e) => Date.parse(e.data.entitlement.updated_at));
  assert.equal(last?.data.entitlement.status, 'disabled', 'the receiver holds the entitlement as active');
});

test('Part B delivery semantics 4: two flips of one pair at one instant are dated 1 ms apart, in the order they happened', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  await withStoppedClock(t, async () => {
    const ent = await grant(t, admin, u.id, app.id);
    const off = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'Payment failed' }), 200);
    assert.ok(Date.parse(off.updated_at) > Date.parse(ent.updated_at));
  });
  const access = await written(u.id, app.id, ['access.granted', 'access.revoked']);
  assert.deepEqual(access.map((e) => e.type), ['access.granted', 'access.revoked']);
  assert.equal(access[1].created_at.getTime() - access[0].created_at.getTime(), 1);
});

/** The events of `types` about a user, in the order they were written (commit order). */
async function writtenAbout(userId: string, types: string[]) {
  return sql<{ type: string; created_at: Date; data: any }>(
    t,
    `SELECT type, created_at, data FROM outbox_events WHERE type = ANY($1::text[]) AND data->>'user_id' = $2 ORDER BY seq`,
    [types, userId],
  );
}

function assertDatedInOrder(events: { created_at: Date }[]): void {
  for (let i = 1; i < events.length; i++) {
    assert.ok(events[i].created_at.getTime() > events[i - 1].created_at.getTime(), `event ${i} dated ${events[i].created_at.toISOString()}, not after ${events[i - 1].created_at.toISOString()}`);
  }
}

test('Part B delivery semantics 4: user.* events are dated as they commit: a suspension that started before a reactivation but committed after it is dated after it, so a receiver dropping stale events holds the user suspended', async () => {
  const u = await person(t);
  await withStoppedClock(t, async () => {
    t.clock.advance(1);
    assertStatus(await call(t, 'POST', `/v1/users/${u.id}/suspend`, admin, { reason: 'chargeback' }), 200);
    // The reactivation started 10 s later and committed first; the second suspension started 5 s later and committed after it.
    t.clock.advance(10);
    assertStatus(await call(t, 'PATCH', `/v1/users/${u.id}`, admin, { status: 'active' }), 200);
    t.clock.advance(-5);
    assertStatus(await call(t, 'POST', `/v1/users/${u.id}/suspend`, admin, { reason: 'fraud' }), 200);
  });
  const events = await writtenAbout(u.id, ['user.suspended', 'user.reactivated']);
  assert.deepEqual(events.map((e) => e.type), ['user.suspended', 'user.reactivated', 'user.suspended']);
  assertDatedInOrder(events);
  assert.equal(receiverState(events, (e) => e.created_at.getTime())?.type, 'user.suspended', 'the receiver holds the suspended user as active');
});

test('Part B delivery semantics 4: role.* events are dated as they commit: an assignment that started before a removal but committed after it is dated after it, and two at one instant are 1 ms apart', async () => {
  const u = await person(t);
  const roleId = await customPlatformRole(t, ['users.list']);
  const assign = () => call(t, 'POST', `/v1/users/${u.id}/roles/${roleId}`, admin, {});
  await withStoppedClock(t, async () => {
    t.clock.advance(1);
    assertStatus(await assign(), 201);
    t.clock.advance(10);
    assert.equal((await call(t, 'DELETE', `/v1/users/${u.id}/roles/${roleId}`, admin)).statusCode, 204);
    t.clock.advance(-5);
    assertStatus(await assign(), 201);
    assert.equal((await call(t, 'DELETE', `/v1/users/${u.id}/roles/${roleId}`, admin)).statusCode, 204);
  });
  const events = await writtenAbout(u.id, ['role.assigned', 'role.removed']);
  assert.deepEqual(events.map((e) => e.type), ['role.assigned', 'role.removed', 'role.assigned', 'role.removed']);
  assertDatedInOrder(events);
  assert.equal(events[3].created_at.getTime() - events[2].created_at.getTime(), 1, 'two at one instant, 1 ms apart');
  assert.equal(receiverState(events, (e) => e.created_at.getTime())?.type, 'role.removed', 'the receiver holds the removed role as held');
});

test('a user\'s event clock is kept while changes may race it and pruned a day after its last event by the idempotency-prune job', async () => {
  const u = await person(t);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/suspend`, admin, {}), 200);
  const clock = () => sql<{ last_at: Date }>(t, 'SELECT last_at FROM event_clocks WHERE subject = $1', [u.id]);
  const [{ created_at }] = await writtenAbout(u.id, ['user.suspended']);
  assert.deepEqual(await clock(), [{ last_at: created_at }]);
  t.clock.advance(86400 - 60);
  await t.deps.jobs.runNow('idempotency-prune');
  assert.equal((await clock()).length, 1, 'kept within the day');
  t.clock.advance(120);
  const result = await t.deps.jobs.runNow('idempotency-prune');
  assert.deepEqual(await clock(), []);
  assert.ok((result as { event_clocks: number }).event_clocks >= 1);
});
