// AU-4: the login lockout, single process. 5 failures in 15 minutes lock the password identity for
// 15 minutes (Part A "Login lockout"; docs/decisions.md "Throttles"). Argon2 evaluations are counted
// as the verify tasks the Argon2 pool receives, so "locked" can be checked as "no password evaluated".
import { passwordEvaluations } from './argon2-probe.js';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, withStoppedClock, type TestApp } from '../../helpers/app.js';
import { createUser, PASSWORD, uniqueEmail, type TestUser } from '../../helpers/fixtures.js';
import { assertError, sql, type InjectResponse } from '../../helpers/http.js';
import { newId } from '../../../src/ids.js';
import { figure } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const WRONG = 'not-the-password-99';
const LOCK = 15 * 60;

function attempt(email: string, password: string, mode: 'live' | 'test' = 'live'): Promise<InjectResponse> {
  return t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password, test_mode: mode === 'test' } });
}
const wrong = (u: Pick<TestUser, 'email' | 'mode'>) => attempt(u.email, WRONG, u.mode);
const right = (u: Pick<TestUser, 'email' | 'mode'>) => attempt(u.email, PASSWORD, u.mode);

/** 429 too_many_attempts with a Retry-After in (0, max]; returns Retry-After. */
function assertLocked(res: InjectResponse, max = LOCK): number {
  assertError(res, 429, 'too_many_attempts');
  const retryAfter = Number(res.headers['retry-after']);
  assert.ok(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= max, `Retry-After ${res.headers['retry-after']}`);
  return retryAfter;
}

/** Five failures, each answered 401 (the fifth sets the lock; "5 failures in 15 min, then 429"). */
async function fiveFailures(u: Pick<TestUser, 'email' | 'mode'>, spacingSeconds = 0): Promise<void> {
  for (let i = 0; i < 5; i++) {
    assertError(await wrong(u), 401, 'invalid_credentials');
    if (spacingSeconds && i < 4) t.clock.advance(spacingSeconds);
  }
}

const sessions = async (userId: string) => (await sql(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1', [userId]))[0].n;

test('AU-4 five failures within 15 minutes lock the identity: 429 too_many_attempts with Retry-After, the correct password refused too, without evaluating any password', async () => {
  const user = await createUser(t);
  const start = passwordEvaluations();
  await fiveFailures(user, 3 * 60 - 1); // spread over ~12 minutes: still inside one window
  assert.equal(passwordEvaluations() - start, 5, 'five failures, five evaluations');
  const locked = passwordEvaluations();
  const retryAfter = assertLocked(await right(user));
  assert.ok(retryAfter > LOCK - 5, `a fresh lock: Retry-After ${retryAfter}`);
  assertLocked(await wrong(user));
  assert.equal(passwordEvaluations(), locked, 'no password is evaluated while locked');
  assert.equal(await sessions(user.id), 0);
});

test('AU-4 the lock lasts 15 minutes on the service clock: 1 s before its end still 429 (Retry-After counting down), 1 s after it the correct password signs in', async () => {
  // On a stopped clock: the test's own run time on a loaded machine must not count toward the limits.
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    await fiveFailures(user);
    assertLocked(await right(user));
    t.clock.advance(LOCK - 1);
    const nearly = assertLocked(await right(user), 2);
    assert.ok(nearly <= 2, 'nearly <= 2');
    t.clock.advance(2);
    const res = await right(user);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal(await sessions(user.id), 1);
  });
});

