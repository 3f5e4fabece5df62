// Entitlements (Part B): grant rules, the status table, other PATCH fields, ETag / If-Match, DELETE,
// who may grant per visibility, confinement of app keys and owners, lists, events and audit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey } from '../helpers/fixtures.js';
import {
  accessEvents, appKey, assertError, assertInvalid, assertStatus, auditOf, call, createOrg, DAY, entitlementEvents, entRow, grant, grantReq,
  HOUR, inSeconds, newApp, orgGrant, outbox, patchEnt, person, platformKey, setReview, sql, type AppFixture,
} from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
});
after(() => t.close());

const ENTITLEMENT_KEYS = [
  'application_id', 'created_at', 'disabled_reason', 'ends_at', 'id', 'member_overrides', 'member_scope', 'order_id', 'organization_id', 'source',
  'starts_at', 'status', 'test_mode', 'updated_at', 'user_id',
];

/** An expired row: granted with a short term, then the clock passes ends_at and the sweep runs. */
async function expiredRow(userId: string, applicationId = app.id): Promise<any> {
  const ent = await grant(t, admin, userId, applicationId, { source: 'trial', ends_at: inSeconds(t, 60) });
  t.clock.advance(61);
  await t.deps.jobs.runNow('entitlement-expiry');
  assert.equal((await entRow(t, ent.id))!.status, 'expired');
  return ent;
}


// ---- POST ----------------------------------------------------------------------------------------

test('POST /v1/users/{id}/entitlements requires an Idempotency-Key: 400 idempotency_key_required without one, nothing written', async () => {
  const user = await person(t);
  assertError(await grantReq(t, admin, user.id, { application_id: app.id, source: 'admin_grant' }, null), 400, 'idempotency_key_required');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 0);
});

test('POST grants an active personal Entitlement (201): audit entitlement.granted, webhook entitlement.granted and access.granted (reason entitlement_granted)', async () => {
  const user = await person(t);
  const res = await grantReq(t, admin, user.id, { application_id: app.id, source: 'purchase', order_id: 'order-1' });
  const ent = assertStatus(res, 201);
  assert.deepEqual(Object.keys(ent).sort(), ENTITLEMENT_KEYS);
  assert.match(ent.id, /^ent_/);
  assert.equal(ent.user_id, user.id);
  assert.equal(ent.organization_id, null);
  assert.equal(ent.application_id, app.id);
  assert.equal(ent.status, 'active');
  assert.equal(ent.source, 'purchase');
  assert.equal(ent.order_id, 'order-1');
  assert.equal(ent.ends_at, null);
  assert.equal(ent.disabled_reason, null);
  assert.equal(ent.test_mode, false);
  const audit = await auditOf(t, ent.id, 'entitlement.granted');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].target_user_id, user.id);
  assert.equal(audit[0].application_id, app.id);
  const events = await outbox(t, { entitlementId: ent.id });
  assert.deepEqual(events.map((e) => e.type), ['entitlement.granted']);
  assert.equal(events[0].application_id, app.id);
  assert.equal(events[0].data.entitlement.id, ent.id);
  assert.equal(events[0].data.entitlement.status, 'active');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
});

test('POST: a retry with the same Idempotency-Key returns the original result and grants once', async () => {
  const user = await person(t);
  const body = { application_id: app.id, source: 'admin_grant' };
  const first = await grantReq(t, admin, user.id, body, 'same-key');
  const again = await grantReq(t, admin, user.id, body, 'same-key');
  assert.equal(again.statusCode, 201);
  assert.equal(again.body, first.body);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 1);
  assert.equal((await accessEvents(t, user.id, app.id)).length, 1);
});

test('IC-3 / docs/conventions.md "Validation failures are not recorded": a grant refused 422 validation_failed by a rule the schema cannot state (starts_at more than 1 year ahead) leaves the Idempotency-Key free, so the corrected retry with the same key grants (201), once', async () => {
  const user = await person(t);
  const refused = await grantReq(t, admin, user.id, { application_id: app.id, source: 'admin_grant', starts_at: inSeconds(t, 400 * DAY) }, 'ic3-corrected');
  assertInvalid(refused, 'starts_at');
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM idempotency_keys WHERE key = 'ic3-corrected'`))[0].n, 0, 'nothing recorded for the key');
  const corrected = await grantReq(t, admin, user.id, { application_id: app.id, source: 'admin_grant' }, 'ic3-corrected');
  assert.equal(corrected.statusCode, 201, corrected.body);
  assert.equal(corrected.headers['idempotent-replayed'], undefined);
  const replay = await grantReq(t, admin, user.id, { application_id: app.id, source: 'admin_grant' }, 'ic3-corrected');
  assert.equal(replay.headers['idempotent-replayed'], 'true');
  assert.equal(replay.body, corrected.body);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 1);
});

test('Idempotency-Key: docs/conventions.md "Every other answer is recorded and replayed, the specific 4xx codes included (ends_at_required, …)": a trial refused 422 ends_at_required is replayed to a retry with the same key, and the corrected body under that key is 422 idempotency_key_reused; nothing is granted', async () => {
  const user = await person(t);
  const body = { application_id: app.id, source: 'trial' };
  const refused = await grantReq(t, admin, user.id, body, 'ends-at-recorded');
  assertError(refused, 422, 'ends_at_required');
  const replay = await grantReq(t, admin, user.id, body, 'ends-at-recorded');
  assertError(replay, 422, 'ends_at_required');
  assert.equal(replay.headers['idempotent-replayed'], 'true', 'the recorded answer, replayed');
  assert.equal(replay.body, refused.body);
  const corrected = await grantReq(t, admin, user.id, { ...body, ends_at: inSeconds(t, 10 * DAY) }, 'ends-at-recorded');
  assertError(corrected, 422, 'idempotency_key_reused');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 0);
});

test('one live personal row per user and Application under concurrent grants: one 201, every other 409 entitlement_already_exists with details.existing_entitlement_id and details.status of the winner', async () => {
  const user = await person(t);
  const rs = await Promise.all(Array.from({ length: 4 }, () => grantReq(t, admin, user.id, { application_id: app.id, source: 'admin_grant' })));
  assert.equal(rs.filter((r) => r.statusCode === 201).length, 1, rs.map((r) => r.statusCode).join(','));
  const winner = rs.find((r) => r.statusCode === 201)!.json();
  for (const r of rs) {
    if (r.statusCode !== 201) assert.deepEqual(assertError(r, 409, 'entitlement_already_exists').details, { existing_entitlement_id: winner.id, status: 'active' });
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1 AND application_id = $2', [user.id, app.id]))[0].n, 1);
});

test('one live personal row per user and Application: an active or disabled one gives 409 entitlement_already_exists with details.existing_entitlement_id and details.status', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  let err = assertError(await grantReq(t, admin, user.id, { application_id: app.id, source: 'purchase' }), 409, 'entitlement_already_exists');
  assert.equal(err.details.existing_entitlement_id, ent.id);
  assert.equal(err.details.status, 'active');
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'chargeback' }), 200);
  err = assertError(await grantReq(t, admin, user.id, { application_id: app.id, source: 'purchase' }), 409, 'entitlement_already_exists');
  assert.equal(err.details.existing_entitlement_id, ent.id);
  assert.equal(err.details.status, 'disabled');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 1);
});

test('revoked and expired rows do not block a new personal grant', async () => {
  const revokedUser = await person(t);
  const first = await grant(t, admin, revokedUser.id, app.id);
  assertStatus(await patchEnt(t, admin, first.id, { status: 'revoked', disabled_reason: 'refund' }), 200);
  const second = await grant(t, admin, revokedUser.id, app.id);
  assert.notEqual(second.id, first.id);

  const expiredUser = await person(t);
  const old = await expiredRow(expiredUser.id);
  const renewed = await grant(t, admin, expiredUser.id, app.id);
  assert.notEqual(renewed.id, old.id);
  assert.equal(renewed.status, 'active');
});

test('a row whose ends_at passed ("ends_at <= now", here ends_at is this very instant) does not block a new grant before the sweep: it is expired by the system in the same transaction (entitlement.expired, access.revoked entitlement_expired), then the new row is granted', async () => {
  const user = await person(t);
  const trial = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, 30) });
  t.clock.advance(30);
  const purchase = await atOneInstant(t, () => grant(t, admin, user.id, app.id, { source: 'purchase', order_id: `ord-${user.id}` }), trial.ends_at);
  assert.notEqual(purchase.id, trial.id);
  assert.equal((await entRow(t, trial.id))!.status, 'expired');
  assert.deepEqual(await entitlementEvents(t, trial.id), ['entitlement.granted', 'entitlement.expired']);
  const expiry = (await auditOf(t, trial.id)).find((a) => a.action === 'entitlement.expired');
  assert.equal(expiry?.actor_type, 'system');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_expired', 'expired'],
    ['access.granted', 'entitlement_granted', 'active'],
  ]);
  // The sweep finds nothing left to do.
  await t.deps.jobs.runNow('entitlement-expiry');
  assert.equal((await accessEvents(t, user.id, app.id)).length, 3);
  assert.deepEqual(await entitlementEvents(t, trial.id), ['entitlement.granted', 'entitlement.expired']);
});

test('source org_seat on a personal grant is 422 invalid_source', async () => {
  const user = await person(t);
  assertError(await grantReq(t, admin, user.id, { application_id: app.id, source: 'org_seat' }), 422, 'invalid_source');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 0);
});

test('a trial without ends_at is 422 ends_at_required; with ends_at it is granted', async () => {
  const user = await person(t);
  assertError(await grantReq(t, admin, user.id, { application_id: app.id, source: 'trial' }), 422, 'ends_at_required');
  assertError(await grantReq(t, admin, user.id, { application_id: app.id, source: 'trial', ends_at: null }), 422, 'ends_at_required');
  const ends = inSeconds(t, 14 * DAY);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: ends });
  assert.equal(ent.ends_at, ends);
  assert.equal(ent.source, 'trial');
});

test("every audit row about an Entitlement (grant, disable, enable, delete) carries its Application's tenant_id, as the grant's does", async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'audit tenant' }), 200);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  const rows = await auditOf(t, ent.id);
  assert.deepEqual(rows.map((r) => r.action), ['entitlement.granted', 'entitlement.disabled', 'entitlement.granted', 'entitlement.deleted']);
  assert.deepEqual(rows.map((r) => r.tenant_id), rows.map(() => app.tenant_id));
});

test('ends_at must be after starts_at (422)', async () => {
  const user = await person(t);
  assertInvalid(await grantReq(t, admin, user.id, { application_id: app.id, source: 'purchase', starts_at: inSeconds(t, HOUR), ends_at: inSeconds(t, 60) }), 'ends_at');
  // "After" is strict: ends_at equal to starts_at is refused too, with or without an explicit starts_at.
  const inAnHour = inSeconds(t, HOUR); // one instant for both: the test clock follows real time
  assertInvalid(await grantReq(t, admin, user.id, { application_id: app.id, source: 'purchase', starts_at: inAnHour, ends_at: inAnHour }), 'ends_at');
  await atOneInstant(t, async () => assertInvalid(await grantReq(t, admin, user.id, { application_id: app.id, source: 'trial', ends_at: inSeconds(t, 0) }), 'ends_at'));
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 0);
});

test('starts_at at most 1 year ahead: beyond is 422 validation_failed; within a year is accepted', async () => {
  const user = await person(t);
  const other = await person(t);
  // From 2026-11-29 the year ahead has 365 days (no 29 February before 2027-11-29).
  await atOneInstant(t, async () => {
    assertInvalid(await grantReq(t, admin, user.id, { application_id: app.id, source: 'purchase', starts_at: '2027-11-29T10:00:00.001Z' }), 'starts_at');
    const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: inSeconds(t, 300 * DAY) });
    assert.equal(ent.status, 'active');
    // "At most": a starts_at exactly a year (365 days) ahead is still within the year.
    const edge = await grant(t, admin, other.id, app.id, { source: 'purchase', starts_at: inSeconds(t, 365 * DAY) });
    assert.equal(edge.starts_at, '2027-11-29T10:00:00.000Z');
  }, '2026-11-29T10:00:00.000Z');
});

test('"at most 1 year ahead" is a calendar year: across 29 February 2028 a starts_at one year ahead (366 days) is accepted, one millisecond later 422 validation_failed; personal and organization grants alike', async () => {
  const user = await person(t);
  const late = await person(t);
  const orgApp = await newApp(t, admin);
  const org = await createOrg(t, [{ userId: user.id }]);
  await atOneInstant(t, async () => {
    assertInvalid(await grantReq(t, admin, late.id, { application_id: app.id, source: 'purchase', starts_at: '2028-06-01T00:00:00.001Z' }), 'starts_at');
    const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', starts_at: '2028-06-01T00:00:00.000Z' });
    assert.equal(ent.starts_at, '2028-06-01T00:00:00.000Z');
    const orgPost = (startsAt: string) => call(t, 'POST', `/v1/organizations/${org}/entitlements`, admin, { application_id: orgApp.id, starts_at: startsAt }, { 'idempotency-key': `org-${startsAt}` });
    assertInvalid(await orgPost('2028-06-01T00:00:00.001Z'), 'starts_at');
    assert.equal(assertStatus(await orgPost('2028-06-01T00:00:00.000Z'), 201).starts_at, '2028-06-01T00:00:00.000Z');
  }, '2027-06-01T00:00:00.000Z');
});

test('order_id is up to 255 characters', async () => {
  const user = await person(t);
  assertInvalid(await grantReq(t, admin, user.id, { application_id: app.id, source: 'purchase', order_id: 'x'.repeat(256) }), 'order_id');
  assert.equal((await grant(t, admin, user.id, app.id, { source: 'purchase', order_id: 'y'.repeat(255) })).order_id.length, 255);
});

test('the Application must be approved: a suspended one is 409 application_not_available; an unknown one 404 application_not_found', async () => {
  const suspended = await newApp(t, admin);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${suspended.id}`, admin, { review_status: 'suspended', review_notes: 'x' }), 200);
  const user = await person(t);
  assertError(await grantReq(t, admin, user.id, { application_id: suspended.id, source: 'admin_grant' }), 409, 'application_not_available');
  assertError(await grantReq(t, admin, user.id, { application_id: 'app_nosuchapp', source: 'admin_grant' }), 404, 'application_not_found');
  const pending = await newApp(t, admin);
  await setReview(t, pending.id, 'pending_review');
  assertError(await grantReq(t, admin, user.id, { application_id: pending.id, source: 'admin_grant' }), 409, 'application_not_available');
});

