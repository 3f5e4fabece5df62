// Part A, Users: export, erasure requests and the 7-day hard-delete cascade, and the nightly purge
// of test data. Tests here move the clock forward by days; each signs in again as it needs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, storageName, TEST_DATABASE_URL, withStoppedClock, type TestApp } from '../helpers/app.js';
import { purgeTestData } from '../../src/modules/users/purge.js';
import { blockedBy, client, commitWhileWaiting, probeWhileHeld } from '../helpers/locks.js';
import { createApiKey, createUser, login, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { createMfaUser, mfaChallenge, totpCode } from '../auth/support.js';
import {
  assertError, assertStatus, auditFor, auditOfTarget, call, createApplication, createOrganization, DAY, grant, latestToken, liveSessionCount,
  orgGrant, outboxFor, rand, sql, userRow,
} from './support.js';

let t: TestApp;
let adminUser: TestUser;

before(async () => {
  t = await buildTestApp();
  adminUser = await createUser(t, { roles: ['superadmin'] });
});
after(() => t.close());

const asAdmin = () => login(t, adminUser);
const exportOf = (id: string, token: string) => call(t, 'GET', `/v1/users/${id}/export`, token);
const requestErasure = (id: string, token: string, payload: object = {}) => call(t, 'POST', `/v1/users/${id}/erasure-requests`, token, payload);
const cancelErasure = (id: string, token: string) => call(t, 'DELETE', `/v1/users/${id}/erasure-requests/current`, token);
const count = async (table: string, where: string, params: unknown[]) =>
  (await sql<{ n: number }>(t, `SELECT count(*)::int AS n FROM ${table} WHERE ${where}`, params))[0].n;

/** Moves the clock to `secondsInto` seconds after the start of the next UTC day. */
function alignToDay(secondsInto: number): void {
  const ms = t.clock.now().getTime() % (DAY * 1000);
  t.clock.advance((DAY * 1000 - ms + secondsInto * 1000) / 1000);
}

/**
 * A user holding something of every kind the export covers: a password identity with confirmed
 * TOTP, sessions with refresh tokens, an organization membership, an Application with an
 * entitlement, AppProfile and AppSettings overrides, a pending email change, audit history.
 */
async function richUser() {
  const mfa = await createMfaUser(t);
  const user = mfa.user;
  const verified = await call(t, 'POST', '/v1/auth/mfa/verify', null, { mfa_token: await mfaChallenge(t, user), code: await totpCode(t, mfa.secret) });
  const session = assertStatus(verified, 200);
  const app = await createApplication(t);
  const entitlementId = await grant(t, user.id, app.id);
  await sql(t, `INSERT INTO app_profiles (user_id, application_id, display_handle, custom, updated_at) VALUES ($1, $2, 'handle', '{"fav":"blue"}', now())`, [user.id, app.id]);
  await sql(t, `INSERT INTO app_settings (user_id, application_id, overrides, updated_at) VALUES ($1, $2, '{"dark":true}', now())`, [user.id, app.id]);
  const buddy = await createUser(t);
  const org = await createOrganization(t, [user.id, buddy.id]);
  const pendingEmail = uniqueEmail('pending');
  assertStatus(await call(t, 'PATCH', '/v1/users/me', session.access_token, { email: pendingEmail }), 200);
  const changeToken = await latestToken(t, pendingEmail, 'email_change_verification');
  const key = await createApiKey(t, { createdBy: user.id, permissions: [] });
  return { user, mfa, session, app, entitlementId, buddy, org, pendingEmail, changeToken, key };
}

test('GET /v1/users/{id}/export (self) returns every key of the bundle: exported_at, user, profile, settings, identities, sessions, organizations, roles, applications, audit_events', async () => {
  const r = await richUser();
  const bundle = assertStatus(await exportOf('me', r.session.access_token), 200);
  assert.deepEqual(Object.keys(bundle).sort(), [
    'applications', 'audit_events', 'exported_at', 'identities', 'organizations', 'profile', 'roles', 'sessions', 'settings', 'user',
  ]);
  assert.ok(!Number.isNaN(Date.parse(bundle.exported_at)), '!Number.isNaN(Date.parse(bundle.exported_at))');
  assert.equal(bundle.user.id, r.user.id);
  assert.equal(bundle.user.email, r.user.email);
  assert.equal(bundle.user.pending_email, r.pendingEmail);
  assert.equal(bundle.profile.user_id, r.user.id);
  for (const k of ['theme', 'timezone', 'notifications', 'locale']) assert.ok(k in bundle.settings, `settings.${k}`);
  assert.deepEqual(Object.keys(bundle.settings.notifications).sort(), ['email', 'sms']);
  assert.equal(bundle.identities.length, 1);
  assert.deepEqual(Object.keys(bundle.identities[0]).sort(), ['last_used_at', 'method', 'mfa_enabled']);
  assert.equal(bundle.identities[0].method, 'password');
  assert.equal(bundle.identities[0].mfa_enabled, true);
  assert.ok(bundle.sessions.length >= 2, 'bundle.sessions.length >= 2');
  assert.ok(bundle.sessions.some((s: { id: string }) => s.id === r.session.session_id), 'bundle.sessions.some((s: { id: string }) => s.id === r.session.session_id)');
  for (const s of bundle.sessions) assert.deepEqual(Object.keys(s).sort(), ['created_at', 'id', 'ip_address', 'user_agent']);
  assert.deepEqual(bundle.organizations.map((o: any) => [o.organization_id, o.role, o.membership_status, typeof o.joined_at]), [[r.org, 'org_admin', 'active', 'string']]);
  assert.ok(bundle.roles.some((x: any) => x.role_id === 'role_platform_member' && x.application_id === null && typeof x.assigned_at === 'string'), 'bundle.roles.some((x: any) => x.role_id === \'role_platform_member\' && x.application_id === null && typeof x.assigned_at === \'string\')');
  const app = bundle.applications.find((a: any) => a.application_id === r.app.id);
  assert.ok(app, JSON.stringify(bundle.applications));
  assert.equal(app.entitlement.status, 'active');
  assert.equal(app.entitlement.source, 'admin_grant');
  assert.ok(app.entitlement.starts_at, 'app.entitlement.starts_at');
  assert.equal(app.app_profile.display_handle, 'handle');
  assert.deepEqual(app.app_profile.custom, { fav: 'blue' });
  assert.deepEqual(app.app_settings, { dark: true });
  const actions = bundle.audit_events.map((e: { action: string }) => e.action);
  assert.ok(actions.includes('user.created') && actions.includes('user.mfa_enabled'), actions.join());
});

test('every timestamp of the export is ISO 8601 UTC with Z and milliseconds, as everywhere in the API (also those built in SQL: entitlement starts_at, app_profile updated_at)', async () => {
  const r = await richUser();
  const bundle = assertStatus(await exportOf('me', r.session.access_token), 200);
  const app = bundle.applications.find((a: any) => a.application_id === r.app.id);
  assert.match(app.entitlement.starts_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  assert.equal(app.entitlement.ends_at, null);
  assert.match(app.app_profile.updated_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  const stamps: string[] = [];
  const walk = (v: unknown, key: string) => {
    if (typeof v === 'string' && /(_at|_for)$/.test(key)) stamps.push(`${key}=${v}`);
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, Array.isArray(v) ? key : k);
  };
  walk(bundle, '');
  assert.ok(stamps.length > 10, stamps.join());
  assert.deepEqual(stamps.filter((s) => !/=\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(s)), []);
});

test('the export\'s audit_events are the user\'s own trail in hot storage, shaped as GET /v1/audit-events returns them; organizations include a pending invitation', async () => {
  const { user, token } = await (async () => {
    const u = await createUser(t);
    return { user: u, token: await login(t, u) };
  })();
  const bundle = assertStatus(await exportOf('me', token), 200);
  const listed = assertStatus(await call(t, 'GET', '/v1/audit-events?target_user_id=me&limit=100', token), 200).data;
  assert.ok(bundle.audit_events.length > 0, 'bundle.audit_events.length > 0');
  assert.deepEqual(bundle.audit_events, [...listed].reverse(), 'the same events, oldest first');
  // Outside the 365-day hot window, an event is no longer exported.
  t.clock.advance(366 * DAY);
  const later = await login(t, user);
  const old = assertStatus(await exportOf('me', later), 200).audit_events.map((e: { id: string }) => e.id);
  for (const e of bundle.audit_events) assert.ok(!old.includes(e.id), `${e.action} is older than the hot window`);
  // A pending Organization invitation is data about the user too.
  const orgAdmin = await createUser(t);
  const orgToken = await login(t, orgAdmin);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgToken, { name: 'Export Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgToken, { email: user.email }), 201);
  const withInvite = assertStatus(await exportOf('me', later), 200);
  assert.deepEqual(withInvite.organizations, [{ organization_id: org.id, role: 'member', membership_status: 'pending', joined_at: null }]);
});

test('the export never contains a password hash, MFA secret, token or key secret', async () => {
  const r = await richUser();
  const res = await exportOf(r.user.id, await asAdmin());
  assertStatus(res, 200);
  const text = res.body;
  const identity = (await sql(t, 'SELECT password_hash, totp_secret FROM identities WHERE user_id = $1', [r.user.id]))[0];
  const forbidden: Record<string, string> = {
    argon2: '$argon2',
    password_hash: identity.password_hash,
    totp_secret: r.mfa.secret,
    stored_totp_secret: identity.totp_secret,
    refresh_token: r.session.refresh_token,
    access_token: r.session.access_token,
    enrollment_access_token: r.mfa.token,
    email_change_token: r.changeToken,
    api_key_secret: r.key.secret,
    ...Object.fromEntries(r.mfa.recoveryCodes.map((c, i) => [`recovery_code_${i}`, c])),
  };
  for (const [what, value] of Object.entries(forbidden)) {
    assert.ok(value, what);
    assert.ok(!text.includes(value), `the export contains the ${what}`);
  }
  for (const column of ['password_hash', 'totp_secret', 'token_hash', 'secret_hash', 'code_hash']) assert.ok(!text.includes(column), column);
});

test('the export holds only the user\'s own rows: another user\'s sessions, Entitlement, AppProfile and AppSettings on the same Application are not in it', async () => {
  const r = await richUser();
  const other = r.buddy;
  await login(t, other);
  t.clock.advance(1); // the other user's grant is the newer one on the Application
  await grant(t, other.id, r.app.id);
  await sql(t, `INSERT INTO app_profiles (user_id, application_id, display_handle, custom, updated_at) VALUES ($1, $2, 'someone-else', '{"fav":"red"}', now())`, [other.id, r.app.id]);
  await sql(t, `INSERT INTO app_settings (user_id, application_id, overrides, updated_at) VALUES ($1, $2, '{"dark":false}', now())`, [other.id, r.app.id]);
  const otherApp = await createApplication(t);
  await grant(t, other.id, otherApp.id);
  const bundle = assertStatus(await exportOf('me', r.session.access_token), 200);
  const own = await sql<{ id: string }>(t, 'SELECT id FROM sessions WHERE user_id = $1 ORDER BY created_at', [r.user.id]);
  assert.deepEqual(bundle.sessions.map((s: { id: string }) => s.id), own.map((s) => s.id));
  assert.deepEqual(bundle.applications.map((a: any) => a.application_id), [r.app.id]);
  const [app] = bundle.applications;
  assert.equal(app.entitlement.id, r.entitlementId);
  assert.deepEqual([app.app_profile.display_handle, app.app_profile.custom], ['handle', { fav: 'blue' }]);
  assert.deepEqual(app.app_settings, { dark: true });
});

test('the export\'s identities show mfa_enabled as the User does: a TOTP enrolment begun but never confirmed is not mfa_enabled; once confirmed it is', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const begun = assertStatus(await call(t, 'POST', '/v1/users/me/mfa/totp', token), 200);
  assert.ok(begun.secret, 'precondition: an enrolment is under way');
  const pending = assertStatus(await exportOf('me', token), 200);
  assert.deepEqual(pending.identities.map((i: any) => [i.method, i.mfa_enabled]), [['password', false]]);
  assert.equal(pending.user.mfa_enabled, false);
  assertStatus(await call(t, 'POST', '/v1/users/me/mfa/totp/confirm', token, { code: await totpCode(t, begun.secret) }), 200);
  const enabled = assertStatus(await exportOf('me', token), 200);
  assert.deepEqual(enabled.identities.map((i: any) => [i.method, i.mfa_enabled]), [['password', true]]);
  assert.equal(enabled.user.mfa_enabled, true);
});

test('export is limited to 5 calls per user per day (self and admin calls count together): the 6th gets 429 rate_limited with Retry-After; the next day it works again', async () => {
  alignToDay(60);
  const user = await createUser(t);
  const token = await login(t, user);
  const admin = await asAdmin();
  for (let i = 0; i < 3; i++) assertStatus(await exportOf('me', token), 200);
  for (let i = 0; i < 2; i++) assertStatus(await exportOf(user.id, admin), 200);
  const limited = await exportOf(user.id, admin);
  assertError(limited, 429, 'rate_limited');
  const retryAfter = Number(limited.headers['retry-after']);
  assert.ok(retryAfter >= 1 && retryAfter <= DAY, String(limited.headers['retry-after']));
  assertError(await exportOf('me', token), 429, 'rate_limited');
  // Another user's allowance is untouched.
  assertStatus(await exportOf('me', await login(t, await createUser(t))), 200);
  t.clock.advance(DAY);
  assertStatus(await exportOf('me', await login(t, user)), 200);
});

test('Export calls "5 per user per day": a call is counted for exactly 24 hours: 5 calls at one instant leave none 1 second before they are 24 hours old (429 rate_limited, Retry-After 1), and at exactly 24 hours the next call is allowed', async () => {
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const token = await login(t, user);
    for (let i = 0; i < 5; i++) assertStatus(await exportOf('me', token), 200);
    const first = await exportOf('me', token);
    assertError(first, 429, 'rate_limited');
    assert.equal(first.headers['retry-after'], String(DAY));
    t.clock.advance(DAY - 1);
    const late = await exportOf('me', await login(t, user));
    assertError(late, 429, 'rate_limited');
    assert.equal(late.headers['retry-after'], '1');
    t.clock.advance(1);
    assertStatus(await exportOf('me', await login(t, user)), 200);
  });
});

