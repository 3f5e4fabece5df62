// Entitlements (Part B): grant rules, who may grant per visibility, confinement of app keys and owners,
// lists.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, type TestApp } from '../helpers/app.js';
import {
  accessEvents, appKey, assertError, assertInvalid, assertStatus, auditOf, call, createOrg, DAY, entitlementEvents, entRow, grant, grantReq, HOUR,
  inSeconds, newApp, orgGrant, outbox, patchEnt, person, platformKey, setReview, sql, type AppFixture,
} from './support.js';
import { expiredRowOf } from './entitlements-support.js';

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

const expiredRow = expiredRowOf(() => ({ t, admin, app }));

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
  assert.deepEqual(await ids(`?include_inactive=true&application_id=${apps[2].id}`), [expired.id]);
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

// ---- the Application must be approved ------------------------------------------------------------

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
