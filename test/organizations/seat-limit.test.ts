// Seats and organization-wide grants on a Starter Tenant at its 1,000-seat cap (Part B, member rules:
// "when a member becomes active each all_members or denylist grant reaches them and counts as a seat,
// and on a Starter Tenant at its seat cap member_decision reads seat_limit and gives no access").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, storageName, TEST_DATABASE_URL, type TestApp } from '../helpers/app.js';
import { blockedBy, client, commitWhileWaiting, endedOrWaiting, probeWhileHeld } from '../helpers/locks.js';
import { deliver, subscription } from '../billing/support.js';
import { accessEvents, addById, assertError, assertStatus, call, createOrgApi, effective, newApp, orgGrantApi, orgWithMembers, outbox, patchEnt, person, platformKey, rand, sql } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

/** A Starter Tenant's Application with `seats` seats taken by personal grants (rows inserted directly); their entitlement ids. */
async function starterAppWithSeats(seats: number): Promise<{ app: Awaited<ReturnType<typeof newApp>>; personal: string[] }> {
  const app = await newApp(t, admin);
  return { app, personal: await seatsOn(app.id, seats) };
}

/** `seats` seats on the Application: users of the mode with personal grants (rows inserted directly); their entitlement ids. */
async function seatsOn(appId: string, seats: number, mode: 'live' | 'test' = 'live'): Promise<string[]> {
  const now = t.clock.now();
  const prefix = `usr_${mode === 'test' ? 't' : ''}seat${rand(6)}_`;
  await sql(t, `INSERT INTO users (id, email, status, test_mode, created_at, updated_at)
                SELECT $1 || g, $1 || g || '@example.com', 'active', $4, $2, $2 FROM generate_series(1, $3::int) g`, [prefix, now, seats, mode === 'test']);
  const rows = await sql<{ id: string }>(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
                SELECT 'ent_' || $1 || g, $1 || g, $3, 'active', 'admin_grant', $2, $5, $2, $2 FROM generate_series(1, $4::int) g RETURNING id`,
    [prefix, now, appId, seats, mode === 'test']);
  return rows.map((r) => r.id);
}

const tenantOf = async (appId: string) => (await sql<{ tenant_id: string }>(t, 'SELECT tenant_id FROM applications WHERE id = $1', [appId]))[0].tenant_id;

async function decisionOf(userId: string, appId: string, cred = admin): Promise<{ allowed: boolean; decision: string }> {
  const view = await effective(t, cred, userId, appId);
  const org = view.access_paths.find((p: any) => p.source === 'org_seat');
  return { allowed: view.allowed, decision: org?.member_decision };
}

test('on a Starter Tenant at its 1,000-seat cap an org grant reaches members beyond the cap as seat_limit: listed, no access, no access.granted, not a seat', async () => {
  const { app } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 1);
  const [within, beyond] = [org.owner, org.members[0]].sort((a, b) => a.id.localeCompare(b.id));
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  assert.equal(ent.included_member_count, 1, 'only the member within the cap is included');
  assert.deepEqual(await decisionOf(within.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await decisionOf(beyond.id, app.id), { allowed: false, decision: 'seat_limit' });
  assert.deepEqual(await accessEvents(t, beyond.id, app.id), [], 'the member over the cap gets no access.granted');
  assert.deepEqual(await accessEvents(t, within.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
  const listed = assertStatus(await call(t, 'GET', `/v1/users/${beyond.id}/entitlements`, admin), 200);
  assert.deepEqual(listed.data.find((e: any) => e.id === ent.id).granted_via, { organization_id: org.id, member_decision: 'seat_limit' });
  const tenantId = await tenantOf(app.id);
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, app.owner!.token), 200);
  assert.deepEqual(usage.limits.seats, { limit: 1000, current: 1000, included: 1000 });
  const read = assertStatus(await call(t, 'GET', `/v1/entitlements/${ent.id}`, admin), 200);
  assert.equal(read.status, 'active');
});

test('adding a member never fails on a plan limit: a member joining at the cap is added (201) and reads seat_limit', async () => {
  const { app } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const late = await person(t);
  const added = assertStatus(await addById(t, admin, org.id, late.id), 201);
  assert.equal(added.membership_status, 'active');
  assert.deepEqual(await decisionOf(late.id, app.id), { allowed: false, decision: 'seat_limit' });
  assert.deepEqual(await accessEvents(t, late.id, app.id), []);
  const audit = await sql(t, `SELECT action FROM audit_events WHERE action = 'organization.member_added' AND target_user_id = $1`, [late.id]);
  assert.equal(audit.length, 1);
});

test('a restricted Tenant takes no new seat: a member joining (by user_id or accepting an invitation) is added and reads seat_limit with no access; once the restriction lifts, seat-limit-release grants access', async () => {
  const app = await newApp(t, admin);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const tenantId = await tenantOf(app.id);
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [tenantId]);
  try {
    const seatsBefore = assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, app.owner!.token), 200).limits.seats.current;
    const byId = await person(t);
    assert.equal(assertStatus(await addById(t, admin, org.id, byId.id), 201).membership_status, 'active');
    const invited = await person(t);
    assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, org.owner.token, { email: invited.email }), 201);
    assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members/me/accept`, invited.token), 200);
    for (const u of [byId, invited]) {
      assert.deepEqual(await decisionOf(u.id, app.id), { allowed: false, decision: 'seat_limit' });
      assert.deepEqual(await accessEvents(t, u.id, app.id), []);
    }
    assert.equal(assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, app.owner!.token), 200).limits.seats.current, seatsBefore, 'no new seat');
    await t.deps.jobs.runNow('seat-limit-release');
    assert.equal((await decisionOf(byId.id, app.id)).allowed, false, 'nothing is released while restricted');
  } finally {
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [tenantId]);
  }
  await t.deps.jobs.runNow('seat-limit-release');
  const members = assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}/members`, admin), 200).data.filter((m: any) => m.user_id !== org.owner.id);
  assert.equal(members.length, 2);
  for (const m of members) {
    assert.deepEqual(await decisionOf(m.user_id, app.id), { allowed: true, decision: 'included' });
    assert.deepEqual(await accessEvents(t, m.user_id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  }
});

test('a member already holding a seat through a personal grant is never seat_limit: joining adds no seat', async () => {
  const { app } = await starterAppWithSeats(998);
  const holder = await person(t);
  assertStatus(await call(t, 'POST', `/v1/users/${holder.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }), 201);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  assertStatus(await addById(t, admin, org.id, holder.id), 201);
  assert.deepEqual(await decisionOf(holder.id, app.id), { allowed: true, decision: 'included' });
});