test('AU-4 a success resets the counter: 4 failures, a success, 4 failures leave the identity unlocked', async () => {
  const user = await createUser(t);
  for (let i = 0; i < 4; i++) assertError(await wrong(user), 401, 'invalid_credentials');
  assert.equal((await right(user)).statusCode, 200);
  for (let i = 0; i < 4; i++) assertError(await wrong(user), 401, 'invalid_credentials');
  assert.equal((await right(user)).statusCode, 200);
  const [row] = await sql(t, `SELECT locked_until, cardinality(recent_failures) AS n FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.equal(row.locked_until, null);
  assert.equal(row.n, 0);
});

test('AU-4 per identity and per mode: a locked live identity leaves the test-mode user with the same email, another user and the same user\'s SSO identity unaffected', async () => {
  const email = uniqueEmail('both');
  const live = await createUser(t, { email, mode: 'live' });
  const testUser = await createUser(t, { email, mode: 'test' });
  await sql(t, `INSERT INTO identities (id, user_id, method, created_at) VALUES ($1, $2, 'sso', $3)`, [newId('idn'), live.id, t.clock.now()]);
  const bystander = await createUser(t);
  await fiveFailures(live);
  assertLocked(await right(live));
  // Same email in test mode: its own identity, its own counter.
  const res = await right(testUser);
  assert.equal(res.statusCode, 200, res.body);
  assert.equal((await right(bystander)).statusCode, 200);
  // Four failures in test mode do not add to (or reach) the live lock, and do not lock test mode.
  for (let i = 0; i < 4; i++) assertError(await wrong(testUser), 401, 'invalid_credentials');
  assert.equal((await right(testUser)).statusCode, 200);
  // The SSO identity carries no lock (the spec: the counter never blocks the same user's SSO login).
  const [sso] = await sql(t, `SELECT locked_until, cardinality(recent_failures) AS n FROM identities WHERE user_id = $1 AND method = 'sso'`, [live.id]);
  assert.equal(sso.locked_until, null);
  assert.equal(sso.n, 0);
  const callback = await t.app.inject({ method: 'POST', url: '/v1/auth/sso/acme/callback', payload: {} });
  assert.notEqual(callback.statusCode, 429, 'the SSO path is not locked');
  assertError(callback, 501, 'not_implemented');
  // And the other way round: locking the test-mode identity leaves live locked only by its own count.
  await fiveFailures(testUser);
  assertLocked(await right(testUser));
  t.clock.advance(LOCK + 1);
  assert.equal((await right(live)).statusCode, 200, 'the live lock ended on its own schedule');
  assert.equal((await right(testUser)).statusCode, 200);
});

test('AU-4 twenty parallel wrong guesses evaluate exactly 5 passwords before the lock; all answers are 401 or 429 and the lock holds', async () => {
  const user = await createUser(t);
  const start = passwordEvaluations();
  const results = await Promise.all(Array.from({ length: 20 }, () => wrong(user)));
  const evaluated = passwordEvaluations() - start;
  figure('AU-4', `password evaluations before lock under parallelism: ${evaluated} (must be 5)`);
  assert.equal(evaluated, 5, 'each guess beyond the fifth must be refused without evaluating the password');
  for (const r of results) {
    if (r.statusCode === 401) assertError(r, 401, 'invalid_credentials');
    else assertLocked(r, LOCK + 1); // a request that started just before the lock counts from its own start
  }
  assert.ok(results.filter((r) => r.statusCode === 401).length <= 5, results.map((r) => r.statusCode).join(','));
  assertLocked(await right(user));
  assert.equal(await sessions(user.id), 0);
});

test('AU-4 no enumeration oracle: an unknown email, an invited user without a password and an SSO-only user answer exactly like a known account, 429 after 5 tries', async () => {
  const known = await createUser(t);
  const invited = await createUser(t, { status: 'invited' });
  const ssoOnly = await createUser(t);
  await sql(t, `INSERT INTO identities (id, user_id, method, created_at) VALUES ($1, $2, 'sso', $3)`, [newId('idn'), ssoOnly.id, t.clock.now()]);
  await sql(t, `DELETE FROM identities WHERE user_id = $1 AND method = 'password'`, [ssoOnly.id]);
  const accounts: Record<string, string> = { known: known.email, unknown: uniqueEmail('nobody'), invited: invited.email, sso_only: ssoOnly.email };
  const shape = (r: InjectResponse) => `${r.statusCode} ${r.json().error?.code}${r.headers['retry-after'] ? ' retry-after' : ''}`;
  const seen: Record<string, string[]> = {};
  for (const [name, email] of Object.entries(accounts)) {
    seen[name] = [];
    for (let i = 0; i < 7; i++) seen[name].push(shape(await attempt(email, WRONG)));
  }
  const differing = Object.keys(accounts).filter((name) => JSON.stringify(seen[name]) !== JSON.stringify(seen.known));
  figure('AU-4', `accounts whose answers differ from a known account over 7 tries: ${differing.length} / 3 (${differing.join(', ') || 'none'})`);
  assert.equal(seen.known[6], '429 too_many_attempts retry-after');
  assert.deepEqual(seen.unknown, seen.known, 'unknown email');
  assert.deepEqual(seen.invited, seen.known, 'invited without a password');
  assert.deepEqual(seen.sso_only, seen.known, 'SSO-only');
});