test('Export calls "5 per user per day" count a rolling 24 hours, not the UTC day: 5 calls at 23:59 UTC leave none for 00:01 UTC; 429 rate_limited with Retry-After until the oldest call leaves the window', async () => {
  alignToDay(DAY - 60); // 23:59:00 UTC
  const user = await createUser(t);
  const token = await login(t, user);
  const stamps: number[] = [];
  for (let i = 0; i < 5; i++) {
    if (i > 0) t.clock.advance(10);
    const before = t.clock.now().getTime();
    assertStatus(await exportOf('me', token), 200);
    stamps.push(before, t.clock.now().getTime());
  }
  t.clock.advance(90); // 00:01 UTC of the next day
  assert.equal(new Date(t.clock.now().getTime() - 90_000).getUTCDate(), new Date(stamps[0]).getUTCDate());
  assert.notEqual(t.clock.now().getUTCDate(), new Date(stamps[0]).getUTCDate());

  const sent = t.clock.now().getTime();
  const limited = await exportOf('me', token);
  const received = t.clock.now().getTime();
  assertError(limited, 429, 'rate_limited');
  // Retry-After: seconds until the first call (between stamps[0] and stamps[1]) is 24 hours old.
  const retryAfter = Number(limited.headers['retry-after']);
  assert.ok(retryAfter >= Math.floor((stamps[0] + DAY * 1000 - received) / 1000), `Retry-After ${retryAfter}`);
  assert.ok(retryAfter <= Math.ceil((stamps[1] + DAY * 1000 - sent) / 1000), `Retry-After ${retryAfter}`);
  assert.ok(retryAfter < DAY - 120 && retryAfter > DAY - 200, `Retry-After ${retryAfter}`);

  // Still refused a little before the oldest call leaves the window (refused calls do not count).
  t.clock.advance(retryAfter - 5);
  assertError(await exportOf('me', await login(t, user)), 429, 'rate_limited');
  // Once it has left, exactly one call is free again; the next waits for the second oldest (10 seconds later).
  t.clock.advance(6);
  const fresh = await login(t, user);
  assertStatus(await exportOf('me', fresh), 200);
  const again = await exportOf(user.id, await asAdmin());
  assertError(again, 429, 'rate_limited');
  const wait = Number(again.headers['retry-after']);
  assert.ok(wait >= 1 && wait <= 10, `Retry-After ${wait}`);
  t.clock.advance(wait);
  assertStatus(await exportOf('me', fresh), 200);
});

test('POST /v1/users/{id}/erasure-requests (self): 202 {user_id, status scheduled, requested_at, scheduled_for = requested_at + 7 days}; the user is soft-deleted at once and every session revoked', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  await grant(t, user.id, app.id);
  const token = await login(t, user);
  await login(t, user);
  const res = await requestErasure('me', token, { reason: 'please forget me' });
  const body = assertStatus(res, 202);
  assert.deepEqual(Object.keys(body).sort(), ['requested_at', 'scheduled_for', 'status', 'user_id']);
  assert.equal(body.user_id, user.id);
  assert.equal(body.status, 'scheduled');
  assert.equal(Date.parse(body.scheduled_for) - Date.parse(body.requested_at), 7 * DAY * 1000);
  const row = await userRow(t, user.id);
  assert.equal(row!.status, 'deleted');
  assert.ok(row!.deleted_at, 'row!.deleted_at');
  assert.equal(await liveSessionCount(t, user.id), 0);
  assert.equal((await call(t, 'GET', '/v1/users/me', token)).statusCode, 401);
  const actions = (await auditFor(t, user.id)).map((a) => a.action);
  assert.ok(actions.includes('user.deleted') && actions.includes('user.erasure_requested'), actions.join());
  const events = (await outboxFor(t, user.id)).map((e) => `${e.type}:${e.data.reason ?? ''}`).sort();
  assert.deepEqual(events, ['access.revoked:user_deleted', 'user.deleted:']);
});

test('an erasure request is idempotent: a repeat returns the existing request with the same body and changes nothing', async () => {
  const user = await createUser(t);
  const first = assertStatus(await requestErasure('me', await login(t, user)), 202);
  const admin = await asAdmin();
  const auditCount = (await auditFor(t, user.id)).length;
  const outboxCount = (await outboxFor(t, user.id)).length;
  const stored = async () => ({
    request: await sql(t, 'SELECT status, reason, requested_at, scheduled_for, requested_by_type, requested_by_id FROM erasure_requests WHERE user_id = $1', [user.id]),
    user: await userRow(t, user.id),
  });
  const before = await stored();
  t.clock.advance(5);
  const again = await requestErasure(user.id, admin);
  assert.deepEqual(assertStatus(again, 202), first);
  assert.deepEqual(assertStatus(await requestErasure(user.id, admin, { reason: 'again' }), 202), first);
  assert.equal((await auditFor(t, user.id)).length, auditCount, 'no new audit rows');
  assert.equal((await outboxFor(t, user.id)).length, outboxCount, 'no new webhook or access events');
  assert.deepEqual(await stored(), before, 'the request (its reason and requester too) and the user row are as they were');
});

test('concurrent erasure requests for one user make one request: the same body for all, one user.erasure_requested and one user.deleted (on PostgreSQL they run at once)', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  const answers = await Promise.all(Array.from({ length: 4 }, () => requestErasure(user.id, admin)));
  const bodies = answers.map((a) => assertStatus(a, 202));
  for (const b of bodies) assert.deepEqual(b, bodies[0]);
  assert.equal((await auditFor(t, user.id, 'user.erasure_requested')).length, 1);
  assert.equal((await auditFor(t, user.id, 'user.deleted')).length, 1);
});

test('an erasure request is allowed for an already soft-deleted user when users.manage: the user stays deleted as they were (no second user.deleted, deleted_at unchanged)', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin)).statusCode, 204);
  const deletedAt = (await userRow(t, user.id))!.deleted_at;
  t.clock.advance(60);
  const body = assertStatus(await requestErasure(user.id, admin), 202);
  assert.equal(body.status, 'scheduled');
  assert.equal((await auditFor(t, user.id, 'user.erasure_requested')).length, 1);
  assert.equal((await auditFor(t, user.id, 'user.deleted')).length, 1);
  assert.equal((await outboxFor(t, user.id)).filter((e) => e.type === 'user.deleted').length, 1);
  assert.deepEqual((await userRow(t, user.id))!.deleted_at, deletedAt);
});

test('DELETE /v1/users/{id}/erasure-requests/current (users.manage) cancels inside the window: 204, the user stays soft-deleted; a second cancel gets 404 erasure_not_scheduled; then the user can be restored', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  assertStatus(await requestErasure(user.id, admin), 202);
  const res = await cancelErasure(user.id, admin);
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(res.body, '');
  assert.equal((await userRow(t, user.id))!.status, 'deleted');
  assertError(await cancelErasure(user.id, admin), 404, 'erasure_not_scheduled');
  // The cascade never runs for a cancelled request.
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const fresh = await asAdmin();
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, fresh, { status: 'active' }), 200).status, 'active');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM identities WHERE user_id = $1', [user.id]))[0].n, 1);
});