test('a member who already holds a seat through another path is never marked: a grant taking the Tenant over its cap marks only members who became seats through it', async () => {
  const { app } = await starterAppWithSeats(998);
  // The holder has the highest user id, so the highest-ids-first choice would pick them if they counted as new.
  const [low, mid, holder] = [await person(t), await person(t), await person(t)].sort((a, b) => a.id.localeCompare(b.id));
  assertStatus(await call(t, 'POST', `/v1/users/${holder.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }), 201);
  const { org } = await createOrgApi(t, low);
  for (const u of [mid, holder]) assertStatus(await addById(t, admin, org.id, u.id), 201);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  assert.equal(ent.included_member_count, 2);
  assert.deepEqual(await decisionOf(holder.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await decisionOf(low.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await decisionOf(mid.id, app.id), { allowed: false, decision: 'seat_limit' });
  assert.deepEqual(await accessEvents(t, mid.id, app.id), []);
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200);
  assert.deepEqual(usage.limits.seats, { limit: 1000, current: 1000, included: 1000 });
});

/**
 * A Starter Tenant's Application with 999 personal seats and an organization-wide grant to an
 * Organization of two: the member beyond the cap (the newer user id) waits as seat_limit.
 */
async function fullTenantWithWaitingMember() {
  const { app, personal } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 1);
  await orgGrantApi(t, admin, org.id, app.id);
  const beyond = [org.owner, org.members[0]].sort((a, b) => b.id.localeCompare(a.id))[0];
  assert.equal((await decisionOf(beyond.id, app.id)).decision, 'seat_limit');
  return { app, personal, org, beyond };
}

test('a seat freed by revoking a personal grant goes back to the seat_limit member in the same transaction: access.granted with reason org_grant_changed', async () => {
  const { app, personal, beyond } = await fullTenantWithWaitingMember();
  assertStatus(await patchEnt(t, admin, personal[0], { status: 'revoked', disabled_reason: 'refunded' }), 200);
  assert.deepEqual(await decisionOf(beyond.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, beyond.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
});

test('a seat freed by DELETE of a personal grant made in error goes back to the seat_limit member in the same transaction: access.granted with reason org_grant_changed', async () => {
  const { app, personal, beyond } = await fullTenantWithWaitingMember();
  assert.equal((await call(t, 'DELETE', `/v1/entitlements/${personal[0]}`, admin)).statusCode, 204);
  assert.deepEqual(await decisionOf(beyond.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, beyond.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await sql(t, 'SELECT * FROM org_seat_limits WHERE user_id = $1', [beyond.id]), []);
});

test('an ownership move to a Tenant with room frees seat_limit members in the same transaction ("on a Starter Tenant at its seat cap member_decision reads seat_limit"; the Application is no longer there): access.granted with reason org_grant_changed', async () => {
  const { app, org, beyond } = await fullTenantWithWaitingMember();
  const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_organization_id: org.id }), 200);
  assert.equal((await sql(t, 'SELECT plan FROM tenants WHERE id = $1', [moved.tenant_id]))[0].plan, 'team', "the Organization's new Tenant, Team: no seat cap");
  assert.deepEqual(await decisionOf(beyond.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, beyond.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await sql(t, 'SELECT * FROM org_seat_limits WHERE user_id = $1', [beyond.id]), []);
});

test('seat-limit-release job: seats freed by time (an expired personal grant) and a plan without a cap release seat_limit members, oldest marks first', async () => {
  const { app, personal } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const first = await person(t);
  const second = await person(t);
  assertStatus(await addById(t, admin, org.id, first.id), 201);
  assertStatus(await addById(t, admin, org.id, second.id), 201);
  for (const u of [first, second]) assert.equal((await decisionOf(u.id, app.id)).decision, 'seat_limit');

  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], new Date(t.clock.now().getTime() - 1000)]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(first.id, app.id), { allowed: true, decision: 'included' }, 'the oldest mark is released first');
  assert.deepEqual(await decisionOf(second.id, app.id), { allowed: false, decision: 'seat_limit' });
  assert.deepEqual(await accessEvents(t, first.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);

  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [await tenantOf(app.id)]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(second.id, app.id), { allowed: true, decision: 'included' }, 'Team has no seat cap');
  assert.deepEqual(await accessEvents(t, second.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await accessEvents(t, second.id, app.id), [['access.granted', 'org_grant_changed', 'active']], 'announced once');
});

/**
 * An Organization's grant on a Starter Tenant at its seat cap, a member marked seat_limit under it, and
 * then (time frees a seat before the release job runs) that member granted the seat personally.
 */
async function markedMemberSeatedPersonally() {
  const { app, personal } = await starterAppWithSeats(999);
  const { org } = await createOrgApi(t);
  await orgGrantApi(t, admin, org.id, app.id);
  const marked = await person(t);
  assertStatus(await addById(t, admin, org.id, marked.id), 201);
  assert.deepEqual(await decisionOf(marked.id, app.id), { allowed: false, decision: 'seat_limit' });
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], new Date(t.clock.now().getTime() - 1000)]);
  const own = assertStatus(await call(t, 'POST', `/v1/users/${marked.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }), 201);
  return { app, marked, own };
}

test('a marked member who meanwhile took a seat through another path loses the mark at the next release without using room: the org path reads included again', async () => {
  const { app, marked } = await markedMemberSeatedPersonally();
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(marked.id, app.id), { allowed: true, decision: 'included' });
  assert.equal((await sql(t, 'SELECT 1 FROM org_seat_limits WHERE user_id = $1', [marked.id])).length, 0);
  assert.deepEqual(await accessEvents(t, marked.id, app.id), [['access.granted', 'entitlement_granted', 'active']], 'access was already on: no second access.granted');
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200);
  assert.deepEqual(usage.limits.seats, { limit: 1000, current: 1000, included: 1000 });
});

