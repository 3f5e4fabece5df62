// MFA challenges voided by a disable, a support reset or a password change, the lock order that keeps
// those from deadlocking with a sign-in, and TOTP's replay guard when the clock steps back. The sign-in
// itself: mfa-login.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { client, blockedBy as waitForBlocked, probeWhileHeld, withDeadlockCount } from '../helpers/locks.js';
import { hashRecoveryCode } from '../../src/auth/passwords.js';
import { bearer, createUser, login } from '../helpers/fixtures.js';
import {
  alignToStep, beginTotp, assertError, createMfaUser, jwtPayload, latestToken, loginRes, mfaChallenge, NEW_PASSWORD, otherCode, post, readMfaEnabled, sql, totpCode, verifyMfa,
} from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const verify = (body: object) => verifyMfa(t, body);
const mfaEnabled = (token: string) => readMfaEnabled(t, token);

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('a sign-in with a recovery code and a disable sending the same code at once do not deadlock (PostgreSQL): the sign-in locks the identity before the code, as disable and the support reset do, so one uses the code and the other is refused at once, not after deadlock_timeout', async () => {
  const m = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, m.user);
  const code = m.recoveryCodes[0];
  const connect = () => client(t);
  const holder = await connect();
  const watcher = await connect();
  const blockedBy = (pid: number, what: string) => waitForBlocked(watcher, pid, what);
  try {
    // The user's recovery codes are held, so the sign-in waits for its code first (holding the
    // identity), then the disable for the identity.
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM recovery_codes WHERE user_id = $1 FOR UPDATE', [m.user.id]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const { result: [a, b], victims } = await withDeadlockCount(t, async () => {
      const signIn = verify({ mfa_token: mfaToken, recovery_code: code });
      const signInPid = await blockedBy(holderPid, 'the sign-in');
      const disable = t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(m.token), payload: { recovery_code: code } });
      await blockedBy(signInPid, 'the disable, behind the sign-in');
      await holder.query('ROLLBACK');
      return Promise.all([signIn, disable]);
    });
    assert.equal(victims, 0, 'no deadlock: neither ran again as a deadlock victim after deadlock_timeout');
    assert.equal(a.statusCode, 200, a.body);
    assertError(b, 422, 'invalid_mfa_code');
    assert.equal(await mfaEnabled(m.token), true);
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM recovery_codes WHERE user_id = $1 AND used_at IS NOT NULL', [m.user.id]))[0].n, 1);
  } finally {
    await holder.end();
    await watcher.end();
  }
});

/**
 * Holds the user's pending MFA challenge (as a sign-in's second step holds it from the moment it uses it
 * until it has taken the identity), runs `op`, and probes the password identity while `op` waits.
 */
async function identityFreeWhileChallengeHeld(m: Awaited<ReturnType<typeof createMfaUser>>, op: () => ReturnType<typeof post>) {
  const [challenge] = await sql(t, `SELECT id FROM one_time_tokens WHERE user_id = $1 AND kind = 'mfa_challenge' AND used_at IS NULL`, [m.user.id]);
  return probeWhileHeld(t, ['SELECT 1 FROM one_time_tokens WHERE id = $1 FOR UPDATE', [challenge.id]], op,
    [`SELECT 1 FROM identities WHERE user_id = $1 AND method = 'password' FOR NO KEY UPDATE NOWAIT`, [m.user.id]]);
}

// Lock order needs two transactions at once: only the PostgreSQL pass registers these tests.
if (storageName === 'postgres') test("a password reset voids the user's MFA challenges before it takes the identity, in the order an MFA sign-in takes them (the challenge, then the identity), so the two at once cannot deadlock (PostgreSQL): the reset answers 204 and the challenge is void", async () => {
  const m = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, m.user);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: m.user.email })).statusCode, 202);
  const token = await latestToken(t, m.user.email, 'password_reset');
  const { probeLocked, result } = await identityFreeWhileChallengeHeld(m, () => post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD }));
  assert.equal(result.statusCode, 204, result.body);
  assert.equal(probeLocked, true, 'the reset waited for the challenge without holding the identity');
  assertError(await verify({ mfa_token: mfaToken, code: await totpCode(t, m.secret) }), 401, 'invalid_credentials');
});

