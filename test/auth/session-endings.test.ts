// A change that ends every session of a user (suspension, password reset or change) while a sign-in
// is under way must not leave that sign-in a session (OWASP ASVS 5.0 V7.4, "nothing revives a
// session"): the sign-in that checked the old password, or an active user, gets no session.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { buildTestApp, pausedAfter as pausedAfterQuery, TEST_DATABASE_URL, type TestApp } from '../helpers/app.js';
import { bearer, createApiKey, createUser } from '../helpers/fixtures.js';
import { assertError, createMfaUser, get, latestToken, loginRes, mfaChallenge, NEW_PASSWORD, post, sql, totpCode } from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = (await createApiKey(t, { permissions: ['users.manage'] })).secret;
});
after(() => t.close());

/** The sign-in's first statement: it reads the password hash the sign-in then verifies. */
const PASSWORD_READ = 'FROM u LEFT JOIN identities i';

/** Runs `request`, and `meanwhile` right after its first query containing `fragment` (any connection scope). */
const pausedAfter = <T>(fragment: string, meanwhile: () => Promise<void>, request: () => Promise<T>) => pausedAfterQuery(t, fragment, meanwhile, request);

const liveSessions = async (userId: string) => sql(t, 'SELECT id FROM sessions WHERE user_id = $1 AND revoked_at IS NULL', [userId]);

async function resetPassword(email: string): Promise<void> {
  assert.equal((await post(t, '/v1/auth/password/forgot', { email })).statusCode, 202);
  const token = await latestToken(t, email, 'password_reset');
  assert.equal((await post(t, '/v1/auth/password/reset', { token, password: NEW_PASSWORD })).statusCode, 204);
}

test('a password reset ends every session: a sign-in that checked the old password before the reset completed gets 401 invalid_credentials and no session; the new password signs in', async () => {
  const user = await createUser(t);
  const res = await pausedAfter(PASSWORD_READ, () => resetPassword(user.email), () => loginRes(t, user));
  assertError(res, 401, 'invalid_credentials');
  assert.deepEqual(await liveSessions(user.id), []);
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200);
});

test('a password change ends the other sessions: a sign-in that checked the old password before the change completed gets 401 invalid_credentials and no session', async () => {
  const user = await createUser(t);
  const first = (await loginRes(t, user)).json();
  const res = await pausedAfter(PASSWORD_READ, async () => {
    const change = await post(t, '/v1/users/me/password', { current_password: user.password, new_password: NEW_PASSWORD }, bearer(first.access_token));
    assert.equal(change.statusCode, 204, change.body);
  }, () => loginRes(t, user));
  assertError(res, 401, 'invalid_credentials');
  assert.deepEqual((await liveSessions(user.id)).map((s) => s.id), [first.session_id]);
});

test('suspension revokes all sessions: a sign-in under way when the user is suspended gets 403 account_suspended and no session, so reactivation brings no session back; the right password is no failed attempt', async () => {
  const user = await createUser(t);
  const res = await pausedAfter(PASSWORD_READ, async () => {
    assert.equal((await t.app.inject({ method: 'POST', url: `/v1/users/${user.id}/suspend`, headers: bearer(admin), payload: {} })).statusCode, 200);
  }, () => loginRes(t, user));
  assertError(res, 403, 'account_suspended');
  assert.deepEqual(await liveSessions(user.id), []);
  const [identity] = await sql(t, `SELECT recent_failures FROM identities WHERE user_id = $1 AND method = 'password'`, [user.id]);
  assert.deepEqual(identity.recent_failures, []);
  const reactivated = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: 'active' } });
  assert.equal(reactivated.statusCode, 200, reactivated.body);
  assert.deepEqual(await liveSessions(user.id), []);
  const list = (await get(t, '/v1/users/me/sessions', (await loginRes(t, user)).json().access_token)).json();
  assert.equal(list.data.length, 1, 'only the sign-in after the reactivation');
});

test('suspension and delete end every session: an MFA sign-in whose password step came before them starts no session after the reactivation or restore (its mfa_token is 401 invalid_credentials, no session); while suspended its right code still gets 403 account_suspended; a new sign-in works', async () => {
  for (const end of ['suspended', 'deleted'] as const) {
    const { user, secret } = await createMfaUser(t);
    const mfaToken = await mfaChallenge(t, user);
    const ended = end === 'deleted'
      ? await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}`, headers: bearer(admin) })
      : await t.app.inject({ method: 'POST', url: `/v1/users/${user.id}/suspend`, headers: bearer(admin), payload: {} });
    assert.ok(ended.statusCode === 200 || ended.statusCode === 204, `${end}: ${ended.statusCode} ${ended.body}`);
    if (end === 'suspended') assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, secret) }), 403, 'account_suspended');
    const back = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: 'active' } });
    assert.equal(back.statusCode, 200, back.body);
    assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: mfaToken, code: await totpCode(t, secret) }), 401, 'invalid_credentials');
    assert.deepEqual(await liveSessions(user.id), [], `after ${end}: no session from the challenge won before it`);
    const fresh = await post(t, '/v1/auth/mfa/verify', { mfa_token: await mfaChallenge(t, user), code: await totpCode(t, secret) });
    assert.equal(fresh.statusCode, 200, fresh.body);
  }
});

test('a delete revokes all sessions: a sign-in under way when the user is deleted gets 401 invalid_credentials and no session, so a restore brings no session back', async () => {
  const user = await createUser(t);
  const res = await pausedAfter(PASSWORD_READ, async () => {
    assert.equal((await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}`, headers: bearer(admin) })).statusCode, 204);
  }, () => loginRes(t, user));
  assertError(res, 401, 'invalid_credentials');
  const restored = await t.app.inject({ method: 'PATCH', url: `/v1/users/${user.id}`, headers: bearer(admin), payload: { status: 'active' } });
  assert.equal(restored.statusCode, 200, restored.body);
  assert.deepEqual(await liveSessions(user.id), []);
});