test('removing an included member frees the seat for the oldest seat_limit member; removing a seat_limit member drops their mark', async () => {
  const { app } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const waiting = await person(t);
  assertStatus(await addById(t, admin, org.id, waiting.id), 201);
  const spare = await person(t);
  assertStatus(await addById(t, admin, org.id, spare.id, 'org_admin'), 201);
  for (const u of [waiting, spare]) assert.equal((await decisionOf(u.id, app.id)).decision, 'seat_limit');
  assertStatus(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${org.owner.id}`, admin), 204);
  assert.deepEqual(await accessEvents(t, org.owner.id, app.id), [['access.granted', 'entitlement_granted', 'active'], ['access.revoked', 'org_member_removed', 'none']]);
  assert.deepEqual(await decisionOf(waiting.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, waiting.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.equal((await decisionOf(spare.id, app.id)).decision, 'seat_limit');
  assertStatus(await addById(t, admin, org.id, (await person(t)).id, 'org_admin'), 201);
  assertStatus(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${spare.id}`, admin), 204);
  assert.equal((await sql(t, 'SELECT 1 FROM org_seat_limits WHERE user_id = $1', [spare.id])).length, 0);
  assert.deepEqual(await accessEvents(t, spare.id, app.id), []);
});

test('a freed seat goes to the oldest seat_limit member the grant still includes: a marked member the admin has since excluded (denylist) takes no seat, so removing a member gives the seat to the next one in the same transaction', async () => {
  const { app } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  const ent = await orgGrantApi(t, admin, org.id, app.id);
  const excluded = await person(t);
  assertStatus(await addById(t, admin, org.id, excluded.id), 201);
  const next = await person(t);
  assertStatus(await addById(t, admin, org.id, next.id, 'org_admin'), 201);
  for (const u of [excluded, next]) assert.equal((await decisionOf(u.id, app.id)).decision, 'seat_limit');
  assertStatus(await patchEnt(t, admin, ent.id, { member_scope: 'denylist', member_overrides: [excluded.id] }), 200);
  assert.deepEqual(await decisionOf(excluded.id, app.id), { allowed: false, decision: 'excluded' });
  assertStatus(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${org.owner.id}`, admin), 204);
  assert.deepEqual(await decisionOf(next.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, next.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await decisionOf(excluded.id, app.id), { allowed: false, decision: 'excluded' });
  assert.deepEqual(await accessEvents(t, excluded.id, app.id), []);
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200);
  assert.equal(usage.limits.seats.current, 1000);
});

test('a freed seat goes to the oldest seat_limit member a live grant still includes: a marked member whose marked grant has since been disabled takes no seat ("by scope, disabled or ended"), so removing a member gives the seat to the next one in the same transaction', async () => {
  const { app } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const other = await orgWithMembers(t, admin, 0);
  const disabled = await orgGrantApi(t, admin, other.id, app.id);
  const next = await person(t);
  assertStatus(await addById(t, admin, org.id, next.id, 'org_admin'), 201);
  for (const u of [other.owner, next]) assert.equal((await decisionOf(u.id, app.id)).decision, 'seat_limit');
  assertStatus(await patchEnt(t, admin, disabled.id, { status: 'disabled', disabled_reason: 'paused' }), 200);
  assertStatus(await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${org.owner.id}`, admin), 204);
  assert.deepEqual(await decisionOf(next.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, next.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.equal((await effective(t, admin, other.owner.id, app.id)).allowed, false);
  assert.deepEqual(await accessEvents(t, other.owner.id, app.id), []);
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200);
  assert.equal(usage.limits.seats.current, 1000);
});

test("a personal grant adding a new seat beyond Starter's 1,000 gives 409 plan_limit_reached (resource seats) and writes nothing; the 1,000th seat is granted", async () => {
  const { app } = await starterAppWithSeats(999);
  const grantTo = (userId: string) => call(t, 'POST', `/v1/users/${userId}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` });
  const last = await person(t);
  assertStatus(await grantTo(last.id), 201);
  const beyond = await person(t);
  const err = assertError(await grantTo(beyond.id), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'seats');
  assert.equal(err.details.limit, 1000);
  assert.deepEqual(await sql(t, 'SELECT id FROM entitlements WHERE user_id = $1', [beyond.id]), []);
  assert.deepEqual(await accessEvents(t, beyond.id, app.id), []);
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200);
  assert.deepEqual(usage.limits.seats, { limit: 1000, current: 1000, included: 1000 });
});