test('"users.manage may cancel it inside the window": a cancel just before the 7 days end (scheduled_for not yet reached, the cascade job run) is 204 and the user is never erased', async () => {
  const user = await createUser(t);
  const requested = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  assert.equal(Date.parse(requested.scheduled_for) - Date.parse(requested.requested_at), 7 * DAY * 1000);
  t.clock.advance(7 * DAY - 5);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await userRow(t, user.id))!.erased_at, null, 'not erased before the 7 days');
  const res = await cancelErasure(user.id, await asAdmin());
  assert.equal(res.statusCode, 204, res.body);
  t.clock.advance(DAY);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await userRow(t, user.id))!.erased_at, null, 'a cancelled erasure never runs');
  assert.equal((await auditFor(t, user.id, 'user.erasure_cancelled')).length, 1);
});

test('an erasure can be cancelled only inside the 7-day window: once scheduled_for has passed, before the cascade job ran, cancel is 404 erasure_not_scheduled and the cascade still erases', async () => {
  const user = await createUser(t);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(7 * DAY + 1);
  const admin = await asAdmin();
  assertError(await cancelErasure(user.id, admin), 404, 'erasure_not_scheduled');
  assert.equal((await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]))[0].status, 'scheduled');
  assert.equal((await auditFor(t, user.id, 'user.erasure_cancelled')).length, 0);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'the due cascade ran');
});

test('cancel with nothing scheduled gets 404 erasure_not_scheduled', async () => {
  const user = await createUser(t);
  assertError(await cancelErasure(user.id, await asAdmin()), 404, 'erasure_not_scheduled');
});

test('the hard-delete cascade runs 7 days after the request, not before', async () => {
  const user = await createUser(t);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(7 * DAY - 3600);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await userRow(t, user.id))!.erased_at, null, 'not yet');
  assert.equal(await count('profiles', 'user_id = $1', [user.id]), 1);
  t.clock.advance(3601);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased after 7 days');
  assert.equal((await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]))[0].status, 'completed');
});

test('"7 days later", on the clock: at scheduled_for itself the erasure can no longer be cancelled (404 erasure_not_scheduled) and the cascade erases the user', async () => {
  const user = await createUser(t);
  const scheduledFor = await withStoppedClock(t, async () => {
    const requested = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
    t.clock.advance((Date.parse(requested.scheduled_for) - t.clock.now().getTime()) / 1000);
    assert.equal(t.clock.now().toISOString(), requested.scheduled_for);
    assertError(await cancelErasure(user.id, await asAdmin()), 404, 'erasure_not_scheduled');
    await t.deps.jobs.runNow('erasure-cascade');
    return requested.scheduled_for;
  });
  assert.equal(new Date((await userRow(t, user.id))!.erased_at).toISOString(), scheduledFor, 'erased by the run at scheduled_for');
  assert.equal((await auditFor(t, user.id, 'user.erasure_cancelled')).length, 0);
  assert.equal((await auditFor(t, user.id, 'user.erased')).length, 1);
});

test('"Erasure clears everything exported": a mail recorded against no user but sent to the erased user\'s address before their deletion (a Tenant owner\'s notice, such as webhook_disabled) goes with the cascade; one to another address, or queued after the deletion to the address someone reused, stays', async () => {
  const user = await createUser(t);
  const other = uniqueEmail('notice-other');
  const notice = (id: string, to: string, at: Date) =>
    sql(t, `INSERT INTO emails (id, template, to_address, subject, text_body, test_mode, next_attempt_at, created_at) VALUES ($1, 'webhook_disabled', $2, 'Webhook disabled', 'A subscription was disabled.', false, $3, $3)`, [id, to, at]);
  const before = new Date(t.clock.now().getTime() - 60_000);
  await notice(`eml_${rand()}`, user.email.toUpperCase(), before);
  await notice(`eml_${rand()}`, other, before);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  const reused = `eml_${rand()}`;
  await notice(reused, user.email, new Date(t.clock.now().getTime() + 1_000));
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const left = await sql<{ id: string; to_address: string }>(t, 'SELECT id, to_address FROM emails WHERE lower(to_address) IN (lower($1), lower($2))', [user.email, other]);
  assert.deepEqual(left.map((m) => m.to_address).sort(), [other, user.email].sort(), 'the notice to the erased address before deletion is gone; the others stay');
  assert.ok(left.some((m) => m.id === reused));
});

test('"Erasure clears everything exported": the tombstone user row keeps none of the exported User fields: no address, pending address, signup Application or last sign-in time', async () => {
  const app = await createApplication(t);
  const email = uniqueEmail('tombstone');
  assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email, password: 'tombstone-Passw0rd-here', application_id: app.id }), 201);
  const [{ id }] = await sql<{ id: string }>(t, 'SELECT id FROM users WHERE email = $1', [email]);
  const user = { id, email, password: 'tombstone-Passw0rd-here', mode: 'live' as const };
  const token = await login(t, user);
  const pendingEmail = uniqueEmail('tombstone-pending');
  assertStatus(await call(t, 'PATCH', '/v1/users/me', token, { email: pendingEmail }), 200);
  const before = await userRow(t, user.id);
  assert.deepEqual([before!.pending_email, before!.signup_application_id, before!.last_login_at !== null], [pendingEmail, app.id, true], 'precondition');
  assertStatus(await requestErasure('me', token), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const row = await userRow(t, user.id);
  assert.deepEqual(
    [row!.email, row!.pending_email, row!.signup_application_id, row!.last_login_at, row!.erased_at !== null],
    [`erased+${user.id.toLowerCase()}@erased.invalid`, null, null, null, true],
  );
});

test('a test-mode user\'s erasure stays in test mode: the cascade\'s user.erased and entitlement.deleted audit rows and its entitlement.deleted webhook are test-mode rows, as the grant was', async () => {
  const user = await createUser(t, { mode: 'test' });
  const app = await createApplication(t);
  const entitlementId = await grant(t, user.id, app.id, { mode: 'test' });
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  const audit = await sql(t, `SELECT action, test_mode FROM audit_events WHERE target_user_id = $1 AND action IN ('user.erased', 'entitlement.deleted') ORDER BY action`, [user.id]);
  assert.deepEqual(audit, [{ action: 'entitlement.deleted', test_mode: true }, { action: 'user.erased', test_mode: true }]);
  const events = await sql(t, `SELECT type, test_mode FROM outbox_events WHERE type = 'entitlement.deleted' AND data->'entitlement'->>'id' = $1`, [entitlementId]);
  assert.deepEqual(events, [{ type: 'entitlement.deleted', test_mode: true }]);
});

test('the erasure cascade clears everything exported except global Settings (also memberships and member_overrides), and audit events persist with snapshot values redacted', async () => {
  const r = await richUser();
  const admin = await asAdmin();
  // An admin edit and an admin email change leave the address in audit snapshots.
  assertStatus(await call(t, 'PATCH', `/v1/users/${r.user.id}/profile`, admin, { display_name: 'Eraseme Person' }), 200);
  const secondEmail = uniqueEmail('second');
  assertStatus(await call(t, 'PATCH', `/v1/users/${r.user.id}`, admin, { email: secondEmail }), 200);
  const grantId = await orgGrant(t, r.org, r.app.id, { memberScope: 'allowlist', overrides: [r.user.id, r.buddy.id] });
  assertStatus(await requestErasure(r.user.id, admin, { reason: 'gdpr' }), 202);
  const auditBefore = (await auditFor(t, r.user.id)).length;
  const snapshotsWithEmail = await count('audit_events', `target_user_id = $1 AND (before::text ILIKE $2 OR after::text ILIKE $2)`, [r.user.id, `%${r.user.email}%`]);
  assert.ok(snapshotsWithEmail > 0, 'precondition: snapshots hold the email');
  // The address is reusable at once: another account signs up with it and gets its own mail.
  assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email: secondEmail, password: 'another-Passw0rd-here' }), 201);
  const othersMail = await sql<{ id: string }>(t, `SELECT id FROM emails WHERE lower(to_address) = lower($1) AND template = 'email_verification' ORDER BY created_at DESC LIMIT 1`, [secondEmail]);

  assert.ok((await count('access_states', 'user_id = $1', [r.user.id])) > 0, 'precondition: the user\'s announced access states');
  t.clock.advance(7 * DAY + 1);
  const result = await t.deps.jobs.runNow('erasure-cascade');
  assert.ok(Number(result.erased) >= 1, JSON.stringify(result));

  const id = r.user.id;
  for (const table of ['identities', 'sessions', 'role_assignments', 'organization_members', 'app_profiles', 'app_settings', 'entitlements', 'profiles', 'recovery_codes', 'one_time_tokens', 'access_states']) {
    assert.equal(await count(table, 'user_id = $1', [id]), 0, `${table} cleared`);
  }
  assert.equal(await count('settings', 'user_id = $1', [id]), 1, 'global Settings remain');
  const overrides = (await sql(t, 'SELECT member_overrides FROM entitlements WHERE id = $1', [grantId]))[0].member_overrides;
  assert.deepEqual(overrides, [r.buddy.id], 'the user is removed from member_overrides; others stay');
  assert.equal(await count('organization_members', 'user_id = $1', [r.buddy.id]), 1, 'other members stay');
  // "organization.member_removed | an active membership begins or is removed": the cascade's removal too.
  const removed = await sql(t, `SELECT type, data FROM outbox_events WHERE type = 'organization.member_removed' AND data->>'user_id' = $1`, [id]);
  assert.deepEqual(removed, [{ type: 'organization.member_removed', data: { organization_id: r.org, user_id: id, role: 'org_admin' } }]);
  assert.equal(await count('audit_events', `action = 'organization.member_removed' AND target_user_id = $1 AND organization_id = $2`, [id, r.org]), 1);
  const row = await userRow(t, id);
  for (const email of [r.user.email, secondEmail, r.pendingEmail]) {
    assert.ok(!JSON.stringify(row).includes(email), `users row still holds ${email}`);
    assert.equal(await count('audit_events', `target_user_id = $1 AND (before::text ILIKE $2 OR after::text ILIKE $2)`, [id, `%${email}%`]), 0, `audit snapshots still hold ${email}`);
  }
  for (const email of [r.user.email, r.pendingEmail]) assert.equal(await count('emails', 'lower(to_address) = lower($1)', [email]), 0, `mails to ${email} cleared`);
  assert.equal(await count('emails', 'lower(to_address) = lower($1)', [secondEmail]), 1, "the erased user's mails to the address are cleared, the new account's stays");
  assert.equal(await count('emails', 'id = $1', [othersMail[0].id]), 1);
  const audit = await auditFor(t, id);
  assert.ok(audit.length >= auditBefore, 'audit events persist');
  assert.ok(audit.some((a) => a.action === 'user.erased'), 'audit.some((a) => a.action === \'user.erased\')');
  assert.ok(!JSON.stringify(audit.map((a) => [a.before, a.after])).includes('Eraseme'), 'profile snapshot values redacted');
  // Nothing remains to read or export.
  const fresh = await asAdmin();
  assertError(await call(t, 'GET', `/v1/users/${id}`, fresh), 404, 'user_not_found');
  assertError(await exportOf(id, fresh), 404, 'user_not_found');
  assertError(await call(t, 'GET', `/v1/users/${id}/profile`, fresh), 404, 'user_not_found');
});

