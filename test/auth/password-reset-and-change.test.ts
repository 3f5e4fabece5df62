// Password recovery and change: password/forgot, password/reset, password change, their lockout,
// timing and audit. Email verification, invitations and other links: one-time-links.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, pausedAfter, storageName, withStoppedClock, withWrappedDatabase, type TestApp } from '../helpers/app.js';
import type { Db, Tx } from '../../src/db/types.js';
import { blockedBy, client, commitWhileWaiting, probeWhileHeld } from '../helpers/locks.js';
import { ADDRESS_BLIND_ANSWER_MS } from '../../src/modules/auth/routes.js';
import { verifyPassword } from '../../src/auth/passwords.js';
import { argon2Hashes, passwordEvaluations } from '../security/core/argon2-probe.js';
import { bearer, createApiKey, createUser, PASSWORD, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import {
  assertAuthSession, assertError, assertFields, createMfaUser, get, jwtPayload, latestToken, loginRes, mailsTo, mfaChallenge, NEW_PASSWORD,
  post, signInSession, signupUser, sql, totpCode,
} from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const signup = (email?: string) => signupUser(t, email);
const signIn = (user: Pick<TestUser, 'email' | 'password' | 'mode'>) => signInSession(t, user);

test('password/forgot always answers 202 with the same body; an active address in that mode gets a password_reset mail with a token= link, an unknown one nothing', async () => {
  const user = await createUser(t);
  const unknown = uniqueEmail('ghost');
  const responses = [
    await post(t, '/v1/auth/password/forgot', { email: unknown }),
    await post(t, '/v1/auth/password/forgot', { email: user.email, test_mode: true }),
    await post(t, '/v1/auth/password/forgot', { email: user.email }),
  ];
  for (const res of responses) {
    assert.equal(res.statusCode, 202, res.body);
    assert.equal(res.body, responses[0].body);
  }
  assert.deepEqual(await mailsTo(t, unknown), []);
  const mails = await mailsTo(t, user.email);
  assert.deepEqual(mails.map((m) => m.template), ['password_reset']);
  assert.match(mails[0].text_body, /\/reset-password\?token=/);
});

test('password/reset with the mailed single-use token sets the new password and revokes all sessions', async () => {
  const user = await createUser(t);
  const one = await signIn(user);
  const two = await signIn(user);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const token = await latestToken(t, user.email, 'password_reset');
  const res = await post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD });
  assert.equal(res.statusCode, 204, res.body);

  for (const s of [one, two]) {
    assertError(await get(t, '/v1/users/me', s.access_token), 401, 'unauthenticated');
    assertError(await post(t, '/v1/auth/token/refresh', { refresh_token: s.refresh_token }), 401, 'invalid_refresh_token');
  }
  assert.deepEqual(await sql(t, 'SELECT id FROM sessions WHERE user_id = $1 AND revoked_at IS NULL', [user.id]), []);
  assertError(await loginRes(t, user), 401, 'invalid_credentials');
  const fresh = await loginRes(t, user, NEW_PASSWORD);
  assert.equal(fresh.statusCode, 200, fresh.body);
  assertAuthSession(fresh.json(), user.id);
  const [identity] = await sql(t, `SELECT password_hash FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.ok(identity.password_hash.startsWith('$argon2id$v=19$m=19456,t=2,p=1$'), 'identity.password_hash.startsWith(\'$argon2id$v=19$m=19456,t=2,p=1$\')');

  assertError(await post(t, '/v1/auth/password/reset', { token, password: 'yet-another-passphrase-3' }), 400, 'invalid_token');
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200, 'the reused token changed nothing');
});

test('password/reset: "the address counts as verified" (docs/decisions.md "Payloads not shown in the spec"): an unverified user who resets through the mailed link reads email_verified true, and the next sign-in\'s AuthSession and access token say so', async () => {
  const { email, session } = await signup();
  const me = async (accessToken: string) => (await get(t, '/v1/users/me', accessToken)).json().email_verified;
  assert.equal(await me(session.access_token), false, 'a new signup is unverified');
  assert.equal((await post(t, '/v1/auth/password/forgot', { email })).statusCode, 202);
  const res = await post(t, '/v1/auth/password/reset', { token: await latestToken(t, email, 'password_reset'), password: NEW_PASSWORD });
  assert.equal(res.statusCode, 204, res.body);
  const fresh = await loginRes(t, { email, password: NEW_PASSWORD, mode: 'live' });
  assert.equal(fresh.statusCode, 200, fresh.body);
  assert.equal(fresh.json().email_verified, true);
  assert.equal(jwtPayload(fresh.json().access_token).email_verified, true);
  assert.equal(await me(fresh.json().access_token), true);
});

test('a password reset link is valid for 1 hour (docs/decisions.md): 10 s before the hour ends it sets the password (204); at the end of the hour it gets 400 invalid_token and the password is unchanged', async () => {
  const a = await createUser(t);
  const b = await createUser(t);
  await withStoppedClock(t, async () => {
    for (const u of [a, b]) assert.equal((await post(t, '/v1/auth/password/forgot', { email: u.email })).statusCode, 202);
    const tokenA = await latestToken(t, a.email, 'password_reset');
    const tokenB = await latestToken(t, b.email, 'password_reset');
    t.clock.advance(3600 - 10);
    assert.equal((await post(t, '/v1/auth/password/reset', { token: tokenA, password: NEW_PASSWORD })).statusCode, 204);
    t.clock.advance(10);
    assertError(await post(t, '/v1/auth/password/reset', { token: tokenB, password: NEW_PASSWORD }), 400, 'invalid_token');
  });
  assert.equal((await loginRes(t, b)).statusCode, 200, 'the old password still signs in');
});

test('a second password/forgot replaces the first link (docs/decisions.md, a link "replaced by a newer mail (a second reset request …)"): the earlier token gets 400 invalid_token, the newer one sets the password', async () => {
  const user = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const first = await latestToken(t, user.email, 'password_reset');
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const second = await latestToken(t, user.email, 'password_reset');
  assert.notEqual(second, first);
  assertError(await post(t, '/v1/auth/password/reset', { token: first, password: NEW_PASSWORD }), 400, 'invalid_token');
  assert.equal((await loginRes(t, user)).statusCode, 200, 'the replaced link changed nothing');
  assert.equal((await post(t, '/v1/auth/password/reset', { token: second, password: NEW_PASSWORD })).statusCode, 204);
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200);
});

test('password/forgot for a suspended user answers 202 as always and mails no reset link (docs/decisions.md: forgot for a suspended user "mails nothing (still 202)"), and no reset token is stored', async () => {
  const user = await createUser(t, { status: 'suspended' });
  const res = await post(t, '/v1/auth/password/forgot', { email: user.email });
  assert.equal(res.statusCode, 202, res.body);
  assert.deepEqual(await mailsTo(t, user.email, 'password_reset'), []);
  assert.deepEqual(await sql(t, `SELECT id FROM one_time_tokens WHERE user_id = $1 AND kind = 'password_reset'`, [user.id]), []);
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('a password reset and a password/forgot of the same user at once do not deadlock (PostgreSQL): the reset takes the user before its link, as the forgot does (the user, then its links), so the forgot waits for the reset and runs once, not again as a deadlock victim; the reset answers 204 and the forgot mails a new link', async () => {
  const user = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const token = await latestToken(t, user.email, 'password_reset');
  // Each run of the forgot's transaction counts its mail quota: a sequence (not rolled back) counts the runs.
  const seq = `${t.schema}.forgot_runs_${user.id.toLowerCase()}`;
  await sql(t, `CREATE SEQUENCE ${seq}`);
  await sql(t, `CREATE FUNCTION ${t.schema}.count_forgot_runs() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
    BEGIN IF NEW.bucket = 'mail:reset:live:${user.email.toLowerCase()}' THEN PERFORM nextval('${seq}'); END IF; RETURN NEW; END $$`);
  await sql(t, `CREATE TRIGGER count_forgot_runs BEFORE INSERT ON ${t.schema}.counters FOR EACH ROW EXECUTE FUNCTION ${t.schema}.count_forgot_runs()`);
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    // The identity is held: the reset waits for it holding what it took before (its link, in the old order).
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM identities WHERE user_id = $1 AND method = 'password' FOR NO KEY UPDATE`, [user.id]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const reset = post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD });
    const resetPid = await blockedBy(watcher, rows[0].pid, 'the reset');
    const forgot = post(t, '/v1/auth/password/forgot', { email: user.email });
    await blockedBy(watcher, resetPid, 'the forgot, behind the reset');
    await holder.query('COMMIT');
    const [r, f] = await Promise.all([reset, forgot]);
    assert.equal(r.statusCode, 204, r.body);
    assert.equal(f.statusCode, 202, f.body);
    const [{ runs }] = await sql<{ runs: number }>(t, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END::int AS runs FROM ${seq}`);
    assert.equal(runs, 1, 'the forgot ran once: it waited for the reset and was no deadlock victim run again');
    assert.equal((await mailsTo(t, user.email, 'password_reset')).length, 2, 'the forgot mailed a new link');
    assert.notEqual(await latestToken(t, user.email, 'password_reset'), token);
    assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200, 'the reset set the password');
  } finally {
    await holder.end();
    await watcher.end();
    await sql(t, `DROP TRIGGER count_forgot_runs ON ${t.schema}.counters`);
    await sql(t, `DROP FUNCTION ${t.schema}.count_forgot_runs()`);
    await sql(t, `DROP SEQUENCE ${seq}`);
  }
});

if (storageName === 'postgres') test('a password reset holds the user only against status, email and link changes (PostgreSQL): while it waits for the identity a sign-in holds, that sign-in can still start its session on the user row (FOR NO KEY UPDATE), so a sign-in and a reset at once do not deadlock; the reset answers 204', async () => {
  const user = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const token = await latestToken(t, user.email, 'password_reset');
  const { probeLocked, result } = await probeWhileHeld(
    t,
    [`SELECT 1 FROM identities WHERE user_id = $1 AND method = 'password' FOR NO KEY UPDATE`, [user.id]],
    () => post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD }),
    ['SELECT 1 FROM users WHERE id = $1 FOR NO KEY UPDATE NOWAIT', [user.id]],
  );
  assert.equal(probeLocked, true, "the reset waited for the identity without blocking the sign-in's write of the user");
  assert.equal(result.statusCode, 204, result.body);
});

test('a reset link issued before a suspension or a delete is dead for good: after reactivation or restore it is 400 invalid_token and the password is unchanged', async () => {
  const { secret: admin } = await createApiKey(t, { permissions: ['users.manage'] });
  for (const [end, back] of [['suspended', 'active'], ['deleted', 'active']] as const) {
    const user = await createUser(t);
    assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
    const token = await latestToken(t, user.email, 'password_reset');
    const ended = end === 'deleted'
      ? await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}`, headers: bearer(admin) })
      : await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: end } });
    assert.ok(ended.statusCode === 200 || ended.statusCode === 204, `${end}: ${ended.statusCode} ${ended.body}`);
    const restored = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: back } });
    assert.equal(restored.statusCode, 200, restored.body);
    assertError(await post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD }), 400, 'invalid_token');
    assert.equal((await loginRes(t, user)).statusCode, 200, `after ${end}: the old password still signs in`);
  }
});

