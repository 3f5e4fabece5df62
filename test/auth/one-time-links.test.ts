// Mailed one-time links: email verification, invitations and email-change links, their lifetimes,
// storage and pruning, and the per-address mail limits. Password reset and change:
// password-reset-and-change.test.ts.
import { test, before, after } from 'node:test';
import { createHash } from 'node:crypto';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { bearer, createApiKey, createUser, PASSWORD, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import {
  alignToWindow, assertAuthSession, assertError, assertFields, createMfaUser, get, jwtPayload, latestToken, linkToken, loginRes, mailsTo, mfaChallenge, NEW_PASSWORD,
  post, signInSession, signupUser, sql, totpCode,
} from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const signup = (email?: string) => signupUser(t, email);
const emailVerified = async (userId: string) => (await sql(t, 'SELECT email_verified FROM users WHERE id = $1', [userId]))[0].email_verified;

const signIn = (user: Pick<TestUser, 'email' | 'password' | 'mode'>) => signInSession(t, user);

test('email/verify with the mailed token verifies the address (204); the token is single use (400 invalid_token)', async () => {
  const { email, session } = await signup();
  const token = await latestToken(t, email, 'email_verification');
  const res = await post(t, '/v1/auth/email/verify', { token });
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(await emailVerified(session.user_id), true);
  assert.equal((await get(t, '/v1/users/me', session.access_token)).json().email_verified, true);
  const again = await loginRes(t, { email, password: PASSWORD, mode: 'live' });
  assert.equal(again.json().email_verified, true);
  // A refresh of the session started before verification reports the verified address too.
  const refreshed = await post(t, '/v1/auth/token/refresh', { refresh_token: session.refresh_token });
  assert.equal(refreshed.json().email_verified, true);
  assert.equal(jwtPayload(refreshed.json().access_token).email_verified, true);
  assertError(await post(t, '/v1/auth/email/verify', { token }), 400, 'invalid_token');
});

test('"bad token 400" holds for any one-time token up to 200 characters (those issued are 47): email/verify, password/reset and invitations/accept answer 400 invalid_token, mfa/verify 401 invalid_credentials; 201 characters, or an empty one (docs/decisions.md "Errors of the token endpoints"), are 422 validation_failed naming the field', async () => {
  const token = (n: number) => 'a'.repeat(n);
  for (const [url, extra] of [['/v1/auth/email/verify', {}], ['/v1/auth/password/reset', { password: NEW_PASSWORD }], ['/v1/auth/invitations/accept', { password: NEW_PASSWORD }]] as const) {
    assertError(await post(t, url, { token: token(200), ...extra }), 400, 'invalid_token');
    assertFields(await post(t, url, { token: token(201), ...extra }), ['token']);
    assertFields(await post(t, url, { token: '', ...extra }), ['token']);
  }
  assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: token(200), code: '123456' }), 401, 'invalid_credentials');
  assertFields(await post(t, '/v1/auth/mfa/verify', { mfa_token: token(201), code: '123456' }), ['mfa_token']);
  assertFields(await post(t, '/v1/auth/mfa/verify', { mfa_token: '', code: '123456' }), ['mfa_token']);
});

test('the email verification token is valid for 24 hours: 10 s before it works, 1 s after it gets 400 invalid_token', async () => {
  const a = await signup();
  const b = await signup();
  const tokenA = await latestToken(t, a.email, 'email_verification');
  const tokenB = await latestToken(t, b.email, 'email_verification');
  t.clock.advance(24 * 3600 - 10);
  assert.equal((await post(t, '/v1/auth/email/verify', { token: tokenA })).statusCode, 204);
  t.clock.advance(11);
  assertError(await post(t, '/v1/auth/email/verify', { token: tokenB }), 400, 'invalid_token');
  assert.equal(await emailVerified(b.session.user_id), false);
});

test('email/verify/resend always answers 202 with the same body and never reveals whether the address exists; only an unverified address in that mode gets a mail', async () => {
  const unverified = await signup();
  const verified = await createUser(t);
  const unknown = uniqueEmail('ghost');
  const responses = [
    await post(t, '/v1/auth/email/verify/resend', { email: unknown }),
    await post(t, '/v1/auth/email/verify/resend', { email: verified.email }),
    await post(t, '/v1/auth/email/verify/resend', { email: unverified.email, test_mode: true }),
    await post(t, '/v1/auth/email/verify/resend', { email: unverified.email }),
  ];
  for (const res of responses) {
    assert.equal(res.statusCode, 202, res.body);
    assert.equal(res.body, responses[0].body);
    assert.equal(res.headers['content-type'], responses[0].headers['content-type']);
  }
  assert.deepEqual(await mailsTo(t, unknown), []);
  assert.deepEqual(await mailsTo(t, verified.email), []);
  const mails = await mailsTo(t, unverified.email, 'email_verification');
  assert.equal(mails.length, 2, 'the signup mail and one re-send (the test_mode one matched nobody)');
  assert.equal((await post(t, '/v1/auth/email/verify', { token: await latestToken(t, unverified.email, 'email_verification') })).statusCode, 204);
  assert.equal(await emailVerified(unverified.session.user_id), true);
});