test('Part B Errors, plan_limit_reached ("A plan cap (seats) would be exceeded") on PATCH: returning a personal row to active (disabled → active, expired → active renewal) seats its user again, so at Starter\'s 1,000 seats it is 409 plan_limit_reached (resource seats) and changes nothing', async () => {
  const { app } = await starterAppWithSeats(998);
  const grantTo = (userId: string, body: Record<string, unknown> = {}) =>
    call(t, 'POST', `/v1/users/${userId}/entitlements`, admin, { application_id: app.id, source: 'purchase', ...body }, { 'idempotency-key': `k-${rand(8)}` });
  const disabledUser = await person(t);
  const disabled = assertStatus(await grantTo(disabledUser.id), 201);
  assertStatus(await patchEnt(t, admin, disabled.id, { status: 'disabled', disabled_reason: 'chargeback' }), 200);
  const expiredUser = await person(t);
  const expired = assertStatus(await grantTo(expiredUser.id, { source: 'trial', ends_at: new Date(t.clock.now().getTime() + 60_000).toISOString() }), 201);
  t.clock.advance(61);
  await t.deps.jobs.runNow('entitlement-expiry');
  assertStatus(await grantTo((await person(t)).id), 201); // 999
  assertStatus(await grantTo((await person(t)).id), 201); // 1,000: the cap
  for (const [row, body, user] of [
    [disabled, { status: 'active' }, disabledUser],
    [expired, { status: 'active', ends_at: new Date(t.clock.now().getTime() + 86_400_000).toISOString() }, expiredUser],
  ] as const) {
    const before = assertStatus(await call(t, 'GET', `/v1/entitlements/${row.id}`, admin), 200);
    const events = await accessEvents(t, user.id, app.id);
    const err = assertError(await patchEnt(t, admin, row.id, body), 409, 'plan_limit_reached');
    assert.deepEqual([err.details.resource, err.details.limit], ['seats', 1000]);
    assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/entitlements/${row.id}`, admin), 200), before, 'the row is unchanged');
    assert.deepEqual(await accessEvents(t, user.id, app.id), events, 'no access event');
  }
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200);
  assert.deepEqual(usage.limits.seats, { limit: 1000, current: 1000, included: 1000 });
});

test("the erasure cascade drops an erased member's seat_limit mark, so a freed seat goes to the next waiting member, not to the erased one", async () => {
  const { app, personal } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const erased = await person(t);
  assertStatus(await addById(t, admin, org.id, erased.id), 201);
  t.clock.advance(1);
  const waiting = await person(t);
  assertStatus(await addById(t, admin, org.id, waiting.id), 201);
  for (const u of [erased, waiting]) assert.equal((await decisionOf(u.id, app.id)).decision, 'seat_limit');

  assertStatus(await call(t, 'POST', `/v1/users/${erased.id}/erasure-requests`, admin, {}), 202);
  t.clock.advance(7 * 86_400 + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.deepEqual(await sql(t, 'SELECT entitlement_id FROM org_seat_limits WHERE user_id = $1', [erased.id]), [], 'the erased member holds no mark');

  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], new Date(t.clock.now().getTime() - 1000)]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(waiting.id, app.id), { allowed: true, decision: 'included' }, 'the freed seat reaches the member still waiting');
  assert.deepEqual(await accessEvents(t, waiting.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
});

test('the 1,000-seat cap holds under concurrency: members joining two Organizations granted one Application and a personal grant, at the same time, one seat left each round, never take the Tenant past 1,000 (on PostgreSQL the three run at once)', async () => {
  for (let round = 0; round < 4; round++) {
    const { app } = await starterAppWithSeats(997);
    const [a, b] = [await orgWithMembers(t, admin, 0), await orgWithMembers(t, admin, 0)];
    for (const org of [a, b]) await orgGrantApi(t, admin, org.id, app.id);
    const usageOf = async () => assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200).limits.seats;
    assert.equal((await usageOf()).current, 999, 'the two org owners took seats 998 and 999');
    const [x, y, z] = [await person(t), await person(t), await person(t)];
    const [joinA, joinB, personal] = await Promise.all([
      addById(t, admin, a.id, x.id),
      addById(t, admin, b.id, y.id),
      call(t, 'POST', `/v1/users/${z.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }),
    ]);
    assert.deepEqual([joinA.statusCode, joinB.statusCode], [201, 201], `round ${round}: adding a member never fails on a plan limit`);
    assert.ok(personal.statusCode === 201 || personal.statusCode === 409, `round ${round}: ${personal.body}`);
    if (personal.statusCode === 409) assert.equal(assertError(personal, 409, 'plan_limit_reached').details.resource, 'seats');
    assert.deepEqual(await usageOf(), { limit: 1000, current: 1000, included: 1000 }, `round ${round}`);
    const decisions = [(await decisionOf(x.id, app.id)).decision, (await decisionOf(y.id, app.id)).decision];
    const seated = decisions.filter((d) => d === 'included').length + (personal.statusCode === 201 ? 1 : 0);
    assert.equal(seated, 1, `round ${round}: exactly one of the three took the last seat (${decisions}, personal ${personal.statusCode})`);
    for (const [u, d] of [[x, decisions[0]], [y, decisions[1]]] as const) {
      assert.deepEqual(await accessEvents(t, u.id, app.id), d === 'included' ? [['access.granted', 'org_member_added', 'active']] : [], `round ${round}`);
    }
  }
});