test('a reset asked while the user is being suspended mails no link: password/forgot answers 202 as always, no password_reset mail or live link, so none works during the suspension or after the reactivation', async () => {
  const { secret: admin } = await createApiKey(t, { permissions: ['users.manage'] });
  const user = await createUser(t);
  const res = await pausedAfter(t, 'WHERE u.email_lower = lower($1)', async () => {
    const suspended = await t.app.inject({ method: 'POST', url: `/v1/users/${user.id}/suspend`, headers: bearer(admin), payload: {} });
    assert.equal(suspended.statusCode, 200, suspended.body);
  }, () => post(t, '/v1/auth/password/forgot', { email: user.email }));
  assert.equal(res.statusCode, 202);
  assert.deepEqual(await mailsTo(t, user.email), []);
  assert.deepEqual(await sql(t, `SELECT id FROM one_time_tokens WHERE user_id = $1 AND kind = 'password_reset' AND used_at IS NULL`, [user.id]), []);
  const back = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: 'active' } });
  assert.equal(back.statusCode, 200, back.body);
  assert.equal((await loginRes(t, user)).statusCode, 200, 'the password is unchanged');
});

test('password/reset applies the password policy (422 weak_password) and a refused reset leaves the token usable', async () => {
  const user = await createUser(t);
  await post(t, '/v1/auth/password/forgot', { email: user.email });
  const token = await latestToken(t, user.email, 'password_reset');
  assert.equal(assertError(await post(t, '/v1/auth/password/reset', { token, password: 'short' }), 422, 'weak_password').details.reason, 'too_short');
  assert.equal(assertError(await post(t, '/v1/auth/password/reset', { token, password: 'password1234' }), 422, 'weak_password').details.reason, 'breached');
  assert.equal(assertError(await post(t, '/v1/auth/password/reset', { token, password: user.email }), 422, 'weak_password').details.reason, 'matches_email');
  assert.equal((await loginRes(t, user)).statusCode, 200, 'the old password still works');
  assert.equal((await post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD })).statusCode, 204);
});