test('email/verify/resend for a suspended user with an unverified address answers 202 as always and mails nothing, as password/forgot for a suspended user (docs/decisions.md: a suspension ends the account\'s links)', async () => {
  const unverified = await signup();
  await sql(t, `UPDATE users SET status = 'suspended' WHERE id = $1`, [unverified.session.user_id]);
  const res = await post(t, '/v1/auth/email/verify/resend', { email: unverified.email });
  assert.equal(res.statusCode, 202, res.body);
  assert.equal((await mailsTo(t, unverified.email, 'email_verification')).length, 1, 'only the signup mail');
  assert.equal(await emailVerified(unverified.session.user_id), false);
});

test('verification re-send is limited to 3 per email per hour: the 4th re-send in the hour answers 202 and sends no mail', async () => {
  alignToWindow(t, 3600, 60);
  const { email } = await signup();
  for (let i = 0; i < 4; i++) assert.equal((await post(t, '/v1/auth/email/verify/resend', { email })).statusCode, 202);
  assert.equal((await mailsTo(t, email, 'email_verification')).length, 1 + 3);
  t.clock.advance(3600);
  assert.equal((await post(t, '/v1/auth/email/verify/resend', { email })).statusCode, 202);
  assert.equal((await mailsTo(t, email, 'email_verification')).length, 1 + 4);
});

test('invitation re-send is limited to 3 per email per hour, the first invitation not counted: 1 + 3 mails, then 429 rate_limited with Retry-After until the oldest re-send leaves the hour', async () => {
  const admin = await createUser(t, { roles: ['superadmin'] });
  const token = (await signIn(admin)).access_token;
  const email = uniqueEmail('inv');
  const created = await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(token), payload: { email } });
  assert.equal(created.statusCode, 201, created.body);
  const resend = async () => t.app.inject({ method: 'POST', url: `/v1/users/${created.json().id}/invitation`, headers: bearer((await signIn(admin)).access_token) });
  // The clock stands still between the steps (sign-ins hash passwords: seconds on a loaded machine), so
  // the first re-send is exactly 600 s old when the limit answers.
  await withStoppedClock(t, async () => {
    assert.equal((await resend()).statusCode, 202);
    t.clock.advance(600);
    // Rule 3: a signup with the invited address re-sends the invitation, counted in the same limit.
    assertError(await post(t, '/v1/auth/signup', { email, password: PASSWORD }), 409, 'email_taken');
    assert.equal((await resend()).statusCode, 202);
    assert.equal((await mailsTo(t, email, 'invitation')).length, 1 + 3);
    const refused = await resend();
    assertError(refused, 429, 'rate_limited');
    assert.equal(refused.headers['retry-after'], String(3600 - 600), 'the first re-send leaves the hour in 50 minutes');
    assert.equal((await mailsTo(t, email, 'invitation')).length, 1 + 3);
    t.clock.advance(3000);
    assert.equal((await resend()).statusCode, 202);
  });
});

test('password reset mails are limited to 3 per address in any hour, also across a clock-hour boundary', async () => {
  alignToWindow(t, 3600, 3300);
  const user = await createUser(t);
  for (let i = 0; i < 3; i++) assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  t.clock.advance(600);
  for (let i = 0; i < 3; i++) assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  assert.equal((await mailsTo(t, user.email, 'password_reset')).length, 3);
  t.clock.advance(3000);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  assert.equal((await mailsTo(t, user.email, 'password_reset')).length, 4);
});

test('an account invitation link is valid for 7 days (docs/decisions.md, token lifetimes): 10 s before the 7 days end invitations/accept activates the user (200); at their end it gets 400 invalid_token and the user stays invited', async () => {
  const a = await createUser(t, { status: 'invited' });
  const b = await createUser(t, { status: 'invited' });
  await withStoppedClock(t, async () => {
    for (const u of [a, b]) assert.equal((await post(t, '/v1/auth/password/forgot', { email: u.email })).statusCode, 202);
    const tokenA = await latestToken(t, a.email, 'invitation');
    const tokenB = await latestToken(t, b.email, 'invitation');
    t.clock.advance(7 * 24 * 3600 - 10);
    assert.equal((await post(t, '/v1/auth/invitations/accept', { token: tokenA, password: NEW_PASSWORD })).statusCode, 200);
    t.clock.advance(10);
    assertError(await post(t, '/v1/auth/invitations/accept', { token: tokenB, password: NEW_PASSWORD }), 400, 'invalid_token');
  });
  assert.deepEqual((await sql(t, 'SELECT status FROM users WHERE id = ANY($1) ORDER BY id = $2 DESC', [[a.id, b.id], a.id])).map((r) => r.status), ['active', 'invited']);
});

