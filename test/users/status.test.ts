// Part A, States and transitions: the User status table, every row and every rejected move, with
// its side effects (sessions, audit rows, webhook and access events in the outbox).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, login, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { createMfaUser, mfaChallenge, totpCode } from '../auth/support.js';
import {
  assertError, assertStatus, auditFor, call, createApplication, createPlatformRole, DAY, grant, liveSessionCount, mailsTo, outboxFor, sql, userRow,
  type TestApplication,
} from './support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };
let support: { user: TestUser; token: string };
let appA: TestApplication;
let appB: TestApplication;

before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
  support = await userToken(t, { roles: ['support'] });
  appA = await createApplication(t);
  appB = await createApplication(t);
});
after(() => t.close());

/**
 * A user with an active entitlement to appA and a disabled one to appB (so exactly one Application
 * has active access), and, when active, two signed-in sessions.
 */
async function subject(status: 'active' | 'invited' = 'active') {
  const user = await createUser(t, { status });
  await grant(t, user.id, appA.id);
  await grant(t, user.id, appB.id, { status: 'disabled' });
  const tokens = status === 'active' ? [await login(t, user), await login(t, user)] : [];
  return { user, tokens };
}

/** Counts of audit and outbox rows about a user, to find what one call added. */
async function mark(userId: string) {
  return { audit: (await auditFor(t, userId)).length, outbox: (await outboxFor(t, userId)).length };
}
async function since(userId: string, m: { audit: number; outbox: number }) {
  return { audit: (await auditFor(t, userId)).slice(m.audit), outbox: (await outboxFor(t, userId)).slice(m.outbox) };
}

const entitlementStatuses = async (userId: string) =>
  (await sql<{ application_id: string; status: string }>(t, 'SELECT application_id, status FROM entitlements WHERE user_id = $1 ORDER BY application_id', [userId])).map(
    (r) => `${r.application_id}:${r.status}`,
  );

const suspend = (id: string, token = admin.token, payload?: object) => call(t, 'POST', `/v1/users/${id}/suspend`, token, payload);
const patch = (id: string, payload: object, token = admin.token) => call(t, 'PATCH', `/v1/users/${id}`, token, payload);
const remove = (id: string, token = admin.token) => call(t, 'DELETE', `/v1/users/${id}`, token);
const getUser = (id: string, token = admin.token) => call(t, 'GET', `/v1/users/${id}`, token);

async function suspendedSubject() {
  const s = await subject();
  assertStatus(await suspend(s.user.id), 200);
  return s;
}

async function deletedSubject() {
  const s = await subject();
  assertStatus(await remove(s.user.id), 204);
  return s;
}

test('active → suspended by POST suspend (users.manage): revokes all sessions, access.revoked (reason user_suspended) for each Application with active access, entitlements unchanged, audit user.suspended, webhook user.suspended', async () => {
  const { user, tokens } = await subject();
  const ents = await entitlementStatuses(user.id);
  const m = await mark(user.id);
  const res = await suspend(user.id, admin.token, { reason: 'chargeback fraud' });
  const body = assertStatus(res, 200);
  assert.equal(body.id, user.id);
  assert.equal(body.status, 'suspended');

  assert.equal(await liveSessionCount(t, user.id), 0, 'all sessions revoked');
  for (const token of tokens) assert.equal((await getUser('me', token)).statusCode, 401);
  assert.deepEqual(await entitlementStatuses(user.id), ents, 'entitlements unchanged');

  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action), ['user.suspended']);
  assert.equal(audit[0].actor_type, 'user');
  assert.equal(audit[0].actor_id, admin.user.id);
  assert.equal(audit[0].before.status, 'active');
  assert.equal(audit[0].after.status, 'suspended');
  assert.deepEqual(outbox.map((e) => e.type).sort(), ['access.revoked', 'user.suspended']);
  const revoked = outbox.find((e) => e.type === 'access.revoked')!;
  assert.equal(revoked.application_id, appA.id, 'only the Application with active access (appB is disabled)');
  assert.deepEqual({ user_id: revoked.data.user_id, application_id: revoked.data.application_id, reason: revoked.data.reason }, {
    user_id: user.id, application_id: appA.id, reason: 'user_suspended',
  });
  assert.equal(outbox.find((e) => e.type === 'user.suspended')!.data.user_id, user.id);
  // Correct credentials on a suspended user: 403 account_suspended.
  assertError(await call(t, 'POST', '/v1/auth/login', null, { email: user.email, password: user.password }), 403, 'account_suspended');
});