/**
 * PostgreSQL: runs `statements` in a transaction of its own and commits it once another connection
 * waits for one of its locks (the returned promise settles then); rolls back and fails if none does.
 */
async function commitOnceWaitedFor(statements: [string, unknown[]][]): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL!, options: `-c search_path=${t.schema}` });
  await client.connect();
  const watcher = new pg.Client({ connectionString: TEST_DATABASE_URL!, options: `-c search_path=${t.schema}` });
  await watcher.connect();
  await client.query('BEGIN');
  for (const s of statements) await client.query(...s);
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const done = (async () => {
    try {
      for (let waited = 0; ; waited += 20) {
        const { rows: blocked } = await watcher.query('SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [rows[0].pid]);
        if (blocked.length) break;
        if (waited > 30_000) { // at least 30 s of polling sleeps: only a defect (nothing waits) spends it
          await client.query('ROLLBACK');
          throw new Error('nothing waited for the change');
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      await client.query('COMMIT');
    } finally {
      await client.end();
      await watcher.end();
    }
  })();
  return () => done;
}

const suspension = (userId: string): [string, unknown[]][] => [
  [`UPDATE users SET status = 'suspended', updated_at = now() WHERE id = $1`, [userId]],
  ['UPDATE sessions SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL', [userId]],
];

if (TEST_DATABASE_URL) test('PostgreSQL: a sign-in (login, mfa/verify) whose session starts while a suspension is committing waits for it and gets 403 account_suspended, no session', async () => {
  const user = await createUser(t);
  const committed = await commitOnceWaitedFor(suspension(user.id));
  const res = await loginRes(t, user);
  await committed();
  assertError(res, 403, 'account_suspended');
  assert.deepEqual(await liveSessions(user.id), []);

  const mfa = await createMfaUser(t);
  const challenge = await mfaChallenge(t, mfa.user);
  const code = await totpCode(t, mfa.secret);
  const enrolled = (await liveSessions(mfa.user.id)).length;
  const held = await commitOnceWaitedFor(suspension(mfa.user.id));
  const verified = await post(t, '/v1/auth/mfa/verify', { mfa_token: challenge, code });
  await held();
  assertError(verified, 403, 'account_suspended');
  assert.deepEqual(await liveSessions(mfa.user.id), []);
  assert.ok(enrolled >= 1);
});

if (TEST_DATABASE_URL) test('PostgreSQL: a sign-in that checked the old password and starts its session while a password reset is committing waits for it and gets 401 invalid_credentials, no session', async () => {
  const user = await createUser(t);
  let committed: () => Promise<void> = async () => undefined;
  const res = await pausedAfter(PASSWORD_READ, async () => {
    committed = await commitOnceWaitedFor([
      [`UPDATE identities SET password_hash = 'replaced', updated_at = now() WHERE user_id = $1 AND method = 'password'`, [user.id]],
      ['UPDATE sessions SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL', [user.id]],
    ]);
  }, () => loginRes(t, user));
  await committed();
  assertError(res, 401, 'invalid_credentials');
  assert.deepEqual(await liveSessions(user.id), []);
});

test('a password reset is not undone by a password change that verified the old password before the reset completed: the change gets 403 invalid_current_password and the reset\'s password stays', async () => {
  const user = await createUser(t);
  const first = (await loginRes(t, user)).json();
  const res = await pausedAfter('totp_last_step, locked_until FROM identities', () => resetPassword(user.email), () =>
    post(t, '/v1/users/me/password', { current_password: user.password, new_password: 'attacker-chosen-passphrase-5' }, bearer(first.access_token)));
  assertError(res, 403, 'invalid_current_password');
  assertError(await loginRes(t, user, 'attacker-chosen-passphrase-5'), 401, 'invalid_credentials');
  assert.equal((await loginRes(t, user, NEW_PASSWORD)).statusCode, 200);
  assert.equal((await sql(t, `SELECT 1 FROM audit_events WHERE action = 'user.password_changed' AND target_user_id = $1`, [user.id])).length, 0);
});

test('concurrent sign-ins of one account (as many as its five attempt slots) each get their own session: none fails on another holding the identity (PostgreSQL: no lock upgrade between them)', async () => {
  const user = await createUser(t);
  for (let round = 0; round < 10; round++) {
    const replies = await Promise.all(Array.from({ length: 5 }, () => loginRes(t, user)));
    assert.deepEqual(replies.map((r) => r.statusCode), Array(5).fill(200), replies.map((r) => r.body).join('\n'));
  }
  assert.equal((await liveSessions(user.id)).length, 50);
});