test('the cap holds while freed seats are given back: the seat-limit-release job and a personal grant at the same time, one seat freed by time each round, never take the Tenant past 1,000 and the seat goes to the waiting seat_limit member, oldest mark first (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 4; round++) {
    const { app, personal } = await starterAppWithSeats(999);
    const org = await orgWithMembers(t, admin, 0);
    await orgGrantApi(t, admin, org.id, app.id);
    const waiting = await person(t);
    assertStatus(await addById(t, admin, org.id, waiting.id), 201);
    assert.equal((await decisionOf(waiting.id, app.id)).decision, 'seat_limit');
    // A seat is freed by time (an ends_at passed): what the job gives back.
    const now = t.clock.now().getTime();
    await sql(t, 'UPDATE entitlements SET starts_at = $2, ends_at = $3 WHERE id = $1', [personal[0], new Date(now - 5000), new Date(now - 1000)]);
    const newcomer = await person(t);
    const [granted, job] = await Promise.all([
      call(t, 'POST', `/v1/users/${newcomer.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }),
      t.deps.jobs.runNow('seat-limit-release'),
    ]);
    const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200).limits.seats;
    assert.deepEqual(usage, { limit: 1000, current: 1000, included: 1000 }, `round ${round}: ${granted.statusCode} ${JSON.stringify(job)}`);
    // "Freed seats go back to marked members, oldest mark first": whichever runs first, the seat is
    // the waiting member's, never the newcomer's.
    assert.deepEqual(await decisionOf(waiting.id, app.id), { allowed: true, decision: 'included' }, `round ${round}: the waiting member took the freed seat (grant ${granted.body}, job ${JSON.stringify(job)})`);
    assert.equal(assertError(granted, 409, 'plan_limit_reached').details.resource, 'seats', `round ${round}`);
    assert.deepEqual(await accessEvents(t, waiting.id, app.id), [['access.granted', 'org_grant_changed', 'active']], `round ${round}: announced once`);
  }
});

/**
 * A Starter Tenant at its cap (999 personal seats and the granting Organization's owner) with
 * `count` members marked seat_limit (marks one second apart, oldest first), then one personal seat
 * freed by time (its ends_at passed) that neither the expiry sweep nor seat-limit-release has seen.
 * `beforeMarks` runs while the Tenant is still below its cap.
 */
async function timeFreedSeatWithWaiting(count: number, beforeMarks: (app: Awaited<ReturnType<typeof newApp>>, personal: string[]) => Promise<void> = async () => {}) {
  const { app, personal } = await starterAppWithSeats(999);
  await beforeMarks(app, personal);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const waiting = [];
  for (let i = 0; i < count; i++) {
    const u = await person(t);
    assertStatus(await addById(t, admin, org.id, u.id), 201);
    assert.equal((await decisionOf(u.id, app.id)).decision, 'seat_limit');
    waiting.push(u);
    t.clock.advance(1);
  }
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], new Date(t.clock.now().getTime() - 1000)]);
  const usageOf = async () => assertStatus(await call(t, 'GET', `/v1/tenants/${await tenantOf(app.id)}/usage`, app.owner!.token), 200).limits.seats;
  return { app, org, personal, waiting, usageOf };
}

test('"Freed seats go back to marked members, oldest mark first": a seat freed by time before seat-limit-release runs is kept for the waiting seat_limit member, so a newcomer\'s personal grant is a new seat beyond Starter\'s 1,000: 409 plan_limit_reached (resource seats)', async () => {
  const { app, waiting: [waiting], usageOf } = await timeFreedSeatWithWaiting(1);
  const newcomer = await person(t);
  const granted = await call(t, 'POST', `/v1/users/${newcomer.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` });
  assert.equal(assertError(granted, 409, 'plan_limit_reached').details.resource, 'seats', "the freed seat is the waiting member's");
  assert.deepEqual(await accessEvents(t, newcomer.id, app.id), []);
  assert.equal((await sql(t, 'SELECT 1 FROM entitlements WHERE user_id = $1', [newcomer.id])).length, 0, 'the 409 writes nothing');
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(waiting.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, waiting.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await usageOf(), { limit: 1000, current: 1000, included: 1000 });
  assert.equal(assertError(await call(t, 'POST', `/v1/users/${newcomer.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }), 409, 'plan_limit_reached').details.resource, 'seats');
});

