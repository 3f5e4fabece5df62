// Part A's prose rules (the sentences outside the tables) that no other test states on its own:
// Auth Rules 5 and 6, the User field notes, the erasure paragraph, the Profile rules, MFA recovery
// codes, the Authentication section and the AuthSession's email_verified.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, PASSWORD, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { assertError, assertStatus, auditFor, call, linkToken, mailsTo, userRow } from './support.js';
import { alignToStep, createMfaUser, loginRes, mfaChallenge, totpCode } from '../auth/support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };
before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
});
after(() => t.close());

test('Auth Rule 5 "Correct credentials on a suspended user: 403 account_suspended" holds with TOTP enrolled: the login answers 403, not an MfaChallenge, and no mfa_token is issued', async () => {
  const m = await createMfaUser(t);
  assertStatus(await call(t, 'POST', `/v1/users/${m.user.id}/suspend`, admin.token, {}), 200);
  const res = await loginRes(t, m.user);
  assertError(res, 403, 'account_suspended');
  assert.equal(res.json().mfa_token, undefined);
  // A wrong password is still the one 401.
  assertError(await loginRes(t, m.user, 'not-the-password-at-all'), 401, 'invalid_credentials');
});

test('Auth Rule 6 "match only accounts in that mode" for Rule 3: a test-mode signup with the address of a live invited user creates the test user (201) and re-sends nothing; a test-mode invited user gets 409 invitation_pending and its invitation again', async () => {
  const liveInvited = uniqueEmail('liveinv');
  assertStatus(await call(t, 'POST', '/v1/users', admin.token, { email: liveInvited }), 201);
  const created = assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email: liveInvited, password: PASSWORD, test_mode: true }), 201);
  assert.equal((await userRow(t, created.user_id))!.test_mode, true);
  assert.equal((await mailsTo(t, liveInvited, 'invitation')).length, 1, 'the live invitation is not re-sent');

  const testKey = await createApiKey(t, { permissions: ['users.manage'], mode: 'test' });
  const testInvited = uniqueEmail('testinv');
  assertStatus(await call(t, 'POST', '/v1/users', testKey.secret, { email: testInvited }), 201);
  const res = await call(t, 'POST', '/v1/auth/signup', null, { email: testInvited, password: PASSWORD, test_mode: true });
  assert.deepEqual(assertError(res, 409, 'email_taken').details, { reason: 'invitation_pending' });
  assert.equal((await mailsTo(t, testInvited, 'invitation')).length, 2);
  // The live mode does not hold the address.
  assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email: testInvited, password: PASSWORD }), 201);
});

test('"last_login_at: Set when a session is actually issued": token/refresh issues no session and leaves it; the refreshed AuthSession and its token carry email_verified as it is now', async () => {
  const email = uniqueEmail('refresh');
  const signed = assertStatus(await call(t, 'POST', '/v1/auth/signup', null, { email, password: PASSWORD }), 201);
  assert.equal(signed.email_verified, false);
  const before = (await userRow(t, signed.user_id))!.last_login_at;
  assert.ok(before, 'signup issued a session');
  t.clock.advance(60);
  const [mail] = await mailsTo(t, email, 'email_verification');
  assert.equal((await call(t, 'POST', '/v1/auth/email/verify', null, { token: linkToken(mail) })).statusCode, 204);
  const refreshed = assertStatus(await call(t, 'POST', '/v1/auth/token/refresh', null, { refresh_token: signed.refresh_token }), 200);
  assert.equal(refreshed.session_id, signed.session_id);
  assert.equal(refreshed.email_verified, true);
  assert.equal(JSON.parse(Buffer.from(refreshed.access_token.split('.')[1], 'base64url').toString()).email_verified, true);
  assert.equal(new Date((await userRow(t, signed.user_id))!.last_login_at).getTime(), new Date(before).getTime());
});

test('Erasure request "idempotent (a repeat returns the existing request)" is about the scheduled one: after users.manage cancelled it, a new request schedules a new erasure (202, scheduled, new requested_at) and restore is 409 erasure_scheduled again', async () => {
  const u = await createUser(t);
  const first = assertStatus(await call(t, 'POST', `/v1/users/${u.id}/erasure-requests`, admin.token, {}), 202);
  assert.equal((await call(t, 'DELETE', `/v1/users/${u.id}/erasure-requests/current`, admin.token)).statusCode, 204);
  t.clock.advance(5);
  const second = assertStatus(await call(t, 'POST', `/v1/users/${u.id}/erasure-requests`, admin.token, {}), 202);
  assert.equal(second.status, 'scheduled');
  assert.notEqual(second.requested_at, first.requested_at);
  assert.equal(new Date(second.scheduled_for).getTime() - new Date(second.requested_at).getTime(), 7 * 86400_000);
  assertError(await call(t, 'PATCH', `/v1/users/${u.id}`, admin.token, { status: 'active' }), 409, 'erasure_scheduled');
  assert.equal((await auditFor(t, u.id, 'user.erasure_requested')).length, 2);
});

