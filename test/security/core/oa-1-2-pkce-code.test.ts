// OA-1 (PKCE, RFC 7636 / RFC 9700 §2.1.1) and OA-2 (authorization code single use, as the
// conformance suite's oidcc-codereuse and oidcc-codereuse-30seconds), single process.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { assertInvalid, assertStatus, call, platformKey, sql, type AppFixture } from '../../access/support.js';
import { assertOAuthError, authorize, codeGrant, member, oauthApp, refreshGrant, REDIRECT, tokenReq, verifyAppToken, type Member } from '../../oauth/support.js';
import { figure, raceTransactions } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
let user: Member;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin);
  user = await member(t, admin, app.id);
});
after(() => t.close());

const s256 = (verifier: string) => createHash('sha256').update(verifier, 'ascii').digest('base64url');
const codeBody = (extra: Record<string, unknown>) => ({ application_id: app.id, redirect_uri: REDIRECT, code_challenge_method: 'S256', ...extra });
/** Issues a code for this challenge (201 asserted). */
async function codeWith(challenge: string): Promise<string> {
  return assertStatus(await authorize(t, user.token, codeBody({ code_challenge: challenge })), 201).code;
}
const exchange = (code: string, verifier: string | undefined, extra: Record<string, unknown> = {}) => {
  const body: Record<string, unknown> = { ...codeGrant({ code, verifier: verifier ?? '' }, app.id), ...extra };
  if (verifier === undefined) delete body.code_verifier;
  return tokenReq(t, body);
};
const tokensOfCode = async (code: string) =>
  (await sql(t, `SELECT r.id FROM oauth_refresh_tokens r JOIN oauth_authorization_codes c ON c.id = r.authorization_code_id WHERE c.code_hash = $1`, [
    createHash('sha256').update(code).digest('hex'),
  ])).length;

// Tallies for the figures.
let badPairs = 0;
let badAccepted = 0;
let extraSuccesses = 0;
let refreshAfterReplay = 0;
let refreshUsableAfterReplay = 0;

/** A refresh token of a replayed code: must be invalid_grant (tallied for the figure first). */
async function assertRefreshDead(refreshToken: string): Promise<void> {
  refreshAfterReplay++;
  const res = await tokenReq(t, refreshGrant(refreshToken, app.id));
  if (res.statusCode === 200) refreshUsableAfterReplay++;
  assertOAuthError(res, 'invalid_grant');
}

test('OA-1 the RFC 7636 Appendix B vector round-trips: verifier dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk, challenge E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', async () => {
  const verifier = 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk';
  const challenge = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM';
  assert.equal(s256(verifier), challenge);
  const code = await codeWith(challenge);
  const [row] = await sql(t, 'SELECT code_challenge FROM oauth_authorization_codes WHERE code_hash = $1', [createHash('sha256').update(code).digest('hex')]);
  assert.equal(row.code_challenge, challenge, 'stored verbatim');
  const body = assertStatus(await exchange(code, verifier), 200);
  assert.equal((await verifyAppToken(t, body.access_token, app.id)).sub, user.id);
  // A 128-character verifier (the maximum) round-trips too.
  const long = 'A1-._~'.repeat(21) + 'zz';
  assert.equal(long.length, 128);
  assertStatus(await exchange(await codeWith(s256(long)), long), 200);
});

test('OA-1 only S256 is accepted: plain, a missing or mis-cased method, and a missing challenge (downgrade) are 422 and issue no code', async () => {
  const verifier = 'x'.repeat(43);
  const codesBefore = (await sql(t, 'SELECT count(*)::int AS n FROM oauth_authorization_codes WHERE user_id = $1', [user.id]))[0].n;
  const cases: [string, Record<string, unknown>, string][] = [
    ['plain', { code_challenge: verifier, code_challenge_method: 'plain' }, 'code_challenge_method'],
    ['PLAIN', { code_challenge: verifier, code_challenge_method: 'PLAIN' }, 'code_challenge_method'],
    ['s256 lower case', { code_challenge: s256(verifier), code_challenge_method: 's256' }, 'code_challenge_method'],
    ['method missing', { code_challenge: s256(verifier), code_challenge_method: undefined }, 'code_challenge_method'],
    ['method empty', { code_challenge: s256(verifier), code_challenge_method: '' }, 'code_challenge_method'],
    ['challenge missing (verifier-only downgrade)', { code_challenge: undefined }, 'code_challenge'],
    ['challenge missing, method plain', { code_challenge: undefined, code_challenge_method: 'plain' }, 'code_challenge'],
    ['challenge empty', { code_challenge: '' }, 'code_challenge'],
    ['challenge null', { code_challenge: null }, 'code_challenge'],
  ];
  for (const [name, extra] of cases) {
    badPairs++;
    const body: Record<string, unknown> = codeBody(extra);
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const res = await authorize(t, user.token, body);
    if (res.statusCode === 201) badAccepted++;
    assert.equal(res.statusCode, 422, `${name}: ${res.body}`);
    assertInvalid(res, extra.code_challenge === undefined || extra.code_challenge === '' || extra.code_challenge === null ? 'code_challenge' : 'code_challenge_method');
  }
  const codesAfter = (await sql(t, 'SELECT count(*)::int AS n FROM oauth_authorization_codes WHERE user_id = $1', [user.id]))[0].n;
  assert.equal(codesAfter, codesBefore, 'no code was issued');
  // Structurally, no code can exist without a challenge.
  const [column] = await sql(t, `SELECT is_nullable FROM information_schema.columns WHERE table_name = 'oauth_authorization_codes' AND column_name = 'code_challenge' AND table_schema = current_schema()`);
  assert.equal(column.is_nullable, 'NO');
  // The discovery document advertises S256 only (RFC 9700 §2.1.1).
  const discovery = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' }), 200);
  assert.deepEqual(discovery.code_challenge_methods_supported, ['S256']);
});