test('an email change link issued before a suspension or a delete is dead for good: while the user is suspended or deleted, and after reactivation or restore, it is 400 invalid_token, pending_email reads null, and the email and sign-in address are unchanged (no user.email_changed)', async () => {
  const { secret: admin } = await createApiKey(t, { permissions: ['users.manage'] });
  for (const end of ['suspended', 'deleted'] as const) {
    const user = await createUser(t);
    const moved = uniqueEmail('moved');
    const change = await t.app.inject({ method: 'PATCH', url: '/v1/users/me', headers: bearer((await signIn(user)).access_token), payload: { email: moved } });
    assert.equal(change.statusCode, 200, change.body);
    const token = await latestToken(t, moved, 'email_change_verification');
    const ended = end === 'deleted'
      ? await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}`, headers: bearer(admin) })
      : await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: end } });
    assert.ok(ended.statusCode === 200 || ended.statusCode === 204, `${end}: ${ended.statusCode} ${ended.body}`);
    const shown = await t.app.inject({ method: 'GET', url: `/v1/users/${user.id}`, headers: bearer(admin) });
    assert.equal(shown.json().pending_email, null, `${end}: no change awaits verification`);
    assertError(await post(t, '/v1/auth/email/verify', { token }), 400, 'invalid_token');
    const restored = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: 'active' } });
    assert.equal(restored.statusCode, 200, restored.body);
    assert.equal(restored.json().pending_email, null);
    assertError(await post(t, '/v1/auth/email/verify', { token }), 400, 'invalid_token');
    const [row] = await sql(t, 'SELECT email, pending_email FROM users WHERE id = $1', [user.id]);
    assert.deepEqual(row, { email: user.email, pending_email: null }, `after ${end}`);
    assert.equal((await loginRes(t, user)).statusCode, 200, `after ${end}: the old address still signs in`);
    assertError(await loginRes(t, { ...user, email: moved }), 401, 'invalid_credentials');
    assert.deepEqual(await sql(t, `SELECT id FROM audit_events WHERE action = 'user.email_changed' AND target_user_id = $1`, [user.id]), []);
  }
});

/**
 * An invited user (invitation mailed to `old`) whose address an admin changes to a new one while
 * `request` is between reading the account and mailing it: the change mails the invitation to the new
 * address, and the request must mail no link to the old one.
 */
async function invitedMovedMeanwhile(fragment: string, request: (old: string, userId: string) => Promise<{ statusCode: number; body: string }>) {
  const { secret: admin } = await createApiKey(t, { permissions: ['users.manage'] });
  const old = uniqueEmail('inv-old');
  const moved = uniqueEmail('inv-new');
  const created = await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(admin), payload: { email: old } });
  assert.equal(created.statusCode, 201, created.body);
  const userId = created.json().id as string;
  const res = await pausedAfter(t, fragment, async () => {
    const changed = await t.app.inject({ method: 'PATCH', url: `/v1/users/${userId}`, headers: bearer(admin), payload: { email: moved } });
    assert.equal(changed.statusCode, 200, changed.body);
  }, () => request(old, userId));
  assert.equal((await mailsTo(t, old, 'invitation')).length, 1, 'only the invitation mailed before the change went to the old address');
  assert.deepEqual((await mailsTo(t, old)).map((m) => m.template), ['invitation']);
  // An invitation mailed to the new address works (the one mailed last: the re-send's, when it mailed one).
  const live = [];
  for (const mail of await mailsTo(t, moved, 'invitation')) {
    const [row] = await sql(t, 'SELECT used_at FROM one_time_tokens WHERE token_hash = $1', [createHash('sha256').update(linkToken(mail)).digest('hex')]);
    if (row?.used_at === null) live.push(linkToken(mail));
  }
  assert.equal(live.length, 1, 'one live invitation link, at the new address');
  const accepted = await post(t, '/v1/auth/invitations/accept', { token: live[0], password: NEW_PASSWORD });
  assert.equal(accepted.statusCode, 200, accepted.body);
  assert.equal(accepted.json().user_id, userId);
  return res;
}

test('a verification re-send racing an admin email change mails no link to the old address ("Links die with their address"): email/verify/resend answers 202 as always, and the invitation mailed to the new address still works', async () => {
  const res = await invitedMovedMeanwhile('WHERE u.email_lower = lower($1)', (old) => post(t, '/v1/auth/email/verify/resend', { email: old }));
  assert.equal(res.statusCode, 202);
});

test('a signup with an invited address racing an admin email change re-sends no invitation to the old address (Rule 3): 409 email_taken, and the invitation mailed to the new address still works', async () => {
  const res = await invitedMovedMeanwhile('WHERE u.email_lower = lower($1)', (old) => post(t, '/v1/auth/signup', { email: old, password: PASSWORD }));
  assertError(res as never, 409, 'email_taken');
});

test('an admin invitation re-send (POST /v1/users/{id}/invitation) racing another admin\'s email change mails the invitation to the address the account has now, not the old one', async () => {
  const { secret: other } = await createApiKey(t, { permissions: ['users.manage'] });
  const res = await invitedMovedMeanwhile('FROM users u WHERE u.id = $1', (_old, userId) =>
    t.app.inject({ method: 'POST', url: `/v1/users/${userId}/invitation`, headers: bearer(other) }),
  );
  assert.equal(res.statusCode, 202, res.body);
});

if (storageName === 'postgres') test('a verification link of a user deleted while it was being followed (the delete committed as the verification waited for the user) is 400 invalid_token, as for a user deleted before: the deleted account is not marked verified. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const { email, session } = await signup();
  const token = await latestToken(t, email, 'email_verification');
  // The delete's transaction (DELETE /v1/users/{id}: the user, then its status, sessions and links).
  const res = await commitWhileWaiting(t, [
    ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [session.user_id]],
    [`UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [session.user_id]],
  ], () => post(t, '/v1/auth/email/verify', { token }));
  assertError(res, 400, 'invalid_token');
  assert.equal(await emailVerified(session.user_id), false);
});