test('POST suspend with the optional reason keeps it in the user.suspended audit row (not on the User)', async () => {
  const user = await createUser(t);
  const body = assertStatus(await suspend(user.id, admin.token, { reason: 'chargeback fraud' }), 200);
  assert.equal(body.status, 'suspended');
  assert.equal(body.reason, undefined);
  const audit = await auditFor(t, user.id, 'user.suspended');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].after.reason, 'chargeback fraud');
  assert.equal(audit[0].after.status, 'suspended');
});

test('active → suspended by PATCH status suspended (users.manage) has the same effects as POST suspend', async () => {
  const { user, tokens } = await subject();
  const m = await mark(user.id);
  const body = assertStatus(await patch(user.id, { status: 'suspended' }), 200);
  assert.equal(body.status, 'suspended');
  assert.equal((await userRow(t, user.id))!.status, 'suspended');
  assert.equal(await liveSessionCount(t, user.id), 0);
  assert.equal((await getUser('me', tokens[0])).statusCode, 401);
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action), ['user.suspended']);
  assert.deepEqual(outbox.map((e) => `${e.type}:${e.application_id ?? ''}:${e.data.reason ?? ''}`).sort(), [
    `access.revoked:${appA.id}:user_suspended`,
    'user.suspended::',
  ]);
});

test('suspending an already suspended user returns 200 with no change and no events (POST suspend and PATCH status suspended)', async () => {
  const { user } = await suspendedSubject();
  const before = await userRow(t, user.id);
  const m = await mark(user.id);
  const first = assertStatus(await suspend(user.id), 200);
  assert.equal(first.status, 'suspended');
  assert.equal(first.updated_at, before!.updated_at.toISOString());
  const second = assertStatus(await patch(user.id, { status: 'suspended' }), 200);
  assert.equal(second.status, 'suspended');
  assert.equal(second.updated_at, before!.updated_at.toISOString());
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit, [], 'no audit rows');
  assert.deepEqual(outbox, [], 'no webhook or access events');
});

test('suspended → active by PATCH status active (users.manage): access.granted (reason user_reactivated) for each Application still accessible, audit user.reactivated, webhook user.reactivated', async () => {
  const { user } = await suspendedSubject();
  const m = await mark(user.id);
  const body = assertStatus(await patch(user.id, { status: 'active' }), 200);
  assert.equal(body.status, 'active');
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action), ['user.reactivated']);
  assert.equal(audit[0].actor_id, admin.user.id);
  assert.equal(audit[0].before.status, 'suspended');
  assert.equal(audit[0].after.status, 'active');
  assert.deepEqual(outbox.map((e) => e.type).sort(), ['access.granted', 'user.reactivated']);
  const granted = outbox.find((e) => e.type === 'access.granted')!;
  assert.equal(granted.application_id, appA.id);
  assert.equal(granted.data.reason, 'user_reactivated');
  assert.equal(granted.data.user_id, user.id);
  // The user can sign in again.
  assert.equal((await getUser('me', await login(t, user))).statusCode, 200);
});

test('invited → active by PATCH status active (users.manage): no password is set, audit user.updated; no user.* webhook (it is no reactivation), access.granted for the Application it holds', async () => {
  const { user } = await subject('invited');
  const m = await mark(user.id);
  const body = assertStatus(await patch(user.id, { status: 'active' }), 200);
  assert.equal(body.status, 'active');
  const identities = await sql(t, 'SELECT password_hash FROM identities WHERE user_id = $1', [user.id]);
  assert.ok(identities.every((i) => i.password_hash === null), 'no password');
  const res = await call(t, 'POST', '/v1/auth/login', null, { email: user.email, password: user.password });
  assertError(res, 401, 'invalid_credentials');
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action), ['user.updated']);
  assert.equal(audit[0].before.status, 'invited');
  assert.equal(audit[0].after.status, 'active');
  assert.deepEqual(outbox.map((e) => `${e.type}:${e.application_id ?? ''}`), [`access.granted:${appA.id}`], 'no user.reactivated webhook');
});

test('PATCH status with the status the user already has (active) is no transition: 200 with no change and no events', async () => {
  const { user } = await subject();
  const before = await userRow(t, user.id);
  const m = await mark(user.id);
  const body = assertStatus(await patch(user.id, { status: 'active' }), 200);
  assert.equal(body.status, 'active');
  assert.equal(body.updated_at, before!.updated_at.toISOString());
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit, [], 'no audit rows');
  assert.deepEqual(outbox, [], 'no webhook or access events');
});