test('password change with a wrong current password gets 403 invalid_current_password and changes nothing', async () => {
  const user = await createUser(t);
  const current = await signIn(user);
  const other = await signIn(user);
  const res = await post(t, '/v1/users/me/password', { current_password: 'not-the-password-9', new_password: NEW_PASSWORD }, bearer(current.access_token));
  assertError(res, 403, 'invalid_current_password');
  assert.equal((await get(t, '/v1/users/me', other.access_token)).statusCode, 200);
  assert.equal((await loginRes(t, user)).statusCode, 200);
  assert.deepEqual(await mailsTo(t, user.email, 'password_changed'), []);
});

test('a user with no password sign-in (an SSO-only identity) holding a User token: password change is 409 password_identity_required, and nothing is written (TOTP enrollment alike: mfa-enrollment.test.ts)', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  await sql(t, `UPDATE identities SET method = 'sso', password_hash = NULL WHERE user_id = $1`, [user.id]);
  const token = bearer(session.access_token);
  assertError(await post(t, '/v1/users/me/password', { current_password: user.password, new_password: NEW_PASSWORD }, token), 409, 'password_identity_required');
  const [identity] = await sql(t, 'SELECT method, password_hash FROM identities WHERE user_id = $1', [user.id]);
  assert.deepEqual(identity, { method: 'sso', password_hash: null });
  assert.deepEqual(await mailsTo(t, user.email, 'password_changed'), []);
  assert.deepEqual(await sql(t, `SELECT action FROM audit_events WHERE target_user_id = $1 AND action = 'user.password_changed'`, [user.id]), []);
});