if (storageName === 'postgres') test("a password change voids the user's MFA challenges before it takes the identity, in the order an MFA sign-in takes them, so the two at once cannot deadlock (PostgreSQL): the change answers 204 and the challenge is void", async () => {
  const m = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, m.user);
  const { probeLocked, result } = await identityFreeWhileChallengeHeld(m, () => post(t, '/v1/users/me/password', { current_password: m.user.password, new_password: NEW_PASSWORD }, bearer(m.token)));
  assert.equal(result.statusCode, 204, result.body);
  assert.equal(probeLocked, true, 'the change waited for the challenge without holding the identity');
  assertError(await verify({ mfa_token: mfaToken, code: await totpCode(t, m.secret) }), 401, 'invalid_credentials');
});

/** Turns TOTP on again for the signed-in user with a new secret (begin, confirm); the clock is then at the next step. */
async function enrollAgain(token: string): Promise<string> {
  const secret = await beginTotp(t, token);
  alignToStep(t, 5);
  const confirm = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code: await totpCode(t, secret) } });
  assert.equal(confirm.statusCode, 200, confirm.body);
  alignToStep(t, 5);
  return secret;
}

const pendingChallenges = async (userId: string) =>
  (await sql(t, `SELECT id FROM one_time_tokens WHERE user_id = $1 AND kind = 'mfa_challenge' AND used_at IS NULL`, [userId])).length;

test("turning TOTP off voids the user's pending MFA challenges (docs/decisions.md, MFA enrollment): an mfa_token of a sign-in begun before a disable or a support reset is refused (401 invalid_credentials) even once TOTP is on again with a new secret; a wrong code at disable voids nothing", async () => {
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const turnOffs: [string, (m: Awaited<ReturnType<typeof createMfaUser>>) => Promise<number>][] = [
    ['disable', async (m) => (await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(m.token), payload: { code: await totpCode(t, m.secret) } })).statusCode],
    ['support reset', async (m) => (await t.app.inject({ method: 'DELETE', url: `/v1/users/${m.user.id}/mfa/totp`, headers: bearer(admin) })).statusCode],
  ];
  for (const [name, turnOff] of turnOffs) {
    const m = await createMfaUser(t);
    const mfaToken = await mfaChallenge(t, m.user);
    if (name === 'disable') {
      const wrong = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(m.token), payload: { code: otherCode(await totpCode(t, m.secret)) } });
      assertError(wrong, 422, 'invalid_mfa_code');
      assert.equal(await pendingChallenges(m.user.id), 1, 'a disable that turned nothing off voids nothing');
    }
    assert.equal(await turnOff(m), 204, name);
    assert.equal(await pendingChallenges(m.user.id), 0, `${name}: the challenge is void`);
    const secret = await enrollAgain(m.token);
    assertError(await verify({ mfa_token: mfaToken, code: await totpCode(t, secret) }), 401, 'invalid_credentials');
    const fresh = await verify({ mfa_token: await mfaChallenge(t, m.user), code: await totpCode(t, secret) });
    assert.equal(fresh.statusCode, 200, `${name}: a sign-in begun after it completes: ${fresh.body}`);
  }
});