test('active → deleted by DELETE (users.manage): 204, soft delete (deleted_at set), all sessions revoked, access.revoked (reason user_deleted), audit user.deleted, webhook user.deleted', async () => {
  const { user, tokens } = await subject();
  const m = await mark(user.id);
  const res = await remove(user.id);
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(res.body, '');
  const row = await userRow(t, user.id);
  assert.equal(row!.status, 'deleted');
  assert.ok(row!.deleted_at instanceof Date, 'deleted_at set');
  assert.equal(await liveSessionCount(t, user.id), 0);
  assert.equal((await getUser('me', tokens[1])).statusCode, 401);
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action), ['user.deleted']);
  assert.equal(audit[0].actor_id, admin.user.id);
  assert.equal(audit[0].after.status, 'deleted');
  assert.deepEqual(outbox.map((e) => `${e.type}:${e.application_id ?? ''}:${e.data.reason ?? ''}`).sort(), [
    `access.revoked:${appA.id}:user_deleted`,
    'user.deleted::',
  ]);
  // Soft-deleted users are visible only to users.manage.
  assert.equal(assertStatus(await getUser(user.id), 200).status, 'deleted');
  assertError(await getUser(user.id, support.token), 404, 'user_not_found');
});

test('active → deleted by DELETE as the user themself: 204 with the same effects, audited with the user as actor', async () => {
  const { user, tokens } = await subject();
  const m = await mark(user.id);
  assert.equal((await remove('me', tokens[0])).statusCode, 204);
  assert.equal((await userRow(t, user.id))!.status, 'deleted');
  assert.equal(await liveSessionCount(t, user.id), 0);
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => `${a.action}:${a.actor_type}:${a.actor_id}`), [`user.deleted:user:${user.id}`]);
  assert.deepEqual(outbox.map((e) => e.type).sort(), ['access.revoked', 'user.deleted']);
});

test('suspended → deleted and invited → deleted by DELETE: 204, audit user.deleted, webhook user.deleted, no access.revoked (no active access)', async () => {
  const suspended = (await suspendedSubject()).user;
  const invited = (await subject('invited')).user;
  for (const user of [suspended, invited]) {
    const m = await mark(user.id);
    assert.equal((await remove(user.id)).statusCode, 204);
    assert.equal((await userRow(t, user.id))!.status, 'deleted');
    const { audit, outbox } = await since(user.id, m);
    assert.deepEqual(audit.map((a) => a.action), ['user.deleted']);
    assert.deepEqual(outbox.map((e) => e.type), ['user.deleted']);
  }
});

test('suspended → deleted and invited → deleted by erasure request (users.manage): 202, soft delete (deleted_at set), audit user.deleted beside user.erasure_requested, webhook user.deleted, no access.revoked (no active access); the email is reusable at once', async () => {
  const suspended = (await suspendedSubject()).user;
  const invited = (await subject('invited')).user;
  for (const user of [suspended, invited]) {
    const m = await mark(user.id);
    assert.equal(assertStatus(await call(t, 'POST', `/v1/users/${user.id}/erasure-requests`, admin.token, {}), 202).status, 'scheduled');
    const row = await userRow(t, user.id);
    assert.equal(row!.status, 'deleted', user.email);
    assert.ok(row!.deleted_at instanceof Date, 'deleted_at set');
    const { audit, outbox } = await since(user.id, m);
    assert.deepEqual(audit.map((a) => a.action).sort(), ['user.deleted', 'user.erasure_requested']);
    assert.deepEqual(outbox.map((e) => e.type), ['user.deleted']);
    assertStatus(await call(t, 'POST', '/v1/users', admin.token, { email: user.email, send_invitation: false }), 201);
  }
});

test('soft delete: the email is reusable at once', async () => {
  const { user } = await deletedSubject();
  const res = await call(t, 'POST', '/v1/users', admin.token, { email: user.email, send_invitation: false });
  const created = assertStatus(res, 201);
  assert.notEqual(created.id, user.id);
  assert.equal(created.email, user.email);
});

test('deleted → active by PATCH status active (users.manage): restore, access.granted per Application (reason user_reactivated), audit user.reactivated, webhook user.reactivated', async () => {
  const { user } = await deletedSubject();
  const m = await mark(user.id);
  const body = assertStatus(await patch(user.id, { status: 'active' }), 200);
  assert.equal(body.status, 'active');
  assert.equal((await userRow(t, user.id))!.deleted_at, null);
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action), ['user.reactivated']);
  assert.equal(audit[0].before.status, 'deleted');
  assert.deepEqual(outbox.map((e) => `${e.type}:${e.application_id ?? ''}:${e.data.reason ?? ''}`).sort(), [
    `access.granted:${appA.id}:user_reactivated`,
    'user.reactivated::',
  ]);
  // The restored user signs in with the old password.
  assert.equal((await getUser('me', await login(t, user))).statusCode, 200);
});