test('invited users may receive grants; deleted users are 404 user_not_found', async () => {
  const invited = await person(t, { status: 'invited' });
  const ent = await grant(t, admin, invited.id, app.id);
  assert.equal(ent.user_id, invited.id);
  // An invited user is not active, so access does not flip on.
  assert.deepEqual(await accessEvents(t, invited.id, app.id), []);

  const gone = await person(t);
  assert.equal((await call(t, 'DELETE', `/v1/users/${gone.id}`, admin)).statusCode, 204);
  assertError(await grantReq(t, admin, gone.id, { application_id: app.id, source: 'admin_grant' }), 404, 'user_not_found');
  assertError(await grantReq(t, admin, 'usr_01NOSUCHUSER0000000000000', { application_id: app.id, source: 'admin_grant' }), 404, 'user_not_found');
});

// ---- who may grant -----------------------------------------------------------------------------

test('public and invite_only: platform entitlements.manage, the app\'s own key with entitlements.manage, and the owner may grant', async () => {
  for (const visibility of ['public', 'invite_only']) {
    const target = await newApp(t, admin, { visibility });
    const key = await appKey(t, target.id, ['entitlements.manage']);
    const platform = await platformKey(t, ['entitlements.manage']);
    for (const cred of [platform, key, target.owner!.token]) {
      const user = await person(t);
      const ent = await grant(t, cred, user.id, target.id);
      assert.equal(ent.application_id, target.id);
    }
  }
});

test('a caller without entitlements.manage who is not the owner gets 403 forbidden; an app key without entitlements.manage too', async () => {
  const user = await person(t);
  const stranger = await person(t);
  assertError(await grantReq(t, stranger.token, user.id, { application_id: app.id, source: 'admin_grant' }), 403, 'forbidden');
  const bareKey = await appKey(t, app.id, ['users.list']);
  assertError(await grantReq(t, bareKey, user.id, { application_id: app.id, source: 'admin_grant' }), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 0);
});

test("another Application's key cannot grant for this one (404 application_not_found)", async () => {
  const other = await newApp(t, admin);
  const otherKey = await appKey(t, other.id, ['entitlements.manage']);
  const user = await person(t);
  assertError(await grantReq(t, otherKey, user.id, { application_id: app.id, source: 'admin_grant' }), 404, 'application_not_found');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 0);
});

test('internal: only platform entitlements.manage may grant; the owner and the own key get 403 or 404', async () => {
  const internal = await newApp(t, admin, { visibility: 'internal' });
  const key = await appKey(t, internal.id, ['entitlements.manage']);
  const user = await person(t);
  for (const cred of [key, internal.owner!.token]) {
    const res = await grantReq(t, cred, user.id, { application_id: internal.id, source: 'admin_grant' });
    assert.ok([403, 404].includes(res.statusCode), `${res.statusCode} ${res.body}`);
    assert.ok(['forbidden', 'application_not_found'].includes(res.json().error.code), res.body);
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [user.id]))[0].n, 0);
  const platform = await platformKey(t, ['entitlements.manage']);
  assert.equal((await grant(t, platform, user.id, internal.id)).status, 'active');
});

// ---- the status table ----------------------------------------------------------------------------

test('disabled_reason is 1–255 characters, counted in code points: 255 (emoji) are accepted on disable and revoke; 256 are 422 validation_failed naming disabled_reason and change nothing', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertInvalid(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: E.repeat(256) }), 'disabled_reason');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  const disabled = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: E.repeat(255) }), 200);
  assert.equal(disabled.disabled_reason, E.repeat(255));
  assertInvalid(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'r'.repeat(256) }), 'disabled_reason');
  assert.equal((await entRow(t, ent.id))!.status, 'disabled');
  const revoked = assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'r'.repeat(255) }), 200);
  assert.deepEqual([revoked.status, revoked.disabled_reason], ['revoked', 'r'.repeat(255)]);
});

test('active → disabled needs disabled_reason (422 disabled_reason_required); then entitlement.disabled, audit, access.revoked (entitlement_disabled)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled' }), 422, 'disabled_reason_required');
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: '' }), 422, 'disabled_reason_required');
  assertInvalid(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x'.repeat(256) }), 'disabled_reason');
  // White space alone is no reason, as for review_notes: on the move, and when rewording a disabled row.
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: ' \t\n ' }), 422, 'disabled_reason_required');
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: '   ' }), 422, 'disabled_reason_required');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'chargeback' }), 200);
  assert.equal(body.status, 'disabled');
  assert.equal(body.disabled_reason, 'chargeback');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled']);
  const audit = await auditOf(t, ent.id, 'entitlement.disabled');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.status, 'active');
  assert.equal(audit[0].after.status, 'disabled');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_disabled', 'disabled'],
  ]);
});

test('disabled → active clears disabled_reason, emits entitlement.granted and access.granted (entitlement_enabled)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
  assert.equal(body.status, 'active');
  assert.equal(body.disabled_reason, null);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.granted']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.granted')).length, 2);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.granted', 'entitlement_enabled', 'active']);
});

