// Issue 3: login is bounded by Argon2id and "the hashing runs off the event loop so other requests
// keep flowing". The hashes run on a thread pool of their own (src/auth/passwords.ts). Catalog LD-1:
// excess sign-ins get 503 instead of queueing until their clients time out.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Piscina } from 'piscina';
import { availableParallelism } from 'node:os';
import { passwordWorkCapacity } from '../../src/auth/passwords.js';
import { buildCapturedApp, type CapturedApp } from '../security/core/support.js';
import { bearer, PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { assertAuthSession, assertError, createMfaUser, mfaChallenge, post, sql, totpCode } from './support.js';
import { withStoppedClock } from '../helpers/app.js';

// While `gate` is set, every verification task waits for it before it reaches the Argon2 pool, so
// the test decides how many sign-ins are in flight.
let gate: Promise<void> | null = null;
let held = 0;
const realRun = Piscina.prototype.run;
Piscina.prototype.run = async function run(this: Piscina, task: unknown, ...rest: unknown[]) {
  if (gate && (task as { op?: string } | null)?.op === 'verify') {
    held++;
    await gate;
  }
  return (realRun as (...args: unknown[]) => Promise<unknown>).call(this, task, ...rest);
} as typeof realRun;

let t: CapturedApp;
before(async () => {
  t = await buildCapturedApp({}, undefined, 'info');
});
after(() => t.close());

test('Argon2id runs off the event loop: requests keep being answered while sign-ins hash', async () => {
  const email = uniqueEmail('pool');
  assert.equal((await post(t, '/v1/auth/signup', { email, password: PASSWORD })).statusCode, 201);

  // Twelve sign-ins (twelve Argon2id verifications: four of the account, eight of unknown emails
  // against the dummy hash) in flight; meanwhile GET /health is asked again and again. Were the hash on
  // the event loop, no answer could come before the sign-ins are done. (Four were too few on a fast
  // machine: they hashed in the time of two answers.)
  let signInsDone = false;
  const signIns = Promise.all(
    Array.from({ length: 12 }, (_, i) => post(t, '/v1/auth/login', i % 3 === 0 ? { email, password: PASSWORD } : { email: uniqueEmail('nobody'), password: PASSWORD })),
  ).then((all) => {
    signInsDone = true;
    return all;
  });
  let answeredMeanwhile = 0;
  while (!signInsDone) {
    await new Promise((resolve) => setImmediate(resolve));
    const res = await t.app.inject({ method: 'GET', url: '/health' });
    assert.equal(res.statusCode, 200);
    if (!signInsDone) answeredMeanwhile++;
  }
  assert.deepEqual((await signIns).map((r) => r.statusCode), Array.from({ length: 12 }, (_, i) => (i % 3 === 0 ? 200 : 401)));
  assert.ok(answeredMeanwhile >= 3, `GET /health answered ${answeredMeanwhile} times while twelve sign-ins hashed`);
});

/** The answer, which must come while the admitted verifications are still held. */
function answeredWhileHeld<T>(answer: Promise<T>): Promise<T> {
  return Promise.race([
    answer,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error('not answered while the admitted sign-ins wait: queued instead of refused')), 20_000).unref()),
  ]);
}

/**
 * Fills the process's password work with as many failing sign-ins (unknown emails) as it admits, their
 * verifications held at the gate, runs `meanwhile`, checks that nothing it sent reached the Argon2 pool,
 * then lets the held sign-ins finish (each 401 invalid_credentials).
 */