test('restore is rejected 409 email_taken if the email was taken meanwhile, and succeeds when a new email is sent in the same request', async () => {
  const { user } = await deletedSubject();
  const taker = await createUser(t, { email: user.email });
  const m = await mark(user.id);
  assertError(await patch(user.id, { status: 'active' }), 409, 'email_taken');
  assert.equal((await userRow(t, user.id))!.status, 'deleted', 'nothing changed');
  assert.deepEqual((await since(user.id, m)).audit, []);

  const newEmail = uniqueEmail('restored');
  const body = assertStatus(await patch(user.id, { status: 'active', email: newEmail }), 200);
  assert.equal(body.status, 'active');
  assert.equal(body.email, newEmail);
  assert.equal(body.email_verified, false, 'an admin email change resets email_verified');
  assert.equal((await userRow(t, taker.id))!.email, user.email, 'the new holder keeps the address');
  const { audit, outbox } = await since(user.id, m);
  // The audit row's before is the user as it was: deleted, with the old email (never a mix of the two).
  const reactivated = audit.find((a) => a.action === 'user.reactivated');
  assert.ok(reactivated, 'reactivated');
  assert.deepEqual([reactivated.before.status, reactivated.before.email], ['deleted', user.email]);
  assert.deepEqual([reactivated.after.status, reactivated.after.email], ['active', newEmail]);
  assert.ok(outbox.some((e) => e.type === 'access.granted' && e.data.reason === 'user_reactivated'), 'outbox.some((e) => e.type === \'access.granted\' && e.data.reason === \'user_reactivated\')');
  // An admin email change (here, within the restore) sends a verification email to the new address.
  assert.equal((await mailsTo(t, newEmail, 'email_verification')).length, 1, 'verification email sent to the new address');
});

test('restore with the user\'s own current email (in any case) is no email change: email_verified stays true, no mail, no user.email_changed; the restore proceeds as usual', async () => {
  const { user } = await deletedSubject();
  const m = await mark(user.id);
  const body = assertStatus(await patch(user.id, { status: 'active', email: user.email.toUpperCase() }), 200);
  assert.equal(body.status, 'active');
  assert.equal(body.email, user.email, 'the stored address is unchanged');
  assert.equal(body.email_verified, true);
  const row = (await userRow(t, user.id))!;
  assert.equal(row.email, user.email);
  assert.equal(row.email_verified, true);
  assert.equal(row.deleted_at, null);
  assert.deepEqual(await mailsTo(t, user.email), [], 'no verification mail');
  const { audit, outbox } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action), ['user.reactivated'], 'no user.email_changed');
  assert.ok(outbox.some((e) => e.type === 'user.reactivated'), 'outbox.some((e) => e.type === \'user.reactivated\')');
  assert.equal((await getUser('me', await login(t, user))).statusCode, 200);
});

test('restore is rejected 409 erasure_scheduled while an erasure is scheduled; after cancelling, restore works', async () => {
  const { user } = await subject();
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/erasure-requests`, admin.token, {}), 202);
  assertError(await patch(user.id, { status: 'active' }), 409, 'erasure_scheduled');
  assert.equal((await userRow(t, user.id))!.status, 'deleted');
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}/erasure-requests/current`, admin.token)).statusCode, 204);
  assert.equal(assertStatus(await patch(user.id, { status: 'active' }), 200).status, 'active');
});

test('PATCH status deleted is rejected 409 invalid_status_transition from any status (use DELETE)', async () => {
  const users = [(await subject()).user, (await suspendedSubject()).user, (await subject('invited')).user, (await deletedSubject()).user];
  for (const user of users) {
    const before = (await userRow(t, user.id))!.status;
    const m = await mark(user.id);
    assertError(await patch(user.id, { status: 'deleted' }), 409, 'invalid_status_transition');
    assert.equal((await userRow(t, user.id))!.status, before);
    assert.deepEqual(await since(user.id, m), { audit: [], outbox: [] });
  }
});

test('PATCH status invited is rejected 409 invalid_status_transition from any status', async () => {
  const users = [(await subject()).user, (await suspendedSubject()).user, (await deletedSubject()).user, (await subject('invited')).user];
  for (const user of users) {
    const before = (await userRow(t, user.id))!.status;
    const m = await mark(user.id);
    assertError(await patch(user.id, { status: 'invited' }), 409, 'invalid_status_transition');
    assert.equal((await userRow(t, user.id))!.status, before);
    assert.deepEqual(await since(user.id, m), { audit: [], outbox: [] });
  }
});