test('"Freed seats go back to marked members, oldest mark first": a member joining the granting Organization while a seat freed by time waits for seat-limit-release reads seat_limit behind the marked members, and the oldest mark takes the seat', async () => {
  const { app, org, waiting: [first, second], usageOf } = await timeFreedSeatWithWaiting(2);
  const joining = await person(t);
  assertStatus(await addById(t, admin, org.id, joining.id), 201);
  assert.deepEqual(await decisionOf(joining.id, app.id), { allowed: false, decision: 'seat_limit' });
  assert.deepEqual(await decisionOf(first.id, app.id), { allowed: true, decision: 'included' }, 'the oldest mark takes the freed seat');
  assert.deepEqual(await decisionOf(second.id, app.id), { allowed: false, decision: 'seat_limit' });
  assert.deepEqual(await accessEvents(t, first.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await accessEvents(t, joining.id, app.id), []);
  assert.deepEqual(await usageOf(), { limit: 1000, current: 1000, included: 1000 });
  // The order holds on: the next seat goes to the member marked before the newcomer.
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = (SELECT id FROM entitlements WHERE application_id = $1 AND user_id IS NOT NULL AND ends_at IS NULL ORDER BY id LIMIT 1)', [app.id, new Date(t.clock.now().getTime() - 1000)]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(second.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await decisionOf(joining.id, app.id), { allowed: false, decision: 'seat_limit' });
});

test('"Freed seats go back to marked members, oldest mark first": re-enabling a disabled personal row while a seat freed by time waits for seat-limit-release seats a new user beyond Starter\'s 1,000: 409 plan_limit_reached (resource seats), and the seat is kept for the waiting seat_limit member', async () => {
  let disabled = '';
  const { app, waiting: [waiting], usageOf } = await timeFreedSeatWithWaiting(1, async (app, personal) => {
    disabled = personal[1];
    assertStatus(await patchEnt(t, admin, disabled, { status: 'disabled', disabled_reason: 'chargeback' }), 200);
    const filler = await person(t); // seat 1,000 again, taken before anyone is marked
    assertStatus(await call(t, 'POST', `/v1/users/${filler.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }), 201);
  });
  const err = assertError(await patchEnt(t, admin, disabled, { status: 'active' }), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'seats');
  assert.equal((await sql<{ status: string }>(t, 'SELECT status FROM entitlements WHERE id = $1', [disabled]))[0].status, 'disabled', 'the 409 changes nothing');
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(waiting.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, waiting.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await usageOf(), { limit: 1000, current: 1000, included: 1000 });
});

if (TEST_DATABASE_URL) test('seat-limit-release gives a freed seat only to a member still waiting: an erasure that removes the member it picked (membership and mark gone under the user\'s lock) while the release waits for that lock leaves the seat to the next marked member, in the same run (PostgreSQL)', async () => {
  const { app, waiting: [erased, next], usageOf } = await timeFreedSeatWithWaiting(2);
  // What the erasure cascade does under the user's lock (src/modules/users/privacy.ts, erase-user.ts), committed
  // once the release waits for that lock.
  await commitWhileWaiting(t, [
    ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [erased.id]],
    ['DELETE FROM organization_members WHERE user_id = $1', [erased.id]],
    ['DELETE FROM org_seat_limits WHERE user_id = $1', [erased.id]],
  ], () => t.deps.jobs.runNow('seat-limit-release'));
  assert.deepEqual(await decisionOf(next.id, app.id), { allowed: true, decision: 'included' }, 'the seat goes to the member still waiting, not to the erased one');
  assert.deepEqual(await accessEvents(t, next.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await accessEvents(t, erased.id, app.id), []);
  assert.deepEqual(await usageOf(), { limit: 1000, current: 1000, included: 1000 });
});

if (TEST_DATABASE_URL) test('a personal grant locks the Tenant before the user (src/access/locks.ts): a plan change giving seats back to marked members, which holds the Tenant and then locks them, cannot deadlock with a grant to one of them', async () => {
  const app = await newApp(t, admin);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const member = await person(t);
  assertStatus(await addById(t, admin, org.id, member.id), 201);
  const tenantId = await tenantOf(app.id);
  const { probeLocked, result } = await probeWhileHeld(
    t,
    ['SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE', [tenantId]],
    () => call(t, 'POST', `/v1/users/${member.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }),
    ['SELECT 1 FROM users WHERE id = $1 FOR NO KEY UPDATE NOWAIT', [member.id]],
  );
  assertStatus(result, 201);
  assert.equal(probeLocked, true, 'the grant waited for the Tenant without holding the user');
});

test('a plan change giving seats back to members marked seat_limit, at the same time as personal grants to those members: every answer is 201 or 409 plan_limit_reached, never a 500 (on PostgreSQL they run at once)', async () => {
  for (let round = 0; round < 4; round++) {
    const { app } = await starterAppWithSeats(999);
    const org = await orgWithMembers(t, admin, 0);
    await orgGrantApi(t, admin, org.id, app.id);
    const marked = [await person(t), await person(t), await person(t)];
    for (const m of marked) assertStatus(await addById(t, admin, org.id, m.id), 201);
    const tenantId = await tenantOf(app.id);
    const [event, ...grants] = await Promise.all([
      deliver(t, 'customer.subscription.created', subscription({ tenantId, id: `sub_${rand(6)}`, customer: `cus_${rand(6)}`, plan: 'team' })),
      ...[...marked].reverse().map((m) => call(t, 'POST', `/v1/users/${m.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` })),
    ]);
    assertStatus(event, 200);
    for (const g of grants) {
      if (g.statusCode !== 201) assert.equal(assertError(g, 409, 'plan_limit_reached').details.resource, 'seats', `round ${round}`);
    }
    // The Team plan has no seat cap: every marked member got their seat back.
    for (const m of marked) assert.equal((await decisionOf(m.id, app.id)).decision, 'included', `round ${round}`);
  }
});

test("seat-limit-release counts each mode's seats apart, as requests count them: a test-mode grant on a live Starter Tenant's Application never keeps a live seat_limit member from a seat freed in live mode", async () => {
  const { app, personal } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const waiting = await person(t);
  assertStatus(await addById(t, admin, org.id, waiting.id), 201);
  assert.deepEqual(await decisionOf(waiting.id, app.id), { allowed: false, decision: 'seat_limit' });
  // Test mode on the same (shared) Application: a test user granted by a test key takes a test seat.
  const testAdmin = await platformKey(t, undefined, 'test');
  const tester = await person(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/users/${tester.id}/entitlements`, testAdmin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }), 201);
  const tenantId = await tenantOf(app.id);
  const seatsOf = async () => assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, app.owner!.token), 200).limits.seats.current;
  assert.equal(await seatsOf(), 1000, 'the live seats: the test one is not the live Tenant\'s');
  // Time frees a live seat: the live member waiting for one gets it.
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], new Date(t.clock.now().getTime() - 1000)]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(waiting.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, waiting.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.equal(await seatsOf(), 1000);
});

test("seat-limit-release gives each mode's freed seat to that mode's marked member, its seats counted apart as that mode's requests count them, and announces it in that mode only: on a Starter Tenant full in both modes, a test seat freed by time goes to the test-mode member (access.granted a test event) and a live seat to the live member (a live event)", async () => {
  const { app, personal } = await starterAppWithSeats(999);
  const testPersonal = await seatsOn(app.id, 999, 'test');
  const testAdmin = await platformKey(t, undefined, 'test');
  const liveOrg = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, liveOrg.id, app.id);
  const liveMember = await person(t);
  assertStatus(await addById(t, admin, liveOrg.id, liveMember.id), 201);
  const testOwner = await person(t, { mode: 'test' });
  const testOrg = assertStatus(await call(t, 'POST', '/v1/organizations', testOwner.token, { name: 'Test-mode Org' }), 201);
  await orgGrantApi(t, testAdmin, testOrg.id, app.id);
  const testMember = await person(t, { mode: 'test' });
  assertStatus(await addById(t, testAdmin, testOrg.id, testMember.id), 201);
  const tenantId = await tenantOf(app.id);
  const state = async () => ({
    live: await decisionOf(liveMember.id, app.id),
    test: await decisionOf(testMember.id, app.id, testAdmin),
    liveSeats: assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, app.owner!.token), 200).limits.seats.current,
  });
  // The test mode at its cap, as its requests count it: a test-mode grant to a new test user is a seat beyond 1,000.
  const testGrantBeyondCap = async () => {
    const newcomer = await person(t, { mode: 'test' });
    const res = await call(t, 'POST', `/v1/users/${newcomer.id}/entitlements`, testAdmin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` });
    assert.equal(assertError(res, 409, 'plan_limit_reached').details.resource, 'seats');
  };
  const modesOf = async (userId: string) => (await outbox(t, { types: ['access.granted', 'access.revoked'], userId, applicationId: app.id })).map((r) => [r.type, r.data.reason, r.test_mode]);
  const seatLimit = { allowed: false, decision: 'seat_limit' };
  const included = { allowed: true, decision: 'included' };
  assert.deepEqual(await state(), { live: seatLimit, test: seatLimit, liveSeats: 1000 }, 'one member marked in each mode');
  await testGrantBeyondCap();

  // Time frees a test-mode seat: the job (system scope) sees both marks; the test seat is the test member's only.
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [testPersonal[0], new Date(t.clock.now().getTime() - 1000)]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await state(), { live: seatLimit, test: included, liveSeats: 1000 });
  await testGrantBeyondCap();
  assert.deepEqual(await modesOf(testMember.id), [['access.granted', 'org_grant_changed', true]], 'a test event: only test-mode subscriptions receive it');
  assert.deepEqual(await modesOf(liveMember.id), []);

  // Time frees a live seat: the live member's, announced as a live event.
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], new Date(t.clock.now().getTime() - 1000)]);
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await state(), { live: included, test: included, liveSeats: 1000 });
  assert.deepEqual(await modesOf(liveMember.id), [['access.granted', 'org_grant_changed', false]]);
  assert.deepEqual(await modesOf(testMember.id), [['access.granted', 'org_grant_changed', true]]);
});