test('"Erasure clears everything exported except global Settings": the erasure request\'s free-text reason (written about the user) is cleared by the cascade; the request row stays completed, and its reason was never in an audit snapshot', async () => {
  const user = await createUser(t);
  const reason = `Leaving; reach me at ${uniqueEmail('reason')} or +1 555 0100`;
  const res = await requestErasure('me', await login(t, user), { reason });
  assert.deepEqual(Object.keys(assertStatus(res, 202)).sort(), ['requested_at', 'scheduled_for', 'status', 'user_id']);
  assert.deepEqual(await sql(t, 'SELECT reason FROM erasure_requests WHERE user_id = $1', [user.id]), [{ reason }], 'kept while the erasure can be cancelled');
  assert.equal(await count('audit_events', `target_user_id = $1 AND (before::text || after::text) LIKE '%555 0100%'`, [user.id]), 0);

  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const rows = await sql(t, 'SELECT status, reason, completed_at IS NOT NULL AS completed FROM erasure_requests WHERE user_id = $1', [user.id]);
  assert.deepEqual(rows, [{ status: 'completed', reason: null, completed: true }]);
  assert.equal((await auditFor(t, user.id, 'user.erased')).length, 1);
  assertError(await call(t, 'GET', `/v1/users/${user.id}`, await asAdmin()), 404, 'user_not_found');
});

test('"entitlement.member_scope_changed | member_scope or member_overrides changed": the erasure cascade\'s removal of the user from an org grant\'s member_overrides writes one, audited, with the row\'s new updated_at', async () => {
  const admin = await asAdmin();
  const [user, buddy] = [await createUser(t), await createUser(t)];
  const app = await createApplication(t);
  const org = await createOrganization(t, [buddy.id, user.id]);
  const grantId = await orgGrant(t, org, app.id, { memberScope: 'allowlist', overrides: [user.id, buddy.id] });
  assertStatus(await requestErasure(user.id, admin, { reason: 'gdpr' }), 202);
  t.clock.advance(7 * DAY + 1);
  const cascadeStart = t.clock.now();
  await t.deps.jobs.runNow('erasure-cascade');

  const row = (await sql(t, 'SELECT member_overrides, updated_at FROM entitlements WHERE id = $1', [grantId]))[0];
  assert.deepEqual(row.member_overrides, [buddy.id]);
  const erasedAt = new Date(row.updated_at).toISOString();
  assert.ok(new Date(row.updated_at) >= cascadeStart, `the grant changed, so its updated_at moves to the cascade's time (${erasedAt})`);
  const events = await sql(t, `SELECT type, application_id, data FROM outbox_events WHERE type = 'entitlement.member_scope_changed' AND data->'entitlement'->>'id' = $1`, [grantId]);
  assert.equal(events.length, 1, JSON.stringify(events));
  assert.equal(events[0].application_id, app.id);
  assert.deepEqual(events[0].data.entitlement.member_overrides, [buddy.id]);
  assert.equal(events[0].data.entitlement.member_scope, 'allowlist');
  assert.equal(events[0].data.entitlement.user_id, null);
  assert.equal(events[0].data.entitlement.organization_id, org);
  assert.equal(events[0].data.entitlement.updated_at, erasedAt);
  const audit = await sql(t, `SELECT action, organization_id, application_id, actor_type, before, after FROM audit_events WHERE target_id = $1 AND action = 'entitlement.member_scope_changed'`, [grantId]);
  assert.equal(audit.length, 1);
  assert.equal(audit[0].organization_id, org);
  assert.equal(audit[0].application_id, app.id);
  assert.equal(audit[0].actor_type, 'system');
  assert.deepEqual([audit[0].before.member_overrides, audit[0].after.member_overrides], [[user.id, buddy.id], [buddy.id]]);
});

test('"entitlement.deleted | hard-deleted" and "role.removed | assignment created or deleted": the erasure cascade\'s hard delete of the user\'s personal entitlements and Role assignments is announced (webhook and audit, actor system) as DELETE /v1/entitlements/{id} and DELETE /v1/users/{id}/roles/{roleId} announce theirs', async () => {
  const admin = await asAdmin();
  const user = await createUser(t);
  const app = await createApplication(t);
  const entitlementId = await grant(t, user.id, app.id);
  const roleId = `role_${app.slug}_editor`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'editor', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/${roleId}`, admin), 201);
  assertStatus(await requestErasure(user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const deleted = await sql(t, `SELECT application_id, test_mode, data FROM outbox_events WHERE type = 'entitlement.deleted' AND data->'entitlement'->>'id' = $1`, [entitlementId]);
  assert.equal(deleted.length, 1, JSON.stringify(deleted));
  assert.equal(deleted[0].application_id, app.id);
  assert.equal(deleted[0].test_mode, false);
  assert.equal(deleted[0].data.entitlement.user_id, user.id);
  assert.equal(deleted[0].data.entitlement.status, 'active', 'the last state');
  const removed = await sql(t, `SELECT application_id, data FROM outbox_events WHERE type = 'role.removed' AND data->>'user_id' = $1 ORDER BY data->>'role_id'`, [user.id]);
  // Not the platform member Role: part of the user record (never announced as assigned), it goes with user.erased.
  assert.deepEqual(removed.map((r) => [r.application_id, r.data]), [[app.id, { user_id: user.id, role_id: roleId, application_id: app.id }]]);
  const audit = await auditFor(t, user.id);
  const entAudit = audit.filter((a) => a.action === 'entitlement.deleted');
  assert.deepEqual(entAudit.map((a) => [a.target_id, a.application_id, a.actor_type]), [[entitlementId, app.id, 'system']]);
  assert.deepEqual(audit.filter((a) => a.action === 'role.removed').map((a) => a.target_id), [roleId]);
  // Written with the rest of the cascade, their snapshots are redacted like every row about the user.
  for (const a of [...entAudit, ...audit.filter((x) => x.action === 'role.removed')]) assert.deepEqual(a.before, { redacted: true });
});

test('"Erasure clears everything exported": after the cascade, a retry of an Idempotency-Key write made to the soft-deleted user in the last 24 hours replays no erased data; it runs again and gets 404 user_not_found', async () => {
  const user = await createUser(t);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  // Six and a half days in, an admin writes to the soft-deleted user's Profile with an Idempotency-Key.
  t.clock.advance(6.5 * DAY);
  const admin = await asAdmin();
  const write = { display_name: 'Latewrite Person', contact_phone: '+4915112345678', contact_email: 'late-contact@example.org' };
  const first = assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}/profile`, admin, write, { 'idempotency-key': 'erase-late-write' }), 200);
  assert.equal(first.display_name, 'Latewrite Person');
  const otherUser = await createUser(t);
  assertStatus(await call(t, 'PATCH', `/v1/users/${otherUser.id}/profile`, admin, { display_name: 'Bystander Kept' }, { 'idempotency-key': 'erase-other-write' }), 200);

  t.clock.advance(0.5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const later = await asAdmin(); // the same credential (the admin user) in a new session
  const retry = await call(t, 'PATCH', `/v1/users/${user.id}/profile`, later, write, { 'idempotency-key': 'erase-late-write' });
  assertError(retry, 404, 'user_not_found');
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  for (const value of ['Latewrite', '4915112345678', 'late-contact@example.org']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
  // Another user's stored answer is not about the erased user and still replays.
  const kept = await call(t, 'PATCH', `/v1/users/${otherUser.id}/profile`, later, { display_name: 'Bystander Kept' }, { 'idempotency-key': 'erase-other-write' });
  assert.equal(kept.statusCode, 200);
  assert.equal(kept.headers['idempotent-replayed'], 'true');
});

