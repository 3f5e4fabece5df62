// MF-1, MF-2, MF-4: the server's own TOTP routine against the RFC 6238 Appendix B vectors (directly
// and through a sign-in), the drift window at every position inside a step, and the mfa_token as a
// bearer of nothing but its own user's second step (bound to the user, voided after five wrong codes).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { generate } from 'otplib';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { createUser } from '../../helpers/fixtures.js';
import { sealTotpSecret, verifyTotp } from '../../../src/auth/totp.js';
import { alignToStep, assertError, createMfaUser, jwtPayload, loginRes, mfaChallenge, post, sql, totpCode } from '../../auth/support.js';
import { figure } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

// RFC 6238 Appendix B, SHA-1, key ASCII "12345678901234567890" in base32; the 6-digit forms.
const RFC_SECRET = 'GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ';
const VECTORS: [number, string][] = [
  [59, '287082'], [1111111109, '081804'], [1111111111, '050471'], [1234567890, '005924'], [2000000000, '279037'], [20000000000, '353130'],
];
const verify = (body: Record<string, string>) => post(t, '/v1/auth/mfa/verify', body);
const sessionCount = async (userId: string) => (await sql(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1', [userId]))[0].n;
const otherCode = (code: string) => String((Number(code) + 1) % 1_000_000).padStart(6, '0');

test('MF-1 RFC 6238 Appendix B through the server\'s own TOTP routine, T=59 to T=20000000000: "all 6 six-digit codes match; otplib agrees"', async () => {
  let passed = 0;
  for (const [T, code] of VECTORS) {
    assert.equal(await generate({ secret: RFC_SECRET, epoch: T }), code, `otplib at T=${T}`);
    assert.equal(await verifyTotp(RFC_SECRET, code, new Date(T * 1000), null), Math.floor(T / 30), `server at T=${T}`);
    assert.equal(await verifyTotp(RFC_SECRET, otherCode(code), new Date(T * 1000), null), null, `wrong code at T=${T}`);
    passed++;
  }
  figure('MF-1', `vectors passed: ${passed}/6`);
  assert.equal(passed, 6);
});

test('MF-1 end to end: a user whose sealed TOTP secret is the RFC key completes mfa/verify at each vector time (service clock) with the vector code', async () => {
  const user = await createUser(t);
  const [identity] = await sql(t, `SELECT id FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  await sql(t, 'UPDATE identities SET totp_secret = $2, totp_confirmed_at = $3, totp_last_step = NULL WHERE id = $1', [
    identity.id, sealTotpSecret({ deps: t.deps }, identity.id, RFC_SECRET), t.clock.now(),
  ]);
  const saved = t.clock.offsetMs;
  const results: string[] = [];
  try {
    for (const [T, code] of VECTORS.slice(1)) { // T=59 (1970): every session would be born expired
      t.clock.offsetMs = T * 1000 + 5 - Date.now();
      const challenge = await loginRes(t, user);
      assert.equal(challenge.statusCode, 200, challenge.body);
      results.push(`${T}:${(await verify({ mfa_token: challenge.json().mfa_token, code })).statusCode}`);
    }
  } finally {
    t.clock.offsetMs = saved;
  }
  assert.deepEqual(results, VECTORS.slice(1).map(([T]) => `${T}:200`));
});

test('MF-2 codes for T-2…T+2 at 0, 15 and 29 s into a step: "accepted exactly within the documented window (±1 step per RFC 6238 §5.2); rejected outside it"', async () => {
  const base = 1_800_000_000 - (1_800_000_000 % 30);
  const accepted: string[] = [];
  for (const into of [0, 15, 29]) {
    const now = base + into;
    for (const k of [-2, -1, 0, 1, 2]) {
      const code = await generate({ secret: RFC_SECRET, epoch: now + k * 30 });
      if ((await verifyTotp(RFC_SECRET, code, new Date(now * 1000), null)) !== null) accepted.push(`${into}s:${k > 0 ? '+' : ''}${k}`);
    }
  }
  figure('MF-2', `accepted offsets: ${accepted.join(' ')}`);
  assert.deepEqual(accepted, ['0s:-1', '0s:0', '0s:+1', '15s:-1', '15s:0', '15s:+1', '29s:-1', '29s:0', '29s:+1']);
});

test('MF-4 the mfa_token is "bound to its user": A\'s token with B\'s valid TOTP or recovery code gets 401 and uses neither; A\'s token then signs in A only', async () => {
  const a = await createMfaUser(t);
  const b = await createMfaUser(t);
  alignToStep(t, 5);
  const tokenA = await mfaChallenge(t, a.user);
  assertError(await verify({ mfa_token: tokenA, code: await totpCode(t, b.secret) }), 401, 'invalid_credentials');
  assertError(await verify({ mfa_token: tokenA, recovery_code: b.recoveryCodes[0] }), 401, 'invalid_credentials');
  const okB = await verify({ mfa_token: await mfaChallenge(t, b.user), recovery_code: b.recoveryCodes[0] });
  assert.equal(okB.statusCode, 200, `B's recovery code was not used up: ${okB.body}`);
  const okA = await verify({ mfa_token: tokenA, code: await totpCode(t, a.secret) });
  assert.equal(okA.statusCode, 200, okA.body);
  assert.equal(okA.json().user_id, a.user.id);
  assert.equal(jwtPayload(okA.json().access_token).sub, a.user.id);
});

test('MF-4 "locked after N failures": five wrong codes void the challenge itself; with the identity lock lifted, the right code on that mfa_token is still 401', async () => {
  const { user, secret } = await createMfaUser(t);
  const token = await mfaChallenge(t, user);
  const good = await totpCode(t, secret);
  const sessionsBefore = await sessionCount(user.id);
  let guesses = 0;
  for (let i = 0; i < 6; i++) {
    const res = await verify({ mfa_token: token, code: otherCode(good) });
    // An evaluated guess is 401 "The code is not valid."; afterwards the void challenge (401, the
    // token's message) or the identity's lock (429) refuses without evaluating.
    if (res.statusCode === 401 && res.json().error.message === 'The code is not valid.') guesses++;
    else if (res.statusCode === 401) assert.match(res.json().error.message, /invalid or expired/);
    else assertError(res, 429, 'too_many_attempts');
  }
  figure('MF-4', `guesses allowed per token: ${guesses}`);
  assert.ok(guesses <= 5, `${guesses} guesses answered 401`);
  // Lift the identity lockout behind the API: only the challenge's own state can refuse now.
  await sql(t, `UPDATE identities SET failed_attempts = 0, first_failed_at = NULL, recent_failures = '{}', locked_until = NULL WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assertError(await verify({ mfa_token: token, code: good }), 401, 'invalid_credentials');
  assert.equal(await sessionCount(user.id), sessionsBefore, 'no session from the voided challenge');
});