test('active → revoked needs disabled_reason; revoked is terminal: entitlement.revoked, audit, access.revoked (entitlement_revoked, status revoked)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked' }), 422, 'disabled_reason_required');
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'refund' }), 200);
  assert.equal(body.status, 'revoked');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.revoked']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.revoked')).length, 1);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.revoked', 'entitlement_revoked', 'revoked']);
});

test('disabled → revoked needs disabled_reason and emits entitlement.revoked but no access event (access was already off)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked' }), 422, 'disabled_reason_required');
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'fraud' }), 200);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled', 'entitlement.revoked']);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_disabled', 'disabled'],
  ]);
});

test('expired → active only with ends_at in the future or null (409 invalid_status_transition otherwise); renewal grants access again', async () => {
  const user = await person(t);
  const ent = await expiredRow(user.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'active' }), 409, 'invalid_status_transition');
  assertError(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, -10) }), 409, 'invalid_status_transition');
  // "In the future": an ends_at equal to now is not.
  await atOneInstant(t, async () => assertError(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, 0) }), 409, 'invalid_status_transition'));
  assert.equal((await entRow(t, ent.id))!.status, 'expired');
  const ends = inSeconds(t, 30 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: ends }), 200);
  assert.equal(body.status, 'active');
  assert.equal(body.ends_at, ends);
  assert.equal((await accessEvents(t, user.id, app.id)).at(-1)![0], 'access.granted');
  assert.equal((await entitlementEvents(t, ent.id)).at(-1), 'entitlement.granted');

  const other = await person(t);
  const second = await expiredRow(other.id);
  // A trial always ends: renewing it without an end is 422 ends_at_required, unless it becomes a purchase.
  assertError(await patchEnt(t, admin, second.id, { status: 'active', ends_at: null }), 422, 'ends_at_required');
  assert.equal((await entRow(t, second.id))!.status, 'expired');
  const renewed = assertStatus(await patchEnt(t, admin, second.id, { status: 'active', ends_at: null, source: 'purchase' }), 200);
  assert.equal(renewed.ends_at, null);
  assert.equal(renewed.status, 'active');
  assert.equal(renewed.source, 'purchase');
});

test('ends_at_required ("Trial without ends_at") also holds on PATCH: a trial\'s ends_at set to null is 422 and changes nothing; converting to purchase in the same PATCH may drop it', async () => {
  const user = await person(t);
  const ends = inSeconds(t, 7 * DAY);
  const trial = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: ends });
  assertError(await patchEnt(t, admin, trial.id, { ends_at: null }), 422, 'ends_at_required');
  const row = assertStatus(await call(t, 'GET', `/v1/entitlements/${trial.id}`, admin), 200);
  assert.deepEqual([row.source, row.ends_at, row.status], ['trial', ends, 'active']);
  assert.deepEqual(await entitlementEvents(t, trial.id), ['entitlement.granted'], 'the refused PATCH wrote no event');
  const converted = assertStatus(await patchEnt(t, admin, trial.id, { source: 'purchase', ends_at: null }), 200);
  assert.deepEqual([converted.source, converted.ends_at], ['purchase', null]);
});

test('a disabled row whose ends_at passed is expired before the sweep: PATCH status active is the expired → active move (409 without a future ends_at; with one, renewed after entitlement.expired)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { ends_at: inSeconds(t, HOUR) });
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'Paused' }), 200);
  t.clock.advance(HOUR + 5);
  assertError(await patchEnt(t, admin, ent.id, { status: 'active' }), 409, 'invalid_status_transition');
  assert.equal((await entRow(t, ent.id))!.status, 'disabled', 'a refused PATCH changes nothing; the sweep expires the row');
  const renewed = assertStatus(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, DAY) }), 200);
  assert.equal(renewed.status, 'active');
  assert.deepEqual((await entitlementEvents(t, ent.id)).slice(-2), ['entitlement.expired', 'entitlement.granted']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.expired')).length, 1);
});

test('expired → active is 409 entitlement_already_exists when a newer live row exists', async () => {
  const user = await person(t);
  const old = await expiredRow(user.id);
  const newer = await grant(t, admin, user.id, app.id);
  const err = assertError(await patchEnt(t, admin, old.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 409, 'entitlement_already_exists');
  assert.equal(err.details.existing_entitlement_id, newer.id);
  assert.equal((await entRow(t, old.id))!.status, 'expired');
});

test('expired → active of an org-wide grant is 409 entitlement_already_exists with details.existing_entitlement_id when a newer live org grant exists, active or disabled ("an existing active or disabled one"); the old row stays expired', async () => {
  for (const status of ['active', 'disabled'] as const) {
    const member = await person(t);
    const org = await createOrg(t, [{ userId: member.id, role: 'org_admin' }]);
    const target = await newApp(t, admin);
    const old = await orgGrant(t, org, target.id, { status: 'expired' });
    const live = await orgGrant(t, org, target.id);
    if (status === 'disabled') assertStatus(await patchEnt(t, admin, live, { status: 'disabled', disabled_reason: 'paused' }), 200);
    const err = assertError(await patchEnt(t, admin, old, { status: 'active', ends_at: null }), 409, 'entitlement_already_exists');
    assert.deepEqual(err.details, { existing_entitlement_id: live, status });
    assert.equal((await entRow(t, old))!.status, 'expired');
    assert.deepEqual(await entitlementEvents(t, old), []);
  }
});

test('expired → active (renewal) grants access again with access.granted reason entitlement_granted (docs/decisions.md), not entitlement_enabled, which names disabled → active', async () => {
  const user = await person(t);
  const ent = await expiredRow(user.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 200);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.granted', 'entitlement_granted', 'active']);
});

test('disabled → active and expired → active of a personal row on a restricted Tenant give 402 subscription_required (a new seat) and change nothing', async () => {
  const target = await newApp(t, admin);
  const disabledHolder = await person(t);
  const disabled = await grant(t, admin, disabledHolder.id, target.id);
  assertStatus(await patchEnt(t, admin, disabled.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const expiredHolder = await person(t);
  const expired = await expiredRow(expiredHolder.id, target.id);
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [target.tenant_id]);
  try {
    assertError(await patchEnt(t, admin, disabled.id, { status: 'active' }), 402, 'subscription_required');
    assertError(await patchEnt(t, admin, expired.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 402, 'subscription_required');
    assert.equal((await entRow(t, disabled.id))!.status, 'disabled');
    assert.equal((await entRow(t, expired.id))!.status, 'expired');
    assert.deepEqual(await entitlementEvents(t, disabled.id), ['entitlement.granted', 'entitlement.disabled']);
  } finally {
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [target.tenant_id]);
  }
  assert.equal(assertStatus(await patchEnt(t, admin, disabled.id, { status: 'active' }), 200).status, 'active');
});

test('expired → revoked needs disabled_reason and emits entitlement.revoked', async () => {
  const user = await person(t);
  const ent = await expiredRow(user.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'revoked' }), 422, 'disabled_reason_required');
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'closed' }), 200).status, 'revoked');
  assert.equal((await entitlementEvents(t, ent.id)).at(-1), 'entitlement.revoked');
});

test('revoked → anything is 409 invalid_status_transition (grant a new Entitlement instead)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'refund' }), 200);
  for (const body of [
    { status: 'active' }, { status: 'disabled', disabled_reason: 'x' }, { status: 'expired' }, { ends_at: inSeconds(t, DAY) }, { order_id: 'late' },
    // Naming the row's own status does not open it: nothing else may change either.
    { status: 'revoked', ends_at: inSeconds(t, DAY) }, { status: 'revoked', order_id: 'late' }, { disabled_reason: 'other' },
    // Another reason would reword a terminal row: refused, not silently dropped.
    { status: 'revoked', disabled_reason: 'again' },
  ]) {
    assertError(await patchEnt(t, admin, ent.id, body), 409, 'invalid_status_transition');
  }
  const row = (await entRow(t, ent.id))!;
  assert.equal(row.status, 'revoked');
  assert.equal(row.order_id, null);
  assert.equal(row.ends_at, null);
  // Repeating the revoke, without a reason or with the same one, is a no-op: 200, no event.
  for (const body of [{ status: 'revoked' }, { status: 'revoked', disabled_reason: 'refund' }]) {
    assert.equal(assertStatus(await patchEnt(t, admin, ent.id, body), 200).disabled_reason, 'refund');
  }
  assert.equal((await entRow(t, ent.id))!.disabled_reason, 'refund');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.revoked']);
});

test('invalid_status_transition on a revoked row names from and to, whether or not the PATCH sends a status', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'refund' }), 200);
  assert.deepEqual(assertError(await patchEnt(t, admin, ent.id, { status: 'active' }), 409, 'invalid_status_transition').details, { from: 'revoked', to: 'active' });
  assert.deepEqual(assertError(await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, DAY) }), 409, 'invalid_status_transition').details, { from: 'revoked', to: 'revoked' });
  assert.deepEqual(assertError(await patchEnt(t, admin, ent.id, { status: 'revoked', disabled_reason: 'again' }), 409, 'invalid_status_transition').details, { from: 'revoked', to: 'revoked' });
  assert.equal((await entRow(t, ent.id))!.ends_at, null);
});

test('→ expired by PATCH is 409 invalid_status_transition (only the system expires rows); so is expired → disabled', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { status: 'expired' }), 409, 'invalid_status_transition');
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  assertError(await patchEnt(t, admin, ent.id, { status: 'expired' }), 409, 'invalid_status_transition');
  assert.equal((await entRow(t, ent.id))!.status, 'disabled');
  const other = await person(t);
  const expired = await expiredRow(other.id);
  assertError(await patchEnt(t, admin, expired.id, { status: 'disabled', disabled_reason: 'x' }), 409, 'invalid_status_transition');
});

// ---- other PATCH fields --------------------------------------------------------------------------

