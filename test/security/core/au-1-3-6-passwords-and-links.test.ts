// AU-1, AU-3, AU-6: the clauses the auth tests (test/auth/*.test.ts) leave open. Password length is
// counted in code points and never truncated; every sign-in failure runs one Argon2 verification and
// answers the same bytes; reset and invitation links expire on the service clock, one used link kills
// its siblings, and a reset leaves the second factor in place.
import { passwordEvaluations } from './argon2-probe.js';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../../helpers/app.js';
import { createUser, PASSWORD, uniqueEmail, type TestUser } from '../../helpers/fixtures.js';
import { linkToken, mailsTo } from '../../helpers/mail.js';
import { createMfaUser, latestToken, loginRes, NEW_PASSWORD, post } from '../../auth/support.js';
import { assertError, call, sql, type InjectResponse } from '../../helpers/http.js';
import { platformKey } from '../../access/support.js';
import { newId } from '../../../src/ids.js';
import { figure, raceTransactions } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const HOUR = 3600;
const signup = (email: string, password: string) => post(t, '/v1/auth/signup', { email, password });
const login = (email: string, password: string) => post(t, '/v1/auth/login', { email, password });
const reason = (res: InjectResponse) => assertError(res, 422, 'weak_password').details.reason;

test('AU-1 lengths are counted in code points ("a 12-emoji password is 12 characters"): 11 emoji too_short, 12 and 128 emoji accepted and sign in, 129 emoji too_long', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units, four UTF-8 bytes
  assert.equal(reason(await signup(uniqueEmail('e11'), E.repeat(11))), 'too_short');
  assert.equal(reason(await signup(uniqueEmail('e129'), E.repeat(129))), 'too_long');
  for (const n of [12, 128]) {
    const email = uniqueEmail(`e${n}`);
    const res = await signup(email, E.repeat(n));
    assert.equal(res.statusCode, 201, res.body);
    assert.equal((await login(email, E.repeat(n))).statusCode, 200);
    assertError(await login(email, E.repeat(n - 1)), 401, 'invalid_credentials');
  }
});

test('AU-1 "the 128-character password logs in; the same password minus its last character fails, which proves no truncation" (nor at 72 bytes)', async () => {
  const email = uniqueEmail('trunc');
  const password = 'Kq7-'.repeat(31) + 'abcd';
  assert.equal([...password].length, 128);
  assert.equal((await signup(email, password)).statusCode, 201);
  assert.equal((await login(email, password)).statusCode, 200);
  for (const near of [password.slice(0, -1), `${password.slice(0, -1)}e`, password.slice(0, 72)]) {
    assertError(await login(email, near), 401, 'invalid_credentials');
  }
  figure('AU-1', 'truncated or altered 128-character passwords accepted: 0 / 3');
});

test('AU-1 "Password length 12–128 characters" counts the characters sent, not their NFKC expansion: 1, 5 and 11 characters that normalize to 18 or more are too_short; 12 and 128 such characters (216 and 2304 after NFKC) are accepted and sign in; 129 are too_long', async () => {
  const FDFA = '\uFDFA'; // one code point; NFKC gives 18
  const FI = '\uFB01'; // one code point; NFKC gives "fi"
  for (const password of [FDFA, '\uFB03\uFB04\uFB03\uFB04\uFB00', FI.repeat(11), `${FDFA}q7`]) {
    assert.equal(reason(await signup(uniqueEmail('nfkc-short'), password)), 'too_short', password);
  }
  assert.equal(reason(await signup(uniqueEmail('nfkc-long'), FI.repeat(129))), 'too_long');
  for (const password of [FDFA.repeat(12), FI.repeat(65), FDFA.repeat(128)]) {
    const email = uniqueEmail('nfkc-ok');
    const res = await signup(email, password);
    assert.equal(res.statusCode, 201, res.body);
    assert.equal((await login(email, password)).statusCode, 200);
    assertError(await login(email, password.slice(0, -1)), 401, 'invalid_credentials');
  }
});