test('OA-1 challenge length and charset: 42 and 129 characters and non-base64url characters are 422; 43 and 128 are accepted but only the matching verifier redeems', async () => {
  const bad = ['a'.repeat(42), 'a'.repeat(129), `${'a'.repeat(42)}+`, `${'a'.repeat(42)}/`, `${s256('q'.repeat(43)).slice(0, 42)}=`, `${'a'.repeat(42)}.`, `${'a'.repeat(42)}~`, `${'a'.repeat(42)} `, `${'a'.repeat(41)}é`, `${'a'.repeat(42)}\n`];
  for (const challenge of bad) {
    badPairs++;
    const res = await authorize(t, user.token, codeBody({ code_challenge: challenge }));
    if (res.statusCode === 201) badAccepted++;
    assertInvalid(res, 'code_challenge');
  }
  // 43 = a real S256 digest; 128 = syntactically allowed, but no S256 verifier can produce it.
  const v43 = 'B'.repeat(43);
  const code43 = await codeWith(s256(v43));
  badPairs++;
  const wrong43 = await exchange(code43, 'C'.repeat(43));
  if (wrong43.statusCode === 200) badAccepted++;
  assertOAuthError(wrong43, 'invalid_grant');
  assertStatus(await exchange(code43, v43), 200);

  const challenge128 = 'c'.repeat(128);
  const code128 = await codeWith(challenge128);
  for (const verifier of [challenge128, 'c'.repeat(43), 'D'.repeat(128)]) {
    badPairs++;
    const res = await exchange(code128, verifier);
    if (res.statusCode === 200) badAccepted++;
    assertOAuthError(res, 'invalid_grant');
  }
  assert.equal(await tokensOfCode(code128), 0);
});

test('OA-1 verifiers: wrong ones are invalid_grant, malformed ones (42/129 characters, bad charset) invalid_request even when their S256 matches, a missing one invalid_request; none issues a token or burns the code', async () => {
  const verifier = 'E'.repeat(20) + '-._~' + 'f'.repeat(20);
  const code = await codeWith(s256(verifier));
  const wrong = [`${verifier.slice(0, -1)}g`, verifier.toUpperCase(), s256(verifier), `${verifier} `.trim() + 'x'];
  for (const w of wrong) {
    badPairs++;
    const res = await exchange(code, w);
    if (res.statusCode === 200) badAccepted++;
    assertOAuthError(res, 'invalid_grant');
  }
  // Malformed verifiers whose digest is the challenge: refused on form (RFC 7636 §4.1), never matched.
  for (const malformed of ['h'.repeat(42), 'h'.repeat(129), `${'h'.repeat(42)}+`, `${'h'.repeat(42)}/`, `${'h'.repeat(42)}=`, `${'h'.repeat(42)} `, `${'h'.repeat(42)}é`]) {
    badPairs++;
    const c = await codeWith(s256(malformed));
    const res = await exchange(c, malformed);
    if (res.statusCode === 200) badAccepted++;
    assertOAuthError(res, 'invalid_request');
    assert.equal(await tokensOfCode(c), 0);
  }
  // Challenge without verifier: missing, empty, null, a number.
  for (const value of [undefined, '', null, 12345]) {
    badPairs++;
    const res = value === undefined ? await exchange(code, undefined) : await exchange(code, undefined, { code_verifier: value });
    if (res.statusCode === 200) badAccepted++;
    assertOAuthError(res, 'invalid_request');
  }
  assert.equal(await tokensOfCode(code), 0, 'no token issued by a refused exchange');
  // The code was not burnt by the refusals: its own verifier still redeems it, once.
  assertStatus(await exchange(code, verifier), 200);
  figure('OA-1', `bad pairs accepted: ${badAccepted} / ${badPairs}`);
  assert.equal(badAccepted, 0);
});