test('disabled_reason: a disabled row can have it reworded (audit entitlement.updated, changed_fields disabled_reason; no webhook: entitlement.updated fires when "ends_at, source or order_id changed"); on a row that is not disabled it is refused (422) and nothing changes', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const err = assertError(await patchEnt(t, admin, ent.id, { disabled_reason: 'why' }), 422, 'validation_failed');
  assert.deepEqual(err.details.fields.map((f: any) => f.path), ['disabled_reason']);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'first' }), 200);
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { disabled_reason: 'reworded' }), 200).disabled_reason, 'reworded');
  assertError(await patchEnt(t, admin, ent.id, { disabled_reason: '  ' }), 422, 'disabled_reason_required');
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'again' }), 200).disabled_reason, 'again');
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { disabled_reason: 'again' }), 200).status, 'disabled', 'the same reason is a no-op');
  assert.deepEqual(await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] }), []);
  const audited = await auditOf(t, ent.id, 'entitlement.updated');
  assert.equal(audited.length, 2);
  // With a field Part B names, the webhook carries every changed field.
  const ends = inSeconds(t, 30 * DAY);
  assertStatus(await patchEnt(t, admin, ent.id, { disabled_reason: 'third', ends_at: ends }), 200);
  const events = await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] });
  assert.deepEqual(events.map((e) => [...e.data.changed_fields].sort()), [['disabled_reason', 'ends_at']]);
  assertError(await patchEnt(t, admin, ent.id, { disabled_reason: null }), 422, 'disabled_reason_required');
  assertError(await patchEnt(t, admin, ent.id, { disabled_reason: '' }), 422, 'disabled_reason_required');
  assert.equal((await entRow(t, ent.id))!.disabled_reason, 'third');
  assert.equal((await accessEvents(t, user.id, app.id)).length, 2, 'granted, then revoked by the disable; rewording flips nothing');
});

test('ends_at is changeable on an active row: entitlement.updated with changed_fields, audit entitlement.updated, no access event', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const ends = inSeconds(t, 90 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { ends_at: ends }), 200);
  assert.equal(body.ends_at, ends);
  assert.equal(body.status, 'active');
  const events = await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] });
  assert.equal(events.length, 1);
  assert.deepEqual(events[0].data.changed_fields, ['ends_at']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1);
  assert.equal((await accessEvents(t, user.id, app.id)).length, 1, 'only the grant');
  assertInvalid(await patchEnt(t, admin, ent.id, { ends_at: new Date(Date.parse(ent.starts_at) - 1000).toISOString() }), 'ends_at');
  // ends_at must stay strictly after starts_at: equal to it is refused as well.
  assertInvalid(await patchEnt(t, admin, ent.id, { ends_at: ent.starts_at }), 'ends_at');
  assert.equal((await entRow(t, ent.id))!.ends_at.toISOString(), ends);
});

test('"entitlement.updated | ends_at, source or order_id changed without status change": a move to disabled that also sets ends_at writes the target status event alone (entitlement.disabled, its audit row) and keeps the new ends_at', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const ends = inSeconds(t, 30 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'on hold', ends_at: ends }), 200);
  assert.equal(body.status, 'disabled');
  assert.equal(body.ends_at, ends);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.disabled']);
  assert.deepEqual((await auditOf(t, ent.id)).map((a) => a.action), ['entitlement.granted', 'entitlement.disabled']);
  assert.equal((await auditOf(t, ent.id, 'entitlement.disabled'))[0].after.ends_at, ends);
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_disabled', 'disabled'],
  ]);
});

test('source: only trial → purchase (trial conversion with order_id and ends_at null); other changes are 422 immutable_field', async () => {
  const user = await person(t);
  const trial = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, 7 * DAY) });
  assertError(await patchEnt(t, admin, trial.id, { source: 'admin_grant' }), 422, 'immutable_field');
  const body = assertStatus(await patchEnt(t, admin, trial.id, { source: 'purchase', order_id: 'ord_77', ends_at: null }), 200);
  assert.equal(body.source, 'purchase');
  assert.equal(body.order_id, 'ord_77');
  assert.equal(body.ends_at, null);
  const [event] = await outbox(t, { entitlementId: trial.id, types: ['entitlement.updated'] });
  assert.deepEqual([...event.data.changed_fields].sort(), ['ends_at', 'order_id', 'source']);
  assertError(await patchEnt(t, admin, trial.id, { source: 'trial' }), 422, 'immutable_field');

  const other = await person(t);
  const purchase = await grant(t, admin, other.id, app.id, { source: 'admin_grant' });
  assertError(await patchEnt(t, admin, purchase.id, { source: 'purchase' }), 422, 'immutable_field');
  assertError(await patchEnt(t, admin, purchase.id, { source: 'trial' }), 422, 'immutable_field');
  assert.equal((await entRow(t, purchase.id))!.source, 'admin_grant');
});

test('order_id is settable while null; changing a set order_id is 422 immutable_field', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assert.equal(assertStatus(await patchEnt(t, admin, ent.id, { order_id: 'ord_1' }), 200).order_id, 'ord_1');
  assertError(await patchEnt(t, admin, ent.id, { order_id: 'ord_2' }), 422, 'immutable_field');
  assertError(await patchEnt(t, admin, ent.id, { order_id: null }), 422, 'immutable_field');
  assert.equal((await entRow(t, ent.id))!.order_id, 'ord_1');
});

test('starts_at, user_id, organization_id and application_id are read-only (422 read_only_field)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const other = await newApp(t, admin);
  for (const body of [{ starts_at: inSeconds(t, HOUR) }, { user_id: (await person(t)).id }, { application_id: other.id }, { organization_id: 'org_x' }]) {
    assertError(await patchEnt(t, admin, ent.id, body), 422, 'read_only_field');
  }
  const row = (await entRow(t, ent.id))!;
  assert.equal(row.user_id, user.id);
  assert.equal(row.application_id, app.id);
});

test('member_scope or member_overrides on a personal row is 422 not_an_org_grant', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertError(await patchEnt(t, admin, ent.id, { member_scope: 'allowlist' }), 422, 'not_an_org_grant');
  assertError(await patchEnt(t, admin, ent.id, { member_overrides: [user.id] }), 422, 'not_an_org_grant');
});

test('org grant: member_scope change emits entitlement.member_scope_changed and access flips for the members it excludes', async () => {
  const a = await person(t);
  const b = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id);
  const stranger = await person(t);
  assertError(await patchEnt(t, admin, id, { member_scope: 'allowlist', member_overrides: [stranger.id] }), 422, 'member_override_not_a_member');
  const body = assertStatus(await patchEnt(t, admin, id, { member_scope: 'allowlist', member_overrides: [a.id] }), 200);
  assert.equal(body.member_scope, 'allowlist');
  assert.deepEqual(body.member_overrides, [a.id]);
  const events = await outbox(t, { entitlementId: id });
  assert.deepEqual(events.map((e) => e.type), ['entitlement.member_scope_changed']);
  assert.equal(events[0].data.entitlement.user_id, null);
  assert.equal(events[0].data.entitlement.organization_id, org);
  assert.equal((await auditOf(t, id, 'entitlement.member_scope_changed')).length, 1);
  assert.deepEqual(await accessEvents(t, b.id, target.id), [['access.revoked', 'org_grant_changed', 'none']]);
  assert.deepEqual(await accessEvents(t, a.id, target.id), []);
  // Members of the holding Organization may fetch the row; others may not.
  assertStatus(await call(t, 'GET', `/v1/entitlements/${id}`, b.token), 200);
  assertError(await call(t, 'GET', `/v1/entitlements/${id}`, stranger.token), 404, 'entitlement_not_found');
});

test('org grant: member_overrides shortened to a subset of the stored list is a change ("member_scope or member_overrides changed"): 200 with the new list, entitlement.member_scope_changed and its audit row, access.revoked for the member it drops', async () => {
  const a = await person(t);
  const b = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: b.id }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id, { memberScope: 'allowlist', overrides: [a.id, b.id] });
  const body = assertStatus(await patchEnt(t, admin, id, { member_overrides: [a.id] }), 200);
  assert.deepEqual(body.member_overrides, [a.id]);
  assert.deepEqual((await entRow(t, id))!.member_overrides, [a.id]);
  assert.deepEqual(await entitlementEvents(t, id), ['entitlement.member_scope_changed']);
  assert.equal((await auditOf(t, id, 'entitlement.member_scope_changed')).length, 1);
  assert.deepEqual(await accessEvents(t, b.id, target.id), [['access.revoked', 'org_grant_changed', 'none']]);
  assert.deepEqual(await accessEvents(t, a.id, target.id), []);
});

test('org grant: member_scope and member_overrides sent as they are is no change ("member_scope or member_overrides changed"): 200, no entitlement.member_scope_changed, no audit row', async () => {
  const a = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id);
  const before = assertStatus(await call(t, 'GET', `/v1/entitlements/${id}`, admin), 200);
  assert.equal(before.member_scope, 'all_members');
  assert.deepEqual(assertStatus(await patchEnt(t, admin, id, { member_scope: 'all_members' }), 200), before);
  assertStatus(await patchEnt(t, admin, id, { member_scope: 'denylist', member_overrides: [a.id] }), 200);
  assertStatus(await patchEnt(t, admin, id, { member_scope: 'denylist', member_overrides: [a.id] }), 200);
  assertStatus(await patchEnt(t, admin, id, { member_overrides: [a.id] }), 200);
  assert.deepEqual((await outbox(t, { entitlementId: id })).map((e) => e.type), ['entitlement.member_scope_changed']);
  assert.equal((await auditOf(t, id, 'entitlement.member_scope_changed')).length, 1);
});