if (storageName === 'postgres') test('"email/verify: 204; bad token 400": a verification link of a user the test purge deleted while it was being followed (the purge\'s DELETE FROM users committed as the verification waited for the user) is 400 invalid_token, not a 500. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const { email, session } = await signup();
  const token = await latestToken(t, email, 'email_verification');
  // The test purge's transaction: the user row goes, and its links, sessions and identities with it.
  const res = await commitWhileWaiting(t, [
    ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [session.user_id]],
    ['DELETE FROM users WHERE id = $1', [session.user_id]],
  ], () => post(t, '/v1/auth/email/verify', { token }));
  assertError(res, 400, 'invalid_token');
});

test('invitations/accept with the mailed invitation token sets the password, activates the invited user and returns an AuthSession', async () => {
  const invited = await createUser(t, { status: 'invited' });
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: invited.email })).statusCode, 202);
  const mails = await mailsTo(t, invited.email);
  assert.deepEqual(mails.map((m) => m.template), ['invitation']);
  const token = await latestToken(t, invited.email, 'invitation');
  const res = await post(t, '/v1/auth/invitations/accept', { token, password: NEW_PASSWORD });
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json(), invited.id);
  const me = await get(t, '/v1/users/me', res.json().access_token);
  assert.equal(me.json().status, 'active');
  const [row] = await sql(t, 'SELECT status, last_login_at FROM users WHERE id = $1', [invited.id]);
  assert.equal(row.status, 'active');
  assert.notEqual(row.last_login_at, null);
  const [identity] = await sql(t, `SELECT password_hash FROM identities WHERE user_id = $1 AND method = 'password'`, [invited.id]);
  assert.ok(identity.password_hash.startsWith('$argon2id$v=19$m=19456,t=2,p=1$'), 'identity.password_hash.startsWith(\'$argon2id$v=19$m=19456,t=2,p=1$\')');
  assert.equal((await loginRes(t, invited, NEW_PASSWORD)).statusCode, 200);
  assertError(await post(t, '/v1/auth/invitations/accept', { token, password: 'another-passphrase-88' }), 400, 'invalid_token');
});

test('invitations/accept applies the password policy (422 weak_password) and leaves the user invited', async () => {
  const invited = await createUser(t, { status: 'invited' });
  await post(t, '/v1/auth/email/verify/resend', { email: invited.email });
  const token = await latestToken(t, invited.email, 'invitation');
  for (const [password, reason] of [['short-one', 'too_short'], ['password1234', 'breached'], [invited.email, 'matches_email']]) {
    assert.equal(assertError(await post(t, '/v1/auth/invitations/accept', { token, password }), 422, 'weak_password').details.reason, reason);
  }
  assert.equal((await sql(t, 'SELECT status FROM users WHERE id = $1', [invited.id]))[0].status, 'invited');
  assert.equal((await post(t, '/v1/auth/invitations/accept', { token, password: NEW_PASSWORD })).statusCode, 200);
});