test('Profile "contact_email: unverified; not used for login", and "an admin changing someone else\'s Profile writes profile.updated" for a users.manage API key too (actor api_key); a users.manage holder editing their own Profile is self-service and writes none', async () => {
  const key = await createApiKey(t, { permissions: ['users.manage'] });
  const { user, token } = await userToken(t);
  const contact = uniqueEmail('contact');
  assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', token, { contact_email: contact }), 200);
  assertError(await loginRes(t, { ...user, email: contact }), 401, 'invalid_credentials');
  assert.equal((await auditFor(t, user.id, 'profile.updated')).length, 0);
  assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}/profile`, key.secret, { display_name: 'Set By Key' }), 200);
  const rows = await auditFor(t, user.id, 'profile.updated');
  assert.equal(rows.length, 1);
  assert.equal(rows[0].actor_type, 'api_key');
  assertStatus(await call(t, 'PATCH', '/v1/users/me/profile', admin.token, { display_name: 'Admin Self' }), 200);
  assert.equal((await auditFor(t, admin.user.id, 'profile.updated')).length, 0);
});

test('MFA "confirms; returns recovery codes": the recovery codes of a TOTP turned off and enrolled again no longer complete a sign-in (401 invalid_credentials)', async () => {
  const m = await createMfaUser(t);
  assert.equal((await call(t, 'POST', '/v1/users/me/mfa/totp/disable', m.token, { code: await totpCode(t, m.secret) })).statusCode, 204);
  const begin = assertStatus(await call(t, 'POST', '/v1/users/me/mfa/totp', m.token), 200);
  t.clock.advance(30);
  alignToStep(t, 5);
  assertStatus(await call(t, 'POST', '/v1/users/me/mfa/totp/confirm', m.token, { code: await totpCode(t, begin.secret) }), 200);
  const mfaToken = await mfaChallenge(t, m.user);
  assertError(await call(t, 'POST', '/v1/auth/mfa/verify', null, { mfa_token: mfaToken, recovery_code: m.recoveryCodes[0] }), 401, 'invalid_credentials');
});

test('Authentication 1 "Unauthenticated operations are marked none" and "GET /health needs no credential": a bad or foreign Authorization header does not make them 401 (health, login, token/refresh, password/forgot, JWKS)', async () => {
  const u = await createUser(t);
  const bad = { authorization: 'Bearer not-a-credential' };
  const health = await t.app.inject({ method: 'GET', url: '/health', headers: bad });
  assert.equal(health.statusCode, 200, health.body);
  assert.deepEqual(health.json(), { status: 'ok' });
  const login = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: bad, payload: { email: u.email, password: PASSWORD } });
  assert.equal(login.statusCode, 200, login.body);
  const refresh = await t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', headers: bad, payload: { refresh_token: login.json().refresh_token } });
  assert.equal(refresh.statusCode, 200, refresh.body);
  const forgot = await t.app.inject({ method: 'POST', url: '/v1/auth/password/forgot', headers: { authorization: 'Basic Zm9vOmJhcg==' }, payload: { email: u.email } });
  assert.equal(forgot.statusCode, 202, forgot.body);
  const jwks = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json', headers: bad });
  assert.equal(jwks.statusCode, 200, jwks.body);
});

test('User "updated_at: timestamp" moves with every change of the User: suspend, reactivate, delete, restore, invited → active, an admin email change, a self-service email change asked, withdrawn and completed', async () => {
  const stamp = async (id: string) => (await userRow(t, id))!.updated_at.getTime();
  /** Runs `change` a minute on and asserts it moved the user's updated_at to that instant or later. */
  const moves = async (label: string, id: string, change: () => Promise<unknown>) => {
    const previous = await stamp(id);
    t.clock.advance(60);
    const at = t.clock.now().getTime();
    await change();
    const now = await stamp(id);
    assert.ok(now > previous && now >= at, `${label}: updated_at ${new Date(now).toISOString()} not moved to ${new Date(at).toISOString()}`);
  };
  const user = await createUser(t);
  await moves('suspend', user.id, async () => assertStatus(await call(t, 'POST', `/v1/users/${user.id}/suspend`, admin.token), 200));
  await moves('reactivate', user.id, async () => assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, admin.token, { status: 'active' }), 200));
  await moves('delete', user.id, async () => assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin.token)).statusCode, 204));
  await moves('restore', user.id, async () => assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, admin.token, { status: 'active' }), 200));
  await moves('admin email change', user.id, async () => assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, admin.token, { email: uniqueEmail('adm') }), 200));
  const invited = await createUser(t, { status: 'invited' });
  await moves('invited → active', invited.id, async () => assertStatus(await call(t, 'PATCH', `/v1/users/${invited.id}`, admin.token, { status: 'active' }), 200));

  const self = await userToken(t);
  const newEmail = uniqueEmail('selfchg');
  await moves('self email change asked', self.user.id, async () => assertStatus(await call(t, 'PATCH', '/v1/users/me', self.token, { email: newEmail }), 200));
  await moves('self email change withdrawn', self.user.id, async () => assertStatus(await call(t, 'PATCH', '/v1/users/me', self.token, { email: self.user.email }), 200));
  assertStatus(await call(t, 'PATCH', '/v1/users/me', self.token, { email: newEmail }), 200);
  const token = linkToken((await mailsTo(t, newEmail)).at(-1)!);
  await moves('self email change completed', self.user.id, async () => assert.equal((await call(t, 'POST', '/v1/auth/email/verify', null, { token })).statusCode, 204));
});
