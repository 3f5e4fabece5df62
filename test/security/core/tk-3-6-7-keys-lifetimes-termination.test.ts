// TK-3, TK-6, TK-7: the JWKS across rotations and the issuer string, every token lifetime at ±1 s on
// the service clock, and every way a session ends (the next call, the refresh and the sessions list).
// Key overlap after one rotation is proven in test/foundation/credentials.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, type JSONWebKeySet } from 'jose';
import { buildTestApp, withStoppedClock, type TestApp } from '../../helpers/app.js';
import { bearer, createApiKey, createUser, login, type TestUser } from '../../helpers/fixtures.js';
import { assertError, createMfaUser, mfaChallenge, post } from '../../auth/support.js';
import { assertStatus, call, grant, platformKey } from '../../access/support.js';
import { CODES, oauthApp, REDIRECT, tokenReq } from '../../oauth/support.js';
import { bootAnother, figure } from './support.js';
import { KEY_PUBLISH_AHEAD_SECONDS } from '../../../src/auth/signing-keys.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const DAY = 86400;
// RFC 7636 Appendix B.
const VERIFIER = 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk';
const challenge = { code_challenge: 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM', code_challenge_method: 'S256' };
type Session = { access_token: string; refresh_token: string; session_id: string };
const me = (token: string) => t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) });
const refresh = (rt: string) => post(t, '/v1/auth/token/refresh', { refresh_token: rt });
const jwks = async (app = t) => assertStatus(await app.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }), 200) as JSONWebKeySet;
async function signIn(user: TestUser): Promise<Session> {
  return assertStatus(await post(t, '/v1/auth/login', { email: user.email, password: user.password }), 200);
}

test('TK-3 "unique kids" across two rotations, none with private members; a key retired over 24 h ago leaves the JWKS', async () => {
  const k1 = decodeProtectedHeader(await login(t, await createUser(t))).kid!;
  const k2 = (await t.deps.keys.rotate()).kid;
  const k3 = (await t.deps.keys.rotate()).kid;
  const published = (await jwks()).keys;
  const kids = published.map((k) => k.kid!);
  assert.equal(new Set(kids).size, kids.length, `duplicate kids: ${kids}`);
  for (const kid of [k1, k2, k3]) assert.ok(kids.includes(kid), kid);
  for (const key of published) for (const member of ['d', 'p', 'q', 'dp', 'dq', 'qi']) assert.ok(!(member in key), `${key.kid} publishes ${member}`);
  // The rotated keys stop signing KEY_PUBLISH_AHEAD_SECONDS (7 minutes) after the rotation; 24 h later they leave the JWKS.
  t.clock.advance(DAY + KEY_PUBLISH_AHEAD_SECONDS + 60);
  await t.deps.keys.reload();
  assert.deepEqual((await jwks()).keys.map((k) => k.kid), [k3], 'only the current key after the 24 h grace');
  figure('TK-3', 'overlap window: 24 h after a rotation (the retired key leaves the JWKS)');
});

test('TK-3 [MP] a rotated key is in every process\'s JWKS before any process signs with it, and all switch at the same instant; a process that missed the reload signs with a key its peers still publish', async () => {
  const b = await bootAnother(t, {});
  const c = await bootAnother(t, {});
  try {
    const user = await createUser(t);
    const kidOf = async (app: TestApp) => decodeProtectedHeader(await login(app, user)).kid!;
    const published = async (app: TestApp) => (await jwks(app)).keys.map((k) => k.kid!);
    const oldKid = await kidOf(t);
    const { kid: newKid } = await t.deps.keys.rotate();
    // B learns of the key at its next reload (at most a minute: the background timer); C never does.
    assert.ok(!(await published(b)).includes(newKid), '!(await published(b)).includes(newKid)');
    await b.deps.keys.reload();
    for (const app of [t, b]) assert.ok((await published(app)).includes(newKid), '(await published(app)).includes(newKid)');
    for (const app of [t, b, c]) assert.equal(await kidOf(app), oldKid, 'nobody signs with the new key before signs_from');
    t.clock.advance(KEY_PUBLISH_AHEAD_SECONDS);
    assert.deepEqual([await kidOf(t), await kidOf(b)], [newKid, newKid]);
    // C, which missed the reload, keeps its last key; A and B still publish it and accept its tokens.
    const fromC = await login(c, user);
    assert.equal(decodeProtectedHeader(fromC).kid, oldKid);
    for (const app of [t, b]) {
      assert.ok((await published(app)).includes(oldKid), '(await published(app)).includes(oldKid)');
      assert.equal((await app.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(fromC) })).statusCode, 200);
    }
  } finally {
    await b.close();
    await c.close();
  }
});