if (storageName === 'postgres') test('"Suspend: all sessions revoked": a password change whose session a suspension ended while it ran (the suspension committed as the change waited for the user) answers 401 and changes nothing: the old password stays, no password_changed mail. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  // The suspension's transaction (POST /v1/users/{id}/suspend: the user, then its status and sessions).
  const res = await commitWhileWaiting(t, [
    ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [user.id]],
    [`UPDATE users SET status = 'suspended' WHERE id = $1`, [user.id]],
    ['UPDATE sessions SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL', [user.id]],
  ], () => post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, bearer(session.access_token)));
  assertError(res, 401, 'unauthenticated');
  const [identity] = await sql<{ password_hash: string }>(t, `SELECT password_hash FROM identities WHERE user_id = $1 AND password_hash IS NOT NULL`, [user.id]);
  assert.equal(await verifyPassword(identity.password_hash, PASSWORD), true, 'the old password stays');
  assert.deepEqual(await mailsTo(t, user.email, 'password_changed'), []);
});

if (storageName === 'postgres') test('a password change of a user the test purge deleted while it ran (the purge\'s DELETE FROM users, sessions with it, committed as the change waited for the user) answers 401 unauthenticated, its session gone, not a 500. PostgreSQL only: the embedded database runs one transaction at a time', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  const [holder, watcher] = [await client(t), await client(t)];
  let res;
  try {
    // The test purge's transaction: the user row goes, and its sessions, identities and links with it.
    // Its DELETE runs once the change waits for the user (not before the change starts, as in
    // commitWhileWaiting): run earlier, it holds the identity the change's lockout claim takes first.
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [user.id]);
    const { rows } = await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const change = post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, bearer(session.access_token));
    await blockedBy(watcher, rows[0].pid, 'the password change');
    await holder.query('DELETE FROM users WHERE id = $1', [user.id]);
    await holder.query('COMMIT');
    res = await change;
  } finally {
    await holder.end();
    await watcher.end();
  }
  assertError(res, 401, 'unauthenticated');
  assert.deepEqual(await mailsTo(t, user.email, 'password_changed'), []);
});

