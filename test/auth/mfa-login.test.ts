// The MFA sign-in: the challenge, TOTP and recovery codes at mfa/verify, the lockout, voided
// challenges, and the clock stepping back. Enrollment, disable and the support reset:
// mfa-enrollment.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { buildTestApp, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { client, blockedBy as waitForBlocked, probeWhileHeld, withDeadlockCount, withTransactionStatements } from '../helpers/locks.js';
import { hashRecoveryCode } from '../../src/auth/passwords.js';
import { bearer, createApiKey, createUser, login } from '../helpers/fixtures.js';
import {
  alignToStep, assertAuthSession, beginTotp, auditRows, assertError, createMfaUser, get, jwtPayload, latestToken, loginRes, mfaChallenge, NEW_PASSWORD, otherCode, post, readMfaEnabled, sql, totpCode, verifyMfa,
} from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const verify = (body: object) => verifyMfa(t, body);
const mfaEnabled = (token: string) => readMfaEnabled(t, token);

test('docs/decisions.md "Bearer token values are not ULIDs": a refresh token, an MFA challenge token and a mailed one-time token are their prefix plus 32 random bytes (base64url, 43 characters), not a ULID', async () => {
  const plain = await createUser(t);
  const signedIn = await loginRes(t, plain);
  assert.equal(signedIn.statusCode, 200, signedIn.body);
  assert.match(signedIn.json().refresh_token, /^rtk_[A-Za-z0-9_-]{43}$/);
  const { user } = await createMfaUser(t);
  assert.match(await mfaChallenge(t, user), /^mfa_[A-Za-z0-9_-]{43}$/);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: plain.email })).statusCode, 202);
  const link = await latestToken(t, plain.email, 'password_reset');
  assert.match(link, /^pwr_[A-Za-z0-9_-]{43}$/);
});

test('login with confirmed TOTP answers the MfaChallenge (mfa_required true, mfa_ token, methods totp and recovery_code, expires_in 300) and issues no session nor last_login_at', async () => {
  const { user } = await createMfaUser(t);
  const [before] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [user.id]);
  const sessionsBefore = (await sql(t, 'SELECT id FROM sessions WHERE user_id = $1', [user.id])).length;
  t.clock.advance(3);
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  const body = res.json();
  assert.deepEqual(Object.keys(body).sort(), ['expires_in', 'methods', 'mfa_required', 'mfa_token']);
  assert.equal(body.mfa_required, true);
  assert.match(body.mfa_token, /^mfa_/);
  assert.deepEqual(body.methods, ['totp', 'recovery_code']);
  assert.equal(body.expires_in, 300);
  assert.equal((await sql(t, 'SELECT id FROM sessions WHERE user_id = $1', [user.id])).length, sessionsBefore);
  const [after] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [user.id]);
  assert.equal(after.last_login_at.getTime(), before.last_login_at.getTime(), 'the first step does not set last_login_at');

  // A wrong password is still the plain 401.
  assertError(await loginRes(t, user, 'not-the-password-1'), 401, 'invalid_credentials');
});

test('mfa/verify with a current TOTP code returns an AuthSession whose amr carries pwd and otp, and sets last_login_at', async () => {
  const { user, secret } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  t.clock.advance(2);
  const res = await verify({ mfa_token: mfaToken, code: await totpCode(t, secret) });
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json(), user.id);
  const claims = jwtPayload(res.json().access_token);
  assert.deepEqual([...claims.amr].sort(), ['otp', 'pwd']);
  const [session] = await sql(t, 'SELECT amr FROM sessions WHERE id = $1', [res.json().session_id]);
  assert.deepEqual([...session.amr].sort(), ['otp', 'pwd']);
  const [row] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [user.id]);
  assert.ok(Math.abs(row.last_login_at.getTime() - t.clock.now().getTime()) < 2000, 'set at mfa/verify');
  assert.equal((await get(t, '/v1/users/me', res.json().access_token)).statusCode, 200);

  // The refreshed access token keeps the methods of the sign-in.
  const refreshed = await post(t, '/v1/auth/token/refresh', { refresh_token: res.json().refresh_token });
  assert.equal(refreshed.statusCode, 200, refreshed.body);
  assert.deepEqual([...jwtPayload(refreshed.json().access_token).amr].sort(), ['otp', 'pwd']);
});

