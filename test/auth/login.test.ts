import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser, PASSWORD, uniqueEmail, type TestUser } from '../helpers/fixtures.js';
import { boot } from '../../src/boot.js';
import { hashPassword } from '../../src/auth/passwords.js';
import { argon2Hashes, argon2Parameters, passwordEvaluations, verifiedParameters } from '../security/core/argon2-probe.js';
import { newId } from '../../src/ids.js';
import { assertAuthSession, assertError, assertFields, get, jwtHeader, jwtPayload, loginRes, mailsTo, post, sql } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const WRONG = 'not-the-password-99';

async function ssoOnlyUser(): Promise<TestUser> {
  const user = await createUser(t);
  await sql(t, `INSERT INTO identities (id, user_id, method, created_at) VALUES ($1, $2, 'sso', $3)`, [newId('idn'), user.id, t.clock.now()]);
  await sql(t, `DELETE FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  return user;
}

const sessionCount = async (userId: string) => (await sql(t, 'SELECT id FROM sessions WHERE user_id = $1', [userId])).length;

async function fail(user: TestUser, app = t.app) {
  return app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: WRONG } });
}

test('login with correct credentials answers 200 AuthSession and every login creates a new ses_ session', async () => {
  const user = await createUser(t);
  const first = await loginRes(t, user);
  assert.equal(first.statusCode, 200, first.body);
  assertAuthSession(first.json(), user.id);
  assert.equal(first.json().email_verified, true);
  const second = await loginRes(t, user);
  assert.equal(second.statusCode, 200);
  assert.notEqual(second.json().session_id, first.json().session_id);
  const rows = await sql(t, 'SELECT id, amr, revoked_at FROM sessions WHERE user_id = $1 ORDER BY created_at', [user.id]);
  assert.deepEqual(rows.map((r) => r.id).sort(), [first.json().session_id, second.json().session_id].sort());
  for (const row of rows) assert.deepEqual(row.amr, ['pwd']);
});

test('responses carrying tokens or secrets are never cached: login, token/refresh, API key creation and other /v1 answers send Cache-Control: no-store (RFC 6749 §5.1); discovery keeps its own', async () => {
  const user = await createUser(t, { roles: ['superadmin'] });
  const login = await loginRes(t, user);
  assert.equal(login.headers['cache-control'], 'no-store');
  const refreshed = await post(t, '/v1/auth/token/refresh', { refresh_token: login.json().refresh_token });
  assert.equal(refreshed.statusCode, 200, refreshed.body);
  assert.equal(refreshed.headers['cache-control'], 'no-store');
  const wrong = await loginRes(t, user, 'not-the-password-at-all');
  assert.equal(wrong.statusCode, 401);
  assert.equal(wrong.headers['cache-control'], 'no-store');
  const me = await get(t, '/v1/users/me', refreshed.json().access_token);
  assert.equal(me.headers['cache-control'], 'no-store');
  const key = await t.app.inject({ method: 'POST', url: '/v1/api-keys', headers: bearer(refreshed.json().access_token), payload: { name: 'cache check', scope: 'platform', permissions: [] } });
  assert.equal(key.statusCode, 201, key.body);
  assert.equal(key.headers['cache-control'], 'no-store');
  const jwks = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
  assert.equal(jwks.headers['cache-control'], 'public, max-age=300');
  const discovery = await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' });
  assert.equal(discovery.statusCode, 200);
  assert.equal(discovery.headers['cache-control'], 'public, max-age=300');
  // Answers the router gives before any route runs: a URL it cannot decode, an over-long path parameter.
  for (const [url, status] of [['/v1/users/%zz', 400], [`/v1/users/${'A'.repeat(2100)}`, 422]] as const) {
    const res = await get(t, url, refreshed.json().access_token);
    assert.equal(res.statusCode, status, res.body);
    assert.equal(res.headers['cache-control'], 'no-store', url.slice(0, 20));
  }
});

test('the access token is an RS256 JWT with iss, aud platform, sub, sid, amr [pwd], email_verified, test_mode, iat, exp 15 minutes later and an atk_ jti, and no permissions', async () => {
  const user = await createUser(t, { roles: ['superadmin'] });
  const res = await loginRes(t, user);
  const session = res.json();
  const header = jwtHeader(session.access_token);
  assert.equal(header.alg, 'RS256');
  const claims = jwtPayload(session.access_token);
  assert.deepEqual(Object.keys(claims).sort(), ['amr', 'aud', 'email_verified', 'exp', 'iat', 'iss', 'jti', 'sid', 'sub', 'test_mode']);
  assert.equal(claims.iss, t.config.publicUrl);
  assert.equal(claims.aud, 'platform');
  assert.equal(claims.sub, user.id);
  assert.equal(claims.sid, session.session_id);
  assert.deepEqual(claims.amr, ['pwd']);
  assert.equal(claims.email_verified, true);
  assert.equal(claims.test_mode, false);
  assert.equal(claims.exp - claims.iat, 900);
  assert.ok(Math.abs(claims.iat - Math.floor(t.clock.now().getTime() / 1000)) <= 5, 'Math.abs(claims.iat - Math.floor(t.clock.now().getTime() / 1000)) <= 5');
  assert.match(claims.jti, /^atk_[0-9A-HJKMNP-TV-Z]{26}$/);
  const jwks = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
  assert.ok(jwks.json().keys.some((k: { kid: string }) => k.kid === header.kid), 'signed with a published key');
});

test('login sets last_login_at when the session is issued', async () => {
  const user = await createUser(t);
  const [before] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [user.id]);
  assert.equal(before.last_login_at, null);
  const start = t.clock.now().getTime();
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200);
  const [row] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [user.id]);
  assert.ok(row.last_login_at.getTime() >= start - 1000 && row.last_login_at.getTime() <= t.clock.now().getTime(), 'row.last_login_at.getTime() >= start - 1000 && row.last_login_at.getTime() <= t.clock.now().getTime()');
  const me = await get(t, '/v1/users/me', res.json().access_token);
  assert.equal(me.json().last_login_at, row.last_login_at.toISOString());
  // A failed login does not touch it.
  t.clock.advance(5);
  assertError(await fail(user), 401, 'invalid_credentials');
  const [after] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [user.id]);
  assert.equal(after.last_login_at.getTime(), row.last_login_at.getTime());
});

test('login answers one 401 invalid_credentials for an unknown email, a wrong password, an invited user with no password and an SSO-only user', async () => {
  const active = await createUser(t);
  const invited = await createUser(t, { status: 'invited' });
  const sso = await ssoOnlyUser();
  const responses = [
    await post(t, '/v1/auth/login', { email: uniqueEmail('nobody'), password: PASSWORD }),
    await fail(active),
    await post(t, '/v1/auth/login', { email: invited.email, password: PASSWORD }),
    await post(t, '/v1/auth/login', { email: sso.email, password: PASSWORD }),
  ];
  const bodies = responses.map((res) => {
    assertError(res, 401, 'invalid_credentials');
    return res.json();
  });
  for (const body of bodies) assert.deepEqual(body, bodies[0], 'the same body for all four');
  for (const user of [active, invited, sso]) assert.equal(await sessionCount(user.id), 0);
});

// Equal time is equal work: what a failure costs is its Argon2id verification (tens of milliseconds;
// the rest is a statement or two), so each case is held to that work by count, not by a stopwatch (a
// wall-clock comparison of medians failed on a loaded two-core machine with nothing wrong; timing
// belongs to `npm run bench`). The verified hash's parameters count too: a cheaper dummy hash for
// unknown emails would be one verification, but a faster one.
test('the four invalid_credentials cases take about the same time: each costs exactly one Argon2id verification, with the password parameters, and no hash', async () => {
  const stored = await hashPassword(`parameters-${uniqueEmail('p')}`);
  const parameters = argon2Parameters(stored);
  // Warm up (the first unknown-email login prepares the dummy hash).
  assertError(await post(t, '/v1/auth/login', { email: uniqueEmail('warm'), password: PASSWORD }), 401, 'invalid_credentials');
  const wrongUser = await createUser(t);
  const invited = await createUser(t, { status: 'invited' });
  const sso = await ssoOnlyUser();
  const cases: Record<string, () => ReturnType<typeof post>> = {
    wrong: () => fail(wrongUser),
    unknown: () => post(t, '/v1/auth/login', { email: uniqueEmail('nobody'), password: PASSWORD }),
    invited: () => post(t, '/v1/auth/login', { email: invited.email, password: PASSWORD }),
    sso: () => post(t, '/v1/auth/login', { email: sso.email, password: PASSWORD }),
  };
  const work: Record<string, { hashes: number; verifications: string[] }> = {};
  for (const [name, run] of Object.entries(cases)) {
    const [hashes, verifications] = [argon2Hashes(), passwordEvaluations()];
    assertError(await run(), 401, 'invalid_credentials');
    work[name] = { hashes: argon2Hashes() - hashes, verifications: verifiedParameters(verifications) };
  }
  const same = { hashes: 0, verifications: [parameters] };
  assert.deepEqual(work, { wrong: same, unknown: same, invited: same, sso: same });
});

test('correct credentials on a suspended user get 403 account_suspended; a wrong password on a suspended user gets 401 invalid_credentials; no session either way', async () => {
  const user = await createUser(t);
  await sql(t, `UPDATE users SET status = 'suspended' WHERE id = $1`, [user.id]);
  assertError(await loginRes(t, user), 403, 'account_suspended');
  assertError(await fail(user), 401, 'invalid_credentials');
  assert.equal(await sessionCount(user.id), 0);
  const [row] = await sql(t, 'SELECT last_login_at FROM users WHERE id = $1', [user.id]);
  assert.equal(row.last_login_at, null);
});

test('correct credentials on a suspended user are no failed attempt: six in a row each get 403 account_suspended, never 429 too_many_attempts', async () => {
  const user = await createUser(t);
  await sql(t, `UPDATE users SET status = 'suspended' WHERE id = $1`, [user.id]);
  for (let i = 0; i < 6; i++) assertError(await loginRes(t, user), 403, 'account_suspended');
  assert.equal(await sessionCount(user.id), 0);
});

test('login matches only accounts in the requested test_mode', async () => {
  const live = await createUser(t, { mode: 'live' });
  const testUser = await createUser(t, { mode: 'test' });
  assertError(await post(t, '/v1/auth/login', { email: live.email, password: PASSWORD, test_mode: true }), 401, 'invalid_credentials');
  assertError(await post(t, '/v1/auth/login', { email: testUser.email, password: PASSWORD }), 401, 'invalid_credentials');
  const res = await post(t, '/v1/auth/login', { email: testUser.email, password: PASSWORD, test_mode: true });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(jwtPayload(res.json().access_token).test_mode, true);
  const [row] = await sql(t, 'SELECT test_mode FROM sessions WHERE id = $1', [res.json().session_id]);
  assert.equal(row.test_mode, true);
});

test('lockout: 5 failed attempts within 15 minutes lock the identity for 15 minutes with 429 too_many_attempts and Retry-After, even for the correct password', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 4; i++) {
    assertError(await fail(user), 401, 'invalid_credentials');
    t.clock.advance(60);
  }
  // The fifth failure answers 401 like the others and sets the lock.
  assertError(await fail(user), 401, 'invalid_credentials');
  const locked = await loginRes(t, user);
  assertError(locked, 429, 'too_many_attempts');
  const retryAfter = Number(locked.headers['retry-after']);
  assert.ok(retryAfter > 890 && retryAfter <= 900, `Retry-After ${locked.headers['retry-after']}`);
  assertError(await fail(user), 429, 'too_many_attempts');
  assert.equal(await sessionCount(user.id), 0);

  t.clock.advance(14 * 60);
  const still = await loginRes(t, user);
  assertError(still, 429, 'too_many_attempts');
  const later = Number(still.headers['retry-after']);
  assert.ok(later >= 1 && later <= 60, `Retry-After ${still.headers['retry-after']}`);

  // Per identity: another account is unaffected.
  const other = await createUser(t);
  assert.equal((await loginRes(t, other)).statusCode, 200);
});

test('"lock 15 minutes" holds to its end: Retry-After right after the fifth failure is 900 s at most; 5 s before the 15 minutes end the right password still gets 429 too_many_attempts with Retry-After, just after them it signs in', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 5; i++) await fail(user);
  const locked = await loginRes(t, user);
  assertError(locked, 429, 'too_many_attempts');
  const retryAfter = Number(locked.headers['retry-after']);
  assert.ok(retryAfter > 890 && retryAfter <= 900, `Retry-After ${retryAfter} is the rest of the 15-minute lock`);
  t.clock.advance(15 * 60 - 5);
  const stillLocked = await loginRes(t, user);
  assertError(stillLocked, 429, 'too_many_attempts');
  assert.ok(Number(stillLocked.headers['retry-after']) >= 1, 'Retry-After is set until the lock ends');
  t.clock.advance(6);
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
});

test('the lockout ends after 15 minutes', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 5; i++) await fail(user);
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
  t.clock.advance(15 * 60 + 1);
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json(), user.id);
  // A fresh window: one new failure does not lock again.
  assertError(await fail(user), 401, 'invalid_credentials');
  assert.equal((await loginRes(t, user)).statusCode, 200);
});

test('"lock 15 minutes" when the clock steps back an hour (an NTP correction, a restored VM): the lock set before the step ends 15 minutes after the next attempt at the latest, not 75 minutes, for an account and for an unknown email alike; then one failure does not lock again', async () => {
  const user = await createUser(t);
  const nobody = uniqueEmail('nobody');
  for (let i = 0; i < 5; i++) {
    assertError(await fail(user), 401, 'invalid_credentials');
    assertError(await post(t, '/v1/auth/login', { email: nobody, password: WRONG }), 401, 'invalid_credentials');
  }
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
  t.clock.advance(-3600);
  for (const locked of [await loginRes(t, user), await post(t, '/v1/auth/login', { email: nobody, password: WRONG })]) {
    assertError(locked, 429, 'too_many_attempts');
    const retryAfter = Number(locked.headers['retry-after']);
    assert.ok(retryAfter > 0 && retryAfter <= 15 * 60, `Retry-After ${locked.headers['retry-after']} (15 minutes at most)`);
  }
  t.clock.advance(15 * 60 + 1);
  assertError(await fail(user), 401, 'invalid_credentials');
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
  assertError(await post(t, '/v1/auth/login', { email: nobody, password: WRONG }), 401, 'invalid_credentials');
});

test('failures stamped before the clock stepped back an hour count as made at the next attempt, no later: 4 failures, a step back, an attempt, 15 minutes, 4 failures leave the identity unlocked', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 4; i++) assertError(await fail(user), 401, 'invalid_credentials');
  t.clock.advance(-3600);
  // The attempt that notices the step: the four failures count as made now, with this fifth one.
  assertError(await fail(user), 401, 'invalid_credentials');
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
  t.clock.advance(15 * 60 + 1);
  for (let i = 0; i < 4; i++) assertError(await fail(user), 401, 'invalid_credentials');
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
});

test('a successful login resets the failure counter: 4 failures, a success, 4 failures leave the identity unlocked', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 4; i++) assertError(await fail(user), 401, 'invalid_credentials');
  assert.equal((await loginRes(t, user)).statusCode, 200);
  for (let i = 0; i < 4; i++) assertError(await fail(user), 401, 'invalid_credentials');
  const res = await loginRes(t, user);
  assert.equal(res.statusCode, 200, res.body);
});

test('failures older than 15 minutes do not count: 4 failures, 15 minutes, 4 failures leave the identity unlocked', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 4; i++) assertError(await fail(user), 401, 'invalid_credentials');
  t.clock.advance(15 * 60 + 1);
  for (let i = 0; i < 4; i++) assertError(await fail(user), 401, 'invalid_credentials');
  assert.equal((await loginRes(t, user)).statusCode, 200);
});

test('any 5 failed attempts within 15 minutes lock, even when the first failure of the series is older than 15 minutes', async () => {
  const user = await createUser(t);
  assertError(await fail(user), 401, 'invalid_credentials'); // 00:00
  t.clock.advance(14 * 60 + 50);
  for (let i = 0; i < 3; i++) assertError(await fail(user), 401, 'invalid_credentials'); // 14:50
  t.clock.advance(20);
  assertError(await fail(user), 401, 'invalid_credentials'); // 15:10: four failures in the last 15 minutes
  const fifth = await fail(user); // five failures between 14:50 and 15:10
  assert.ok([401, 429].includes(fifth.statusCode), fifth.body);
  assertError(await loginRes(t, user), 429, 'too_many_attempts');
});

test('an unknown email is treated alike by the lockout: 5 failed attempts within 15 minutes, in any letter case, then 429 too_many_attempts with Retry-After', async () => {
  const email = uniqueEmail('nobody');
  const typed = [email, email.toUpperCase(), email, email.toUpperCase(), email];
  for (const address of typed) assertError(await post(t, '/v1/auth/login', { email: address, password: WRONG }), 401, 'invalid_credentials');
  for (const address of [email, email.toUpperCase()]) {
    const locked = await post(t, '/v1/auth/login', { email: address, password: WRONG });
    assertError(locked, 429, 'too_many_attempts');
    const retryAfter = Number(locked.headers['retry-after']);
    assert.ok(retryAfter > 890 && retryAfter <= 900, `Retry-After ${locked.headers['retry-after']}`);
  }
});

test('an unknown email\'s lockout is per mode, as an account\'s identity is (Part A rule 6, Login lockout): 5 failures in live mode lock that email in live mode only; in test mode, where an account with that email may exist, it still answers 401 invalid_credentials, so the lock tells nothing about test-mode accounts', async () => {
  const email = uniqueEmail('nobody-mode');
  for (let i = 0; i < 5; i++) assertError(await post(t, '/v1/auth/login', { email, password: WRONG }), 401, 'invalid_credentials');
  assertError(await post(t, '/v1/auth/login', { email, password: WRONG }), 429, 'too_many_attempts');
  assertError(await post(t, '/v1/auth/login', { email, password: WRONG, test_mode: true }), 401, 'invalid_credentials');
});

test('the lockout counter is shared by all processes: failures split across two processes on one database still lock', async () => {
  const second = await boot({ config: t.config, database: t.database, clock: t.clock, logger: false });
  try {
    const user = await createUser(t);
    for (let i = 0; i < 5; i++) {
      const res = await fail(user, i % 2 === 0 ? t.app : second.app);
      if (i < 4) assertError(res, 401, 'invalid_credentials');
    }
    for (const app of [t.app, second.app]) {
      const res = await app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: PASSWORD } });
      assertError(res, 429, 'too_many_attempts');
      assert.ok(Number(res.headers['retry-after']) > 0, 'Number(res.headers[\'retry-after\']) > 0');
    }
  } finally {
    await second.app.close();
    await second.deps.jobs.stop();
  }
});

test('the lockout tells nothing about which accounts exist, for look-alike spellings too: five failures typed with the Kelvin sign (U+212A, lower-cased to `k` by JavaScript) leave the ASCII address answering 401 whether or not it has an account', async () => {
  const account = await createUser(t, { email: uniqueEmail('kim') });
  const nobody = uniqueEmail('kim');
  const answers: number[] = [];
  for (const email of [account.email, nobody]) {
    const typed = email.replace('k', '\u212a');
    for (let i = 0; i < 5; i++) assertError(await post(t, '/v1/auth/login', { email: typed, password: WRONG }), 401, 'invalid_credentials');
    // The look-alike spelling is an address of its own, locked as such.
    assertError(await post(t, '/v1/auth/login', { email: typed, password: WRONG }), 429, 'too_many_attempts');
    const res = await post(t, '/v1/auth/login', { email, password: WRONG });
    answers.push(res.statusCode);
    assertError(res, 401, 'invalid_credentials');
  }
  assert.deepEqual(answers, [401, 401], 'an account and no account answer alike');
  // The account itself still signs in.
  assert.equal((await post(t, '/v1/auth/login', { email: account.email, password: PASSWORD })).statusCode, 200);
});

test('login bad input gets 422 validation_failed with details.fields naming the field', async () => {
  assertFields(await post(t, '/v1/auth/login', {}), ['email', 'password']);
  assertFields(await post(t, '/v1/auth/login', { email: uniqueEmail() }), ['password']);
  assertFields(await post(t, '/v1/auth/login', { password: PASSWORD }), ['email']);
  assertFields(await post(t, '/v1/auth/login', { email: 7, password: PASSWORD }), ['email']);
  assertFields(await post(t, '/v1/auth/login', { email: uniqueEmail(), password: ['x'] }), ['password']);
  assertFields(await post(t, '/v1/auth/login', { email: uniqueEmail(), password: PASSWORD, test_mode: 'false' }), ['test_mode']);
  assertFields(await post(t, '/v1/auth/login', { email: uniqueEmail(), password: PASSWORD, remember: true }), ['remember']);
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'application/json' }, payload: '{"email":' });
  assertError(res, 400, 'malformed_json');
});

test('POST /v1/auth/sso/{provider}/callback answers 501 not_implemented, whatever the body: none, JSON, a form post (how providers call back), malformed JSON, text', async () => {
  const bodies: { payload?: string | object; type?: string }[] = [
    {},
    { payload: { code: 'abc', state: 'xyz' } },
    { payload: 'code=abc&state=xyz', type: 'application/x-www-form-urlencoded' },
    { payload: '{', type: 'application/json' },
    { payload: 'SAMLResponse', type: 'text/plain' },
  ];
  for (const { payload, type } of bodies) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/sso/okta/callback', payload, headers: type ? { 'content-type': type } : {} });
    assertError(res, 501, 'not_implemented');
  }
});

test('me in user paths: GET /v1/users/me is the caller, equal to GET /v1/users/{own id}; an API key has no me (400 user_token_required)', async () => {
  const user = await createUser(t);
  const token = (await loginRes(t, user)).json().access_token;
  const me = await get(t, '/v1/users/me', token);
  assert.equal(me.statusCode, 200, me.body);
  const byId = await get(t, `/v1/users/${user.id}`, token);
  assert.deepEqual(me.json(), byId.json());
  const key = await createApiKey(t, { permissions: ['users.list', 'users.manage'] });
  for (const url of ['/v1/users/me', '/v1/users/me/sessions']) {
    assertError(await t.app.inject({ method: 'GET', url, headers: bearer(key.secret) }), 400, 'user_token_required');
  }
});

test('a soft-deleted user\'s email is reusable at once (Part A Status transitions, DELETE: "email reusable at once"): the account signed up again on it signs in with its own password, and the deleted account\'s password gets 401 invalid_credentials and starts no session', async () => {
  const admin = await createApiKey(t, { permissions: ['users.manage'] });
  const old = await createUser(t, { email: uniqueEmail('reused') });
  const deleted = await t.app.inject({ method: 'DELETE', url: `/v1/users/${old.id}`, headers: bearer(admin.secret) });
  assert.ok([200, 204].includes(deleted.statusCode), deleted.body);
  const again = await post(t, '/v1/auth/signup', { email: old.email, password: 'second-account-pass-41' });
  assert.equal(again.statusCode, 201, again.body);
  const newId = again.json().user_id;
  assert.notEqual(newId, old.id);
  for (let i = 0; i < 2; i++) {
    const res = await post(t, '/v1/auth/login', { email: old.email, password: 'second-account-pass-41' });
    assert.equal(res.statusCode, 200, res.body);
    assertAuthSession(res.json(), newId);
    assertError(await loginRes(t, old), 401, 'invalid_credentials');
  }
  assert.equal(await sessionCount(old.id), 0, 'the deleted account starts no session');
  const [identity] = await sql(t, `SELECT cardinality(recent_failures) AS n, locked_until FROM identities WHERE user_id = $1 AND method = 'password'`, [old.id]);
  assert.deepEqual({ ...identity }, { n: 0, locked_until: null }, 'sign-ins on the address count nothing against the deleted account');
});

test('login matches the email case-insensitively', async () => {
  const user = await createUser(t, { email: uniqueEmail('MixedCase') });
  const res = await post(t, '/v1/auth/login', { email: user.email.toUpperCase(), password: PASSWORD });
  assert.equal(res.statusCode, 200, res.body);
  assert.equal(res.json().user_id, user.id);
});

test('the email matches in ASCII case only: `İ` (U+0130) and the Kelvin sign (U+212A), which PostgreSQL lowers to `i` and `k`, name no account for login, forgot-password or the verification re-send', async () => {
  const user = await createUser(t, { email: uniqueEmail('kim') });
  const unverified = await createUser(t, { email: uniqueEmail('kim') });
  await sql(t, 'UPDATE users SET email_verified = false WHERE id = $1', [unverified.id]);
  const lookAlike = (email: string) => email.replace('k', '\u212a').replace('i', '\u0130');
  const typed = lookAlike(user.email);
  assert.notEqual(typed, user.email);

  assertError(await post(t, '/v1/auth/login', { email: typed, password: PASSWORD }), 401, 'invalid_credentials');
  assert.equal(await sessionCount(user.id), 0, 'no session for the account of kim@…');
  assert.equal((await sql(t, `SELECT recent_failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]))[0].recent_failures.length, 0, "the account's lockout counts nothing");

  assert.equal((await post(t, '/v1/auth/password/forgot', { email: typed })).statusCode, 202);
  assert.deepEqual(await mailsTo(t, user.email), [], 'no reset link for the account of kim@…');
  assert.equal((await post(t, '/v1/auth/email/verify/resend', { email: lookAlike(unverified.email) })).statusCode, 202);
  assert.deepEqual(await mailsTo(t, unverified.email), [], 'no verification mail for the account of kim@…');

  // The address itself, in any ASCII case, still works.
  assert.equal((await post(t, '/v1/auth/login', { email: user.email.toUpperCase(), password: PASSWORD })).statusCode, 200);
});