async function whilePasswordWorkFull(meanwhile: () => Promise<void>): Promise<void> {
  // README, Running past one machine: "beyond 32 password requests ... per core in flight" (the documented figure, not the constant).
  const capacity = availableParallelism() * 32;
  assert.equal(passwordWorkCapacity(), capacity, 'the password-work capacity is 32 per core');
  let release!: () => void;
  gate = new Promise((resolve) => {
    release = resolve;
  });
  held = 0;
  try {
    const admitted = Array.from({ length: capacity }, () => post(t, '/v1/auth/login', { email: uniqueEmail('nobody'), password: PASSWORD }));
    for (let waited = 0; held < capacity; waited++) {
      assert.ok(waited < 3000, `only ${held} of ${capacity} sign-ins reached the Argon2 pool`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await meanwhile();
    assert.equal(held, capacity, 'no refused request reached the Argon2 pool');
    release();
    for (const res of await Promise.all(admitted)) assertError(res, 401, 'invalid_credentials');
  } finally {
    gate = null;
    release?.();
  }
}

test('LD-1 sign-ins beyond the process\'s password-work capacity (README: "beyond 32 password requests … per core in flight") get 503 service_unavailable with Retry-After at once, take no lockout slot, and the admitted ones are served', async () => {
  const email = uniqueEmail('capacity');
  assert.equal((await post(t, '/v1/auth/signup', { email, password: PASSWORD })).statusCode, 201);
  // Failing sign-ins for unknown emails fill the process; their verifications wait.
  await whilePasswordWorkFull(async () => {
    // Six wrong passwords for a real account meanwhile: each is answered while the others still wait.
    const refused = await answeredWhileHeld(Promise.all(Array.from({ length: 6 }, () => post(t, '/v1/auth/login', { email, password: `${PASSWORD}x` }))));
    for (const res of refused) {
      assertError(res, 503, 'service_unavailable');
      assert.equal(res.headers['retry-after'], '1');
    }
    // A sign-up is password work too.
    assertError(await answeredWhileHeld(post(t, '/v1/auth/signup', { email: uniqueEmail('later'), password: PASSWORD })), 503, 'service_unavailable');
  });
  // Six refused wrong guesses would have locked the account had they taken lockout slots; the room
  // is free again.
  const res = await post(t, '/v1/auth/login', { email, password: PASSWORD });
  assert.equal(res.statusCode, 200, res.body);
  assertAuthSession(res.json());

  // Shedding is an expected condition under load, not a fault: each refusal is one info line with its
  // code and request id, no warning or error and no stack (an overloaded process does not log more).
  const shed = t.logs.filter((line) => line.code === 'service_unavailable');
  assert.equal(shed.length, 7, JSON.stringify(t.logs));
  for (const line of shed) {
    assert.equal(line.level, 30);
    assert.match(String(line.reqId), /^req_/);
    assert.equal(line.err, undefined);
  }
  assert.deepEqual(t.logs.filter((line) => line.reqId !== undefined && line.level >= 40), []);
});

test('LD-1 a TOTP confirm is password work too (it hashes ten recovery codes with Argon2id): beyond the process\'s capacity it gets 503 service_unavailable with Retry-After at once and changes nothing (the code is not spent); the same code confirms once there is room', async () => {
  const email = uniqueEmail('confirm');
  const signup = await post(t, '/v1/auth/signup', { email, password: PASSWORD });
  assert.equal(signup.statusCode, 201, signup.body);
  const token = signup.json().access_token;
  const headers = { authorization: `Bearer ${token}` };
  const begin = await t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp', headers });
  assert.equal(begin.statusCode, 200, begin.body);
  const confirm = (code: string) => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/confirm', headers, payload: { code } });
  await withStoppedClock(t, async () => {
    const code = await totpCode(t, begin.json().secret);
    await whilePasswordWorkFull(async () => {
      const refused = await answeredWhileHeld(confirm(code));
      assertError(refused, 503, 'service_unavailable');
      assert.equal(refused.headers['retry-after'], '1');
    });
    const [identity] = await sql(t, `SELECT totp_confirmed_at, totp_last_step FROM identities WHERE user_id = $1 AND method = 'password'`, [signup.json().user_id]);
    assert.deepEqual(identity, { totp_confirmed_at: null, totp_last_step: null }, 'the refused confirm changed nothing');
    const ok = await confirm(code);
    assert.equal(ok.statusCode, 200, ok.body);
    assert.equal(ok.json().recovery_codes.length, 10);
  });
});

test('LD-1 a recovery code is password work too (it is hashed with Argon2id to be looked up): mfa/verify and TOTP disable with one, beyond the process\'s capacity, get 503 service_unavailable with Retry-After at once and change nothing (no challenge attempt, no lockout slot, the code unused); the same code works once there is room', async () => {
  const { user, token, recoveryCodes } = await createMfaUser(t);
  const mfaToken = await mfaChallenge(t, user);
  const verify = () => post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, recovery_code: recoveryCodes[0] });
  const disable = () => t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: bearer(token), payload: { recovery_code: recoveryCodes[1] } });
  const state = async () => ({
    challenge: await sql(t, `SELECT attempts, used_at FROM one_time_tokens WHERE user_id = $1 AND kind = 'mfa_challenge'`, [user.id]),
    identity: await sql(t, `SELECT recent_failures, locked_until, totp_confirmed_at IS NOT NULL AS mfa FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]),
    used: await sql(t, 'SELECT count(*)::int AS n FROM recovery_codes WHERE user_id = $1 AND used_at IS NOT NULL', [user.id]),
  });
  const before = await state();
  await whilePasswordWorkFull(async () => {
    for (const refused of await answeredWhileHeld(Promise.all([verify(), disable()]))) {
      assertError(refused, 503, 'service_unavailable');
      assert.equal(refused.headers['retry-after'], '1');
    }
  });
  assert.deepEqual(await state(), before, 'the refused requests changed nothing');
  const signedIn = await verify();
  assert.equal(signedIn.statusCode, 200, signedIn.body);
  assertAuthSession(signedIn.json(), user.id);
  assert.equal((await disable()).statusCode, 204);
});
