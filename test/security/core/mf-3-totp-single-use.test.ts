// MF-3: TOTP codes and recovery codes are single use (RFC 6238 §5.2, NIST 800-63B §5.1.4.2, ASVS
// 6.5.1), single process: sequential reuse, concurrent races on two mfa_tokens, older steps after a
// newer one, and recovery codes stored as hashes only.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { hashRecoveryCode } from '../../../src/auth/passwords.js';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { assertError, sql, type InjectResponse } from '../../helpers/http.js';
import { alignToStep, createMfaUser, jwtPayload, mfaChallenge, totpCode, type MfaUser } from '../../auth/support.js';
import { figure, raceTransactions } from './support.js';
import { systemCtx } from '../../../src/context.js';
import { issueOneTimeToken } from '../../../src/auth/one-time-tokens.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const TOTP_RACES = 50;
let races = 0;
let doubleAccepts = 0;

const verify = (mfaToken: string, body: { code?: string; recovery_code?: string }): Promise<InjectResponse> =>
  t.app.inject({ method: 'POST', url: '/v1/auth/mfa/verify', payload: { mfa_token: mfaToken, ...body } });

/**
 * An mfa_token minted the way a correct password login issues one (login.ts challenge), without the
 * Argon2 work: the races below are about /mfa/verify, and the password step is covered above.
 */
async function mintedChallenge(u: MfaUser): Promise<string> {
  const [identity] = await sql(t, `SELECT id FROM identities WHERE user_id = $1 AND method = 'password'`, [u.user.id]);
  const ctx = systemCtx(t.deps, u.user.mode);
  return ctx.db.transaction((tx) => issueOneTimeToken(tx, { ...ctx, db: tx, now: t.clock.now() }, { kind: 'mfa_challenge', userId: u.user.id, data: { identity_id: identity.id } }));
}