test('org grant: removing a member listed in member_overrides ("their id is removed from member_overrides") is a member_overrides change: entitlement.member_scope_changed and its audit row, with the new list; a grant not naming them gets none', async () => {
  const a = await person(t);
  const listed = await person(t);
  const unlisted = await person(t);
  const org = await createOrg(t, [{ userId: a.id, role: 'org_admin' }, { userId: listed.id }, { userId: unlisted.id }]);
  const [x, y] = [await newApp(t, admin), await newApp(t, admin)];
  const naming = await orgGrant(t, org, x.id, { memberScope: 'allowlist', overrides: [a.id, listed.id] });
  const other = await orgGrant(t, org, y.id, { memberScope: 'denylist', overrides: [unlisted.id] });
  const before = assertStatus(await call(t, 'GET', `/v1/entitlements/${naming}`, admin), 200);

  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org}/members/${listed.id}`, admin)).statusCode, 204);
  const after = assertStatus(await call(t, 'GET', `/v1/entitlements/${naming}`, admin), 200);
  assert.deepEqual(after.member_overrides, [a.id]);
  assert.equal(after.member_scope, 'allowlist');
  const events = await outbox(t, { entitlementId: naming });
  assert.deepEqual(events.map((e) => e.type), ['entitlement.member_scope_changed']);
  assert.deepEqual(events[0].data.entitlement, after);
  assert.equal(events[0].application_id, x.id);
  const audit = await auditOf(t, naming, 'entitlement.member_scope_changed');
  assert.equal(audit.length, 1);
  assert.deepEqual(audit[0].before.member_overrides, before.member_overrides);
  assert.deepEqual(audit[0].after.member_overrides, [a.id]);
  assert.equal(audit[0].application_id, x.id);
  assert.equal(audit[0].target_user_id, null);
  assert.deepEqual((await outbox(t, { entitlementId: other })).map((e) => e.type), []);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/entitlements/${other}`, admin), 200).member_overrides, [unlisted.id]);
});

// ---- ETag / If-Match -----------------------------------------------------------------------------

test('GET and PATCH return an ETag; PATCH with a stale If-Match is 412 precondition_failed and changes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const got = await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin);
  assertStatus(got, 200);
  const etag = got.headers.etag as string;
  assert.ok(etag, 'GET carries an ETag');
  t.clock.advance(1);
  const first = await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, 10 * DAY) }, { 'if-match': etag });
  assertStatus(first, 200);
  const newTag = first.headers.etag as string;
  assert.ok(newTag, 'newTag');
  assert.notEqual(newTag, etag);
  // A second operator still holding the old ETag.
  assertError(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }, { 'if-match': etag }), 412, 'precondition_failed');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  assert.equal((await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag, newTag);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }, { 'if-match': newTag }), 200);
});

test('If-Match is a list (RFC 9110 §13.1.1): a list or two If-Match headers naming the current ETag among others are honoured; a list of stale tags or a weak W/ tag is 412 precondition_failed and changes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const endsIn = (days: number) => ({ ends_at: inSeconds(t, days * DAY) });
  assertError(await patchEnt(t, admin, ent.id, endsIn(5), { 'if-match': '"stale-1", "stale-2"' }), 412, 'precondition_failed');
  assertError(await patchEnt(t, admin, ent.id, endsIn(5), { 'if-match': `W/${etag}` }), 412, 'precondition_failed');
  assert.equal((await entRow(t, ent.id))!.ends_at, null);
  const listed = await patchEnt(t, admin, ent.id, endsIn(10), { 'if-match': `"stale", ${etag}` });
  assertStatus(listed, 200);
  const twice = await t.app.inject({
    method: 'PATCH', url: `/v1/entitlements/${ent.id}`, payload: endsIn(20),
    // Sent as two header lines (the inject types take one string per name).
    headers: { authorization: `Bearer ${admin}`, 'if-match': ['"stale"', listed.headers.etag as string] } as unknown as Record<string, string>,
  });
  assertStatus(twice, 200);
  assert.equal(new Date((await entRow(t, ent.id))!.ends_at).toISOString(), twice.json().ends_at);
  assert.notEqual(twice.json().ends_at, listed.json().ends_at);
});

test('RFC 9110 §13.1.2 If-None-Match "An origin server MUST NOT perform the requested method if the condition evaluates to false": a GET naming the current ETag (as sent, as W/, in a list, or `*`) is 304 with the ETag and no body, a stale tag 200; a PATCH naming the current ETag or `*` is 412 precondition_failed and changes nothing, a stale tag lets it go on', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const get = (ifNoneMatch: string) => t.app.inject({ method: 'GET', url: `/v1/entitlements/${ent.id}`, headers: { authorization: `Bearer ${admin}`, 'if-none-match': ifNoneMatch } });
  for (const tag of [etag, `W/${etag}`, `"stale", ${etag}`, '*']) {
    const res = await get(tag);
    assert.equal(res.statusCode, 304, `${tag}: ${res.body}`);
    assert.equal(res.body, '', tag);
    assert.equal(res.headers['content-length'], undefined, tag);
    assert.equal(res.headers.etag, etag, tag);
    assert.equal(res.headers['cache-control'], 'no-store');
  }
  const stale = await get('"stale"');
  assert.equal(stale.statusCode, 200);
  assert.equal(stale.json().id, ent.id);

  const endsIn = (days: number) => ({ ends_at: inSeconds(t, days * DAY) });
  for (const tag of [etag, `W/${etag}`, '*']) {
    const res = await patchEnt(t, admin, ent.id, endsIn(5), { 'if-none-match': tag });
    assertError(res, 412, 'precondition_failed');
    assert.equal(res.json().error.details.etag, etag);
  }
  assert.equal((await entRow(t, ent.id))!.ends_at, null);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 0, 'nothing written');
  assertStatus(await patchEnt(t, admin, ent.id, endsIn(5), { 'if-none-match': '"stale"' }), 200);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1);
});

test('RFC 9110 §13.2.2 "When If-Match is present … if false, respond 412 (Precondition Failed)", on a GET too: a GET under an If-Match naming no current ETag (a stale tag, a weak W/ tag of the current one) is 412 precondition_failed (details.etag) without the row; the current tag, in a list or `*`, is 200 with it', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const get = (ifMatch: string) => t.app.inject({ method: 'GET', url: `/v1/entitlements/${ent.id}`, headers: { authorization: `Bearer ${admin}`, 'if-match': ifMatch } });
  for (const tag of ['"stale"', `W/${etag}`]) {
    const error = assertError(await get(tag), 412, 'precondition_failed');
    assert.equal(error.details.etag, etag, tag);
  }
  for (const tag of [etag, `"stale", ${etag}`, '*']) {
    const res = await get(tag);
    assert.equal(assertStatus(res, 200).id, ent.id, tag);
    assert.equal(res.headers.etag, etag, tag);
  }
});

test('"A retry with the same key returns the original result": a PATCH replayed under its Idempotency-Key carries the ETag it first answered, so the client\'s next If-Match still holds', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const body = { ends_at: inSeconds(t, 10 * DAY) };
  const key = { 'idempotency-key': `etag-${ent.id}` };
  const first = await patchEnt(t, admin, ent.id, body, key);
  assertStatus(first, 200);
  const etag = first.headers.etag as string;
  assert.ok(etag, 'the PATCH carries an ETag');
  const again = await patchEnt(t, admin, ent.id, body, key);
  assert.equal(again.statusCode, 200);
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(again.body, first.body);
  assert.equal(again.headers.etag, etag, 'the replay carries the original ETag');
  assert.equal((await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag, etag);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1, 'one write');
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }, { 'if-match': again.headers.etag as string }), 200);
});

test('Idempotency-Key: "A retry with the same key returns the original result", and a PATCH under other preconditions is another request: after a 412 precondition_failed, the fresh If-Match sent under the same key is 422 idempotency_key_reused, never the old 412 replayed', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const stale = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  assertStatus(await patchEnt(t, admin, ent.id, { order_id: 'ord-first' }), 200);
  const body = { ends_at: inSeconds(t, 10 * DAY) };
  const key = `pre-${ent.id}`;
  const refused = await patchEnt(t, admin, ent.id, body, { 'if-match': stale, 'idempotency-key': key });
  const current = assertError(refused, 412, 'precondition_failed').details.etag as string;
  assert.notEqual(current, stale);
  // The very same request again is the original result.
  const replayed = await patchEnt(t, admin, ent.id, body, { 'if-match': stale, 'idempotency-key': key });
  assert.equal(replayed.statusCode, 412);
  assert.equal(replayed.headers['idempotent-replayed'], 'true');
  assert.equal(replayed.body, refused.body);
  // The client read the current ETag and sent it under the same key: another request, not a retry.
  for (const headers of [{ 'if-match': current }, { 'if-none-match': stale }, {}] as Record<string, string>[]) {
    const other = await patchEnt(t, admin, ent.id, body, { ...headers, 'idempotency-key': key });
    assertError(other, 422, 'idempotency_key_reused');
    assert.equal(other.headers['idempotent-replayed'], undefined);
  }
  assert.equal((await entRow(t, ent.id))!.ends_at, null, 'nothing written');
  // Under a key of its own the fresh precondition holds and the change is made once.
  const fresh = await patchEnt(t, admin, ent.id, body, { 'if-match': current, 'idempotency-key': `${key}-2` });
  assertStatus(fresh, 200);
  const again = await patchEnt(t, admin, ent.id, body, { 'if-match': current, 'idempotency-key': `${key}-2` });
  assert.equal(again.headers['idempotent-replayed'], 'true');
  assert.equal(again.body, fresh.body);
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 2, 'the order_id write and this one');
});