test('wrong current passwords at password change count toward the lockout: after 5 in 15 minutes the next gets 429 too_many_attempts with Retry-After, even the right one, and the password is unchanged', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  const change = (current_password: string) => post(t, '/v1/users/me/password', { current_password, new_password: NEW_PASSWORD }, bearer(session.access_token));
  for (let i = 0; i < 5; i++) assertError(await change('not-the-password-9'), 403, 'invalid_current_password');
  const locked = await change(PASSWORD);
  assertError(locked, 429, 'too_many_attempts');
  assert.ok(Number(locked.headers['retry-after']) > 0, `Retry-After ${locked.headers['retry-after']}`);
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
  t.clock.advance(15 * 60 + 1);
  assertError(await loginRes(t, user, NEW_PASSWORD), 401, 'invalid_credentials');
  assert.equal((await loginRes(t, user)).statusCode, 200, 'the old password still signs in');
});

test('a password reset clears the lockout (docs/decisions.md "Throttles"): a locked-out user who resets signs in at once with the new password; with TOTP on, that sign-in still asks for a code (catalog AU-6, ASVS 6.4.3)', async () => {
  const plain = await createUser(t);
  const { user: guarded } = await createMfaUser(t);
  for (const user of [plain, guarded]) {
    for (let i = 0; i < 5; i++) assertError(await loginRes(t, user, 'not-the-password-9'), 401, 'invalid_credentials');
    assertError(await loginRes(t, user), 429, 'too_many_attempts');
    assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
    assert.equal((await post(t, '/v1/auth/password/reset', { token: await latestToken(t, user.email, 'password_reset'), password: NEW_PASSWORD })).statusCode, 204);
  }
  const signedIn = await loginRes(t, plain, NEW_PASSWORD);
  assert.equal(signedIn.statusCode, 200, signedIn.body);
  assertAuthSession(signedIn.json(), plain.id);
  const res = await loginRes(t, guarded, NEW_PASSWORD);
  assert.equal(res.statusCode, 200, res.body);
  const challenge = res.json();
  assert.equal(challenge.mfa_required, true, 'the reset did not turn MFA off');
  assert.equal(challenge.access_token, undefined);
});