const sessions = async (userId: string) => (await sql(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1', [userId]))[0].n;

/**
 * One race: the same credential on two fresh mfa_tokens at once; exactly one may win. The two
 * requests' transactions start together (raceTransactions), so both have read the identity and
 * checked the code before either records its use: only an atomic use can refuse the second.
 */
async function race(u: MfaUser, body: { code?: string; recovery_code?: string }): Promise<InjectResponse[]> {
  const [a, b] = [await mintedChallenge(u), await mintedChallenge(u)];
  const barrier = raceTransactions(t.database, 2);
  let results: InjectResponse[];
  try {
    results = await Promise.all([verify(a, body), verify(b, body)]);
  } finally {
    barrier.restore();
  }
  assert.equal(barrier.arrived(), 2, 'both requests reached their transaction: a real race');
  races++;
  const wins = results.filter((r) => r.statusCode === 200).length;
  if (wins > 1) doubleAccepts += wins - 1;
  assert.equal(wins, 1, `one winner, got ${results.map((r) => `${r.statusCode} ${r.body.slice(0, 80)}`).join(' | ')}`);
  assertError(results.find((r) => r.statusCode !== 200)!, 401, 'invalid_credentials');
  return results;
}

test('MF-3 the same valid TOTP code on two logins within one step: the first signs in (amr pwd+otp), the second gets 401 invalid_credentials and no session', async () => {
  const u = await createMfaUser(t);
  const code = await totpCode(t, u.secret);
  const sessionsBefore = await sessions(u.user.id);
  const first = await verify(await mfaChallenge(t, u.user), { code });
  assert.equal(first.statusCode, 200, first.body);
  assert.deepEqual(jwtPayload(first.json().access_token).amr, ['pwd', 'otp']);
  t.clock.advance(10); // still inside the same 30-second step
  races++;
  const second = await verify(await mfaChallenge(t, u.user), { code });
  if (second.statusCode === 200) doubleAccepts++;
  assertError(second, 401, 'invalid_credentials');
  assert.equal(await sessions(u.user.id), sessionsBefore + 1);
});

test(`MF-3 the same TOTP code raced on two mfa_tokens, ${TOTP_RACES} races: exactly one success each`, async () => {
  const u = await createMfaUser(t);
  for (let i = 0; i < TOTP_RACES; i++) {
    const code = await totpCode(t, u.secret);
    await race(u, { code });
    alignToStep(t, 5); // the next race uses the next step's code
  }
  const [row] = await sql(t, `SELECT totp_last_step FROM identities WHERE user_id = $1 AND method = 'password'`, [u.user.id]);
  assert.equal(Number(row.totp_last_step), Math.floor(t.clock.now().getTime() / 30_000) - 1, 'the last used step moved forward with each race');
});

test('MF-3 an older step after a newer one was used is refused: after the next step\'s code (drift +1), the current and the previous step\'s codes get 401; the used step stays used when its time comes', async () => {
  const u = await createMfaUser(t);
  const next = await totpCode(t, u.secret, 1);
  const current = await totpCode(t, u.secret, 0);
  const previous = await totpCode(t, u.secret, -1);
  assert.equal((await verify(await mfaChallenge(t, u.user), { code: next })).statusCode, 200);
  for (const code of [current, previous]) {
    races++;
    const res = await verify(await mfaChallenge(t, u.user), { code });
    if (res.statusCode === 200) doubleAccepts++;
    assertError(res, 401, 'invalid_credentials');
  }
  alignToStep(t, 5); // now the "next" step is the current one
  races++;
  const reused = await verify(await mfaChallenge(t, u.user), { code: next });
  if (reused.statusCode === 200) doubleAccepts++;
  assertError(reused, 401, 'invalid_credentials');
  alignToStep(t, 5);
  const fresh = await verify(await mfaChallenge(t, u.user), { code: await totpCode(t, u.secret) });
  assert.equal(fresh.statusCode, 200, 'a newer step still works');
});

test('MF-3 a recovery code works once: reused as typed, upper-cased or spaced it gets 401; raced on two mfa_tokens exactly one wins', async () => {
  const u = await createMfaUser(t);
  const [code, ...rest] = u.recoveryCodes;
  const first = await verify(await mfaChallenge(t, u.user), { recovery_code: code });
  assert.equal(first.statusCode, 200, first.body);
  assert.deepEqual(jwtPayload(first.json().access_token).amr, ['pwd', 'recovery_code']);
  for (const variant of [code, code.toUpperCase(), ` ${code} `, code.replace('-', ' - ')]) {
    races++;
    const res = await verify(await mfaChallenge(t, u.user), { recovery_code: variant });
    if (res.statusCode === 200) doubleAccepts++;
    assertError(res, 401, 'invalid_credentials');
  }
  // The four refused variants counted toward the identity's lockout (wrong codes do); the races start
  // from a clean counter, so that both requests of each race are evaluated.
  await sql(t, `UPDATE identities SET recent_failures = '{}', locked_until = NULL WHERE user_id = $1`, [u.user.id]);
  // Concurrent uses of one unused code: 8 races over the remaining codes (one left for the check below).
  for (const c of rest.slice(0, 8)) await race(u, { recovery_code: c });
  const [row] = await sql(t, 'SELECT count(*) FILTER (WHERE used_at IS NULL)::int AS unused, count(*)::int AS total FROM recovery_codes WHERE user_id = $1', [u.user.id]);
  assert.deepEqual(row, { unused: 1, total: 10 });
});

test('MF-3 recovery codes are stored hashed: 10 Argon2id rows per user (salted with the user), and no plaintext code appears anywhere in the database', async () => {
  const u = await createMfaUser(t);
  const rows = await sql(t, 'SELECT * FROM recovery_codes WHERE user_id = $1', [u.user.id]);
  assert.equal(rows.length, 10);
  const expected = (await Promise.all(u.recoveryCodes.map((c) => hashRecoveryCode(u.user.id, c)))).sort();
  assert.deepEqual(rows.map((r) => r.code_hash).sort(), expected);
  for (const r of rows) assert.match(r.code_hash, /^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
  // Every table of the service, as text, searched for any of the codes (with or without the dash).
  const tables = await sql<{ name: string }>(t, `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`);
  assert.ok(tables.length > 10, 'the service tables are visible');
  const pattern = u.recoveryCodes.flatMap((c) => [c, c.replace('-', '')]).join('|');
  const leaks: string[] = [];
  for (const { name } of tables) {
    const [hit] = await sql(t, `SELECT count(*)::int AS n FROM "${name}" x WHERE x::text ~* $1`, [pattern]);
    if (hit.n > 0) leaks.push(`${name}: ${hit.n}`);
  }
  assert.deepEqual(leaks, [], 'plaintext recovery codes in the database');
  figure('MF-3', `double-accepts over ${races} races and reuses: ${doubleAccepts}`);
  assert.equal(doubleAccepts, 0);
});

test('MF-3 "exactly one success in every case" across endpoints: a TOTP code or recovery code used to sign in is refused at mfa/totp/disable (422 invalid_mfa_code, TOTP stays on), as is an older step after a newer one; a code used at disable does not complete a pending challenge', async () => {
  const disable = (token: string, body: { code?: string; recovery_code?: string }) =>
    t.app.inject({ method: 'POST', url: '/v1/users/me/mfa/totp/disable', headers: { authorization: `Bearer ${token}` }, payload: body });
  const totpOn = async (userId: string) => (await sql(t, `SELECT totp_confirmed_at FROM identities WHERE user_id = $1 AND method = 'password'`, [userId]))[0].totp_confirmed_at !== null;
  const cases: [string, (u: MfaUser) => Promise<[{ code?: string; recovery_code?: string }, { code?: string; recovery_code?: string }]>][] = [
    ['the same TOTP code', async (u) => { const code = await totpCode(t, u.secret); return [{ code }, { code }]; }],
    ['an older step after the next one', async (u) => [{ code: await totpCode(t, u.secret, 1) }, { code: await totpCode(t, u.secret) }]],
    ['the same recovery code', async (u) => [{ recovery_code: u.recoveryCodes[0] }, { recovery_code: u.recoveryCodes[0] }]],
  ];
  for (const [name, credentials] of cases) {
    const u = await createMfaUser(t);
    const [signInWith, disableWith] = await credentials(u);
    const res = await verify(await mintedChallenge(u), signInWith);
    assert.equal(res.statusCode, 200, `${name}: ${res.body}`);
    assertError(await disable(res.json().access_token, disableWith), 422, 'invalid_mfa_code');
    assert.equal(await totpOn(u.user.id), true, `${name}: TOTP stays on`);
  }
  const u = await createMfaUser(t);
  const code = await totpCode(t, u.secret);
  const pending = await mintedChallenge(u);
  assert.equal((await disable(u.token, { code })).statusCode, 204);
  assertError(await verify(pending, { code }), 401, 'invalid_credentials');
  assert.equal(await sessions(u.user.id), 1, 'only the enrolling session');
});