test('a Tenant whose seat release fails does not hold back the other Tenants: their members are released in the same run, the run reports failure naming the Tenant, and its members are released once it can run', async () => {
  const setups: { tenantId: string; appId: string; member: string }[] = [];
  for (let i = 0; i < 2; i++) {
    const app = await newApp(t, admin);
    const org = await orgWithMembers(t, admin, 0);
    await orgGrantApi(t, admin, org.id, app.id);
    const tenantId = await tenantOf(app.id);
    await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [tenantId]);
    const member = await person(t);
    assertStatus(await addById(t, admin, org.id, member.id), 201);
    assert.deepEqual(await decisionOf(member.id, app.id), { allowed: false, decision: 'seat_limit' });
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [tenantId]);
    setups.push({ tenantId, appId: app.id, member: member.id });
  }
  // The Tenant released first (in id order) cannot be released (a data fault, say).
  const [stuck, next] = setups.sort((a, b) => (a.tenantId < b.tenantId ? -1 : 1));
  await sql(t, `CREATE FUNCTION refuse_stuck_mark() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'stuck mark'; END $$`);
  await sql(t, `CREATE TRIGGER refuse_stuck_mark BEFORE DELETE ON org_seat_limits FOR EACH ROW WHEN (OLD.user_id = '${stuck.member}') EXECUTE FUNCTION refuse_stuck_mark()`);
  try {
    await assert.rejects(t.deps.jobs.runNow('seat-limit-release'), (err: Error) => err.message.includes(stuck.tenantId) && err.message.includes('stuck mark'));
    assert.deepEqual(await decisionOf(next.member, next.appId), { allowed: true, decision: 'included' }, 'the Tenant after it was released');
    assert.deepEqual(await decisionOf(stuck.member, stuck.appId), { allowed: false, decision: 'seat_limit' });
  } finally {
    await sql(t, 'DROP TRIGGER refuse_stuck_mark ON org_seat_limits');
    await sql(t, 'DROP FUNCTION refuse_stuck_mark()');
  }
  await t.deps.jobs.runNow('seat-limit-release');
  assert.deepEqual(await decisionOf(stuck.member, stuck.appId), { allowed: true, decision: 'included' });
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test("seat-limit-release and an ownership move of the Application out of the Tenant at once (PostgreSQL): a seat the release gives back while the move counts the destination is counted there, 409 plan_limit_reached (resource seats), never a Starter Tenant past its 1,000 seats", async () => {
  // 999 personal holders and the Organization's owner fill a Starter Tenant; the member who joins is
  // marked seat_limit. The Tenant then has no cap (Team): the release gives that member a seat.
  const { app } = await starterAppWithSeats(999);
  const org = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, org.id, app.id);
  const marked = await person(t);
  assertStatus(await addById(t, admin, org.id, marked.id), 201);
  assert.deepEqual(await decisionOf(marked.id, app.id), { allowed: false, decision: 'seat_limit' });
  const source = await tenantOf(app.id);
  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [source]);
  const newOwner = await person(t);
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    // The marked member's announced state is held: the release has deleted the mark and waits to
    // record access.granted, uncommitted, while the move counts the seats its destination would hold.
    await holder.query('BEGIN');
    const held = await holder.query('SELECT 1 FROM access_states WHERE user_id = $1 AND application_id = $2 FOR UPDATE', [marked.id, app.id]);
    assert.equal(held.rowCount, 1);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const releasing = t.deps.jobs.runNow('seat-limit-release');
    const releasePid = await blockedBy(watcher, holderPid, 'the release');
    const moving = call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id });
    // The move either ends at once (the released seat uncounted) or waits for the release.
    await endedOrWaiting(watcher, moving, [holderPid, releasePid], [releasePid], 'the move');
    await holder.query('ROLLBACK');
    await releasing;
    const err = assertError(await moving, 409, 'plan_limit_reached');
    assert.equal(err.details.resource, 'seats');
    assert.equal(err.details.plan, 'starter');
    assert.equal(await tenantOf(app.id), source);
    assert.deepEqual(await decisionOf(marked.id, app.id), { allowed: true, decision: 'included' });
    assert.deepEqual(await accessEvents(t, marked.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  } finally {
    await holder.end();
    await watcher.end();
  }
});