test('token endpoints refuse unknown tokens and tokens of another kind with 400 invalid_token', async () => {
  const { email } = await signup();
  const verification = await latestToken(t, email, 'email_verification');
  await post(t, '/v1/auth/password/forgot', { email });
  const reset = await latestToken(t, email, 'password_reset');
  assertError(await post(t, '/v1/auth/password/reset', { token: verification, password: NEW_PASSWORD }), 400, 'invalid_token');
  assertError(await post(t, '/v1/auth/invitations/accept', { token: reset, password: NEW_PASSWORD }), 400, 'invalid_token');
  assertError(await post(t, '/v1/auth/email/verify', { token: reset }), 400, 'invalid_token');
  for (const url of ['/v1/auth/email/verify', '/v1/auth/password/reset', '/v1/auth/invitations/accept']) {
    assertError(await post(t, url, { token: 'vrf_unknown', ...(url === '/v1/auth/email/verify' ? {} : { password: NEW_PASSWORD }) }), 400, 'invalid_token');
  }
  // The tokens were not used up by the refusals.
  assert.equal((await post(t, '/v1/auth/email/verify', { token: verification })).statusCode, 204);
  assert.equal((await post(t, '/v1/auth/password/reset', { token: reset, password: NEW_PASSWORD })).statusCode, 204);
});

test('token endpoints need no test_mode (Part A rule 6): a test-mode user\'s verification link verifies it and its reset link sets its password', async () => {
  const email = uniqueEmail('tokmode');
  const created = await post(t, '/v1/auth/signup', { email, password: PASSWORD, test_mode: true });
  assert.equal(created.statusCode, 201, created.body);
  const userId = created.json().user_id;
  const verified = await post(t, '/v1/auth/email/verify', { token: await latestToken(t, email, 'email_verification') });
  assert.equal(verified.statusCode, 204, verified.body);
  assert.equal(await emailVerified(userId), true);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email, test_mode: true })).statusCode, 202);
  const reset = await post(t, '/v1/auth/password/reset', { token: await latestToken(t, email, 'password_reset'), password: NEW_PASSWORD });
  assert.equal(reset.statusCode, 204, reset.body);
  const signedIn = await loginRes(t, { email, password: NEW_PASSWORD, mode: 'test' });
  assert.equal(signedIn.statusCode, 200, signedIn.body);
  assert.equal(jwtPayload(signedIn.json().access_token).test_mode, true);
});

test('token endpoints need no test_mode (Part A rule 6) for invitations/accept too: a test-mode invited user\'s invitation link activates that user, not the live invited user of the same address, and returns a test-mode session (access token claim test_mode true)', async () => {
  const email = uniqueEmail('invmode');
  const live = await createUser(t, { email, status: 'invited' });
  const invited = await createUser(t, { email, status: 'invited', mode: 'test' });
  assert.equal((await post(t, '/v1/auth/password/forgot', { email, test_mode: true })).statusCode, 202);
  const res = await post(t, '/v1/auth/invitations/accept', { token: await latestToken(t, email, 'invitation'), password: NEW_PASSWORD });
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json(), invited.id);
  assert.equal(jwtPayload(res.json().access_token).test_mode, true);
  const me = await get(t, '/v1/users/me', res.json().access_token);
  assert.equal(me.statusCode, 200, me.body);
  assert.deepEqual([me.json().id, me.json().test_mode, me.json().status], [invited.id, true, 'active']);
  const rows = await sql(t, 'SELECT id, status FROM users WHERE id = ANY($1) ORDER BY test_mode', [[live.id, invited.id]]);
  assert.deepEqual(rows.map((r) => `${r.id}:${r.status}`), [`${live.id}:invited`, `${invited.id}:active`]);
});

test('one-time tokens are stored only as their SHA-256 hash (docs/decisions.md, secrets at rest): neither a mailed reset token nor an mfa_token is in any one_time_tokens column', async () => {
  const user = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const reset = await latestToken(t, user.email, 'password_reset');
  const mfa = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, mfa.user);
  const rows = await sql(t, 'SELECT x::text AS r, token_hash FROM one_time_tokens x WHERE user_id = ANY($1::text[])', [[user.id, mfa.user.id]]);
  const text = rows.map((row) => row.r).join('\n');
  for (const token of [reset, mfaToken]) {
    assert.ok(!text.includes(token) && !text.includes(token.slice(4)), 'the token is not stored');
    assert.ok(rows.some((row) => row.token_hash === createHash('sha256').update(token).digest('hex')), 'its SHA-256 hex is');
  }
});