test('MfaChallenge methods are the methods that can complete the challenge: recovery_code only while the user has an unused recovery code', async () => {
  const m = await createMfaUser(t);
  // Nine of the ten codes used: only the first stays.
  const kept = await hashRecoveryCode(m.user.id, m.recoveryCodes[0]!);
  await sql(t, 'UPDATE recovery_codes SET used_at = $3 WHERE user_id = $1 AND code_hash <> $2', [m.user.id, kept, t.clock.now()]);
  const withOne = await loginRes(t, m.user);
  assert.equal(withOne.statusCode, 200, withOne.body);
  assert.deepEqual(withOne.json().methods, ['totp', 'recovery_code']);
  const last = await verify({ mfa_token: withOne.json().mfa_token, recovery_code: m.recoveryCodes[0] });
  assert.equal(last.statusCode, 200, last.body);
  const none = await loginRes(t, m.user);
  assert.equal(none.statusCode, 200, none.body);
  assert.deepEqual(none.json().methods, ['totp'], 'every recovery code is used');
  assert.equal((await verify({ mfa_token: none.json().mfa_token, code: await totpCode(t, m.secret) })).statusCode, 200, 'TOTP still completes it');
});

if (storageName === 'postgres') test("a disable and a support reset void the user's MFA challenges before they take the identity, in the order an MFA sign-in takes them, so the two at once cannot deadlock (PostgreSQL): each answers 204 and the challenge is void", async () => {
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const byCode = await createMfaUser(t);
  await mfaChallenge(t, byCode.user);
  const disable = await identityFreeWhileChallengeHeld(byCode, async () => post(t, '/v1/users/me/mfa/totp/disable', { recovery_code: byCode.recoveryCodes[0] }, bearer(byCode.token)));
  assert.equal(disable.result.statusCode, 204, disable.result.body);
  assert.equal(disable.probeLocked, true, 'the disable waited for the challenge without holding the identity');
  assert.equal(await pendingChallenges(byCode.user.id), 0);

  const bySupport = await createMfaUser(t);
  await mfaChallenge(t, bySupport.user);
  const reset = await identityFreeWhileChallengeHeld(bySupport, () => t.app.inject({ method: 'DELETE', url: `/v1/users/${bySupport.user.id}/mfa/totp`, headers: bearer(admin) }));
  assert.equal(reset.result.statusCode, 204, reset.result.body);
  assert.equal(reset.probeLocked, true, 'the reset waited for the challenge without holding the identity');
  assert.equal(await pendingChallenges(bySupport.user.id), 0);
});

// The clock stepping back (docs/decisions.md, "Clocks of several processes" and "MFA enrollment"):
// the replay guard keeps the last step used; one further ahead than the verification window plus the
// skew bound can only have been taken before the clock stepped back.
test('"a TOTP code is accepted once only" after the clock stepped back an hour: a current code signs in (not an hour later), the same code right after gets 401, an older step than the one used since gets 401, and the code used before the step gets 401 when its time comes again', async () => {
  await withStoppedClock(t, async () => {
    const { user, secret } = await createMfaUser(t);
    const before = await totpCode(t, secret);
    assert.equal((await verify({ mfa_token: await mfaChallenge(t, user), code: before })).statusCode, 200);
    t.clock.advance(-3600);
    try {
      const now = await totpCode(t, secret);
      const signedIn = await verify({ mfa_token: await mfaChallenge(t, user), code: now });
      assert.equal(signedIn.statusCode, 200, signedIn.body);
      assert.deepEqual([...jwtPayload(signedIn.json().access_token).amr].sort(), ['otp', 'pwd']);
      assertError(await verify({ mfa_token: await mfaChallenge(t, user), code: now }), 401, 'invalid_credentials');
      assertError(await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, -1) }), 401, 'invalid_credentials');
      const next = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, +1) });
      assert.equal(next.statusCode, 200, next.body);
    } finally {
      t.clock.advance(3600);
    }
    assert.equal(await totpCode(t, secret), before, 'back at the step used before the clock stepped back');
    assertError(await verify({ mfa_token: await mfaChallenge(t, user), code: before }), 401, 'invalid_credentials');
    const after = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, +1) });
    assert.equal(after.statusCode, 200, after.body);
  });
});