test('"lock 15 minutes" to the second (stopped clock): 5 failures at one instant lock the identity (and an unknown email alike); 1 s before the 15 minutes end the right password gets 429 too_many_attempts with Retry-After 1, at 15 minutes exactly it signs in (the unknown email gets 401 invalid_credentials)', async () => {
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const nobody = uniqueEmail('nobody');
    for (let i = 0; i < 5; i++) {
      assertError(await fail(user), 401, 'invalid_credentials');
      assertError(await post(t, '/v1/auth/login', { email: nobody, password: WRONG }), 401, 'invalid_credentials');
    }
    t.clock.advance(15 * 60 - 1);
    for (const locked of [await loginRes(t, user), await post(t, '/v1/auth/login', { email: nobody, password: WRONG })]) {
      assertError(locked, 429, 'too_many_attempts');
      assert.equal(locked.headers['retry-after'], '1');
    }
    t.clock.advance(1);
    const res = await loginRes(t, user);
    assert.equal(res.statusCode, 200, res.body);
    assertAuthSession(res.json(), user.id);
    // An unknown email is treated alike: its lock is over too.
    assertError(await post(t, '/v1/auth/login', { email: nobody, password: WRONG }), 401, 'invalid_credentials');
  });
});

test('"5 failed attempts within 15 minutes" to the second (stopped clock): 4 failures 15 minutes before a fifth no longer count, the right password then signs in; 4 failures 1 s less than 15 minutes before it lock', async () => {
  await withStoppedClock(t, async () => {
    const outside = await createUser(t);
    for (let i = 0; i < 4; i++) assertError(await fail(outside), 401, 'invalid_credentials');
    t.clock.advance(15 * 60);
    assertError(await fail(outside), 401, 'invalid_credentials');
    assert.equal((await loginRes(t, outside)).statusCode, 200);

    const inside = await createUser(t);
    for (let i = 0; i < 4; i++) assertError(await fail(inside), 401, 'invalid_credentials');
    t.clock.advance(15 * 60 - 1);
    assertError(await fail(inside), 401, 'invalid_credentials');
    assertError(await loginRes(t, inside), 429, 'too_many_attempts');
  });
});
