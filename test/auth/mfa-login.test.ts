// The MFA sign-in: the challenge, TOTP and recovery codes at mfa/verify, and the challenge's expiry.
// The lockout: mfa-lockout.test.ts; voided challenges, lock order and the clock stepping back:
// mfa-voids-and-clock.test.ts. Enrollment, disable and the support reset: mfa-enrollment.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { hashRecoveryCode } from '../../src/auth/passwords.js';
import { bearer, createUser, login, PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import {
  alignToStep, assertAuthSession, auditRows, assertError, beginTotp, createMfaUser, get, jwtPayload, latestToken, loginRes, mfaChallenge, post, readMfaEnabled, sql, totpCode, verifyMfa,
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

test('mfa/verify\'s AuthSession and access token carry email_verified as the account has it (Part A AuthSession and access token claims, "email_verified: boolean"): an unverified user with TOTP on gets false, and true once the address is verified', async () => {
  const email = uniqueEmail('mfa-unverified');
  const signedUp = await post(t, '/v1/auth/signup', { email, password: PASSWORD });
  assert.equal(signedUp.statusCode, 201, signedUp.body);
  const secret = await beginTotp(t, signedUp.json().access_token);
  alignToStep(t, 5);
  const confirm = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers: bearer(signedUp.json().access_token), payload: { code: await totpCode(t, secret) } });
  assert.equal(confirm.statusCode, 200, confirm.body);
  const user = { email, password: PASSWORD, mode: 'live' as const };
  for (const verified of [false, true]) {
    alignToStep(t, 5);
    const res = await verify({ mfa_token: await mfaChallenge(t, { ...user, id: signedUp.json().user_id }), code: await totpCode(t, secret) });
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(res.json().email_verified, verified);
    assert.equal(jwtPayload(res.json().access_token).email_verified, verified);
    if (!verified) assert.equal((await post(t, '/v1/auth/email/verify', { token: await latestToken(t, email, 'email_verification') })).statusCode, 204);
  }
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