test('moves not in the table are rejected 409 invalid_status_transition: invited → suspended, deleted → suspended', async () => {
  const invited = (await subject('invited')).user;
  assertError(await suspend(invited.id), 409, 'invalid_status_transition');
  assertError(await patch(invited.id, { status: 'suspended' }), 409, 'invalid_status_transition');
  assert.equal((await userRow(t, invited.id))!.status, 'invited');
  const deleted = (await deletedSubject()).user;
  assertError(await suspend(deleted.id), 409, 'invalid_status_transition');
  assertError(await patch(deleted.id, { status: 'suspended' }), 409, 'invalid_status_transition');
  assert.equal((await userRow(t, deleted.id))!.status, 'deleted');
});

test('a self-service caller sending status gets 403 status_change_forbidden, whatever else the body sends (a read-only field too), and nothing changes', async () => {
  const { user, tokens } = await subject();
  const m = await mark(user.id);
  for (const payload of [{ status: 'active' }, { status: 'suspended' }, { status: 'deleted' }, { email: uniqueEmail('x'), status: 'active' }, { status: 'active', email_verified: true }]) {
    assertError(await patch('me', payload, tokens[0]), 403, 'status_change_forbidden');
    assertError(await patch(user.id, payload, tokens[0]), 403, 'status_change_forbidden');
  }
  const row = await userRow(t, user.id);
  assert.equal(row!.status, 'active');
  assert.equal(row!.pending_email, null);
  assert.deepEqual(await since(user.id, m), { audit: [], outbox: [] });
});

test('a users.manage holder cannot change their own status either: PATCH status on oneself is 403 status_change_forbidden, POST suspend on oneself likewise, and nothing changes', async () => {
  const manager = await userToken(t, { roles: ['superadmin'] });
  const m = await mark(manager.user.id);
  for (const id of ['me', manager.user.id]) {
    assertError(await patch(id, { status: 'suspended' }, manager.token), 403, 'status_change_forbidden');
    assertError(await patch(id, { status: 'active' }, manager.token), 403, 'status_change_forbidden');
    assertError(await suspend(id, manager.token, {}), 403, 'status_change_forbidden');
  }
  assert.equal((await userRow(t, manager.user.id))!.status, 'active');
  assert.deepEqual(await since(manager.user.id, m), { audit: [], outbox: [] });
  // The session survives: a self-suspension would have revoked it.
  assertStatus(await getUser('me', manager.token), 200);
});

test('only users.manage changes status: a users.list holder gets 403 forbidden, another user 404 user_not_found', async () => {
  const { user } = await subject();
  const other = await userToken(t);
  assertError(await patch(user.id, { status: 'suspended' }, support.token), 403, 'forbidden');
  assertError(await patch(user.id, { status: 'suspended' }, other.token), 404, 'user_not_found');
  assertError(await suspend(user.id, support.token), 403, 'forbidden');
  assert.equal((await userRow(t, user.id))!.status, 'active');
});