test('"Erasure clears everything exported": a stored Idempotency-Key answer of an org admin\'s role change of the soft-deleted member (PATCH /v1/organizations/{id}/members/{userId}, holding their email and display name) is dropped by the cascade; a retry runs again and gets 404 member_not_found', async () => {
  const user = await createUser(t);
  const orgAdmin = await createUser(t);
  const org = await createOrganization(t, [orgAdmin.id, user.id]);
  assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}/profile`, await asAdmin(), { display_name: 'Roleswap Person' }), 200);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(6.5 * DAY);
  const first = await call(t, 'PATCH', `/v1/organizations/${org}/members/${user.id}`, await login(t, orgAdmin), { role: 'org_admin' }, { 'idempotency-key': 'erase-member-role' });
  const body = assertStatus(first, 200);
  assert.deepEqual([body.email, body.display_name], [user.email, 'Roleswap Person'], 'precondition: the answer holds the member\'s email and name');

  t.clock.advance(0.5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const retry = await call(t, 'PATCH', `/v1/organizations/${org}/members/${user.id}`, await login(t, orgAdmin), { role: 'org_admin' }, { 'idempotency-key': 'erase-member-role' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'member_not_found');
  for (const value of [user.email, 'Roleswap']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
});

test('"Erasure clears everything exported": a stored Idempotency-Key answer of an operator\'s PATCH /v1/entitlements/{id} of the soft-deleted user\'s personal Entitlement (the exported entitlement, with its free-text disabled_reason) is dropped by the cascade; a retry runs again and gets 404 entitlement_not_found', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  const entitlementId = await grant(t, user.id, app.id);
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(6.5 * DAY);
  const write = { status: 'revoked', disabled_reason: 'Chargeback filed by Jane Roe, jane.roe@example.org' };
  const first = assertStatus(await call(t, 'PATCH', `/v1/entitlements/${entitlementId}`, await asAdmin(), write, { 'idempotency-key': 'erase-late-entitlement' }), 200);
  assert.deepEqual([first.user_id, first.disabled_reason], [user.id, write.disabled_reason], 'precondition: the answer is the user\'s Entitlement');

  t.clock.advance(0.5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');

  const retry = await call(t, 'PATCH', `/v1/entitlements/${entitlementId}`, await asAdmin(), write, { 'idempotency-key': 'erase-late-entitlement' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'entitlement_not_found');
  for (const value of [user.id, 'jane.roe@example.org']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
});

test('after the erasure cascade the id stays 404 user_not_found on the support MFA reset (DELETE /v1/users/{id}/mfa/totp) too, and no audit row is written', async () => {
  const mfa = await createMfaUser(t);
  const admin = await asAdmin();
  assertStatus(await requestErasure(mfa.user.id, admin), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  const fresh = await asAdmin();
  assertError(await call(t, 'DELETE', `/v1/users/${mfa.user.id}/mfa/totp`, fresh), 404, 'user_not_found');
  assert.equal((await auditFor(t, mfa.user.id, 'user.mfa_reset')).length, 0);
});

test('test data older than 30 days is purged nightly; live rows and younger test rows stay', async () => {
  const live = await createUser(t, { mode: 'live' });
  const old = await createUser(t, { mode: 'test' });
  await login(t, old);
  await login(t, live);
  const app = await createApplication(t);
  await grant(t, old.id, app.id, { mode: 'test' });
  await grant(t, live.id, app.id);
  t.clock.advance(31 * DAY);
  const young = await createUser(t, { mode: 'test' });
  const result = await t.deps.jobs.runNow('test-purge');
  assert.ok(result, 'ran');
  assert.equal(await userRow(t, old.id), undefined, 'old test user purged');
  for (const table of ['profiles', 'settings', 'sessions', 'role_assignments', 'entitlements', 'identities']) {
    assert.equal(await count(table, 'user_id = $1', [old.id]), 0, `${table} of the old test user purged`);
    assert.ok((await count(table, 'user_id = $1', [live.id])) >= 1, `${table} of the live user kept`);
  }
  // What is left about the old user is the purge's own announcement of the grant it deleted (test data
  // itself); its platform member Role goes with the user record, unannounced.
  assert.deepEqual((await auditFor(t, old.id)).map((a) => [a.action, a.actor_type]), [['entitlement.deleted', 'system']], 'old test audit rows purged');
  assert.ok((await count('audit_events', 'target_user_id = $1', [live.id])) >= 1, 'live audit rows kept');
  assert.equal((await userRow(t, live.id))!.status, 'active');
  assert.equal((await userRow(t, young.id))!.test_mode, true, 'a test user younger than 30 days stays');
  assert.equal((await call(t, 'GET', '/v1/users/me', await login(t, live))).statusCode, 200);
});

test('the export\'s roles list every Role assignment (role_id, application_id, assigned_at): an Application Role with its application_id as well as the platform member Role', async () => {
  const user = await createUser(t);
  const admin = await asAdmin();
  const app = await createApplication(t);
  await sql(t, `UPDATE applications SET available_app_roles = '{viewer}' WHERE id = $1`, [app.id]);
  const role = assertStatus(await call(t, 'POST', '/v1/roles', admin, { name: 'viewer', scope: app.id, permissions: [`app.${app.slug}.read`] }), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${user.id}/roles/${role.id}`, admin, {}), 201);
  const bundle = assertStatus(await exportOf('me', await login(t, user)), 200);
  const roles = bundle.roles.map((r: any) => [r.role_id, r.application_id]).sort();
  assert.deepEqual(roles, [[role.id, app.id], ['role_platform_member', null]].sort());
});

test('the export\'s audit_events are only the user\'s own trail: events the user wrote about another user (an admin editing someone\'s Profile) are not in it', async () => {
  const adminToken = await asAdmin();
  const other = await createUser(t);
  assertStatus(await call(t, 'PATCH', `/v1/users/${other.id}/profile`, adminToken, { display_name: 'Edited By Admin' }), 200);
  const edit = (await auditFor(t, other.id, 'profile.updated')).at(-1)!;
  assert.equal(edit.actor_id, adminUser.id, 'precondition: the admin is the actor');
  const bundle = assertStatus(await exportOf('me', adminToken), 200);
  assert.ok(!bundle.audit_events.some((e: { id: string }) => e.id === edit.id), 'another user\'s event is in the export');
  for (const e of bundle.audit_events) assert.equal(e.target_user_id, adminUser.id, `${e.action} is about ${e.target_user_id}`);
});

test('the test purge takes a purged test user\'s mails with it, as the erasure does: a reset mail queued just before the purge is deleted and never sent (its link died with the user)', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: old.email, test_mode: true } });
  assert.equal(forgot.statusCode, 202);
  assert.equal(await count('emails', `user_id = $1 AND template = 'password_reset' AND status = 'queued'`, [old.id]), 1, 'precondition: the reset mail is queued');
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, old.id), undefined, 'precondition: the old test user is purged');
  assert.equal(await count('emails', 'user_id = $1', [old.id]), 0, 'the purged user\'s mails are gone');
  await t.deps.jobs.runNow('mail-delivery');
  assert.equal(await count('emails', `lower(to_address) = lower($1) AND status IN ('sent', 'logged')`, [old.email]), 0, 'nothing was sent to the purged user');
});

test('"Test rows older than 30 days are purged": live mails are not test rows, so the test purge leaves a live mail still queued after 31 days where it is, while it takes a test one of the same age', async () => {
  const live = await createUser(t, { mode: 'live' });
  const tester = await createUser(t, { mode: 'test' });
  for (const [user, testMode] of [[live, false], [tester, true]] as const) {
    const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', payload: { email: user.email, test_mode: testMode } });
    assert.equal(forgot.statusCode, 202);
    assert.equal(await count('emails', `user_id = $1 AND template = 'password_reset' AND status = 'queued'`, [user.id]), 1, 'precondition: the reset mail is queued');
  }
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await count('emails', `user_id = $1 AND status = 'queued'`, [live.id]), 1, 'the live queued mail stays');
  assert.equal(await count('emails', 'user_id = $1', [tester.id]), 0, 'the 31-day-old test mail goes');
});

test('the test purge is a hard delete like the erasure cascade: a stored Idempotency-Key answer of an admin\'s write to a purged test user in its last 24 hours (their Profile) is dropped; a retry runs again and gets 404 user_not_found instead of replaying the purged Profile', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(30 * DAY);
  const testAdmin = await createUser(t, { mode: 'test', roles: ['superadmin'] });
  const write = { display_name: 'Purged Person', contact_email: 'purged-contact@example.org' };
  const first = assertStatus(await call(t, 'PATCH', `/v1/users/${old.id}/profile`, await login(t, testAdmin), write, { 'idempotency-key': 'purge-late-write' }), 200);
  assert.equal(first.display_name, 'Purged Person');
  t.clock.advance(3600);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, old.id), undefined, 'purged');

  const retry = await call(t, 'PATCH', `/v1/users/${old.id}/profile`, await login(t, testAdmin), write, { 'idempotency-key': 'purge-late-write' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'user_not_found');
  for (const value of ['Purged Person', 'purged-contact@example.org']) assert.ok(!retry.body.includes(value), `the retry shows ${value}`);
});

test('"API keys are not purged (a CI\'s test key must keep working)": a test-mode key older than 30 days, made by a test user the purge removes, still authenticates after the nightly test purge', async () => {
  const creator = await createUser(t, { mode: 'test' });
  const key = await createApiKey(t, { mode: 'test', permissions: ['users.list'], createdBy: creator.id });
  assertStatus(await call(t, 'GET', '/v1/users?limit=1', key.secret), 200);
  t.clock.advance(31 * DAY);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, creator.id), undefined, 'the test user who made the key is purged');
  assert.equal(await count('api_keys', 'id = $1', [key.id]), 1, 'the key stays');
  assertStatus(await call(t, 'GET', '/v1/users?limit=1', key.secret), 200);
});

test('the test purge is a hard delete like the erasure cascade: a stored Idempotency-Key answer of an admin\'s PATCH /v1/users/{id} of a purged test user in its last 24 hours (the User, with its email) is dropped; a retry runs again and gets 404 user_not_found instead of replaying the purged User', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(30 * DAY);
  const testAdmin = await createUser(t, { mode: 'test', roles: ['superadmin'] });
  const first = assertStatus(await call(t, 'PATCH', `/v1/users/${old.id}`, await login(t, testAdmin), { status: 'suspended' }, { 'idempotency-key': 'purge-late-user-write' }), 200);
  assert.equal(first.email, old.email);
  t.clock.advance(3600);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, old.id), undefined, 'purged');

  const retry = await call(t, 'PATCH', `/v1/users/${old.id}`, await login(t, testAdmin), { status: 'suspended' }, { 'idempotency-key': 'purge-late-user-write' });
  assert.equal(retry.headers['idempotent-replayed'], undefined, 'not a replay of the stored answer');
  assertError(retry, 404, 'user_not_found');
  assert.ok(!retry.body.includes(old.email), 'the retry shows the purged email');
});

test('the test purge is a hard delete like the erasure cascade: a purged test user\'s own stored Idempotency-Key answer (`me` is the caller) of a PATCH /v1/users/me in its last 24 hours (the User, with its email) is gone from the database with them', async () => {
  const old = await createUser(t, { mode: 'test' });
  t.clock.advance(30 * DAY);
  const own = await call(t, 'PATCH', '/v1/users/me', await login(t, old), { email: uniqueEmail('purged-own') }, { 'idempotency-key': 'purge-own-write' });
  assert.equal(assertStatus(own, 200).email, old.email);
  assert.equal(await count('idempotency_keys', `key = 'purge-own-write'`, []), 1, 'the answer was stored');
  t.clock.advance(3600);
  await purgeTestData(t.deps);
  assert.equal(await userRow(t, old.id), undefined, 'purged');
  assert.equal(await count('idempotency_keys', `key = 'purge-own-write'`, []), 0, 'the stored answer about the purged user went with them');
});

test('the test purge takes an erased test user older than 30 days with the record of their completed erasure request', async () => {
  const user = await createUser(t, { mode: 'test' });
  assertStatus(await requestErasure('me', await login(t, user)), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.deepEqual(await sql(t, 'SELECT status FROM erasure_requests WHERE user_id = $1', [user.id]), [{ status: 'completed' }], 'precondition');
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, user.id), undefined, 'the erased test user is purged');
  assert.equal(await count('erasure_requests', 'user_id = $1', [user.id]), 0);
  assert.equal(await count('settings', 'user_id = $1', [user.id]), 0);
});

test('only test rows older than 30 days are purged: a test user 29 days old stays, with its profile and sessions', async () => {
  const recent = await createUser(t, { mode: 'test' });
  await login(t, recent);
  t.clock.advance(29 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, recent.id))?.test_mode, true, 'a 29-day-old test user stays');
  assert.equal(await count('profiles', 'user_id = $1', [recent.id]), 1);
  assert.equal(await count('sessions', 'user_id = $1', [recent.id]), 1);
});