test('TK-3 [MP] a process meeting a kid it does not know looks in the database at once: a token of a key another process rotated in verifies there before its next timed reload', async () => {
  const b = await bootAnother(t, {});
  try {
    const user = await createUser(t);
    const { kid: newKid } = await t.deps.keys.rotate();
    t.clock.advance(KEY_PUBLISH_AHEAD_SECONDS);
    const token = await login(t, user);
    assert.equal(decodeProtectedHeader(token).kid, newKid, 'signed with the rotated key');
    assert.ok(!(await jwks(b)).keys.some((k) => k.kid === newKid), 'B has not reloaded its keys since the rotation');
    // B's last load is over a second old (its background reload comes only every minute).
    (b.deps.keys as unknown as { loadedAt: number }).loadedAt = 0;
    assert.equal((await b.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) })).statusCode, 200);
    assert.ok((await jwks(b)).keys.some((k) => k.kid === newKid), 'and publishes it from then on');
  } finally {
    await b.close();
  }
});

test('TK-3 "the discovery issuer equals PUBLIC_URL byte for byte", also for a PUBLIC_URL with a path, and so does every token\'s iss', async () => {
  const publicUrl = 'https://id.example.com/base';
  const other = await bootAnother(t, { publicUrl });
  try {
    const doc = assertStatus(await other.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' }), 200);
    assert.equal(doc.issuer, publicUrl);
    assert.equal(decodeJwt(await login(other, await createUser(other))).iss, publicUrl);
  } finally {
    await other.close();
  }
  const doc = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' }), 200);
  assert.equal(doc.issuer, t.config.publicUrl);
});

test('TK-6 lifetimes: "refused 1 s past each limit and accepted 1 s before" for the access token (900 s), refresh idle (30 d), session absolute (90 d), app token (300 s) and MFA challenge (300 s)', async () => {
  // On a stopped clock: the test's own run time on a loaded machine must not count toward the limits.
  await withStoppedClock(t, async () => {
    let verified = 0;
    // Access token: exp - iat = 900.
    const s = await signIn(await createUser(t));
    const claims = decodeJwt(s.access_token);
    assert.equal(claims.exp! - claims.iat!, 900);
    // To 1 s before exp, measured from the clock (iat is whole seconds: the token may be most of a
    // second old already, and a loaded machine takes time between the two calls).
    t.clock.advance(claims.exp! - 1 - t.clock.now().getTime() / 1000);
    assert.equal((await me(s.access_token)).statusCode, 200);
    t.clock.advance(2);
    assertError(await me(s.access_token), 401, 'unauthenticated');
    verified++;

    // Refresh idle: two sessions of one user, unused for 30 d − 1 s and 30 d + 1 s.
    const idleUser = await createUser(t);
    const [a, b] = [await signIn(idleUser), await signIn(idleUser)];
    t.clock.advance(30 * DAY - 1);
    assert.equal((await refresh(a.refresh_token)).statusCode, 200);
    t.clock.advance(2);
    assertError(await refresh(b.refresh_token), 401, 'invalid_refresh_token');
    verified++;

    // Absolute: refreshed every 29 days, the session still ends 90 days after sign-in.
    const start = t.clock.now().getTime();
    let current = (await signIn(await createUser(t))).refresh_token;
    for (let i = 0; i < 3; i++) {
      t.clock.advance(29 * DAY);
      current = assertStatus(await refresh(current), 200).refresh_token;
    }
    t.clock.advance((start + 90 * DAY * 1000 - 1000 - t.clock.now().getTime()) / 1000);
    const last = assertStatus(await refresh(current), 200);
    assert.ok(last.refresh_token_expires_in <= 1, `refresh_token_expires_in ${last.refresh_token_expires_in}`);
    t.clock.advance(2);
    assertError(await refresh(last.refresh_token), 401, 'invalid_refresh_token');
    verified++;

    // App token: exp - iat = 300; the Application's verifier accepts it at 299 s and not at 301 s.
    const admin = await platformKey(t);
    const app = await oauthApp(t, admin);
    const holder = await createUser(t);
    await grant(t, admin, holder.id, app.id);
    const appToken = assertStatus(await call(t, 'POST', '/v1/auth/app-tokens', await login(t, holder), { application_id: app.id }), 200).access_token;
    const app_claims = decodeJwt(appToken);
    assert.equal(app_claims.exp! - app_claims.iat!, 300);
    const keySet = createLocalJWKSet(await jwks());
    const at = (s: number) => ({ audience: app.id, issuer: t.config.publicUrl, algorithms: ['RS256'], currentDate: new Date((app_claims.iat! + s) * 1000) });
    await jwtVerify(appToken, keySet, at(299));
    await assert.rejects(jwtVerify(appToken, keySet, at(301)), /exp/);
    verified++;

    // MFA challenge: two challenges of one moment, answered at 299 s and 301 s.
    const { user, recoveryCodes } = await createMfaUser(t);
    const [early, late] = [await mfaChallenge(t, user), await mfaChallenge(t, user)];
    t.clock.advance(299);
    assert.equal((await post(t, '/v1/auth/mfa/verify', { mfa_token: early, recovery_code: recoveryCodes[0] })).statusCode, 200);
    t.clock.advance(2);
    assertError(await post(t, '/v1/auth/mfa/verify', { mfa_token: late, recovery_code: recoveryCodes[1] }), 401, 'invalid_credentials');
    verified++;
    figure('TK-6', `limits verified: ${verified}/5`);
  });
});

test('TK-7 termination by logout, all_sessions, suspend (POST and PATCH), delete, erasure request, admin or API-key revoke and self revoke: "on the next call, refresh fails and access tokens with a revoked sid get 401"; "the session is gone from the sessions list"', async () => {
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const key = (await createApiKey(t, { permissions: ['users.manage', 'users.list'] })).secret;
  const stale: string[] = [];
  let checked = 0;
  const assertEnded = async (name: string, userId: string, s: Session) => {
    checked++;
    const access = await me(s.access_token);
    if (access.statusCode !== 401) stale.push(`${name}: access ${access.statusCode}`);
    else assert.equal(access.json().error.code, 'unauthenticated');
    const refreshed = await refresh(s.refresh_token);
    if (refreshed.statusCode !== 401) stale.push(`${name}: refresh ${refreshed.statusCode}`);
    const list = await call(t, 'GET', `/v1/users/${userId}/sessions`, admin);
    if (list.statusCode === 200 && list.json().data.some((row: { id: string }) => row.id === s.session_id)) stale.push(`${name}: still listed`);
    else if (list.statusCode !== 200) assertError(list, 404, 'user_not_found'); // a deleted user has no list
  };
  const ending = async (name: string, end: (u: TestUser, s: Session) => Promise<{ statusCode: number; body: string }>, expected: number) => {
    const u = await createUser(t);
    const s = await signIn(u);
    const res = await end(u, s);
    assert.equal(res.statusCode, expected, `${name}: ${res.body}`);
    await assertEnded(name, u.id, s);
  };

  await ending('logout', async (_u, s) => call(t, 'POST', '/v1/auth/logout', s.access_token, {}), 204);
  {
    const u = await createUser(t);
    const [s1, s2] = [await signIn(u), await signIn(u)];
    assert.equal((await call(t, 'POST', '/v1/auth/logout', s1.access_token, { all_sessions: true })).statusCode, 204);
    await assertEnded('all_sessions (caller)', u.id, s1);
    await assertEnded('all_sessions (other session)', u.id, s2);
  }
  await ending('suspend', (u) => call(t, 'POST', `/v1/users/${u.id}/suspend`, admin, {}), 200);
  await ending('PATCH status suspended', (u) => call(t, 'PATCH', `/v1/users/${u.id}`, admin, { status: 'suspended' }), 200);
  await ending('delete', (u) => call(t, 'DELETE', `/v1/users/${u.id}`, admin), 204);
  await ending('erasure request', (u) => call(t, 'POST', `/v1/users/${u.id}/erasure-requests`, admin, {}), 202);
  await ending('admin revoke', (u, s) => call(t, 'DELETE', `/v1/users/${u.id}/sessions/${s.session_id}`, admin), 204);
  await ending('API key revoke', (u, s) => call(t, 'DELETE', `/v1/users/${u.id}/sessions/${s.session_id}`, key), 204);
  await ending('self revoke from another session', async (u, s) => {
    const keep = await signIn(u);
    const res = await call(t, 'DELETE', `/v1/users/me/sessions/${s.session_id}`, keep.access_token);
    assert.equal((await me(keep.access_token)).statusCode, 200, 'the other session lives on');
    return res;
  }, 204);
  figure('TK-7', `terminations with a live token or listing afterwards: ${stale.length} / ${checked} (staleness 0 ms: refused on the next call)`);
  assert.deepEqual(stale, []);
});

test('TK-7 a session ended by suspend or delete stays ended: after reactivation or restore its access token still gets 401, its refresh token 401 invalid_refresh_token, its app refresh token invalid_grant, and it is not listed', async () => {
  const admin = await platformKey(t);
  const revived: string[] = [];
  for (const [name, end, expected] of [
    ['suspend, then PATCH status active', (id: string) => call(t, 'POST', `/v1/users/${id}/suspend`, admin, {}), 200],
    ['delete, then restore', (id: string) => call(t, 'DELETE', `/v1/users/${id}`, admin), 204],
  ] as const) {
    const user = await createUser(t);
    const s = await signIn(user);
    const app = await oauthApp(t, admin);
    await grant(t, admin, user.id, app.id);
    const code = assertStatus(await call(t, 'POST', CODES, s.access_token, { application_id: app.id, redirect_uri: REDIRECT, ...challenge }), 201).code;
    const appRefresh = assertStatus(await tokenReq(t, { grant_type: 'authorization_code', code, code_verifier: VERIFIER, redirect_uri: REDIRECT, client_id: app.id }), 200).refresh_token;
    assert.equal((await end(user.id)).statusCode, expected, name);
    assertStatus(await call(t, 'PATCH', `/v1/users/${user.id}`, admin, { status: 'active' }), 200);
    assert.equal((await me(await login(t, user))).statusCode, 200, `${name}: the user signs in again`);
    const access = await me(s.access_token);
    if (access.statusCode !== 401) revived.push(`${name}: access ${access.statusCode}`);
    else assert.equal(access.json().error.code, 'unauthenticated');
    const refreshed = await refresh(s.refresh_token);
    if (refreshed.statusCode !== 401) revived.push(`${name}: refresh ${refreshed.statusCode}`);
    else assert.equal(refreshed.json().error.code, 'invalid_refresh_token');
    const appRefreshed = await tokenReq(t, { grant_type: 'refresh_token', refresh_token: appRefresh, client_id: app.id });
    if (appRefreshed.statusCode !== 400) revived.push(`${name}: app refresh ${appRefreshed.statusCode}`);
    else assert.equal(appRefreshed.json().error, 'invalid_grant');
    const listed = assertStatus(await call(t, 'GET', `/v1/users/${user.id}/sessions`, admin), 200).data;
    if (listed.some((row: { id: string }) => row.id === s.session_id)) revived.push(`${name}: still listed`);
  }
  assert.deepEqual(revived, []);
});