test('a TOTP code is accepted once only: the same code on a second login within the same step gets 401', async () => {
  const { user, secret } = await createMfaUser(t);
  const code = await totpCode(t, secret);
  const first = await verify({ mfa_token: await mfaChallenge(t, user), code });
  assert.equal(first.statusCode, 200, first.body);
  const second = await verify({ mfa_token: await mfaChallenge(t, user), code });
  assertError(second, 401, 'invalid_credentials');
});

test('the code used to confirm enrollment is used up: it cannot also complete a login', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const secret = (await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) })).json().secret;
  alignToStep(t, 5);
  const code = await totpCode(t, secret);
  const confirm = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
  assert.equal(confirm.statusCode, 200, confirm.body);
  assertError(await verify({ mfa_token: await mfaChallenge(t, user), code }), 401, 'invalid_credentials');
});

test('TOTP allows ±1 step of drift: codes of the previous and the next 30-second step are accepted', async () => {
  const { user, secret } = await createMfaUser(t);
  alignToStep(t, 5); // the confirming code's step is now two steps back
  const previous = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, -1) });
  assert.equal(previous.statusCode, 200, previous.body);
  const next = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret, +1) });
  assert.equal(next.statusCode, 200, next.body);
});

test('TOTP refuses codes two steps away (step-2 and step+2)', async () => {
  const { user, secret } = await createMfaUser(t);
  for (let i = 0; i < 3; i++) alignToStep(t, 5); // nothing used in the last four steps
  const mfaToken = await mfaChallenge(t, user);
  assertError(await verify({ mfa_token: mfaToken, code: await totpCode(t, secret, -2) }), 401, 'invalid_credentials');
  assertError(await verify({ mfa_token: mfaToken, code: await totpCode(t, secret, +2) }), 401, 'invalid_credentials');
  const ok = await verify({ mfa_token: mfaToken, code: await totpCode(t, secret) });
  assert.equal(ok.statusCode, 200, ok.body);
});

test('mfa/verify with a recovery code returns an AuthSession whose amr carries pwd and recovery_code; a recovery code works once', async () => {
  const { user, recoveryCodes } = await createMfaUser(t);
  const res = await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: recoveryCodes[0] });
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json(), user.id);
  assert.deepEqual([...jwtPayload(res.json().access_token).amr].sort(), ['pwd', 'recovery_code']);
  const used = await sql(t, 'SELECT used_at FROM recovery_codes WHERE user_id = $1 AND used_at IS NOT NULL', [user.id]);
  assert.equal(used.length, 1);

  assertError(await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: recoveryCodes[0] }), 401, 'invalid_credentials');
  assertError(await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: 'zzzzz-zzzzz' }), 401, 'invalid_credentials');
  const other = await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: recoveryCodes[1] });
  assert.equal(other.statusCode, 200, other.body);
});

test('recovery codes are stored as Argon2id (m=19456, t=2, p=1) salted per user, not as a plain hash an offline search of ~50 bits reads back: the same code of two users is stored differently; a code stored the earlier way (SHA-256) still signs in, once', async () => {
  const a = await createMfaUser(t);
  const b = await createMfaUser(t);
  const rows = await sql(t, 'SELECT user_id, code_hash FROM recovery_codes WHERE user_id = ANY($1::text[])', [[a.user.id, b.user.id]]);
  assert.equal(rows.length, 20);
  for (const row of rows) assert.match(row.code_hash, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$/, row.code_hash);
  // One code given to both users: the two stored hashes differ (a salt per user, no precomputed table).
  const code = 'abcde-fghjk';
  const [ofA, ofB] = await Promise.all([a.user.id, b.user.id].map((id) => hashRecoveryCode(id, code)));
  assert.notEqual(ofA, ofB);
  assert.ok(!rows.some((r) => r.code_hash === createHash('sha256').update(a.recoveryCodes[0]).digest('hex')), 'no unsalted SHA-256 is stored');
  // A code issued before the change, stored as SHA-256, is still accepted, once.
  await sql(t, 'UPDATE recovery_codes SET code_hash = $2 WHERE id = (SELECT id FROM recovery_codes WHERE user_id = $1 LIMIT 1)', [a.user.id, createHash('sha256').update(code).digest('hex')]);
  const res = await verify({ mfa_token: await mfaChallenge(t, a.user), recovery_code: code.toUpperCase() });
  assert.equal(res.statusCode, 200, res.body);
  assertError(await verify({ mfa_token: await mfaChallenge(t, a.user), recovery_code: code }), 401, 'invalid_credentials');
});