test('"Test rows older than 30 days are purged nightly", on the clock: a test user exactly 30 days old is not older than 30 days and stays; a millisecond later it is purged', async () => {
  await withStoppedClock(t, async () => {
    const edge = await createUser(t, { mode: 'test' });
    t.clock.advance(30 * DAY);
    await t.deps.jobs.runNow('test-purge');
    assert.equal((await userRow(t, edge.id))?.test_mode, true, 'exactly 30 days old: kept');
    t.clock.advance(0.001);
    await t.deps.jobs.runNow('test-purge');
    assert.equal(await userRow(t, edge.id), undefined, '30 days and 1 ms old: purged');
  });
});

test('the test purge keeps test owners of shared catalog rows: a test User owning an Application (and its Tenant), and a test Organization owning one with its org admin, stay after 30 days; a plain old test user goes', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['applications.manage', 'organizations.manage'] });
  const owner = await createUser(t, { mode: 'test' });
  const orgAdmin = await createUser(t, { mode: 'test' });
  const plain = await createUser(t, { mode: 'test' });
  const slug = () => `purge-${Math.random().toString(36).slice(2, 8)}`;
  const app = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Owned by a test user', launch_url: 'https://owned.example.com', owner_user_id: owner.id }), 201);
  const org = { id: await createOrganization(t, [orgAdmin.id], { mode: 'test' }) };
  const orgApp = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Owned by a test org', launch_url: 'https://org-owned.example.com', owner_organization_id: org.id }), 201);
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, plain.id), undefined, 'a test user owning nothing is purged');
  assert.equal((await userRow(t, owner.id))?.id, owner.id, "the Application's test owner stays");
  assert.equal((await userRow(t, orgAdmin.id))?.id, orgAdmin.id, "the owning Organization's org admin stays");
  assert.equal(await count('organizations', 'id = $1', [org.id]), 1, 'the owning test Organization stays');
  assert.equal(await count('organization_members', 'organization_id = $1 AND user_id = $2', [org.id, orgAdmin.id]), 1, 'with its org admin');
  const [tenant] = await sql(t, 'SELECT owner_user_id FROM tenants WHERE id = $1', [app.tenant_id]);
  assert.equal(tenant.owner_user_id, owner.id);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, key.secret), 200).owner_user_id, owner.id);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${orgApp.id}`, key.secret), 200).owner_organization_id, org.id);
  assertStatus(await call(t, 'GET', `/v1/organizations/${org.id}`, key.secret), 200);
});

test('the test purge is a hard delete like any other for the test users who stay: a member younger than 30 days of a purged test Organization, and a kept test owner whose old test entitlement goes, get access.revoked (entitlement_deleted, test_mode) once for each Application whose access flips (Part B: access.revoked fires on allowed to not allowed)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['applications.manage', 'organizations.manage', 'entitlements.manage'] });
  const app = await createApplication(t);
  const orgAdmin = await createUser(t, { mode: 'test' });
  const org = await createOrganization(t, [orgAdmin.id], { mode: 'test' });
  await orgGrant(t, org, app.id, { mode: 'test' });
  // A test user owning an Application is kept by the purge; their personal test grant is not.
  const owner = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: `own-${Math.random().toString(36).slice(2, 8)}`, name: 'Owned', launch_url: 'https://owned.example.com', owner_user_id: owner.id }), 201);
  await grant(t, owner.id, app.id, { mode: 'test' });
  t.clock.advance(20 * DAY);
  const young = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${org}/members`, key.secret, { user_id: young.id }), 201);
  const allowed = async (id: string) => assertStatus(await call(t, 'GET', `/v1/users/${id}/apps/${app.id}/effective-permissions`, key.secret), 200).allowed;
  assert.equal(await allowed(young.id), true, 'precondition: the young member reaches the Application through the org grant');
  assert.equal(await allowed(owner.id), true, 'precondition: the owner reaches it through the personal grant');
  t.clock.advance(11 * DAY);
  const revoked = async (id: string) => (await outboxFor(t, id)).filter((e) => e.type === 'access.revoked');
  assert.deepEqual(await revoked(young.id), []);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, young.id))?.status, 'active', 'the young member stays');
  assert.equal((await userRow(t, owner.id))?.status, 'active', 'the owner stays');
  for (const id of [young.id, owner.id]) {
    assert.equal(await allowed(id), false, 'access is gone');
    const events = await revoked(id);
    assert.deepEqual(events.map((e) => [e.application_id, e.test_mode, e.data.reason, e.data.entitlement_status]), [[app.id, true, 'entitlement_deleted', 'none']]);
  }
  // A second run finds nothing more to announce.
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await revoked(young.id)).length, 1);
});

test('"entitlement.deleted | hard-deleted": the nightly test purge announces each test Entitlement it hard-deletes (a personal grant and an Organization\'s grant), once, in test mode (webhook with the last state, audit with actor system); live grants of the same age are left alone', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['entitlements.manage', 'organizations.manage'] });
  const liveKey = await createApiKey(t, { mode: 'live', permissions: ['entitlements.manage'] });
  const app = await createApplication(t);
  const holder = await createUser(t, { mode: 'test' });
  const liveHolder = await createUser(t, { mode: 'live' });
  const personal = assertStatus(await call(t, 'POST', `/v1/users/${holder.id}/entitlements`, key.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `k-${rand()}` }), 201);
  const live = assertStatus(await call(t, 'POST', `/v1/users/${liveHolder.id}/entitlements`, liveKey.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `k-${rand()}` }), 201);
  const org = await createOrganization(t, [holder.id], { mode: 'test' });
  const orgWide = assertStatus(await call(t, 'POST', `/v1/organizations/${org}/entitlements`, key.secret, { application_id: app.id }, { 'idempotency-key': `k-${rand()}` }), 201);
  t.clock.advance(31 * DAY);
  const deletedEvents = (id: string) => sql(t, `SELECT application_id, test_mode, data FROM outbox_events WHERE type = 'entitlement.deleted' AND data->'entitlement'->>'id' = $1`, [id]);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await count('entitlements', 'id = ANY($1::text[])', [[personal.id, orgWide.id]]), 0, 'precondition: both test grants are purged');
  for (const { included_member_count: _count, ...ent } of [personal, orgWide]) {
    const events = await deletedEvents(ent.id);
    assert.equal(events.length, 1, `one entitlement.deleted for ${ent.id}: ${JSON.stringify(events)}`);
    assert.equal(events[0].application_id, app.id);
    assert.equal(events[0].test_mode, true);
    assert.deepEqual(events[0].data.entitlement, ent, 'the last state');
    const audit = await auditOfTarget(t, ent.id, 'entitlement.deleted');
    assert.deepEqual(audit.map((a) => [a.actor_type, a.application_id, a.test_mode]), [['system', app.id, true]]);
    assert.deepEqual(audit[0].before, ent);
  }
  assert.equal(await count('entitlements', 'id = $1', [live.id]), 1, 'the live grant stays');
  assert.deepEqual(await deletedEvents(live.id), []);
  // A second run purges nothing more and announces nothing more.
  await t.deps.jobs.runNow('test-purge');
  for (const ent of [personal, orgWide]) {
    assert.equal((await deletedEvents(ent.id)).length, 1);
    assert.equal((await auditOfTarget(t, ent.id, 'entitlement.deleted')).length, 1);
  }
});