test('Idempotency-Key: "the same key with a different request gets 422 idempotency_key_reused" (docs/conventions.md: the preconditions If-Match and If-None-Match it is sent under): a PATCH sent under If-None-Match and then under the same key without it, or with another tag, is 422, never the first 200 replayed', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const body = { ends_at: inSeconds(t, 10 * DAY) };
  const key = `inm-${ent.id}`;
  // A tag that is not the current one: the PATCH goes on and changes the row.
  const first = await patchEnt(t, admin, ent.id, body, { 'if-none-match': '"not-the-current-tag"', 'idempotency-key': key });
  assertStatus(first, 200);
  const replayed = await patchEnt(t, admin, ent.id, body, { 'if-none-match': '"not-the-current-tag"', 'idempotency-key': key });
  assert.equal(replayed.statusCode, 200);
  assert.equal(replayed.headers['idempotent-replayed'], 'true');
  assert.equal(replayed.body, first.body);
  for (const headers of [{}, { 'if-none-match': '"another-tag"' }] as Record<string, string>[]) {
    const other = await patchEnt(t, admin, ent.id, body, { ...headers, 'idempotency-key': key });
    assertError(other, 422, 'idempotency_key_reused');
    assert.equal(other.headers['idempotent-replayed'], undefined);
  }
  assert.equal((await auditOf(t, ent.id, 'entitlement.updated')).length, 1, 'one write');
});

test('RFC 9110 §13.2.1 "A server MUST ignore all received preconditions if its response to the same request without those conditions … would have been a status code other than a 2xx": a caller who may see the row but not change it (the holder, a plain member, an org admin sending ends_at) gets 403 forbidden with a stale If-Match too, never 412 with the current ETag; nothing changes', async () => {
  const holder = await person(t);
  const ent = await grant(t, admin, holder.id, app.id);
  const orgAdmin = await person(t);
  const member = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: member.id }]);
  const orgRow = await orgGrant(t, org, (await newApp(t, admin)).id);
  const cases: [string, string, Record<string, unknown>][] = [
    [holder.token, ent.id, { status: 'disabled', disabled_reason: 'mine' }],
    [member.token, orgRow, { status: 'disabled', disabled_reason: 'ours' }],
    [orgAdmin.token, orgRow, { ends_at: inSeconds(t, DAY) }],
  ];
  for (const [token, id, body] of cases) {
    for (const headers of [{}, { 'if-match': '"stale"' }, { 'if-none-match': '*' }] as Record<string, string>[]) {
      const res = await patchEnt(t, token, id, body, headers);
      assertError(res, 403, 'forbidden');
      assert.equal(res.json().error.details.etag, undefined);
    }
  }
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  assert.equal((await entRow(t, orgRow))!.status, 'active');
  assert.equal((await entRow(t, orgRow))!.ends_at, null);
});

test('the ETag changes with every write, even two writes within one millisecond: the older If-Match is 412 precondition_failed', async () => {
  const user = await person(t);
  await atOneInstant(t, async () => {
    const ent = await grant(t, admin, user.id, app.id);
    const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
    const first = assertStatus(await patchEnt(t, admin, ent.id, { ends_at: inSeconds(t, 10 * DAY) }, { 'if-match': etag }), 200);
    // Within one millisecond the second write is dated 1 ms after the first (Part B delivery semantics 4: receivers drop older updated_at).
    assert.equal(Date.parse(first.updated_at) - Date.parse(ent.updated_at), 1);
    assertError(await patchEnt(t, admin, ent.id, { order_id: 'ord-late' }, { 'if-match': etag }), 412, 'precondition_failed');
    assert.equal((await entRow(t, ent.id))!.order_id, null);
  });
});

test('PATCH of an entitlement the caller cannot see is 404 entitlement_not_found, also with read-only fields in the body', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const stranger = await person(t);
  assertError(await patchEnt(t, stranger.token, ent.id, { starts_at: inSeconds(t, DAY) }), 404, 'entitlement_not_found');
  assertError(await patchEnt(t, admin, 'ent_01JAAAAAAAAAAAAAAAAAAAAAAA', { starts_at: inSeconds(t, DAY) }), 404, 'entitlement_not_found');
  assertError(await patchEnt(t, admin, ent.id, { starts_at: inSeconds(t, DAY) }), 422, 'read_only_field');
});

// ---- DELETE --------------------------------------------------------------------------------------

test('DELETE hard-removes a fresh grant made in error: 204, entitlement.deleted, access.revoked (entitlement_deleted)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  assert.equal(await entRow(t, ent.id), undefined);
  const deleted = await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] });
  assert.equal(deleted.length, 1);
  assert.equal(deleted[0].data.entitlement.id, ent.id);
  assert.deepEqual((await accessEvents(t, user.id, app.id)).at(-1), ['access.revoked', 'entitlement_deleted', 'none']);
  assertError(await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin), 404, 'entitlement_not_found');
});

test('RFC 9110 §13.1.1 "An origin server MUST NOT perform the requested method if a received If-Match condition evaluates to false" (§13.1.2 likewise for If-None-Match): a DELETE under a stale If-Match, a weak W/ tag of the current one, or an If-None-Match naming the current ETag or `*` is 412 precondition_failed (details.etag) and removes nothing; the current ETag, alone or in a list, lets it go on (204)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag as string;
  const del = (headers: Record<string, string>) =>
    t.app.inject({ method: 'DELETE', url: `/v1/entitlements/${ent.id}`, headers: { authorization: `Bearer ${admin}`, ...headers } });
  for (const headers of [{ 'if-match': '"stale"' }, { 'if-match': `W/${etag}` }, { 'if-none-match': etag }, { 'if-none-match': '*' }] as Record<string, string>[]) {
    const error = assertError(await del(headers), 412, 'precondition_failed');
    assert.equal(error.details.etag, etag, JSON.stringify(headers));
  }
  assert.equal((await entRow(t, ent.id))!.status, 'active', 'nothing removed');
  assert.equal((await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] })).length, 0);
  assert.equal((await auditOf(t, ent.id, 'entitlement.deleted')).length, 0);
  assert.equal((await del({ 'if-match': `"stale", ${etag}`, 'if-none-match': '"stale"' })).statusCode, 204);
  assert.equal(await entRow(t, ent.id), undefined);
  assert.equal((await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] })).length, 1);
});

test('"entitlement.expired | ends_at passed": DELETE of a row whose ends_at passed before the sweep expires it first (entitlement.expired, its audit row, access.revoked entitlement_expired), then entitlement.deleted carries that last state, expired', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'trial', ends_at: inSeconds(t, 30) });
  t.clock.advance(31);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.expired', 'entitlement.deleted']);
  const [deleted] = await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] });
  assert.equal(deleted.data.entitlement.status, 'expired');
  const expiry = (await auditOf(t, ent.id)).find((a) => a.action === 'entitlement.expired');
  assert.equal(expiry?.actor_type, 'system');
  assert.deepEqual(await accessEvents(t, user.id, app.id), [
    ['access.granted', 'entitlement_granted', 'active'],
    ['access.revoked', 'entitlement_expired', 'expired'],
  ]);
});

test('DELETE of an order-linked row is 409 entitlement_order_linked for every caller and regardless of restrict_destructive, even a superadmin', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', order_id: 'ord_del' });
  const superadmin = await person(t, { roles: ['superadmin'] });
  const key = await appKey(t, app.id, ['entitlements.manage']);
  const restricted = [
    (await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'], intendedUse: 'agent' })).secret,
    (await createApiKey(t, { scope: app.id, permissions: ['entitlements.manage'], restrictDestructive: true })).secret,
  ];
  for (const cred of [admin, superadmin.token, key, ...restricted]) {
    const error = assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, cred), 409, 'entitlement_order_linked');
    assert.equal(error.details.order_id, 'ord_del');
  }
  assert.ok(await entRow(t, ent.id), 'await entRow(t, ent.id)');
});

test('DELETE of a row without order_id by a restrict_destructive key is 403 destructive_operation_restricted and removes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const restricted = await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'], intendedUse: 'agent' });
  const error = assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, restricted.secret), 403, 'destructive_operation_restricted');
  assert.equal(error.details.key_id, restricted.id);
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  assert.equal((await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] })).length, 0);
});

test('docs/decisions.md "Entitlement DELETE", the order of the refusals: 403 destructive_operation_restricted comes before entitlement_too_old, so a restrict_destructive key deleting a row older than 24 hours (no order_id) is 403, and removes nothing', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const restricted = await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'], intendedUse: 'agent' });
  const createdAt = (await entRow(t, ent.id))!.created_at as Date;
  const later = new Date(createdAt.getTime() + DAY * 1000 + 1000);
  const error = assertError(await atOneInstant(t, () => call(t, 'DELETE', `/v1/entitlements/${ent.id}`, restricted.secret), later), 403, 'destructive_operation_restricted');
  assert.equal(error.details.key_id, restricted.id);
  assertError(await atOneInstant(t, () => call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin), later), 409, 'entitlement_too_old');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
});

