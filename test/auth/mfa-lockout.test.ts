// The MFA sign-in's lockout: wrong codes at mfa/verify and mfa/totp/disable count toward it, five
// void a challenge, and parallel wrong codes evaluate at most five. The sign-in itself: mfa-login.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { withTransactionStatements } from '../helpers/locks.js';
import { bearer, createApiKey, createUser, login } from '../helpers/fixtures.js';
import { alignToStep, assertAuthSession, assertError, createMfaUser, loginRes, mfaChallenge, otherCode, post, readMfaEnabled, sql, totpCode, verifyMfa } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const verify = (body: object) => verifyMfa(t, body);
const mfaEnabled = (token: string) => readMfaEnabled(t, token);

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