test('only a successful login resets the lockout counter (Part A Login lockout): a password change refused for its new password, with the right current password, keeps the earlier failures, so 4 wrong logins, that change and 1 wrong login lock the identity', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  for (let i = 0; i < 4; i++) assertError(await loginRes(t, user, 'not-the-password-9'), 401, 'invalid_credentials');
  const refused = await post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: 'too-short' }, bearer(session.access_token));
  assert.equal(assertError(refused, 422, 'weak_password').details.reason, 'too_short');
  assertError(await loginRes(t, user, 'not-the-password-9'), 401, 'invalid_credentials');
  const locked = await loginRes(t, user);
  assertError(locked, 429, 'too_many_attempts');
  assert.ok(Number(locked.headers['retry-after']) > 0, `Retry-After ${locked.headers['retry-after']}`);
  const [row] = await sql(t, `SELECT password_hash FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(await verifyPassword(row.password_hash, PASSWORD), true, 'the refused change left the password as it was');
  assert.deepEqual(await mailsTo(t, user.email, 'password_changed'), []);
  // The right current password itself was no failure: 4 wrong logins and the refused change leave one slot.
  const other = await createUser(t);
  const otherSession = await signIn(other);
  for (let i = 0; i < 4; i++) assertError(await loginRes(t, other, 'not-the-password-9'), 401, 'invalid_credentials');
  assertError(await post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: 'too-short' }, bearer(otherSession.access_token)), 422, 'weak_password');
  assert.equal((await loginRes(t, other)).statusCode, 200, 'a fifth attempt is still evaluated');
});

test('password change (POST /v1/users/me/password) answers 204, ends the other sessions, keeps the current one, and mails password_changed', async () => {
  const user = await createUser(t);
  const current = await signIn(user);
  const other = await signIn(user);
  const res = await post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, bearer(current.access_token));
  assert.equal(res.statusCode, 204, res.body);
  assert.equal((await get(t, '/v1/users/me', current.access_token)).statusCode, 200, 'the current session still works');
  assert.equal((await post(t, '/v1/auth/token/refresh', { refresh_token: current.refresh_token })).statusCode, 200);
  assertError(await get(t, '/v1/users/me', other.access_token), 401, 'unauthenticated');
  assertError(await post(t, '/v1/auth/token/refresh', { refresh_token: other.refresh_token }), 401, 'invalid_refresh_token');
  const mails = await mailsTo(t, user.email, 'password_changed');
  assert.equal(mails.length, 1);
  assert.equal(mails[0].to_address, user.email);
  assertError(await loginRes(t, user), 401, 'invalid_credentials');
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200);
});

test('Part A: "users.manage changes email immediately": an admin email change committed while a password change was under way (after it read the account) moves the notice with it: password_changed goes to the address the account has when the password changes, nothing to the address it left', async () => {
  const admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
  const user = await createUser(t);
  const session = await signIn(user);
  const movedTo = uniqueEmail('pw-moved');
  const res = await pausedAfter(t, "FROM identities WHERE user_id = $1 AND method = 'password'", async () => {
    const changed = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { email: movedTo } });
    assert.equal(changed.statusCode, 200, changed.body);
  }, () => post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, bearer(session.access_token)));
  assert.equal(res.statusCode, 204, res.body);
  assert.deepEqual(await mailsTo(t, user.email, 'password_changed'), [], 'nothing to the address the account left');
  assert.equal((await mailsTo(t, movedTo, 'password_changed')).length, 1, 'password_changed to the address the account has');
});

test('password change takes me or the own id, applies the password policy, and is refused for another user', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  const change = (id: string, body: object) => post(t, `/v1/users/${id}/password`, body, bearer(session.access_token));
  assert.equal(assertError(await change('me', { current_password: PASSWORD, new_password: 'qwertyuiop12' }), 422, 'weak_password').details.reason, 'breached');
  assert.equal(assertError(await change('me', { current_password: PASSWORD, new_password: user.email }), 422, 'weak_password').details.reason, 'matches_email');
  assert.equal(assertError(await change('me', { current_password: PASSWORD, new_password: 'x'.repeat(129) }), 422, 'weak_password').details.reason, 'too_long');
  assert.equal((await loginRes(t, user)).statusCode, 200, 'refused changes changed nothing');
  const someoneElse = await createUser(t);
  assertError(await change(someoneElse.id, { current_password: PASSWORD, new_password: NEW_PASSWORD }), 404, 'user_not_found');
  assert.equal((await loginRes(t, someoneElse)).statusCode, 200);
  assert.equal((await change(user.id, { current_password: PASSWORD, new_password: NEW_PASSWORD })).statusCode, 204);
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200);
});

test('email and password endpoints: bad input gets 422 validation_failed with details.fields naming the field', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  assertFields(await post(t, '/v1/auth/email/verify', {}), ['token']);
  assertFields(await post(t, '/v1/auth/email/verify', { token: 5 }), ['token']);
  assertFields(await post(t, '/v1/auth/email/verify/resend', {}), ['email']);
  assertFields(await post(t, '/v1/auth/email/verify/resend', { email: uniqueEmail(), test_mode: 1 }), ['test_mode']);
  assertFields(await post(t, '/v1/auth/password/forgot', { email: 42 }), ['email']);
  assertFields(await post(t, '/v1/auth/password/reset', {}), ['token', 'password']);
  assertFields(await post(t, '/v1/auth/password/reset', { token: 'pwr_x', password: 1234567890123 }), ['password']);
  assertFields(await post(t, '/v1/auth/invitations/accept', {}), ['token', 'password']);
  assertFields(await post(t, '/v1/auth/invitations/accept', { token: 'inv_x' }), ['password']);
  assertFields(await post(t, '/v1/users/me/password', {}, bearer(session.access_token)), ['current_password', 'new_password']);
  assertFields(await post(t, '/v1/users/me/password', { current_password: PASSWORD }, bearer(session.access_token)), ['new_password']);
  assertFields(await post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD, password: 'x' }, bearer(session.access_token)), ['password']);
  assertError(await post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD }), 401, 'unauthenticated');
  assert.equal((await loginRes(t, user)).statusCode, 200, 'nothing changed');
});

test('a password reset voids pending MFA challenges: a challenge won with the old password cannot start a session afterwards (401)', async () => {
  const { user, secret } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  assert.equal((await post(t, '/v1/auth/password/reset', { token: await latestToken(t, user.email, 'password_reset'), password: NEW_PASSWORD })).statusCode, 204);
  // The next step's code: the current one was spent confirming the enrollment.
  assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, secret, 1) }), 401, 'invalid_credentials');
  const [sessions] = await sql(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1 AND revoked_at IS NULL', [user.id]);
  assert.equal(sessions.n, 0);
});

test('a password change voids reset links mailed before it: the earlier reset token gets 400 invalid_token and the new password stays', async () => {
  const user = await createUser(t);
  const { access_token } = await signIn(user);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const resetToken = await latestToken(t, user.email, 'password_reset');
  assert.equal((await post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, bearer(access_token))).statusCode, 204);
  assertError(await post(t, '/v1/auth/password/reset', { token: resetToken, password: `${NEW_PASSWORD}-reset` }), 400, 'invalid_token');
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200);
});

// AU-5's equal timing, as the design makes it (src/modules/auth/routes.ts addressBlind): the answer
// waits for the later of the address's work and a floor started with it, and the work stays far under
// the floor. Each is checked by order and by count rather than by comparing medians of wall-clock
// samples, which failed on a loaded two-core machine with nothing wrong (the known path's few statements
// took 100-330 ms there); how long the work takes belongs to `npm run bench`.
test('AU-5 forgot and resend take the same time for known and unknown addresses: every 202 comes no sooner than the address-blind floor (docs/security.md: "no sooner than 150 ms after their handler starts"), the floor runs alongside the work (not after it), and neither kind does Argon2 work', async (tc) => {
  for (const [url, template, mailsEach] of [['/v1/auth/password/forgot', 'password_reset', 1], ['/v1/auth/email/verify/resend', 'email_verification', 2]] as const) {
    const knownAddresses: string[] = [];
    for (let i = 0; i < 4; i++) {
      // A fresh address each time, so the send limit never turns the known path into a cheap one.
      const kind = i % 2 === 0 ? 'known' : 'unknown';
      const address = kind === 'known' ? (await signup()).email : uniqueEmail('ghost');
      if (kind === 'known') knownAddresses.push(address);
      const [hashes, verifications] = [argon2Hashes(), passwordEvaluations()];
      const started = performance.now();
      const res = await post(t, url, { email: address });
      const took = performance.now() - started;
      assert.equal(res.statusCode, 202, res.body);
      assert.equal(res.body, '{"status":"accepted"}');
      // A lower bound only: a timer never fires early, however loaded the machine.
      // The documented 150 ms, not the constant: a shorter floor would break the documented promise.
      assert.ok(took >= 150 - 1, `${url} (${kind}) answered after ${took.toFixed(1)} ms`);
      assert.deepEqual({ hashes: argon2Hashes() - hashes, verifications: passwordEvaluations() - verifications }, { hashes: 0, verifications: 0 }, `${url} (${kind})`);
    }
    // The known addresses got their mail (the signup's verification mail plus the re-send for resend).
    for (const address of knownAddresses) assert.equal((await mailsTo(t, address, template)).length, mailsEach, address);

    // The floor runs alongside the work: a known address's work is held, once its mail is written,
    // until the floor started with it has passed (a timer of the test's, started after the handler's and
    // as long, has fired); let go, the answer comes before a fresh floor would end. Were the floor
    // started after the work, the answer would come a whole floor after the release, after the test's
    // second timer (started at the release, as long): always, however loaded the machine.
    const address = (await signup()).email;
    let released = 0;
    let freshFloorEnded = false;
    let held = false;
    // The mail is written inside the work's transaction: its statements are watched too.
    const watch = <D extends Db>(db: D): D =>
      new Proxy(db, {
        get(target, prop) {
          if (prop === 'transaction') return <T>(fn: (tx: Tx) => Promise<T>) => target.transaction((tx) => fn(watch(tx)));
          if (prop === 'query') {
            return async (text: string, params?: unknown[]) => {
              const result = await target.query(text, params);
              if (!held && text.includes('INSERT INTO emails')) {
                held = true;
                await new Promise((resolve) => setTimeout(resolve, ADDRESS_BLIND_ANSWER_MS));
                released = performance.now();
                setTimeout(() => (freshFloorEnded = true), ADDRESS_BLIND_ANSWER_MS).unref();
              }
              return result;
            };
          }
          const value = Reflect.get(target, prop, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    const res = await withWrappedDatabase(t, watch, () => post(t, url, { email: address }));
    assert.ok(held, `${url}: no mail was written`);
    const afterRelease = performance.now() - released;
    assert.equal(res.statusCode, 202, res.body);
    assert.equal(freshFloorEnded, false, `${url} answered ${afterRelease.toFixed(1)} ms after its work was let go, the floor passed: a floor after the work`);
    assert.equal((await mailsTo(t, address, template)).length, mailsEach, address);
    tc.diagnostic(`${url}: answered ${afterRelease.toFixed(1)} ms after the held work was let go`);
  }
});

test('password and invitation changes are audited on the user, acted by the user (docs/decisions.md): user.password_changed, user.password_reset, user.invitation_accepted (before invited, after active)', async () => {
  const rows = async (userId: string, action: string) =>
    (await sql(t, `SELECT actor_type, actor_id, target_type, target_id, before, after FROM audit_events WHERE target_user_id = $1 AND action = $2`, [userId, action]))
      .map((r: any) => ({ actor: [r.actor_type, r.actor_id], target: [r.target_type, r.target_id], before: r.before, after: r.after }));

  const changer = await createUser(t);
  const session = await signIn(changer);
  assert.equal((await post(t, '/v1/users/me/password', { current_password: PASSWORD, new_password: NEW_PASSWORD }, bearer(session.access_token))).statusCode, 204);
  const [changed] = await rows(changer.id, 'user.password_changed');
  assert.deepEqual([changed?.actor, changed?.target], [['user', changer.id], ['user', changer.id]]);

  const resetter = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: resetter.email })).statusCode, 202);
  assert.deepEqual(await rows(resetter.id, 'user.password_reset'), [], 'nothing is audited before the reset is done');
  const reset = await post(t, '/v1/auth/password/reset', { token: await latestToken(t, resetter.email, 'password_reset'), password: NEW_PASSWORD });
  assert.equal(reset.statusCode, 204, reset.body);
  const [wasReset] = await rows(resetter.id, 'user.password_reset');
  assert.deepEqual([wasReset?.actor, wasReset?.target], [['user', resetter.id], ['user', resetter.id]]);

  const invited = await createUser(t, { status: 'invited' });
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: invited.email })).statusCode, 202);
  const accept = await post(t, '/v1/auth/invitations/accept', { token: await latestToken(t, invited.email, 'invitation'), password: NEW_PASSWORD });
  assert.equal(accept.statusCode, 200, accept.body);
  const [accepted] = await rows(invited.id, 'user.invitation_accepted');
  assert.deepEqual([accepted?.actor, accepted?.target, accepted?.before, accepted?.after.status], [['user', invited.id], ['user', invited.id], { status: 'invited' }, 'active']);
});