/** A full exchange: the token response of one fresh code. */
async function redeemed(): Promise<{ code: string; verifier: string; tokens: any }> {
  const verifier = `v${Math.random().toString(36).slice(2)}`.padEnd(43, 'k');
  const code = await codeWith(s256(verifier));
  return { code, verifier, tokens: assertStatus(await exchange(code, verifier), 200) };
}

async function reuseAudits(): Promise<number> {
  return (await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'oauth.authorization_code_reused' AND target_user_id = $1`, [user.id]))[0].n;
}

test('OA-2 oidcc-codereuse: a second redemption is invalid_grant and revokes the refresh token of the first; its app token is refused by the platform and expires within 300 s', async () => {
  const audits = await reuseAudits();
  const first = await redeemed();
  const replay = await exchange(first.code, first.verifier);
  if (replay.statusCode === 200) extraSuccesses++;
  assertOAuthError(replay, 'invalid_grant');
  await assertRefreshDead(first.tokens.refresh_token);
  const rows = await sql(t, 'SELECT revoked_at FROM oauth_refresh_tokens r JOIN oauth_authorization_codes c ON c.id = r.authorization_code_id WHERE c.code_hash = $1', [
    createHash('sha256').update(first.code).digest('hex'),
  ]);
  assert.equal(rows.length, 1);
  assert.ok(rows.every((r) => r.revoked_at !== null), 'every refresh token of the grant is revoked');
  assert.equal(await reuseAudits(), audits + 1, 'audited oauth.authorization_code_reused');
  // The app access token is a stateless JWT verified by the Application: the platform refuses it as a
  // credential, and it stops verifying at exp (300 s after issue, per the documented decision).
  assert.equal((await call(t, 'GET', '/v1/users/me', first.tokens.access_token)).statusCode, 401);
  const claims = await verifyAppToken(t, first.tokens.access_token, app.id);
  assert.ok(claims.exp! - claims.iat! <= 300, 'claims.exp! - claims.iat! <= 300');
  t.clock.advance(301);
  try {
    await assert.rejects(verifyAppToken(t, first.tokens.access_token, app.id));
  } finally {
    t.clock.advance(-301);
  }
});

test('OA-2 oidcc-codereuse-30seconds: redeem, rotate the refresh token, replay the code 30 s later: invalid_grant, and the whole chain (rotated child too) stops working', async () => {
  const first = await redeemed();
  const rotated = assertStatus(await tokenReq(t, refreshGrant(first.tokens.refresh_token, app.id)), 200);
  t.clock.advance(30);
  const replay = await exchange(first.code, first.verifier);
  if (replay.statusCode === 200) extraSuccesses++;
  assertOAuthError(replay, 'invalid_grant');
  for (const rt of [rotated.refresh_token, first.tokens.refresh_token]) await assertRefreshDead(rt);
  const rows = await sql(t, 'SELECT revoked_at FROM oauth_refresh_tokens r JOIN oauth_authorization_codes c ON c.id = r.authorization_code_id WHERE c.code_hash = $1', [
    createHash('sha256').update(first.code).digest('hex'),
  ]);
  assert.equal(rows.length, 2);
  assert.ok(rows.every((r) => r.revoked_at !== null), 'rows.every((r) => r.revoked_at !== null)');
  // Replaying again later (still inside the code's 60 s, and after it) never succeeds either.
  for (const wait of [20, 60]) {
    t.clock.advance(wait);
    const again = await exchange(first.code, first.verifier);
    if (again.statusCode === 200) extraSuccesses++;
    assertOAuthError(again, 'invalid_grant');
  }
  // The documented decision: the platform session itself stays.
  assertStatus(await call(t, 'GET', '/v1/users/me', user.token), 200);
});

test('OA-2 ten simultaneous redemptions of one code in one process (all past the lookup before any uses it): exactly one success, and the replays revoke its refresh token', async () => {
  const verifier = 'r'.repeat(50);
  const code = await codeWith(s256(verifier));
  // All ten have looked the code up (unused) before any of them tries to use it.
  const barrier = raceTransactions(t.database, 10);
  let results;
  try {
    results = await Promise.all(Array.from({ length: 10 }, () => exchange(code, verifier)));
  } finally {
    barrier.restore();
  }
  assert.equal(barrier.arrived(), 10, 'all ten reached the atomic use: a real race');
  const wins = results.filter((r) => r.statusCode === 200);
  for (const r of results.filter((x) => x.statusCode !== 200)) assertOAuthError(r, 'invalid_grant');
  extraSuccesses += Math.max(0, wins.length - 1);
  assert.equal(wins.length, 1, results.map((r) => r.statusCode).join(','));
  assert.equal(await tokensOfCode(code), 1, 'one refresh token issued');
  await assertRefreshDead(wins[0].json().refresh_token);
  figure('OA-2', `extra successes: ${extraSuccesses}; refresh tokens still usable after a replay: ${refreshUsableAfterReplay} / ${refreshAfterReplay}`);
  assert.equal(extraSuccesses, 0);
  assert.equal(refreshUsableAfterReplay, 0);
});