test('a recovery code is the same code upper-cased or with spaces: typed so, an unused one signs in (amr recovery_code), once', async () => {
  const { user, recoveryCodes } = await createMfaUser(t);
  for (const typed of [recoveryCodes[0].toUpperCase(), ` ${recoveryCodes[1].replace('-', ' - ')} `]) {
    const res = await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: typed });
    assert.equal(res.statusCode, 200, `${JSON.stringify(typed)}: ${res.body}`);
    assert.deepEqual([...jwtPayload(res.json().access_token).amr].sort(), ['pwd', 'recovery_code']);
  }
  for (const code of recoveryCodes.slice(0, 2)) assertError(await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: code }), 401, 'invalid_credentials');
});

test('a recovery code is the same code without its dash, with a space or another dash in its place, or in full-width characters: typed so, an unused one signs in (amr recovery_code) or turns TOTP off, once, and the refusal of a used one is the only failure counted', async () => {
  const { user, token, recoveryCodes } = await createMfaUser(t);
  const [a, b, c, d] = recoveryCodes.map((code) => code.split('-') as [string, string]);
  const typings = [`${a[0]}${a[1]}`, `${b[0].toUpperCase()} ${b[1]}`, `${c[0]}\u2013${c[1]}`];
  for (const typed of typings) {
    const res = await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: typed });
    assert.equal(res.statusCode, 200, `${JSON.stringify(typed)}: ${res.body}`);
    assert.deepEqual([...jwtPayload(res.json().access_token).amr].sort(), ['pwd', 'recovery_code']);
  }
  // Used once, whichever way it was typed.
  assertError(await verify({ mfa_token: await mfaChallenge(t, user), recovery_code: `${a[0]}-${a[1]}` }), 401, 'invalid_credentials');
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.failures, 1, 'only the used code counted as a failed attempt');
  const fullWidth = `${d[0]}${d[1]}`.replace(/[a-z0-9]/g, (ch) => String.fromCharCode(ch.charCodeAt(0) + 0xfee0));
  const off = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload: { recovery_code: fullWidth } });
  assert.equal(off.statusCode, 204, off.body);
  assert.equal(await mfaEnabled(token), false);
  assert.equal((await auditRows(t, 'user.mfa_disabled', user.id)).length, 1);
});

test('mfa/verify needs no test_mode: a test-mode user completes the challenge with its mfa_token and code alone, and the session is test_mode', async () => {
  const { user, secret } = await createMfaUser(t, { mode: 'test' });
  const res = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret) });
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json(), user.id);
  assert.equal(jwtPayload(res.json().access_token).test_mode, true);
});