test('DELETE of a row older than 24 hours is 409 entitlement_too_old; a row just under 24 hours old may still be deleted', async () => {
  const user = await person(t);
  const young = await grant(t, admin, user.id, app.id);
  const other = await person(t);
  const ent = await grant(t, admin, other.id, app.id);
  t.clock.advance(DAY - 60);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${young.id}`, admin)).statusCode, 204);
  t.clock.advance(61);
  const tooOld = assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin), 409, 'entitlement_too_old');
  // The refusal names the window it applies (docs/decisions.md: 24 hours).
  assert.equal(tooOld.details.max_age_seconds, DAY);
  assert.ok(await entRow(t, ent.id), 'await entRow(t, ent.id)');
});

test('DELETE is refused 409 entitlement_too_old only once the row is "older than 24 hours" (docs/decisions.md): a row exactly 24 hours old may still be deleted (204, entitlement.deleted)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const createdAt = (await entRow(t, ent.id))!.created_at as Date;
  const res = await atOneInstant(t, () => call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin), new Date(createdAt.getTime() + DAY * 1000));
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(await entRow(t, ent.id), undefined);
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted', 'entitlement.deleted']);
});

test("DELETE needs entitlements.manage: the owner gets 403 forbidden; the app's own key with entitlements.manage may delete", async () => {
  const target = await newApp(t, admin);
  const user = await person(t);
  const ent = await grant(t, admin, user.id, target.id);
  assertError(await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, target.owner!.token), 403, 'forbidden');
  const key = await appKey(t, target.id, ['entitlements.manage']);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, key)).statusCode, 204);
});

// ---- confinement ---------------------------------------------------------------------------------

test("app-confined keys and owners act only on their Application's rows: others' rows are 404 entitlement_not_found for GET, PATCH and DELETE", async () => {
  const mine = await newApp(t, admin);
  const theirs = await newApp(t, admin);
  const user = await person(t);
  const foreign = await grant(t, admin, user.id, theirs.id);
  const own = await grant(t, admin, user.id, mine.id);
  const key = await appKey(t, mine.id, ['entitlements.manage']);
  for (const cred of [key, mine.owner!.token]) {
    assertError(await call(t, 'GET', `/v1/entitlements/${foreign.id}`, cred), 404, 'entitlement_not_found');
    assertError(await patchEnt(t, cred, foreign.id, { status: 'disabled', disabled_reason: 'x' }), 404, 'entitlement_not_found');
    assertStatus(await call(t, 'GET', `/v1/entitlements/${own.id}`, cred), 200);
  }
  assertError(await call(t, 'DELETE', `/v1/entitlements/${foreign.id}`, key), 404, 'entitlement_not_found');
  assert.equal((await entRow(t, foreign.id))!.status, 'active');
  // The holder reads their own row; a stranger cannot.
  assertStatus(await call(t, 'GET', `/v1/entitlements/${foreign.id}`, user.token), 200);
  assertError(await call(t, 'GET', `/v1/entitlements/${foreign.id}`, (await person(t)).token), 404, 'entitlement_not_found');
});

test("the owner may toggle their Application's rows", async () => {
  const target = await newApp(t, admin);
  const user = await person(t);
  const ent = await grant(t, target.owner!.token, user.id, target.id);
  assert.equal(assertStatus(await patchEnt(t, target.owner!.token, ent.id, { status: 'disabled', disabled_reason: 'by owner' }), 200).status, 'disabled');
  assert.equal(assertStatus(await patchEnt(t, target.owner!.token, ent.id, { status: 'active' }), 200).status, 'active');
});

test('the cross-user list is confined: an app key sees only its Application, an owner only owned Applications, a plain user 403', async () => {
  const mine = await newApp(t, admin);
  const theirs = await newApp(t, admin);
  const user = await person(t);
  const a = await grant(t, admin, user.id, mine.id);
  const b = await grant(t, admin, user.id, theirs.id);
  const key = await appKey(t, mine.id, ['entitlements.manage']);
  for (const cred of [key, mine.owner!.token]) {
    const body = assertStatus(await call(t, 'GET', '/v1/entitlements?limit=100', cred), 200);
    const ids = body.data.map((e: { id: string }) => e.id);
    assert.ok(ids.includes(a.id), 'ids.includes(a.id)');
    assert.ok(!ids.includes(b.id), '!ids.includes(b.id)');
    assert.ok(body.data.every((e: { application_id: string }) => e.application_id === mine.id), 'body.data.every((e: { application_id: string }) => e.application_id === mine.id)');
  }
  assertError(await call(t, 'GET', '/v1/entitlements', (await platformKey(t, ['users.list']))), 403, 'forbidden');
  // A user who owns no Application is no owner: 403, not an empty list.
  assertError(await call(t, 'GET', '/v1/entitlements', user.token), 403, 'forbidden');
  const adminIds = assertStatus(await call(t, 'GET', `/v1/entitlements?user_id=${user.id}`, admin), 200).data.map((e: { id: string }) => e.id);
  assert.deepEqual(adminIds.sort(), [a.id, b.id].sort());
});

// ---- lists ---------------------------------------------------------------------------------------

test('user list excludes revoked and expired by default; ?status=revoked or include_inactive=true show them; filters application_id, source', async () => {
  const user = await person(t);
  const apps = [await newApp(t, admin), await newApp(t, admin), await newApp(t, admin)];
  const active = await grant(t, admin, user.id, apps[0].id, { source: 'purchase' });
  const revoked = await grant(t, admin, user.id, apps[1].id);
  assertStatus(await patchEnt(t, admin, revoked.id, { status: 'revoked', disabled_reason: 'x' }), 200);
  const expired = await expiredRow(user.id, apps[2].id);
  const ids = async (query: string) =>
    assertStatus(await call(t, 'GET', `/v1/users/${user.id}/entitlements${query}`, admin), 200).data.map((e: { id: string }) => e.id).sort();
  assert.deepEqual(await ids(''), [active.id]);
  assert.deepEqual(await ids('?status=revoked'), [revoked.id]);
  assert.deepEqual(await ids('?status=expired'), [expired.id]);
  assert.deepEqual(await ids('?include_inactive=true'), [active.id, revoked.id, expired.id].sort());
  assert.deepEqual(await ids(`?include_inactive=true&application_id=${apps[1].id}`), [revoked.id]);
  assert.deepEqual(await ids('?include_inactive=true&source=purchase'), [active.id]);
  // Self reads the same list.
  const self = await person(t);
  await grant(t, admin, self.id, apps[0].id);
  assert.equal(assertStatus(await call(t, 'GET', '/v1/users/me/entitlements', self.token), 200).data.length, 1);
});

test("an app-confined key reading a user's entitlements sees only its own Application's rows", async () => {
  const mine = await newApp(t, admin);
  const theirs = await newApp(t, admin);
  const user = await person(t);
  const own = await grant(t, admin, user.id, mine.id);
  await grant(t, admin, user.id, theirs.id);
  for (const permissions of [['entitlements.manage'], ['users.list']]) {
    const key = await appKey(t, mine.id, permissions);
    const ids = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/entitlements?include_inactive=true`, key), 200).data.map((e: { id: string }) => e.id);
    assert.deepEqual(ids, [own.id]);
  }
  const stranger = await person(t);
  assertError(await call(t, 'GET', `/v1/users/${stranger.id}/entitlements`, await appKey(t, mine.id, ['entitlements.manage'])), 404, 'user_not_found');
});

test('GET /v1/users/{id}/entitlements: platform entitlements.manage (without users.list) and users.manage read any user\'s rows; a plain user and a platform users.list holder (not named, docs/decisions.md) get 404', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  for (const permissions of [['entitlements.manage'], ['users.manage']]) {
    const ids = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/entitlements`, await platformKey(t, permissions)), 200).data.map((e: { id: string }) => e.id);
    assert.deepEqual(ids, [ent.id], permissions[0]);
  }
  assertError(await call(t, 'GET', `/v1/users/${user.id}/entitlements`, (await person(t)).token), 404, 'user_not_found');
  assertError(await call(t, 'GET', `/v1/users/${user.id}/entitlements`, await platformKey(t, ['users.list'])), 404, 'user_not_found');
});

test('user list includes org-wide rows of Organizations the user is an active member of, annotated with granted_via', async () => {
  const user = await person(t);
  const excluded = await person(t);
  const org = await createOrg(t, [{ userId: user.id, role: 'org_admin' }, { userId: excluded.id }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id, { memberScope: 'denylist', overrides: [excluded.id] });
  const mine = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/entitlements`, admin), 200).data;
  const row = mine.find((e: { id: string }) => e.id === id);
  assert.ok(row, 'row');
  assert.equal(row.user_id, null);
  assert.deepEqual(row.granted_via, { organization_id: org, member_decision: 'included' });
  const theirs = assertStatus(await call(t, 'GET', `/v1/users/${excluded.id}/entitlements`, admin), 200).data;
  assert.deepEqual(theirs.find((e: { id: string }) => e.id === id).granted_via, { organization_id: org, member_decision: 'excluded' });
});

test('user list includes org-wide rows only of Organizations the user is an active member of: a pending invitee\'s list (self or entitlements.manage) leaves out the Organization\'s grant', async () => {
  const orgAdmin = await person(t);
  const invitee = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: invitee.id, status: 'pending' }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id);
  for (const cred of [admin, invitee.token]) {
    const list = assertStatus(await call(t, 'GET', `/v1/users/${invitee.id}/entitlements`, cred), 200).data;
    assert.equal(list.find((e: { id: string }) => e.id === id), undefined);
  }
  assert.ok(assertStatus(await call(t, 'GET', `/v1/users/${orgAdmin.id}/entitlements`, admin), 200).data.find((e: { id: string }) => e.id === id), 'the active member sees it');
});

test('cross-user list filters: application_id, status, user_id, organization_id, source, order_id (exact), ends_before (strictly before: a row ending at that instant is left out), include_inactive', async () => {
  const target = await newApp(t, admin);
  const [u1, u2, u3] = [await person(t), await person(t), await person(t)];
  const e1 = await grant(t, admin, u1.id, target.id, { source: 'purchase', order_id: 'ord-abc' });
  const e2 = await grant(t, admin, u2.id, target.id, { source: 'trial', ends_at: inSeconds(t, 3 * DAY) });
  const e3 = await grant(t, admin, u3.id, target.id, { source: 'admin_grant' });
  assertStatus(await patchEnt(t, admin, e3.id, { status: 'revoked', disabled_reason: 'x' }), 200);
  const org = await createOrg(t, [{ userId: u3.id }]);
  const orgEnt = await orgGrant(t, org, target.id);
  const ids = async (query: string) =>
    assertStatus(await call(t, 'GET', `/v1/entitlements?application_id=${target.id}${query}`, admin), 200).data.map((e: { id: string }) => e.id).sort();
  assert.deepEqual(await ids(''), [e1.id, e2.id, orgEnt].sort());
  assert.deepEqual(await ids('&include_inactive=true'), [e1.id, e2.id, e3.id, orgEnt].sort());
  // An org-wide grant is one row with user_id null; organization_id keeps only that Organization's.
  const orgRows = assertStatus(await call(t, 'GET', `/v1/entitlements?application_id=${target.id}&organization_id=${org}`, admin), 200).data;
  assert.deepEqual(orgRows.map((e: { id: string; user_id: string | null; organization_id: string }) => [e.id, e.user_id, e.organization_id]), [[orgEnt, null, org]]);
  assert.deepEqual(await ids('&status=revoked'), [e3.id]);
  assert.deepEqual(await ids(`&user_id=${u2.id}`), [e2.id]);
  assert.deepEqual(await ids('&source=purchase'), [e1.id]);
  assert.deepEqual(await ids('&order_id=ord-abc'), [e1.id]);
  assert.deepEqual(await ids('&order_id=ord-ab'), []);
  assert.deepEqual(await ids(`&ends_before=${encodeURIComponent(inSeconds(t, 4 * DAY))}`), [e2.id]);
  // ends_before is strict: a row ending at that very instant does not end before it.
  assert.deepEqual(await ids(`&ends_before=${encodeURIComponent(e2.ends_at)}`), []);
});

