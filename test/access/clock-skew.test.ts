// Several processes share one database and their clocks disagree by a few seconds (NTP normally keeps
// them within tens of milliseconds; a VM pause or a bad time source gives seconds). Part B delivery
// semantics 4: receivers drop an access event older (by created_at) than the last one they applied, so
// what is announced about a (user, Application) pair must never go back in time, whichever process
// announces it (docs/decisions.md, "Clocks of several processes").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { buildTestApp } from '../helpers/app.js';
import { secondProcess } from '../foundation/support/ops.js';
import { assertStatus, call, effective, grant, inSeconds, newApp, person, platformKey, sql } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

test('Part B derived access events with clocks 3 s apart: a start announced by the process ahead is not revoked by a change on the process behind (access.revoked only "when resolved access flips")', async () => {
  const app = await newApp(t, admin);
  const u = await person(t);
  const ent = await grant(t, admin, u.id, app.id, { starts_at: inSeconds(t, 60) });
  assert.equal((await effective(t, admin, u.id, app.id)).allowed, false, 'not started yet');
  const second = await secondProcess(t);
  try {
    // Process A (t) is 2 s past starts_at; process B's clock is 3 s behind A's, 1 s before starts_at.
    t.clock.advance(62);
    second.clock.offsetMs = t.clock.offsetMs - 3000;
    await t.deps.jobs.runNow('scheduled-starts');
    // On B, a renewal of the same grant (ends_at set a year ahead), as a billing system sends it.
    const renewed = assertStatus(
      await call({ ...t, app: second.app }, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { ends_at: inSeconds(t, 365 * 86400) }),
      200,
    );
    assert.equal(renewed.id, ent.id);

    const events = await sql<{ type: string; created_at: Date; data: any }>(
      t,
      `SELECT type, created_at, data FROM outbox_events WHERE type IN ('access.granted', 'access.revoked') AND data->>'user_id' = $1 AND application_id = $2 ORDER BY seq`,
      [u.id, app.id],
    );
    assert.deepEqual(events.map((e) => [e.type, e.data.reason]), [['access.granted', 'entitlement_started']], 'the renewal on the process behind announced the started grant as revoked');
    const [state] = await sql<{ allowed: boolean }>(t, 'SELECT allowed FROM access_states WHERE user_id = $1 AND application_id = $2', [u.id, app.id]);
    assert.equal(state.allowed, true);
    const [updated] = await sql<{ type: string }>(t, `SELECT type FROM outbox_events WHERE type = 'entitlement.updated' AND data->'entitlement'->>'id' = $1`, [ent.id]);
    assert.equal(updated?.type, 'entitlement.updated');

    // Once B's clock too is past starts_at, a later change announces nothing more: no grant was lost.
    second.clock.advance(10);
    t.clock.advance(10);
    assertStatus(await call({ ...t, app: second.app }, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { ends_at: inSeconds(t, 300 * 86400) }), 200);
    const after = await sql<{ type: string }>(
      t,
      `SELECT type FROM outbox_events WHERE type IN ('access.granted', 'access.revoked') AND data->>'user_id' = $1 AND application_id = $2 ORDER BY seq`,
      [u.id, app.id],
    );
    assert.deepEqual(after.map((e) => e.type), ['access.granted']);
    assert.equal((await effective(t, admin, u.id, app.id)).allowed, true);
  } finally {
    await second.close();
  }
});

test('Part B delivery semantics 4 with clocks 4 s apart: application.review_status_changed is dated after the Application\'s previous one, so a reinstatement on the process behind is not dropped as stale after a suspension on the process ahead', async () => {
  const app = await newApp(t, admin);
  const second = await secondProcess(t);
  try {
    // Process A (t) is 4 s ahead of process B; B reinstates 1 s (real time) after A suspended.
    second.clock.offsetMs = t.clock.offsetMs - 4000;
    const suspended = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { review_status: 'suspended', review_notes: 'Phishing report' }), 200);
    assert.equal(suspended.review_status, 'suspended');
    second.clock.advance(1);
    const reinstated = assertStatus(await call({ ...t, app: second.app }, 'PATCH', `/v1/applications/${app.id}`, admin, { review_status: 'approved' }), 200);
    assert.equal(reinstated.review_status, 'approved');

    const events = await sql<{ created_at: Date; data: any }>(
      t,
      `SELECT created_at, data FROM outbox_events WHERE type = 'application.review_status_changed' AND application_id = $1 ORDER BY seq`,
      [app.id],
    );
    assert.deepEqual(events.map((e) => e.data.review_status), ['suspended', 'approved']);
    assert.ok(events[1].created_at.getTime() > events[0].created_at.getTime(), `the reinstatement is dated ${events[1].created_at.toISOString()}, before the suspension (${events[0].created_at.toISOString()})`);
    const audit = await sql<{ action: string }>(t, `SELECT action FROM audit_events WHERE action = 'application.review_status_changed' AND target_id = $1`, [app.id]);
    assert.equal(audit.length, 2);
  } finally {
    await second.close();
  }
});