test('an email change voids the links mailed to the old address: after an admin sets a new email, an earlier email-change, verification or reset token gets 400 invalid_token and changes nothing', async () => {
  const { email, session } = await signup();
  const user = { id: session.user_id as string, email };
  const access_token = session.access_token as string;
  // Three links outstanding: the signup verification of the old address, a reset sent to it, a self-service change.
  const verifyToken = await latestToken(t, user.email, 'email_verification');
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const resetToken = await latestToken(t, user.email, 'password_reset');
  const pending = uniqueEmail('pending');
  const change = await t.app.inject({ method: 'PATCH', url: '/v1/users/me', headers: bearer(access_token), payload: { email: pending } });
  assert.equal(change.json().pending_email, pending, change.body);
  const changeToken = await latestToken(t, pending, 'email_change_verification');

  const admin = await createApiKey(t, { permissions: ['users.manage'] });
  const adminSet = uniqueEmail('admin-set');
  const res = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin.secret), payload: { email: adminSet } });
  assert.equal(res.statusCode, 200, res.body);

  assertError(await post(t, '/v1/auth/email/verify', { token: changeToken }), 400, 'invalid_token');
  assertError(await post(t, '/v1/auth/email/verify', { token: verifyToken }), 400, 'invalid_token');
  assertError(await post(t, '/v1/auth/password/reset', { token: resetToken, password: NEW_PASSWORD }), 400, 'invalid_token');
  const [row] = await sql(t, 'SELECT email, pending_email, email_verified FROM users WHERE id = $1', [user.id]);
  assert.deepEqual(row, { email: adminSet, pending_email: null, email_verified: false });
  // The verification mailed to the new address does work.
  assert.equal((await post(t, '/v1/auth/email/verify', { token: await latestToken(t, adminSet, 'email_verification') })).statusCode, 204);
  assert.equal(await emailVerified(user.id), true);
});

test('completing a self-service email change voids the reset link mailed to the old address (400 invalid_token)', async () => {
  const user = await createUser(t);
  const { access_token } = await signIn(user);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const resetToken = await latestToken(t, user.email, 'password_reset');
  const next = uniqueEmail('next');
  assert.equal((await t.app.inject({ method: 'PATCH', url: '/v1/users/me', headers: bearer(access_token), payload: { email: next } })).statusCode, 200);
  assert.equal((await post(t, '/v1/auth/email/verify', { token: await latestToken(t, next, 'email_change_verification') })).statusCode, 204);
  assertError(await post(t, '/v1/auth/password/reset', { token: resetToken, password: NEW_PASSWORD }), 400, 'invalid_token');
  assert.equal((await loginRes(t, { ...user, email: next })).statusCode, 200);
});

test('completing an email change onto an address an invited user took meanwhile: 409 email_taken with details.reason invitation_pending, nothing changes', async () => {
  const user = await createUser(t);
  const { access_token } = await signIn(user);
  const next = uniqueEmail('taken');
  assert.equal((await t.app.inject({ method: 'PATCH', url: '/v1/users/me', headers: bearer(access_token), payload: { email: next } })).statusCode, 200);
  const token = await latestToken(t, next, 'email_change_verification');
  const { secret } = await createApiKey(t, { scope: 'platform', permissions: ['users.manage'] });
  const invited = await t.app.inject({ method: 'POST', url: '/v1/users', headers: bearer(secret), payload: { email: next, send_invitation: false } });
  assert.equal(invited.statusCode, 201, invited.body);
  const err = assertError(await post(t, '/v1/auth/email/verify', { token }), 409, 'email_taken');
  assert.deepEqual(err.details, { reason: 'invitation_pending' });
  const [row] = await sql(t, 'SELECT email FROM users WHERE id = $1', [user.id]);
  assert.equal(row.email, user.email);
});

const sha256 = (token: string) => createHash('sha256').update(token).digest('hex');

/** Runs the mail relay until the outbox has nothing due (it takes 50 mails a run). */
async function relayAll(): Promise<void> {
  for (;;) {
    const r = await t.deps.jobs.runNow('mail-delivery');
    if (!r.sent && !r.failed) return;
  }
}