test('cross-user list filters "`order_id` (exact)", `user_id`: an empty value matches no row, so it is 422 validation_failed naming the parameter, never every Entitlement of the list', async () => {
  const target = await newApp(t, admin);
  const [u1, u2] = [await person(t), await person(t)];
  await grant(t, admin, u1.id, target.id, { source: 'purchase', order_id: 'ord-1' });
  await grant(t, admin, u2.id, target.id);
  assertInvalid(await call(t, 'GET', `/v1/entitlements?application_id=${target.id}&order_id=`, admin), 'query.order_id');
  assertInvalid(await call(t, 'GET', `/v1/entitlements?application_id=${target.id}&user_id=`, admin), 'query.user_id');
  assertInvalid(await call(t, 'GET', `/v1/entitlements?application_id=`, admin), 'query.application_id');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/entitlements?application_id=${target.id}&order_id=ord-1`, admin), 200).data.length, 1);
});

test('a caller who may not see a row gets 404 entitlement_not_found on GET and PATCH: a user for another user\'s personal row, a pending invitee for the Organization\'s org grant; nothing changes', async () => {
  const holder = await person(t);
  const ent = await grant(t, admin, holder.id, app.id);
  const stranger = await person(t);
  assertError(await call(t, 'GET', `/v1/entitlements/${ent.id}`, stranger.token), 404, 'entitlement_not_found');
  assertError(await patchEnt(t, stranger.token, ent.id, { status: 'disabled', disabled_reason: 'x' }), 404, 'entitlement_not_found');
  const orgAdmin = await person(t);
  const invitee = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: invitee.id, status: 'pending' }]);
  const other = await newApp(t, admin);
  const orgRowId = await orgGrant(t, org, other.id);
  assertError(await call(t, 'GET', `/v1/entitlements/${orgRowId}`, invitee.token), 404, 'entitlement_not_found');
  assertError(await patchEnt(t, invitee.token, orgRowId, { status: 'disabled', disabled_reason: 'x' }), 404, 'entitlement_not_found');
  assertError(await call(t, 'GET', `/v1/entitlements/${orgRowId}`, stranger.token), 404, 'entitlement_not_found');
  assertError(await patchEnt(t, stranger.token, orgRowId, { status: 'disabled', disabled_reason: 'x' }), 404, 'entitlement_not_found');
  assert.equal((await entRow(t, ent.id))!.status, 'active');
  assert.equal((await entRow(t, orgRowId))!.status, 'active');
  assert.deepEqual(await entitlementEvents(t, ent.id), ['entitlement.granted']);
  assert.deepEqual(await entitlementEvents(t, orgRowId), []);
});

test('a move not in the status table is 409 invalid_status_transition also without disabled_reason (expired → disabled), not 422 disabled_reason_required; nothing changes', async () => {
  const user = await person(t);
  const expired = await expiredRow(user.id);
  const error = assertError(await patchEnt(t, admin, expired.id, { status: 'disabled' }), 409, 'invalid_status_transition');
  assert.deepEqual(error.details, { from: 'expired', to: 'disabled' });
  assert.equal((await entRow(t, expired.id))!.status, 'expired');
  assert.deepEqual(await entitlementEvents(t, expired.id), ['entitlement.granted', 'entitlement.expired']);
});

test('source of an org grant (org_seat) cannot change: 422 immutable_field, the row stays org_seat', async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const other = await newApp(t, admin);
  const rowId = await orgGrant(t, org, other.id);
  for (const source of ['purchase', 'admin_grant', 'trial']) {
    const error = assertError(await patchEnt(t, admin, rowId, { source }), 422, 'immutable_field');
    assert.equal(error.details.field, 'source');
  }
  assert.equal((await entRow(t, rowId))!.source, 'org_seat');
  assert.deepEqual(await entitlementEvents(t, rowId), []);
});

test('the Application must be approved: pending_review and rejected ones are 409 application_not_available (details.review_status) for platform entitlements.manage and the owner; nothing is granted', async () => {
  const user = await person(t);
  for (const status of ['pending_review', 'rejected']) {
    const other = await newApp(t, admin);
    await setReview(t, other.id, status);
    for (const cred of [admin, other.owner!.token]) {
      const error = assertError(await grantReq(t, cred, user.id, { application_id: other.id, source: 'admin_grant' }), 409, 'application_not_available');
      assert.equal(error.details.review_status, status);
    }
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE application_id = $1', [other.id]))[0].n, 0);
    assert.deepEqual(await accessEvents(t, user.id, other.id), []);
  }
});

test('expired → active blocked by a newer live row: details.existing_entitlement_id and details.status name that row (disabled too)', async () => {
  const user = await person(t);
  const old = await expiredRow(user.id);
  const newer = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, newer.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  const err = assertError(await patchEnt(t, admin, old.id, { status: 'active', ends_at: inSeconds(t, 30 * DAY) }), 409, 'entitlement_already_exists');
  assert.deepEqual(err.details, { existing_entitlement_id: newer.id, status: 'disabled' });
  assert.equal((await entRow(t, old.id))!.status, 'expired');
});

test('"disabled_reason cleared" only on disabled → active: an ends_at change on a disabled row (entitlement.updated) keeps its disabled_reason, in the answer, the row, the webhook and the audit row\'s after', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'on hold' }), 200);
  const ends = inSeconds(t, 30 * DAY);
  const body = assertStatus(await patchEnt(t, admin, ent.id, { ends_at: ends }), 200);
  assert.equal(body.status, 'disabled');
  assert.equal(body.ends_at, ends);
  assert.equal(body.disabled_reason, 'on hold');
  assert.equal((await entRow(t, ent.id))!.disabled_reason, 'on hold');
  const events = await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] });
  assert.equal(events.length, 1);
  assert.deepEqual(events[0].data.changed_fields, ['ends_at']);
  assert.equal(events[0].data.entitlement.disabled_reason, 'on hold');
  const audit = await auditOf(t, ent.id, 'entitlement.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.disabled_reason, 'on hold');
  assert.equal(audit[0].after.disabled_reason, 'on hold');
});

test('"entitlement.updated | ends_at, source or order_id changed": a PATCH sending ends_at, source and order_id as they already are changes nothing: 200 with the row, no entitlement.updated webhook, no audit row, the same ETag', async () => {
  const user = await person(t);
  const ends = inSeconds(t, 30 * DAY);
  const ent = await grant(t, admin, user.id, app.id, { source: 'purchase', order_id: 'ord_same', ends_at: ends });
  const etag = (await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin)).headers.etag;
  const res = await patchEnt(t, admin, ent.id, { ends_at: ends, source: 'purchase', order_id: 'ord_same' });
  assert.deepEqual(assertStatus(res, 200), ent);
  assert.equal(res.headers.etag, etag);
  assert.deepEqual(await outbox(t, { entitlementId: ent.id, types: ['entitlement.updated'] }), []);
  assert.deepEqual(await auditOf(t, ent.id, 'entitlement.updated'), []);
});

test('"entitlement.deleted | hard-deleted" with its last state: the audit row of a DELETE names the holder (target_user_id) and the Application, its before is the row as it was (after null), and the webhook carries the same state', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  const last = assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'made in error' }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${ent.id}`, admin)).statusCode, 204);
  const audit = await auditOf(t, ent.id, 'entitlement.deleted');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].target_type, 'entitlement');
  assert.equal(audit[0].target_user_id, user.id);
  assert.equal(audit[0].application_id, app.id);
  assert.deepEqual(audit[0].before, last);
  assert.equal(audit[0].after, null);
  const deleted = await outbox(t, { entitlementId: ent.id, types: ['entitlement.deleted'] });
  assert.deepEqual(deleted.map((e) => e.data.entitlement), [last]);
});

test('audit rows about an organization-wide grant name its Organization (organization_id) and no holder: a member_scope change, a disable and the DELETE alike', async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const target = await newApp(t, admin);
  const id = await orgGrant(t, org, target.id);
  assertStatus(await patchEnt(t, admin, id, { member_scope: 'denylist', member_overrides: [orgAdmin.id] }), 200);
  assertStatus(await patchEnt(t, admin, id, { status: 'disabled', disabled_reason: 'org audit' }), 200);
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${id}`, admin)).statusCode, 204);
  const rows = await sql(t, 'SELECT action, organization_id, target_user_id, application_id FROM audit_events WHERE target_id = $1 ORDER BY created_at, id', [id]);
  assert.deepEqual(rows.map((r: any) => r.action), ['entitlement.member_scope_changed', 'entitlement.disabled', 'entitlement.deleted']);
  for (const r of rows) {
    assert.equal(r.organization_id, org, r.action);
    assert.equal(r.target_user_id, null, r.action);
    assert.equal(r.application_id, target.id, r.action);
  }
});