// Moves the clock 7 days: keep last.
test('restore after the erasure cascade finished is rejected 404 user_not_found', async () => {
  const { user } = await subject();
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/erasure-requests`, admin.token, { reason: 'gdpr' }), 202);
  t.clock.advance(7 * DAY + 1);
  const result = await t.deps.jobs.runNow('erasure-cascade');
  assert.ok(Number(result.erased) >= 1, JSON.stringify(result));
  const fresh = await login(t, admin.user);
  assertError(await patch(user.id, { status: 'active' }, fresh), 404, 'user_not_found');
  assertError(await getUser(user.id, fresh), 404, 'user_not_found');
  assert.equal((await userRow(t, user.id))!.status, 'deleted');
});

test('concurrent status changes follow the status table: two DELETEs write user.deleted once; DELETE racing suspend or reactivate never brings a deleted user back', async () => {
  const { token } = await userToken(t, { roles: ['superadmin'] }); // earlier tests moved the clock past admin's token
  for (let i = 0; i < 3; i++) {
    const twice = await createUser(t);
    const deletes = await Promise.all([1, 2].map(() => call(t, 'DELETE', `/v1/users/${twice.id}`, token)));
    assert.deepEqual(deletes.map((r) => r.statusCode), [204, 204]);
    assert.equal((await auditFor(t, twice.id, 'user.deleted')).length, 1, 'one deletion, one audit row');
    assert.equal((await outboxFor(t, twice.id)).filter((e) => e.type === 'user.deleted').length, 1, 'one user.deleted event');

    const raced = await createUser(t);
    await Promise.all([call(t, 'DELETE', `/v1/users/${raced.id}`, token), call(t, 'POST', `/v1/users/${raced.id}/suspend`, token, {})]);
    assert.equal((await userRow(t, raced.id))!.status, 'deleted', 'a suspend after the delete is refused, not applied');

    const suspended = await createUser(t);
    assertStatus(await call(t, 'POST', `/v1/users/${suspended.id}/suspend`, token, {}), 200);
    await Promise.all([call(t, 'DELETE', `/v1/users/${suspended.id}`, token), call(t, 'PATCH', `/v1/users/${suspended.id}`, token, { status: 'active' })]);
    const end = (await userRow(t, suspended.id))!;
    // The two changes must form a serial history of the status table, each starting from the state the
    // other left (audit rows carry before and after; their timestamps are the requests' start, not
    // their commit order): reactivate then delete, or delete then restore. Never both from suspended.
    const moves = (await auditFor(t, suspended.id)).filter((a) => a.action === 'user.deleted' || a.action === 'user.reactivated').map((a: any) => [a.before.status, a.after.status]);
    assert.equal(moves.length, 2, JSON.stringify(moves));
    const serial = [moves, [...moves].reverse()].some(([a, b]) => a[0] === 'suspended' && b[0] === a[1] && b[1] === end.status);
    assert.ok(serial, `final ${end.status} after ${JSON.stringify(moves)}`);
    if (end.status === 'active') assert.equal(end.deleted_at, null);
  }
});

test('PATCH /v1/users/{id} with a read-only field (mfa_enabled, signup_application_id, id, test_mode, email_verified, created_at…) is 422 read_only_field naming it, for the user and for users.manage, and changes nothing', async () => {
  const self = await userToken(t);
  const manager = await userToken(t, { roles: ['superadmin'] }); // earlier tests move the clock past admin's token
  const before = await userRow(t, self.user.id);
  const cases: [Record<string, unknown>, string[]][] = [
    [{ mfa_enabled: true }, ['mfa_enabled']],
    [{ signup_application_id: appA.id }, ['signup_application_id']],
    [{ email: uniqueEmail('ro'), email_verified: true }, ['email_verified']],
    [{ id: 'usr_other', test_mode: true, created_at: '2020-01-01T00:00:00Z' }, ['id', 'test_mode', 'created_at']],
  ];
  for (const [body, fields] of cases) {
    for (const [who, token] of [['me', self.token], [self.user.id, manager.token]] as const) {
      const error = assertError(await call(t, 'PATCH', `/v1/users/${who}`, token, body), 422, 'read_only_field');
      assert.deepEqual([...error.details.fields].sort(), [...fields].sort(), JSON.stringify(body));
    }
  }
  assert.deepEqual(await userRow(t, self.user.id), before);
  assert.equal((await mailsTo(t, self.user.email)).length, 0);
  assertError(await call(t, 'PATCH', '/v1/users/me', self.token, { nickname: 'x' }), 422, 'validation_failed');
});

/** Earlier tests move the clock past the 15-minute access tokens: sign the callers in again. */
async function freshTokens() {
  admin.token = await login(t, admin.user);
  support.token = await login(t, support.user);
}

test('restore colliding with an invited user gets 409 email_taken with details.reason invitation_pending: the email taken meanwhile by an invitation, and a new email sent in the same request held by one', async () => {
  await freshTokens();
  const { user } = await deletedSubject();
  const invitee = await createUser(t, { email: user.email, status: 'invited' });
  const m = await mark(user.id);
  const res = await patch(user.id, { status: 'active' });
  assert.equal(assertError(res, 409, 'email_taken').details.reason, 'invitation_pending', res.body);

  const other = await createUser(t, { status: 'invited' });
  const withEmail = await patch(user.id, { status: 'active', email: other.email });
  assert.equal(assertError(withEmail, 409, 'email_taken').details.reason, 'invitation_pending', withEmail.body);

  const row = (await userRow(t, user.id))!;
  assert.deepEqual([row.status, row.email], ['deleted', user.email], 'nothing changed');
  assert.deepEqual((await since(user.id, m)).audit, []);
  assert.equal((await userRow(t, invitee.id))!.status, 'invited');
});

test('a restore that sends a new email is an admin email change: it completes at once and writes audit user.email_changed (old and new address) besides user.reactivated', async () => {
  await freshTokens();
  const { user } = await deletedSubject();
  const m = await mark(user.id);
  const newEmail = uniqueEmail('restored-changed');
  assertStatus(await patch(user.id, { status: 'active', email: newEmail }), 200);
  const { audit } = await since(user.id, m);
  assert.deepEqual(audit.map((a) => a.action).sort(), ['user.email_changed', 'user.reactivated']);
  const changed = audit.find((a) => a.action === 'user.email_changed')!;
  assert.equal(changed.actor_id, admin.user.id);
  assert.equal(changed.before.email, user.email);
  assert.equal(changed.after.email, newEmail);
});

test('soft-deleted users are visible only to users.manage: a users.list holder gets 404 user_not_found for GET /v1/users/{id} of a deleted user, users.manage gets it with status deleted', async () => {
  await freshTokens();
  const { user } = await deletedSubject();
  assertError(await getUser(user.id, support.token), 404, 'user_not_found');
  assert.equal(assertStatus(await getUser(user.id), 200).status, 'deleted');
});

test('Part A Errors, email_taken on restore: an address taken meanwhile by a suspended user is 409 email_taken without details.reason; the user stays deleted, nothing written', async () => {
  const { user } = await deletedSubject();
  await createUser(t, { email: user.email, status: 'suspended' });
  const m = await mark(user.id);
  assert.deepEqual(assertError(await patch(user.id, { status: 'active' }), 409, 'email_taken').details, {});
  const row = (await userRow(t, user.id))!;
  assert.equal(row.status, 'deleted');
  assert.notEqual(row.deleted_at, null);
  assert.deepEqual(await since(user.id, m), { audit: [], outbox: [] });
});

test('Part A Errors, erasure_scheduled ("Restore while erasure pending"): a restore that also sends a new email is 409 erasure_scheduled too; email, status and pending erasure unchanged, nothing sent', async () => {
  const { user } = await subject();
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/erasure-requests`, admin.token, {}), 202);
  const m = await mark(user.id);
  const newEmail = uniqueEmail('restored');
  assertError(await patch(user.id, { status: 'active', email: newEmail }), 409, 'erasure_scheduled');
  const row = (await userRow(t, user.id))!;
  assert.deepEqual([row.status, row.email], ['deleted', user.email]);
  assert.deepEqual(await since(user.id, m), { audit: [], outbox: [] });
  assert.deepEqual(await mailsTo(t, newEmail), []);
  assert.equal((await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]))[0].status, 'scheduled');
});