/**
 * A user signs in with a code (`used`), then with a code of the clock run an hour ahead, and the clock
 * steps back to `used`'s time. With `forgetRecord`, the identity is first left as an earlier version
 * left it: the last used step, and no record of the steps used.
 */
async function signedInThenAnHourAhead(forgetRecord: boolean) {
  const { user, secret } = await createMfaUser(t);
  const used = await totpCode(t, secret);
  assert.equal((await verify({ mfa_token: await mfaChallenge(t, user), code: used })).statusCode, 200);
  if (forgetRecord) await sql(t, `UPDATE identities SET totp_used_steps = '{}', totp_steps_from = NULL WHERE user_id = $1 AND method = 'password'`, [user.id]);
  t.clock.advance(3600);
  try {
    const ahead = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret) });
    assert.equal(ahead.statusCode, 200, ahead.body);
  } finally {
    t.clock.advance(-3600);
  }
  return { user, secret, used };
}

test('a TOTP code used before the clock ran an hour ahead is refused when the clock steps back to its time: a step used is never accepted again, though the last step used lies beyond the window', async () => {
  await withStoppedClock(t, async () => {
    const { user, secret, used } = await signedInThenAnHourAhead(false);
    assertError(await verify({ mfa_token: await mfaChallenge(t, user), code: used }), 401, 'invalid_credentials');
    assertError(await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, -1) }), 401, 'invalid_credentials');
    const next = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, +1) });
    assert.equal(next.statusCode, 200, next.body);
  });
});

test('disable with a current code works after the clock stepped back an hour (204, TOTP off); the code it used is refused at a second disable and completes no sign-in', async () => {
  await withStoppedClock(t, async () => {
    const { user, secret, token } = await createMfaUser(t);
    assert.equal((await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret) })).statusCode, 200);
    t.clock.advance(-3600);
    try {
      const mfaToken = await mfaChallenge(t, user);
      const code = await totpCode(t, secret);
      const disable = (payload: object) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload });
      const off = await disable({ code });
      assert.equal(off.statusCode, 204, off.body);
      assert.equal(await mfaEnabled(token), false);
      assertError(await disable({ code }), 409, 'mfa_not_enabled');
      assertError(await verify({ mfa_token: mfaToken, code }), 401, 'invalid_credentials');
    } finally {
      t.clock.advance(3600);
    }
  });
});

test('confirm with a current code works after the clock stepped back an hour, though a confirm that did not complete took a step before the step back; that step\'s code stays refused', async () => {
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const token = await login(t, user);
    const secret = (await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) })).json().secret;
    const confirm = (code: string) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
    const spent = await totpCode(t, secret);
    // The step is taken (as the confirm's first statement writes it), then the confirm fails before it commits.
    const step = Math.floor(t.clock.now().getTime() / 30_000);
    await sql(t, `UPDATE identities SET totp_last_step = $2, totp_used_steps = ARRAY[$2::bigint], totp_steps_from = $2::bigint - 2880 WHERE user_id = $1 AND method = 'password'`, [user.id, step]);
    t.clock.advance(-3600);
    try {
      const ok = await confirm(await totpCode(t, secret));
      assert.equal(ok.statusCode, 200, ok.body);
      assert.equal(await mfaEnabled(token), true);
    } finally {
      t.clock.advance(3600);
    }
    assertError(await verify({ mfa_token: await mfaChallenge(t, user), code: spent }), 401, 'invalid_credentials');
  });
});

test('a step used before the record of used steps began (an identity from before migration 0038, or a step a process of an earlier version took) is never accepted again after the clock stepped back to it: the record counts from the step after it', async () => {
  await withStoppedClock(t, async () => {
    const { user, secret, used } = await signedInThenAnHourAhead(true);
    assertError(await verify({ mfa_token: await mfaChallenge(t, user), code: used }), 401, 'invalid_credentials');
    const next = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, +1) });
    assert.equal(next.statusCode, 200, next.body);
  });
});