test('one-time tokens are not kept once they work nowhere (GDPR Art. 5(1)(e) storage limitation): the idempotency-prune job deletes a used email-change token, which holds the requested address, and an expired MFA challenge; a live reset link stays and still works', async () => {
  const user = await createUser(t);
  const { access_token } = await signIn(user);
  const next = uniqueEmail('pruned');
  assert.equal((await t.app.inject({ method: 'PATCH', url: '/v1/users/me', headers: bearer(access_token), payload: { email: next } })).statusCode, 200);
  const changeToken = await latestToken(t, next, 'email_change_verification');
  const mfa = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, mfa.user);
  const other = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: other.email })).statusCode, 202);
  const resetToken = await latestToken(t, other.email, 'password_reset');
  await relayAll();
  assert.equal((await post(t, '/v1/auth/email/verify', { token: changeToken })).statusCode, 204);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM one_time_tokens WHERE data->>'email' = $1`, [next]))[0].n, 1, 'precondition: the used token holds the address');

  t.clock.advance(301);
  const result = await t.deps.jobs.runNow('idempotency-prune');
  assert.ok((result.one_time_tokens as number) >= 2, JSON.stringify(result));
  const left = await sql(t, 'SELECT kind FROM one_time_tokens WHERE token_hash = ANY($1::text[])', [[changeToken, mfaToken, resetToken].map(sha256)]);
  assert.deepEqual(left, [{ kind: 'password_reset' }]);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM one_time_tokens WHERE user_id = $1 OR data::text LIKE $2`, [user.id, `%${next}%`]))[0].n, 0);
  assertError(await post(t, '/v1/auth/email/verify', { token: changeToken }), 400, 'invalid_token');
  assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, mfa.secret) }), 401, 'invalid_credentials');
  assert.equal((await post(t, '/v1/auth/password/reset', { token: resetToken, password: NEW_PASSWORD })).statusCode, 204);
});

test('a dead link\'s token is kept while a queued mail carries it, so the relay still sees the link dead: a reset mail still queued when its hour ran out fails for good after the prune, and its token goes at the next prune', async () => {
  const user = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const token = await latestToken(t, user.email, 'password_reset');
  t.clock.advance(3601);
  await t.deps.jobs.runNow('idempotency-prune');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM one_time_tokens WHERE token_hash = $1', [sha256(token)]))[0].n, 1, 'kept for the queued mail');
  await relayAll();
  const [mail] = await sql(t, `SELECT status, last_error, text_body FROM emails WHERE to_address = $1 AND template = 'password_reset'`, [user.email]);
  assert.equal(mail.status, 'failed');
  assert.match(mail.last_error, /link was used, replaced or expired/);
  assert.ok(!mail.text_body.includes(token), 'the dead link is redacted');
  await t.deps.jobs.runNow('idempotency-prune');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM one_time_tokens WHERE token_hash = $1', [sha256(token)]))[0].n, 0);
});

test('the idempotency-prune job deletes a backlog of dead one-time tokens in batches of 5,000, all of it in one run (the first run after an upgrade finds every token ever written)', async () => {
  const user = await createUser(t);
  const now = t.clock.now();
  await sql(t, `INSERT INTO one_time_tokens (id, kind, token_hash, user_id, test_mode, created_at, expires_at, used_at)
                SELECT 'ott_backlog' || g, 'password_reset', 'backlog' || g || $2, $1, false, $3, $3, $3 FROM generate_series(1, 5001) g`, [user.id, randomHex(), now]);
  t.clock.advance(1);
  const result = await t.deps.jobs.runNow('idempotency-prune');
  assert.ok((result.one_time_tokens as number) >= 5001, JSON.stringify(result));
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM one_time_tokens WHERE user_id = $1', [user.id]))[0].n, 0);
});

const randomHex = () => createHash('sha256').update(String(Math.random())).digest('hex').slice(0, 8);

test('invitation token "single use": two accepts of one invitation at once, and of two links of one invited user (the account\'s and an Organization\'s), activate the user once: one 200 AuthSession, the other 400 invalid_token; one password, one session, one user.invitation_accepted', async () => {
  const admin = await createUser(t, { roles: ['superadmin'] });
  const adminToken = (await signIn(admin)).access_token;
  const invite = async (label: string) => {
    const email = uniqueEmail(label);
    const res = await post(t, '/v1/users', { email }, bearer(adminToken));
    assert.equal(res.statusCode, 201, res.body);
    return { id: res.json().id as string, email, link: await latestToken(t, email, 'invitation') };
  };
  const once = await invite('twice');
  const twoLinks = await invite('two-links');
  const org = await post(t, '/v1/organizations', { name: 'Two Links' }, bearer(adminToken));
  assert.equal((await post(t, `/v1/organizations/${org.json().id}/members`, { email: twoLinks.email }, bearer(adminToken))).statusCode, 201);
  const orgLink = await latestToken(t, twoLinks.email, 'organization_invitation');
  for (const [user, links] of [[once, [once.link, once.link]], [twoLinks, [twoLinks.link, orgLink]]] as const) {
    const answers = await Promise.all(links.map((token, i) => post(t, '/v1/auth/invitations/accept', { token, password: `${NEW_PASSWORD}-${i}` })));
    assert.deepEqual(answers.map((r) => r.statusCode).sort(), [200, 400], answers.map((r) => r.body).join('\n'));
    const winner = answers.findIndex((r) => r.statusCode === 200);
    assertAuthSession(answers[winner].json(), user.id);
    assertError(answers[1 - winner], 400, 'invalid_token');
    assert.equal((await loginRes(t, { email: user.email, password: `${NEW_PASSWORD}-${winner}`, mode: 'live' })).statusCode, 200, 'the winner\'s password is the one set');
    const [n] = await sql(t, `SELECT (SELECT count(*)::int FROM sessions WHERE user_id = $1) AS sessions,
                                     (SELECT count(*)::int FROM audit_events WHERE target_user_id = $1 AND action = 'user.invitation_accepted') AS audits`, [user.id]);
    assert.deepEqual(n, { sessions: 2, audits: 1 }, 'the accept\'s session and the sign-in just made');
  }
});