test('a superadmin\'s account is changed by another only if that one is a superadmin: a users.manage holder without it (User token or API key) gets 403 forbidden on its email, status, Profile, sessions, TOTP, export and erasure, and nothing changes; on a user who is no superadmin the same calls work', async () => {
  const managerRole = await createPlatformRole(t, ['users.list', 'users.manage']);
  const manager = await userToken(t, { roles: [managerRole] });
  const key = (await createApiKey(t, { permissions: ['users.list', 'users.manage'] })).secret;
  // TOTP on, so that a reset which went through would show.
  const target = await createMfaUser(t, { roles: ['superadmin'] });
  const id = target.user.id;
  const profileBefore = assertStatus(await call(t, 'GET', `/v1/users/${id}/profile`, admin.token), 200);
  const m = await mark(id);
  const attempts: [string, string, object | undefined][] = [
    ['PATCH', `/v1/users/${id}`, { email: uniqueEmail('takeover') }],
    ['PATCH', `/v1/users/${id}`, { status: 'suspended' }],
    ['POST', `/v1/users/${id}/suspend`, {}],
    ['PATCH', `/v1/users/${id}/profile`, { display_name: 'Taken' }],
    ['DELETE', `/v1/users/${id}/mfa/totp`, undefined],
    ['GET', `/v1/users/${id}/export`, undefined],
    ['POST', `/v1/users/${id}/erasure-requests`, {}],
    ['DELETE', `/v1/users/${id}`, undefined],
  ];
  for (const cred of [manager.token, key]) {
    for (const [method, url, body] of attempts) {
      const err = assertError(await call(t, method, url, cred, body), 403, 'forbidden');
      assert.equal(err.details.required_role, 'superadmin', `${method} ${url}`);
    }
    const [session] = assertStatus(await call(t, 'GET', `/v1/users/${id}/sessions`, admin.token), 200).data;
    assertError(await call(t, 'DELETE', `/v1/users/${id}/sessions/${session.id}`, cred), 403, 'forbidden');
  }
  const row = (await userRow(t, id))!;
  assert.equal(row.status, 'active');
  assert.equal(row.email, target.user.email);
  assert.ok((await liveSessionCount(t, id)) >= 1, 'the sessions stay');
  assert.deepEqual(await since(id, m), { audit: [], outbox: [] }, 'no audit row, no event');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/users/${id}/profile`, admin.token), 200), profileBefore, 'the Profile is as it was');
  assert.equal(assertStatus(await call(t, 'GET', '/v1/users/me', target.token), 200).mfa_enabled, true, 'TOTP stays on');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM erasure_requests WHERE user_id = $1', [id]))[0].n, 0, 'no erasure scheduled');
  // Another superadmin may; and the manager may act on a user who is no superadmin.
  assertStatus(await call(t, 'POST', `/v1/users/${id}/suspend`, admin.token, {}), 200);
  const plain = await createUser(t);
  assertStatus(await call(t, 'POST', `/v1/users/${plain.id}/suspend`, manager.token, {}), 200);
  assertStatus(await call(t, 'PATCH', `/v1/users/${plain.id}/profile`, key, { display_name: 'Renamed' }), 200);
});

test('Part A "GET /v1/users/{id}/sessions | self or users.manage" and GET …/settings: a users.manage holder who is no superadmin reads a superadmin\'s sessions and Settings (200, reads change no account), while revoking a session and PATCH of the Settings stay 403 forbidden (required_role superadmin) and change nothing', async () => {
  const managerRole = await createPlatformRole(t, ['users.list', 'users.manage']);
  const manager = await userToken(t, { roles: [managerRole] });
  const target = await userToken(t, { roles: ['superadmin'] });
  const id = target.user.id;
  const sessions = assertStatus(await call(t, 'GET', `/v1/users/${id}/sessions`, manager.token), 200);
  assert.ok(sessions.data.length >= 1);
  assert.equal(sessions.data.some((s: { current: boolean }) => s.current), false, 'none is the caller\'s');
  const settings = assertStatus(await call(t, 'GET', `/v1/users/${id}/settings`, manager.token), 200);
  assert.equal(settings.user_id, id);

  const before = await mark(id);
  assert.equal(assertError(await call(t, 'DELETE', `/v1/users/${id}/sessions/${sessions.data[0].id}`, manager.token), 403, 'forbidden').details.required_role, 'superadmin');
  assert.equal(assertError(await call(t, 'PATCH', `/v1/users/${id}/settings`, manager.token, { theme: 'dark' }), 403, 'forbidden').details.required_role, 'superadmin');
  assert.deepEqual(await mark(id), before, 'no audit row, no event');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/users/${id}/settings`, target.token), 200).theme, settings.theme);
  assert.ok((await liveSessionCount(t, id)) >= 1, 'the sessions stay');
});