async function ssoOnlyUser(): Promise<TestUser> {
  const user = await createUser(t);
  await sql(t, `INSERT INTO identities (id, user_id, method, created_at) VALUES ($1, $2, 'sso', $3)`, [newId('idn'), user.id, t.clock.now()]);
  await sql(t, `DELETE FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  return user;
}

test('AU-3 "identical 401 invalid_credentials bodies; unknown-email path still runs one Argon2 verify": unknown, wrong password, invited, SSO-only and soft-deleted each run exactly one verification and answer the same bytes and headers', async () => {
  const admin = await platformKey(t);
  const active = await createUser(t);
  const invited = await createUser(t, { status: 'invited' });
  const sso = await ssoOnlyUser();
  const deleted = await createUser(t);
  assert.equal((await call(t, 'DELETE', `/v1/users/${deleted.id}`, admin)).statusCode, 204);
  const cases: [string, string, string][] = [
    ['unknown email', uniqueEmail('nobody'), PASSWORD],
    ['wrong password', active.email, 'not-the-password-99'],
    ['invited, no password', invited.email, PASSWORD],
    ['SSO-only', sso.email, PASSWORD],
    ['soft-deleted, right password', deleted.email, PASSWORD],
  ];
  const evaluations: Record<string, number> = {};
  const shapes = new Set<string>();
  for (const [name, email, password] of cases) {
    const start = passwordEvaluations();
    const res = await login(email, password);
    evaluations[name] = passwordEvaluations() - start;
    assertError(res, 401, 'invalid_credentials');
    const headers = Object.keys(res.headers).filter((h) => !['date', 'request-id', 'x-request-id', 'content-length'].includes(h)).sort();
    shapes.add(`${res.body} ${headers.join(',')}`);
  }
  figure('AU-3', `Argon2 verifications per failure: ${Object.values(evaluations).join(' / ')} (each must be 1); distinct answers ${shapes.size}`);
  assert.deepEqual(evaluations, Object.fromEntries(cases.map(([name]) => [name, 1])));
  assert.equal(shapes.size, 1, [...shapes].join('\n'));
});

test('AU-6 reset and invitation links expire on the service clock: a reset token works 1 s before 1 hour and gets 400 invalid_token 1 s after; an invitation likewise at 7 days', async () => {
  await withStoppedClock(t, async () => {
    const [a, b] = [await createUser(t), await createUser(t)];
    const [c, d] = [await createUser(t, { status: 'invited' }), await createUser(t, { status: 'invited' })];
    for (const u of [a, b, c, d]) assert.equal((await post(t, '/v1/auth/password/forgot', { email: u.email })).statusCode, 202);
    const [ra, rb] = [await latestToken(t, a.email, 'password_reset'), await latestToken(t, b.email, 'password_reset')];
    const [ic, id] = [await latestToken(t, c.email, 'invitation'), await latestToken(t, d.email, 'invitation')];

    t.clock.advance(HOUR - 1);
    assert.equal((await post(t, '/v1/auth/password/reset', { token: ra, password: NEW_PASSWORD })).statusCode, 204);
    t.clock.advance(2);
    assertError(await post(t, '/v1/auth/password/reset', { token: rb, password: NEW_PASSWORD }), 400, 'invalid_token');
    assert.equal((await loginRes(t, b)).statusCode, 200, 'the expired link changed nothing');

    t.clock.advance(7 * 24 * HOUR - HOUR - 2);
    assert.equal((await post(t, '/v1/auth/invitations/accept', { token: ic, password: NEW_PASSWORD })).statusCode, 200);
    t.clock.advance(2);
    assertError(await post(t, '/v1/auth/invitations/accept', { token: id, password: NEW_PASSWORD }), 400, 'invalid_token');
    assert.equal((await sql(t, 'SELECT status FROM users WHERE id = $1', [d.id]))[0].status, 'invited');
  });
});

test('AU-6 "single-use (second use 400)" across mails: once the newest reset or verification link is used, the older one gets 400 invalid_token and changes nothing', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 2; i++) assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const resets = (await mailsTo(t, user.email, 'password_reset')).map(linkToken);
  assert.equal(resets.length, 2);
  assert.equal((await post(t, '/v1/auth/password/reset', { token: resets[1], password: NEW_PASSWORD })).statusCode, 204);
  assertError(await post(t, '/v1/auth/password/reset', { token: resets[0], password: 'other-passphrase-4455' }), 400, 'invalid_token');
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200);

  const email = uniqueEmail('verify');
  assert.equal((await signup(email, PASSWORD)).statusCode, 201);
  assert.equal((await post(t, '/v1/auth/email/verify/resend', { email })).statusCode, 202);
  const verifications = (await mailsTo(t, email, 'email_verification')).map(linkToken);
  assert.equal(verifications.length, 2);
  assert.equal((await post(t, '/v1/auth/email/verify', { token: verifications[1] })).statusCode, 204);
  let reused = 0;
  for (const token of verifications) if ((await post(t, '/v1/auth/email/verify', { token })).statusCode !== 400) reused++;
  figure('AU-6', `reuse accepted: ${reused}`);
  assert.equal(reused, 0);
});

test('AU-6 "single-use (second use 400)" when raced: two resets with one link at once get one 204 and one 400 invalid_token, and the password is the winner\'s', async () => {
  const user = await createUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const token = await latestToken(t, user.email, 'password_reset');
  const passwords = ['raced-passphrase-one-81', 'raced-passphrase-two-82'];
  const race = raceTransactions(t.database, 2);
  let results: InjectResponse[];
  try {
    results = await Promise.all(passwords.map((password) => post(t, '/v1/auth/password/reset', { token, password })));
  } finally {
    race.restore();
  }
  assert.equal(race.arrived(), 2, 'both resets reached their transaction');
  const won = results.findIndex((r) => r.statusCode === 204);
  assert.ok(won >= 0, `one reset succeeds: ${results.map((r) => r.statusCode)}`);
  assertError(results[1 - won]!, 400, 'invalid_token');
  assert.equal((await login(user.email, passwords[won]!)).statusCode, 200, 'the winner\'s password is set');
  assertError(await login(user.email, passwords[1 - won]!), 401, 'invalid_credentials');
});

test('AU-6 "a reset on an MFA account still requires TOTP at the next login (ASVS 6.4.3)": the new password answers the MfaChallenge, no session', async () => {
  const { user } = await createMfaUser(t);
  assert.equal((await post(t, '/v1/auth/password/forgot', { email: user.email })).statusCode, 202);
  const token = await latestToken(t, user.email, 'password_reset');
  assert.equal((await post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD })).statusCode, 204);
  const res = await loginRes(t, user, NEW_PASSWORD);
  assert.equal(res.statusCode, 200, res.body);
  const body = res.json();
  assert.equal(body.mfa_required, true, res.body);
  assert.match(body.mfa_token, /^mfa_/);
  assert.ok(!('access_token' in body) && !('refresh_token' in body), 'no session before the second factor');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1 AND revoked_at IS NULL', [user.id]))[0].n, 0);
});