test('Auth Rule 6 "match only accounts in that mode" for the mail limits: a live and a test-mode account of one address are two addresses, 3 verification re-sends and 3 reset mails each per hour; the live account\'s spent limits leave the test account\'s untouched', async () => {
  const email = uniqueEmail('modes');
  await withStoppedClock(t, async () => {
    for (const test_mode of [false, true]) assert.equal((await post(t, '/v1/auth/signup', { email, password: PASSWORD, test_mode })).statusCode, 201);
    for (let i = 0; i < 4; i++) {
      assert.equal((await post(t, '/v1/auth/email/verify/resend', { email })).statusCode, 202);
      assert.equal((await post(t, '/v1/auth/password/forgot', { email })).statusCode, 202);
    }
    const counts = async () => Object.fromEntries(
      (await sql(t, `SELECT template || ':' || test_mode AS k, count(*)::int AS n FROM emails WHERE lower(to_address) = lower($1) GROUP BY 1`, [email])).map((r: any) => [r.k, r.n]),
    );
    assert.deepEqual(await counts(), { 'email_verification:false': 1 + 3, 'password_reset:false': 3, 'email_verification:true': 1 });
    assert.equal((await post(t, '/v1/auth/email/verify/resend', { email, test_mode: true })).statusCode, 202);
    assert.equal((await post(t, '/v1/auth/password/forgot', { email, test_mode: true })).statusCode, 202);
    assert.deepEqual(await counts(), { 'email_verification:false': 1 + 3, 'password_reset:false': 3, 'email_verification:true': 1 + 1, 'password_reset:true': 1 });
  });
});

test('reset mails and verification re-sends are two limits, 3 per address per hour each (docs/decisions.md "Throttles"): an unverified user who spent the 3 re-sends still gets a reset mail, and one who spent the 3 resets still gets a verification re-send', async () => {
  await withStoppedClock(t, async () => {
    const first = await signup();
    for (let i = 0; i < 3; i++) assert.equal((await post(t, '/v1/auth/email/verify/resend', { email: first.email })).statusCode, 202);
    assert.equal((await post(t, '/v1/auth/password/forgot', { email: first.email })).statusCode, 202);
    assert.equal((await mailsTo(t, first.email, 'password_reset')).length, 1, 'a reset mail after 3 re-sends');
    const second = await signup();
    for (let i = 0; i < 3; i++) assert.equal((await post(t, '/v1/auth/password/forgot', { email: second.email })).statusCode, 202);
    assert.equal((await post(t, '/v1/auth/email/verify/resend', { email: second.email })).statusCode, 202);
    assert.equal((await mailsTo(t, second.email, 'email_verification')).length, 1 + 1, 'a re-send after 3 resets');
  });
});

test('the verification re-send and reset limits are a rolling hour to the second: 3 of each at one instant, a 4th 3,599 s later mails nothing (202 as always), one at exactly 3,600 s mails', async () => {
  await withStoppedClock(t, async () => {
    const { email } = await signup();
    const sends = [['/v1/auth/email/verify/resend', 'email_verification', 1], ['/v1/auth/password/forgot', 'password_reset', 0]] as const;
    for (const [url] of sends) for (let i = 0; i < 3; i++) assert.equal((await post(t, url, { email })).statusCode, 202);
    t.clock.advance(3599);
    for (const [url, template, first] of sends) {
      assert.equal((await post(t, url, { email })).statusCode, 202);
      assert.equal((await mailsTo(t, email, template)).length, first + 3, `${url} 1 s before the hour ends`);
    }
    t.clock.advance(1);
    for (const [url, template, first] of sends) {
      assert.equal((await post(t, url, { email })).statusCode, 202);
      assert.equal((await mailsTo(t, email, template)).length, first + 4, `${url} at the hour's end`);
    }
  });
});