test('an mfa_token expires after 300 seconds: 299 s after the challenge it completes, from the 300th second on (the instant it expires) it gets 401', async () => {
  const { user, secret, recoveryCodes } = await createMfaUser(t);
  // The clock stands still but for advance(): the early token is exactly 299 s old when used, however
  // long the sign-ins between take on a loaded machine (with the real clock running, 10 s was the margin).
  await withStoppedClock(t, async () => {
    const early = await mfaChallenge(t, user);
    const late = await mfaChallenge(t, user);
    t.clock.advance(299);
    const ok = await verify({ mfa_token: early, recovery_code: recoveryCodes[0] });
    assert.equal(ok.statusCode, 200, ok.body);
    t.clock.advance(1); // exactly 300 s after the challenge: expired from that instant, as every link and token of the service
    const code = await totpCode(t, secret);
    assertError(await verify({ mfa_token: late, code }), 401, 'invalid_credentials');
    // The code itself was good: a fresh challenge accepts it.
    assert.equal((await verify({ mfa_token: await mfaChallenge(t, user), code })).statusCode, 200);
  });
});

test('an mfa_token is single use', async () => {
  const { user, secret, recoveryCodes } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  assert.equal((await verify({ mfa_token: mfaToken, code: await totpCode(t, secret) })).statusCode, 200);
  assertError(await verify({ mfa_token: mfaToken, recovery_code: recoveryCodes[0] }), 401, 'invalid_credentials');
  assertError(await verify({ mfa_token: 'mfa_unknown', code: '123456' }), 401, 'invalid_credentials');
});

test('wrong MFA codes count toward the lockout across challenges: a right password does not reset the counter, so 5 failures in 15 minutes lock (then 429 too_many_attempts with Retry-After)', async () => {
  const { user, secret } = await createMfaUser(t);
  const wrong = otherCode(await totpCode(t, secret));
  const answers: string[] = [];
  for (let round = 0; round < 2; round++) {
    const res = await loginRes(t, user);
    if (res.statusCode !== 200) {
      answers.push(`login ${res.statusCode} ${res.json().error.code}`);
      break;
    }
    const mfaToken = res.json().mfa_token;
    for (let i = 0; i < 3; i++) {
      const verify = await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: wrong });
      answers.push(`${verify.statusCode} ${verify.json().error.code}`);
    }
  }
  // Round 1: three wrong codes (3 failures). Round 2: the right password is no failure, two more
  // wrong codes make five failures (both answered 401) and lock; the third is refused by the lock.
  assert.deepEqual(answers, [
    '401 invalid_credentials', '401 invalid_credentials', '401 invalid_credentials',
    '401 invalid_credentials', '401 invalid_credentials', '429 too_many_attempts',
  ]);
  const locked = await loginRes(t, user);
  assertError(locked, 429, 'too_many_attempts');
  assert.ok(Number(locked.headers['retry-after']) > 0, 'Number(locked.headers[\'retry-after\']) > 0');
});

test('a right password for an MFA user neither counts as a failure nor clears earlier ones: 4 wrong passwords, a right one, then 1 wrong password locks', async () => {
  const { user } = await createMfaUser(t);
  for (let i = 0; i < 4; i++) assertError(await loginRes(t, { ...user, password: `${user.password}x` }), 401, 'invalid_credentials');
  assert.equal((await loginRes(t, user)).json().mfa_required, true);
  assertError(await loginRes(t, { ...user, password: `${user.password}x` }), 401, 'invalid_credentials');
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
});

test('a successful login completed at mfa/verify resets the failure counter: 4 wrong passwords, a sign-in with a TOTP code, 4 wrong passwords leave the identity unlocked', async () => {
  const { user, secret } = await createMfaUser(t);
  for (let i = 0; i < 4; i++) assertError(await loginRes(t, user, `${user.password}x`), 401, 'invalid_credentials');
  const signedIn = await verify({ mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret) });
  assert.equal(signedIn.statusCode, 200, signedIn.body);
  for (let i = 0; i < 4; i++) assertError(await loginRes(t, user, `${user.password}x`), 401, 'invalid_credentials');
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.json().mfa_required, true);
});

test('mfa/verify with a right code for a user suspended after the password step gets 403 account_suspended and counts no failure', async () => {
  const { user, secret } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  const admin = await createApiKey(t, { permissions: ['users.manage'] });
  assert.equal((await t.app.inject({ method: 'POST', url: `/v1/users/${user.id}/suspend`, headers: bearer(admin.secret), payload: {} })).statusCode, 200);
  assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, secret) }), 403, 'account_suspended');
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.failures ?? 0, 0);
  const [challenge] = await sql(t, `SELECT attempts FROM one_time_tokens WHERE kind = 'mfa_challenge' AND user_id = $1`, [user.id]);
  assert.equal(challenge.attempts, 0);
});