test('"organization.member_removed | an active membership … is removed" and "role.removed | assignment … deleted": the nightly test purge announces each membership and Role assignment it hard-deletes (audit with actor system, webhook routed as a removal is), once: a purged member of a test Organization that stays, a young member of a purged test Organization, and a purged user\'s app Role on an Application that stays', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage', 'roles.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  // A test Organization kept by the purge (it owns an Application), its org admin kept with it.
  const keptAdmin = await createUser(t, { mode: 'test' });
  const kept = await createOrganization(t, [keptAdmin.id], { mode: 'test' });
  await createApplication(t, { ownerOrganization: kept });
  await orgGrant(t, kept, app.id, { mode: 'test' });
  // A plain old test user, member of the kept Organization (reaching the Application through its grant) and holding its app Role.
  const leaver = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${kept}/members`, key.secret, { user_id: leaver.id }), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${leaver.id}/roles/${roleId}`, key.secret), 201);
  // An old test Organization purged whole; a member who joins it later is young and stays.
  const goneAdmin = await createUser(t, { mode: 'test' });
  const gone = await createOrganization(t, [goneAdmin.id], { mode: 'test' });
  t.clock.advance(20 * DAY);
  const young = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${gone}/members`, key.secret, { user_id: young.id }), 201);
  t.clock.advance(11 * DAY);
  const purgedAt = t.clock.now();
  const memberEvents = () => sql(t, `SELECT application_id, test_mode, data, path_application_ids FROM outbox_events WHERE type = 'organization.member_removed' AND created_at >= $1 ORDER BY data->>'organization_id', data->>'user_id'`, [purgedAt]);
  const memberAudit = () => sql(t, `SELECT organization_id, target_user_id, actor_type, test_mode, before FROM audit_events WHERE action = 'organization.member_removed' AND created_at >= $1 ORDER BY organization_id, target_user_id`, [purgedAt]);
  const roleEvents = (userId: string) => sql(t, `SELECT application_id, test_mode, data FROM outbox_events WHERE type = 'role.removed' AND data->>'user_id' = $1 ORDER BY data->>'role_id'`, [userId]);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, leaver.id), undefined, 'precondition: the old member is purged');
  assert.equal(await count('organizations', 'id = $1', [kept]), 1, 'precondition: the owning Organization stays');
  assert.equal(await count('organizations', 'id = $1', [gone]), 0, 'precondition: the old Organization is purged');
  assert.equal((await userRow(t, young.id))?.status, 'active', 'precondition: the young member stays');

  const removed = [
    { organization_id: kept, user_id: leaver.id, role: 'member' },
    { organization_id: gone, user_id: goneAdmin.id, role: 'org_admin' },
    { organization_id: gone, user_id: young.id, role: 'member' },
  ].sort((a, b) => (a.organization_id + a.user_id < b.organization_id + b.user_id ? -1 : 1));
  const events = await memberEvents();
  assert.deepEqual(events.map((e) => [e.application_id, e.test_mode, e.data]), removed.map((m) => [null, true, m]), 'one organization.member_removed per purged membership');
  assert.deepEqual(events.find((e) => e.data.user_id === leaver.id)!.path_application_ids, [app.id], 'routed to the Application the membership reached');
  assert.deepEqual((await memberAudit()).map((a) => [a.organization_id, a.target_user_id, a.actor_type, a.test_mode, a.before]),
    removed.map((m) => [m.organization_id, m.user_id, 'system', true, { ...m, membership_status: 'active' }]));

  const roles = await roleEvents(leaver.id);
  // Not the platform member Role: part of the user record, it goes unannounced (as in erasure).
  assert.deepEqual(roles.map((r) => [r.application_id, r.test_mode, r.data]), [[app.id, true, { user_id: leaver.id, role_id: roleId, application_id: app.id }]]);
  assert.deepEqual((await auditOfTarget(t, roleId, 'role.removed')).map((a) => [a.target_user_id, a.application_id, a.actor_type, a.test_mode]), [[leaver.id, app.id, 'system', true]]);
  assert.deepEqual(await roleEvents(keptAdmin.id), [], 'kept users keep their Roles');

  // A second run deletes nothing more and announces nothing more.
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await memberEvents()).length, 3);
  assert.equal((await memberAudit()).length, 3);
  assert.equal((await roleEvents(leaver.id)).length, 1);
});

if (storageName === 'postgres') test('three test purges running at once announce each purged membership and Role assignment once: only the run whose DELETE removed the row announces it', async () => {
  const members = [await createUser(t, { mode: 'test' }), await createUser(t, { mode: 'test' }), await createUser(t, { mode: 'test' })];
  const org = await createOrganization(t, members.map((u) => u.id), { mode: 'test' });
  const key = await createApiKey(t, { mode: 'test', permissions: ['roles.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  for (const u of members) assertStatus(await call(t, 'POST', `/v1/users/${u.id}/roles/${roleId}`, key.secret), 201);
  t.clock.advance(31 * DAY);
  const since = t.clock.now();
  await Promise.all([purgeTestData(t.deps), purgeTestData(t.deps), purgeTestData(t.deps)]);
  const sent = await sql(t, `SELECT type, data->>'user_id' AS user_id, count(*)::int AS n FROM outbox_events WHERE type IN ('organization.member_removed', 'role.removed') AND created_at >= $1 AND data->>'user_id' = ANY($2::text[]) GROUP BY 1, 2 ORDER BY 1, 2`, [since, members.map((u) => u.id)]);
  const audited = await sql(t, `SELECT action AS type, target_user_id AS user_id, count(*)::int AS n FROM audit_events WHERE action IN ('organization.member_removed', 'role.removed') AND created_at >= $1 AND target_user_id = ANY($2::text[]) GROUP BY 1, 2 ORDER BY 1, 2`, [since, members.map((u) => u.id)]);
  const once = ['organization.member_removed', 'role.removed'].flatMap((type) => members.map((u) => u.id).sort().map((user_id) => ({ type, user_id, n: 1 })));
  assert.deepEqual(sent, once, 'webhooks');
  assert.deepEqual(audited, once, 'audit rows');
  assert.equal(await count('organizations', 'id = $1', [org]), 0);
});

if (storageName === 'postgres') test('"organization.member_removed" once when a member removal meets the test purge (PostgreSQL): the purge locks the Organizations whose memberships it deletes before it deletes any, so a DELETE /v1/organizations/{id}/members/{userId} of a purged membership waits for it and answers 404 member_not_found, and the removal is announced once, by the purge', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage'] });
  // A test Organization kept by the purge (it owns an Application), and an old test user invited to it.
  const keptAdmin = await createUser(t, { mode: 'test' });
  const kept = await createOrganization(t, [keptAdmin.id], { mode: 'test' });
  await createApplication(t, { ownerOrganization: kept });
  const leaver = await createUser(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${kept}/members`, key.secret, { email: leaver.email }), 201);
  t.clock.advance(31 * DAY);
  const since = t.clock.now();
  // The purge is held at its delete of the user (its last step about them), the removal sent while it is.
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM users WHERE id = $1 FOR KEY SHARE', [leaver.id]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const purge = purgeTestData(t.deps);
    const purgePid = await blockedBy(watcher, rows[0].pid, 'the purge');
    const removal = call(t, 'DELETE', `/v1/organizations/${kept}/members/${leaver.id}`, key.secret);
    await blockedBy(watcher, purgePid, 'the member removal');
    await holder.query('COMMIT');
    await purge;
    assertError(await removal, 404, 'member_not_found');
  } finally {
    await holder.end();
    await watcher.end();
  }
  assert.equal(await userRow(t, leaver.id), undefined, 'precondition: the old test user is purged');
  const audited = await sql(t, `SELECT actor_type, before FROM audit_events WHERE action = 'organization.member_removed' AND target_user_id = $1 AND created_at >= $2`, [leaver.id, since]);
  assert.deepEqual(audited.map((a) => [a.actor_type, a.before]), [['system', { organization_id: kept, user_id: leaver.id, role: 'member', membership_status: 'pending' }]], 'one removal, the purge\'s');
});

/**
 * Runs the test purge held at its delete of `userId`'s profile (after it locked the users it purges),
 * starts `op` once the purge waits, and lets the purge commit once `op` waits for it: `op` found the
 * user live before the purge and takes the user's lock (or its foreign-key check does) after it.
 * PostgreSQL only.
 */
async function whilePurgeDeletes<T>(userId: string, op: () => Promise<T>): Promise<T> {
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM profiles WHERE user_id = $1 FOR UPDATE', [userId]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const purge = purgeTestData(t.deps);
    const purgePid = await blockedBy(watcher, rows[0].pid, 'the purge');
    const running = op();
    await blockedBy(watcher, purgePid, 'the operation');
    await holder.query('COMMIT');
    await purge;
    assert.equal(await userRow(t, userId), undefined, 'precondition: the purge deleted the user');
    return await running;
  } finally {
    await holder.end();
    await watcher.end();
  }
}

if (storageName === 'postgres') test('a personal grant (POST /v1/users/{id}/entitlements) that waited for the test purge deleting its user answers 404 user_not_found, not 500, and writes nothing: the user is read again under its lock (PostgreSQL)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['entitlements.manage'] });
  const app = await createApplication(t);
  const victim = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const res = await whilePurgeDeletes(victim.id, () => call(t, 'POST', `/v1/users/${victim.id}/entitlements`, key.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `purged-${rand(8)}` }));
  assertError(res, 404, 'user_not_found');
  assert.equal(await count('entitlements', 'user_id = $1', [victim.id]), 0);
  assert.equal(await count('audit_events', "action = 'entitlement.granted' AND target_user_id = $1", [victim.id]), 0);
});

if (storageName === 'postgres') test('a Role assignment (POST /v1/users/{id}/roles/{roleId}) that waited for the test purge deleting its user answers 404 user_not_found, not 500, and announces nothing (PostgreSQL)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['roles.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  const victim = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const res = await whilePurgeDeletes(victim.id, () => call(t, 'POST', `/v1/users/${victim.id}/roles/${roleId}`, key.secret));
  assertError(res, 404, 'user_not_found');
  assert.equal(await count('role_assignments', 'user_id = $1', [victim.id]), 0);
  assert.equal(await count('audit_events', "action = 'role.assigned' AND target_user_id = $1", [victim.id]), 0);
});

if (storageName === 'postgres') test('a membership added by user_id (POST /v1/organizations/{id}/members) that waited for the test purge deleting its user answers 404 user_not_found, not 500, and announces nothing (PostgreSQL)', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage'] });
  const victim = await createUser(t, { mode: 'test' });
  t.clock.advance(31 * DAY);
  const admin = await createUser(t, { mode: 'test' });
  const org = await createOrganization(t, [admin.id], { mode: 'test' });
  const res = await whilePurgeDeletes(victim.id, () => call(t, 'POST', `/v1/organizations/${org}/members`, key.secret, { user_id: victim.id }));
  assertError(res, 404, 'user_not_found');
  assert.equal(await count('organization_members', 'user_id = $1', [victim.id]), 0);
  assert.equal(await count('audit_events', "action = 'organization.member_added' AND target_user_id = $1", [victim.id]), 0);
});

if (storageName === 'postgres') test('"a grant, an assignment or a membership may target" only a live user: a personal grant, a Role assignment and a membership by user_id that waited for the user\'s soft delete (an erasure request, DELETE /v1/users/{id}) answer 404 user_not_found and write nothing, so the erasure cascade is not left a grant announced for a deleted user (PostgreSQL)', async () => {
  const entKey = await createApiKey(t, { permissions: ['entitlements.manage'] });
  const roleKey = await createApiKey(t, { permissions: ['roles.manage'] });
  const orgKey = await createApiKey(t, { permissions: ['organizations.manage'] });
  const app = await createApplication(t);
  const roleId = `role_${app.slug}_viewer`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, 'viewer', $2, $3, now(), now())`, [roleId, app.id, [`app.${app.slug}.read`]]);
  const admin = await createUser(t);
  const org = await createOrganization(t, [admin.id]);
  const deletedMeanwhile = (id: string): [string, unknown[]][] => [
    ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [id]],
    [`UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [id]],
  ];
  const writes: [string, (id: string) => Promise<Awaited<ReturnType<typeof call>>>][] = [
    ['grant', (id) => call(t, 'POST', `/v1/users/${id}/entitlements`, entKey.secret, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': `deleted-${rand(8)}` })],
    ['assignment', (id) => call(t, 'POST', `/v1/users/${id}/roles/${roleId}`, roleKey.secret)],
    ['membership', (id) => call(t, 'POST', `/v1/organizations/${org}/members`, orgKey.secret, { user_id: id })],
  ];
  for (const [label, write] of writes) {
    const user = await createUser(t);
    const res = await commitWhileWaiting(t, deletedMeanwhile(user.id), () => write(user.id));
    assert.equal(res.statusCode, 404, `${label}: ${res.body}`);
    assert.equal(res.json().error.code, 'user_not_found', label);
    assert.equal(await count('entitlements', 'user_id = $1', [user.id]), 0, label);
    assert.equal(await count('role_assignments', 'user_id = $1 AND role_id = $2', [user.id, roleId]), 0, label);
    assert.equal(await count('organization_members', 'user_id = $1', [user.id]), 0, label);
  }
});

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

test('an erasure the cascade cannot complete does not hold back the erasures due after it: they complete in the same run, the run reports failure naming the user, and that user is erased once the cascade can run', async () => {
  const stuck = await createUser(t);
  const next = await createUser(t);
  assertStatus(await requestErasure(stuck.id, await asAdmin()), 202);
  t.clock.advance(60);
  assertStatus(await requestErasure(next.id, await asAdmin()), 202);
  // The user due first cannot be written (a data fault, say).
  await sql(t, `CREATE FUNCTION refuse_stuck_user() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'stuck user'; END $$`);
  await sql(t, `CREATE TRIGGER refuse_stuck_user BEFORE UPDATE ON users FOR EACH ROW WHEN (OLD.id = '${stuck.id}') EXECUTE FUNCTION refuse_stuck_user()`);
  try {
    t.clock.advance(7 * DAY + 1);
    await assert.rejects(t.deps.jobs.runNow('erasure-cascade'), (err: Error) => err.message.includes(stuck.id) && err.message.includes('stuck user'));
    assert.notEqual((await userRow(t, next.id))!.erased_at, null, 'the erasure due after it ran');
    assert.equal((await userRow(t, stuck.id))!.erased_at, null);
  } finally {
    await sql(t, 'DROP TRIGGER refuse_stuck_user ON users');
    await sql(t, 'DROP FUNCTION refuse_stuck_user()');
  }
  await t.deps.jobs.runNow('erasure-cascade');
  assert.notEqual((await userRow(t, stuck.id))!.erased_at, null);
});