test('a sign-in whose password step came before a suspension or a delete starts no session after the reactivation or restore (suspended → active, deleted → active): its MFA challenge is void, 401 invalid_credentials', async () => {
  const manager = await userToken(t, { roles: ['superadmin'] });
  for (const end of ['suspend', 'delete'] as const) {
    const { user, secret } = await createMfaUser(t);
    const mfaToken = await mfaChallenge(t, user);
    if (end === 'suspend') assertStatus(await suspend(user.id, manager.token), 200);
    else assertStatus(await remove(user.id, manager.token), 204);
    assertStatus(await patch(user.id, { status: 'active' }, manager.token), 200);
    // The next step's code: the current one was spent confirming the enrollment.
    assertError(await call(t, 'POST', '/v1/auth/mfa/verify', null, { mfa_token: mfaToken, code: await totpCode(t, secret, 1) }), 401, 'invalid_credentials');
    assert.equal(await liveSessionCount(t, user.id), 0, `${end}: no session`);
  }
});

test('a pending email change ends with a suspension or a delete: the stored pending_email is cleared with its link (users row), so a reactivation or restore brings no pending address back', async () => {
  const manager = await userToken(t, { roles: ['superadmin'] });
  for (const end of ['suspend', 'delete'] as const) {
    const user = await createUser(t);
    const pending = uniqueEmail('pending-end');
    assertStatus(await call(t, 'PATCH', '/v1/users/me', await login(t, user), { email: pending }), 200);
    assert.equal((await userRow(t, user.id))!.pending_email, pending, 'precondition: a pending change');
    if (end === 'suspend') assertStatus(await suspend(user.id, manager.token), 200);
    else assertStatus(await remove(user.id, manager.token), 204);
    assert.equal((await userRow(t, user.id))!.pending_email, null, `${end}: pending_email cleared`);
    const back = assertStatus(await patch(user.id, { status: 'active' }, manager.token), 200);
    assert.equal(back.pending_email, null);
    assert.equal((await userRow(t, user.id))!.pending_email, null);
  }
});