test('mfa/verify with a right code for a user deleted after the password step gets 401 invalid_credentials and, as for a suspended one, counts no failure: a right code is no failed attempt', async () => {
  const { user, secret } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  const admin = await createApiKey(t, { permissions: ['users.manage'] });
  const deleted = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}`, headers: bearer(admin.secret) });
  assert.ok([200, 204].includes(deleted.statusCode), deleted.body);
  const sessions = async () => (await sql(t, 'SELECT id FROM sessions WHERE user_id = $1', [user.id])).length;
  const before = await sessions();
  assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, secret) }), 401, 'invalid_credentials');
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(identity.failures ?? 0, 0, 'the right code is no failure on the lockout');
  const [challenge] = await sql(t, `SELECT attempts FROM one_time_tokens WHERE kind = 'mfa_challenge' AND user_id = $1`, [user.id]);
  assert.equal(challenge.attempts, 0, 'nor on the challenge');
  assert.equal(await sessions(), before, 'no session');
});

test('5 wrong codes void an MFA challenge (docs/decisions.md, Login lockout): the fifth uses the challenge up (its row is spent, no longer pending), and the next use of its mfa_token answers 401 for the token, "invalid or expired", not the lock\'s 429', async () => {
  const { user, secret } = await createMfaUser(t);
  const token = await mfaChallenge(t, user);
  const wrong = otherCode(await totpCode(t, secret));
  const pending = async () => (await sql(t, `SELECT 1 FROM one_time_tokens WHERE user_id = $1 AND kind = 'mfa_challenge' AND used_at IS NULL`, [user.id])).length;
  for (let i = 0; i < 4; i++) assertError(await verify({ mfa_token: token, code: wrong }), 401, 'invalid_credentials');
  assert.equal(await pending(), 1, 'four wrong codes leave the challenge pending');
  assertError(await verify({ mfa_token: token, code: wrong }), 401, 'invalid_credentials');
  assert.equal(await pending(), 0, 'the fifth wrong code voids it');
  const next = await verify({ mfa_token: token, code: await totpCode(t, secret) });
  assertError(next, 401, 'invalid_credentials');
  assert.match(next.json().error.message, /invalid or expired/);
});

// Both requests must have counted their attempt before either spends the token: two transactions at once need PostgreSQL.
if (storageName === 'postgres') test('one right code submitted twice at once on one mfa_token (a double-submit), both counted before either spends the token: one AuthSession; the other gets 401 for the spent token ("invalid or expired"), not "The code is not valid", and no failed attempt stays counted on the identity', async () => {
  const { user, secret } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  const code = await totpCode(t, secret);
  // A barrier at the token's spending: each transaction waits there until both have reached it.
  let arrived = 0;
  let release!: () => void;
  const bothThere = new Promise<void>((r) => (release = r));
  const barrier = async (run: () => Promise<unknown>, text: string) => {
    if (text.startsWith('UPDATE one_time_tokens SET used_at')) {
      if (++arrived === 2) release();
      await bothThere;
    }
    return run();
  };
  const answers = await withTransactionStatements(t, barrier, () => Promise.all([verify({ mfa_token: mfaToken, code }), verify({ mfa_token: mfaToken, code })]));
  assert.equal(arrived, 2, 'both reached the spending of the token');
  const won = answers.filter((r) => r.statusCode === 200);
  assert.equal(won.length, 1, answers.map((r) => r.body).join('\n'));
  assertAuthSession(won[0]!.json(), user.id);
  for (const lost of answers.filter((r) => r.statusCode !== 200)) {
    assertError(lost, 401, 'invalid_credentials');
    assert.match(lost.json().error.message, /invalid or expired/);
  }
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS failures, locked_until FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.deepEqual([identity.failures, identity.locked_until], [0, null]);
});

test('parallel wrong codes on one mfa_token evaluate at most five: each takes its lockout slot before its code is checked; the fifth failure locks, the others are refused unevaluated', async () => {
  const { user, secret } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  const wrong = otherCode(await totpCode(t, secret));
  const answers = await Promise.all(Array.from({ length: 30 }, () => verify({ mfa_token: mfaToken, code: wrong })));
  const tally = new Map<string, number>();
  for (const r of answers) {
    const key = `${r.statusCode} ${r.json().error.code}: ${r.json().error.message}`;
    tally.set(key, (tally.get(key) ?? 0) + 1);
  }
  // Refused with 401 after evaluation: at most five (the fifth evaluated code also sets the lock); the
  // rest found the identity locked (429) or the challenge void (401, the token's message).
  const known = new Set(['401 invalid_credentials: The code is not valid.', '401 invalid_credentials: The MFA token is invalid or expired.']);
  for (const key of tally.keys()) assert.ok(known.has(key) || key.startsWith('429 too_many_attempts'), key);
  assert.ok((tally.get('401 invalid_credentials: The code is not valid.') ?? 0) <= 5, JSON.stringify([...tally]));
  const [challenge] = await sql(t, `SELECT attempts FROM one_time_tokens WHERE kind = 'mfa_challenge' AND user_id = $1`, [user.id]);
  assert.ok(challenge.attempts <= 5, `attempts recorded on the challenge: ${challenge.attempts}`);
  // The identity is locked: a new challenge cannot be had, and the right code on this one is refused.
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
  const late = await verify({ mfa_token: mfaToken, code: await totpCode(t, secret) });
  assert.ok([401, 429].includes(late.statusCode), late.body);
});

test('wrong codes at mfa/totp/disable count toward the lockout: after 5 in 15 minutes the next gets 429 too_many_attempts with Retry-After, even the right code, and TOTP stays on', async () => {
  const { user, token, secret } = await createMfaUser(t);
  const disable = (payload: object) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload });
  const wrong = otherCode(await totpCode(t, secret));
  for (let i = 0; i < 5; i++) assertError(await disable({ code: wrong }), 422, 'invalid_mfa_code');
  const sixth = await disable({ code: await totpCode(t, secret) });
  assertError(sixth, 429, 'too_many_attempts');
  assert.ok(Number(sixth.headers['retry-after']) > 0, 'Number(sixth.headers[\'retry-after\']) > 0');
  assert.equal(await mfaEnabled(token), true);
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
});

test('docs/decisions.md "Throttles": "Wrong codes at mfa/totp/confirm do not count" toward the lockout (the caller holds the pending secret they are proving): after 5 wrong confirm codes the right one turns TOTP on (200) and the right password still signs in (the MFA challenge, not 429)', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const { secret } = (await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers: bearer(token) })).json();
  alignToStep(t, 5);
  const confirm = (code: string) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(token), payload: { code } });
  const wrong = otherCode(await totpCode(t, secret));
  for (let i = 0; i < 5; i++) assertError(await confirm(wrong), 422, 'invalid_mfa_code');
  const right = await confirm(await totpCode(t, secret));
  assert.equal(right.statusCode, 200, right.body);
  assert.equal(await mfaEnabled(token), true);
  const signIn = await loginRes(t, user);
  assert.equal(signIn.statusCode, 200, signIn.body);
  assert.equal(signIn.json().mfa_required, true);
});

test('a right code at mfa/totp/disable is no failed attempt: after 4 wrong codes, disabling with the right code leaves the identity unlocked (the next login succeeds)', async () => {
  const { user, token, secret } = await createMfaUser(t);
  const disable = (payload: object) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload });
  const right = await totpCode(t, secret);
  for (let i = 0; i < 4; i++) assertError(await disable({ code: otherCode(right) }), 422, 'invalid_mfa_code');
  assert.equal((await disable({ code: right })).statusCode, 204);
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json(), user.id);
});

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