test('the test purge keeps a test owner of a Tenant that no longer holds their Application (docs/decisions.md "Test purge": "a test User who owns an Application or a Tenant, a test Organization that owns one, and that Organization\'s org admins are kept"): after the Application moved to another owner, the old owner User and the old owner Organization with its org admin stay with their Tenants', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['applications.manage', 'organizations.manage'] });
  const [formerUser, orgAdmin] = [await createUser(t, { mode: 'test' }), await createUser(t, { mode: 'test' })];
  const org = await createOrganization(t, [orgAdmin.id], { mode: 'test' });
  const slug = () => `moved-${Math.random().toString(36).slice(2, 8)}`;
  const userApp = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Moved from a user', launch_url: 'https://moved.example.com', owner_user_id: formerUser.id }), 201);
  const orgApp = assertStatus(await call(t, 'POST', '/v1/applications', key.secret, { slug: slug(), name: 'Moved from an org', launch_url: 'https://moved.example.com', owner_organization_id: org }), 201);
  for (const app of [userApp, orgApp]) {
    const newOwner = await createUser(t, { mode: 'test' }); // one each: a Starter Tenant holds one Application
    const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, key.secret, { owner_user_id: newOwner.id, owner_organization_id: null }), 200);
    assert.notEqual(moved.tenant_id, app.tenant_id, 'precondition: the Application left its first Tenant');
  }
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, formerUser.id))?.id, formerUser.id, 'the owner of the emptied Tenant stays');
  assert.equal(await count('organizations', 'id = $1', [org]), 1, 'the Organization owning the emptied Tenant stays');
  assert.equal((await userRow(t, orgAdmin.id))?.id, orgAdmin.id, 'with its org admin');
  const owners = await sql(t, 'SELECT t.id, t.owner_user_id, t.owner_organization_id FROM tenants t WHERE t.id = ANY($1::text[]) ORDER BY t.id', [[userApp.tenant_id, orgApp.tenant_id]]);
  for (const o of owners) {
    const ownerLeft = o.owner_user_id ? await userRow(t, o.owner_user_id) : (await sql(t, 'SELECT id FROM organizations WHERE id = $1', [o.owner_organization_id]))[0];
    assert.ok(ownerLeft, `Tenant ${o.id} keeps an owner that exists`);
  }
});

test('the test purge keeps a test User who owns an Application whose Tenant is not theirs (docs/decisions.md "Test purge": "a test User who owns an Application or a Tenant … kept rather than leaving an owner id that points nowhere"): the Application is kept with its owner, whoever owns the Tenant', async () => {
  const tenantOwner = await createUser(t, { mode: 'test' });
  const owner = await createUser(t, { mode: 'test' });
  const app = await createApplication(t, { owner: tenantOwner.id });
  await sql(t, 'UPDATE applications SET owner_user_id = $2 WHERE id = $1', [app.id, owner.id]);
  assert.deepEqual(await sql(t, 'SELECT owner_user_id FROM tenants WHERE owner_user_id = $1', [owner.id]), [], 'precondition: the owner owns no Tenant');
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal((await userRow(t, owner.id))?.id, owner.id, "the Application's owner stays");
  assert.deepEqual(await sql(t, 'SELECT owner_user_id FROM applications WHERE id = $1', [app.id]), [{ owner_user_id: owner.id }]);
});

test('the test purge keeps an Organization\'s org admins, not its pending invitees (Part B: "A pending membership grants nothing"; an owner is "any org_admin", active, as src/access/ownership.ts reads it): an old test user invited as org_admin to a test Organization that owns an Application, never accepting, is purged with the invitation; the active org admin stays', async () => {
  const key = await createApiKey(t, { mode: 'test', permissions: ['organizations.manage'] });
  const keptAdmin = await createUser(t, { mode: 'test' });
  const kept = await createOrganization(t, [keptAdmin.id], { mode: 'test' });
  await createApplication(t, { ownerOrganization: kept });
  const invitee = await createUser(t, { mode: 'test' });
  assert.equal(assertStatus(await call(t, 'POST', `/v1/organizations/${kept}/members`, key.secret, { email: invitee.email, role: 'org_admin' }), 201).membership_status, 'pending');
  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.equal(await userRow(t, invitee.id), undefined, 'the pending invitee owns nothing and is purged');
  assert.equal(await count('organization_members', 'organization_id = $1 AND user_id = $2', [kept, invitee.id]), 0);
  assert.equal((await userRow(t, keptAdmin.id))?.id, keptAdmin.id, 'the active org admin stays');
});

test('the export\'s applications are every Application the user has an Entitlement, an AppProfile or AppSettings overrides on: one known only by its AppProfile, or only by its AppSettings, is listed too (entitlement null)', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const onlyProfile = await createApplication(t);
  const onlySettings = await createApplication(t);
  await sql(t, `INSERT INTO app_profiles (user_id, application_id, display_handle, custom, updated_at) VALUES ($1, $2, 'only-profile', '{}', now())`, [user.id, onlyProfile.id]);
  await sql(t, `INSERT INTO app_settings (user_id, application_id, overrides, updated_at) VALUES ($1, $2, '{"lang":"fr"}', now())`, [user.id, onlySettings.id]);
  const bundle = assertStatus(await exportOf('me', token), 200);
  const byApp = Object.fromEntries(bundle.applications.map((a: { application_id: string }) => [a.application_id, a]));
  assert.deepEqual(Object.keys(byApp).sort(), [onlyProfile.id, onlySettings.id].sort());
  assert.equal(byApp[onlyProfile.id].entitlement, null);
  assert.equal(byApp[onlyProfile.id].app_profile.display_handle, 'only-profile');
  assert.deepEqual(byApp[onlyProfile.id].app_settings, {});
  assert.equal(byApp[onlySettings.id].entitlement, null);
  assert.equal(byApp[onlySettings.id].app_profile, null);
  assert.deepEqual(byApp[onlySettings.id].app_settings, { lang: 'fr' });
});

test('the export\'s entitlement per Application is the latest one: a grant revoked earlier and a new active grant on the same Application export the active one', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  await grant(t, user.id, app.id, { status: 'revoked' });
  t.clock.advance(60);
  const current = await grant(t, user.id, app.id);
  const bundle = assertStatus(await exportOf('me', await login(t, user)), 200);
  assert.deepEqual(bundle.applications.map((a: any) => [a.application_id, a.entitlement.id, a.entitlement.status]), [[app.id, current, 'active']]);
});

test('"organization.member_removed | an active membership begins or is removed": the erasure cascade removes a pending invitation of the user too, audited but with no webhook (a pending membership never began)', async () => {
  const user = await createUser(t);
  const orgToken = await login(t, await createUser(t));
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgToken, { name: 'Pending Erasure Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgToken, { email: user.email }), 201);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  assert.equal(await count('organization_members', `user_id = $1 AND membership_status = 'pending'`, [user.id]), 1, 'precondition: the invitation is pending');
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  assert.equal(await count('organization_members', 'user_id = $1', [user.id]), 0);
  assert.deepEqual(await sql(t, `SELECT type FROM outbox_events WHERE type = 'organization.member_removed' AND data->>'user_id' = $1`, [user.id]), []);
  assert.deepEqual(await sql(t, `SELECT organization_id FROM audit_events WHERE action = 'organization.member_removed' AND target_user_id = $1`, [user.id]), [{ organization_id: org.id }]);
});

test('"Erasure clears everything exported", in the user\'s mode only: a test-mode mail recorded against no user to the erased live user\'s address (another mode\'s account) stays; the live one goes', async () => {
  const user = await createUser(t);
  const notice = (id: string, testMode: boolean, at: Date) =>
    sql(t, `INSERT INTO emails (id, template, to_address, subject, text_body, test_mode, next_attempt_at, created_at) VALUES ($1, 'webhook_disabled', $2, 'Webhook disabled', 'A subscription was disabled.', $3, $4, $4)`, [id, user.email, testMode, at]);
  const earlier = new Date(t.clock.now().getTime() - 60_000);
  const live = `eml_${rand()}`;
  const testMode = `eml_${rand()}`;
  await notice(live, false, earlier);
  await notice(testMode, true, earlier);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  assert.deepEqual((await sql<{ id: string }>(t, 'SELECT id FROM emails WHERE id = ANY($1::text[])', [[live, testMode]])).map((m) => m.id), [testMode]);
});

test('an erasure requested again after a cancel is a new request: 202 scheduled with requested_at the new request\'s time and scheduled_for 7 days after it, audited user.erasure_requested with that request; the cascade runs 7 days after it, not after the first', async () => {
  const user = await createUser(t);
  const first = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(DAY);
  assertStatus(await cancelErasure(user.id, await asAdmin()), 204);
  t.clock.advance(DAY);
  const again = assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  assert.equal(again.status, 'scheduled');
  assert.ok(Date.parse(again.requested_at) >= Date.parse(first.requested_at) + 2 * DAY * 1000, `${again.requested_at} is the new request's time (first ${first.requested_at})`);
  assert.equal(Date.parse(again.scheduled_for) - Date.parse(again.requested_at), 7 * DAY * 1000);
  const requested = await auditFor(t, user.id, 'user.erasure_requested');
  assert.deepEqual(requested.map((a) => a.after), [first, again]);
  // 7 days after the first request (the cancelled one) the cascade leaves the user alone.
  t.clock.advance(5 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok(!(await userRow(t, user.id))!.erased_at, 'not erased 7 days after the cancelled request');
  t.clock.advance(2 * DAY);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased 7 days after the new request');
});

test('"organization.member_removed" written by the erasure cascade is routed to the Applications the membership reached (an Organization grant), as a DELETE of the member routes it, though the cascade removed that path', async () => {
  const user = await createUser(t);
  const app = await createApplication(t);
  const org = await createOrganization(t, [(await createUser(t)).id, user.id]);
  await orgGrant(t, org, app.id);
  assertStatus(await requestErasure(user.id, await asAdmin()), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.ok((await userRow(t, user.id))!.erased_at, 'erased');
  const removed = await sql(t, `SELECT path_application_ids FROM outbox_events WHERE type = 'organization.member_removed' AND data->>'user_id' = $1`, [user.id]);
  assert.deepEqual(removed, [{ path_application_ids: [app.id] }]);
});