test('"No event fires for users whose resolved access does not flip": a marked member holding the seat personally, whose personal grant is revoked before the release job runs, keeps access through the Organization (the freed seat is theirs) and gets neither access.revoked nor a second access.granted', async () => {
  const { app, marked, own } = await markedMemberSeatedPersonally();
  assert.deepEqual(await accessEvents(t, marked.id, app.id), [['access.granted', 'entitlement_granted', 'active']]);
  // The personal row ends: the seat it held goes back to the oldest mark, the member's own.
  assertStatus(await patchEnt(t, admin, own.id, { status: 'revoked', disabled_reason: 'refunded' }), 200);
  assert.deepEqual(await decisionOf(marked.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, marked.id, app.id), [['access.granted', 'entitlement_granted', 'active']], 'access never flipped: no event');
});

test('"No event fires for users whose resolved access does not flip": a member marked seat_limit under one Organization who holds the seat through another, removed from that other before the release job runs, keeps access through the first and gets no access.revoked', async () => {
  const { app, personal } = await starterAppWithSeats(999);
  const marking = await createOrgApi(t);
  await orgGrantApi(t, admin, marking.org.id, app.id);
  const member = await person(t);
  assertStatus(await addById(t, admin, marking.org.id, member.id), 201);
  assert.deepEqual(await decisionOf(member.id, app.id), { allowed: false, decision: 'seat_limit' });
  // A second Organization granted the Application (its owner already a seat). Time frees a seat;
  // before the release job runs, the member joins that Organization and takes the seat, theirs as the
  // oldest mark, through it.
  const other = await createOrgApi(t, marking.owner);
  await orgGrantApi(t, admin, other.org.id, app.id);
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], new Date(t.clock.now().getTime() - 1000)]);
  assertStatus(await addById(t, admin, other.org.id, member.id), 201);
  assert.deepEqual(await accessEvents(t, member.id, app.id), [['access.granted', 'org_member_added', 'active']]);
  // Leaving the second Organization frees the seat; the oldest mark, the member's own, takes it.
  assertStatus(await call(t, 'DELETE', `/v1/organizations/${other.org.id}/members/${member.id}`, admin), 204);
  assert.deepEqual(await decisionOf(member.id, app.id), { allowed: true, decision: 'included' });
  assert.deepEqual(await accessEvents(t, member.id, app.id), [['access.granted', 'org_member_added', 'active']], 'access never flipped: no event');
});

test('a grant holds its seat until its ends_at and not at it ("ends_at <= now counts as expired at once", seats.current is live): a personal row ending at the instant frees its seat then, so the 1,000th seat is granted; an organization-wide grant ending then counts its members until the millisecond before', async () => {
  const { app, personal } = await starterAppWithSeats(1000);
  const ends = new Date(t.clock.now().getTime() + 60_000);
  await sql(t, 'UPDATE entitlements SET ends_at = $2 WHERE id = $1', [personal[0], ends]);
  const tenantId = await tenantOf(app.id);
  const seatsAt = (at: Date) => atOneInstant(t, async () => assertStatus(await call(t, 'GET', `/v1/tenants/${tenantId}/usage`, app.owner!.token), 200).limits.seats.current, at);
  assert.equal(await seatsAt(new Date(ends.getTime() - 1)), 1000);
  assert.equal(await seatsAt(ends), 999);
  const newcomer = await person(t);
  await atOneInstant(t, async () => {
    assertStatus(await call(t, 'POST', `/v1/users/${newcomer.id}/entitlements`, admin, { application_id: app.id, source: 'purchase' }, { 'idempotency-key': `k-${rand(8)}` }), 201);
  }, ends);

  const other = await newApp(t, admin);
  const org = await orgWithMembers(t, admin, 1);
  await orgGrantApi(t, admin, org.id, other.id, { ends_at: ends.toISOString() });
  const otherTenant = await tenantOf(other.id);
  const orgSeatsAt = (at: Date) => atOneInstant(t, async () => assertStatus(await call(t, 'GET', `/v1/tenants/${otherTenant}/usage`, other.owner!.token), 200).limits.seats.current, at);
  assert.equal(await orgSeatsAt(new Date(ends.getTime() - 1)), 2);
  assert.equal(await orgSeatsAt(ends), 0);
});

test('"Freed seats go back to marked members, oldest mark first", a grant ending at the instant included ("ends_at <= now counts as expired at once"): a seat_limit member whose marked grant ends at the instant of seat-limit-release takes no room, and the seat that grant freed goes to the next waiting member with access.granted (org_grant_changed)', async () => {
  const { app } = await starterAppWithSeats(999);
  const ends = new Date(t.clock.now().getTime() + 3_600_000);
  const ending = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, ending.id, app.id, { ends_at: ends.toISOString() });
  const first = await person(t);
  assertStatus(await addById(t, admin, ending.id, first.id), 201);
  t.clock.advance(1);
  const next = await orgWithMembers(t, admin, 0);
  await orgGrantApi(t, admin, next.id, app.id);
  for (const u of [first, next.owner]) assert.equal((await decisionOf(u.id, app.id)).decision, 'seat_limit');
  // At `ends` the first Organization's grant ends: its owner's seat is free, and its marked member gains nothing.
  await atOneInstant(t, () => t.deps.jobs.runNow('seat-limit-release'), ends);
  assert.deepEqual(await accessEvents(t, next.owner.id, app.id), [['access.granted', 'org_grant_changed', 'active']]);
  assert.deepEqual(await accessEvents(t, first.id, app.id), []);
  assert.equal((await sql(t, 'SELECT 1 FROM org_seat_limits WHERE user_id = $1', [first.id])).length, 0, 'the mark of the ended grant is dropped');
});
