import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import {
  SignJWT,
  base64url,
  createLocalJWKSet,
  decodeJwt,
  decodeProtectedHeader,
  exportSPKI,
  generateKeyPair,
  importJWK,
  jwtVerify,
  type JWK,
  type JSONWebKeySet,
} from 'jose';
import { atOneInstant, buildTestApp, withStatementsSettled, withStoppedClock, type TestApp } from '../helpers/app.js';
import { PASSWORD, bearer, createApiKey, createUser, login, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import { KEY_PUBLISH_AHEAD_SECONDS } from '../../src/auth/signing-keys.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const ISSUER = 'http://localhost:8080';
const ACCESS_CLAIMS = ['amr', 'aud', 'email_verified', 'exp', 'iat', 'iss', 'jti', 'sid', 'sub', 'test_mode'];

const sha256Hex = (s: string) => createHash('sha256').update(s).digest('hex');
const me = (token: string) => t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) });
const getUser = (token: string, id: string) => t.app.inject({ method: 'GET', url: `/v1/users/${id}`, headers: bearer(token) });

async function jwks(): Promise<JSONWebKeySet> {
  const res = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
  assert.equal(res.statusCode, 200);
  return res.json();
}

async function loginRes(user: Pick<TestUser, 'email' | 'password'>, testMode: boolean) {
  return t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: user.password, test_mode: testMode } });
}

/** 401 in the envelope with the RFC 6750 invalid_token challenge. */
function assertInvalidToken(res: { statusCode: number; headers: Record<string, unknown>; json(): any }, label = '') {
  assert.equal(res.statusCode, 401, label);
  assert.match(String(res.headers['www-authenticate']), /error="invalid_token"/, label);
  assert.equal(res.json().error.code, 'unauthenticated', label);
}

async function keyRow(id: string) {
  const { rows } = await t.database.scoped('system').query('SELECT * FROM api_keys WHERE id = $1', [id]);
  return rows[0];
}

// ---------------------------------------------------------------------------------------------
// Signing keys, JWKS and the platform access token
// ---------------------------------------------------------------------------------------------

test('signing keys are published at the JWKS document as RSA keys with a kid (no private parts)', async () => {
  const { keys } = await jwks();
  assert.ok(keys.length >= 1, 'keys.length >= 1');
  for (const k of keys) {
    assert.equal(k.kty, 'RSA');
    assert.equal(typeof k.kid, 'string');
    assert.ok(k.kid!.length > 0, 'k.kid!.length > 0');
    assert.equal(typeof k.n, 'string');
    assert.equal(typeof k.e, 'string');
    for (const privatePart of ['d', 'p', 'q', 'dp', 'dq', 'qi']) assert.equal((k as Record<string, unknown>)[privatePart], undefined, privatePart);
  }
});

test('docs/decisions.md "Signing keys are RSA-2048 (RS256)": every published key is an RS256 RSA key with a 2048-bit modulus', async () => {
  const { keys } = await jwks();
  assert.ok(keys.length >= 1, 'keys.length >= 1');
  for (const k of keys) {
    assert.deepEqual([k.kty, k.alg], ['RSA', 'RS256'], k.kid);
    assert.equal(Buffer.from(k.n as string, 'base64url').length * 8, 2048, `${k.kid}: modulus bits`);
  }
});

test('the platform access token is a JWT RS256 that verifies against the JWKS and carries exactly the claims of Part A, no permissions', async () => {
  const user = await createUser(t, { roles: ['superadmin'] });
  const res = await loginRes(user, false);
  assert.equal(res.statusCode, 200);
  const session = res.json();
  const header = decodeProtectedHeader(session.access_token);
  assert.equal(header.alg, 'RS256');

  const keySet = createLocalJWKSet(await jwks());
  const { payload } = await jwtVerify(session.access_token, keySet, {
    algorithms: ['RS256'],
    issuer: ISSUER,
    audience: 'platform',
    currentDate: t.clock.now(),
  });
  assert.deepEqual(Object.keys(payload).sort(), ACCESS_CLAIMS);
  assert.equal(payload.iss, t.config.publicUrl);
  assert.equal(payload.iss, ISSUER);
  assert.equal(payload.aud, 'platform');
  assert.equal(payload.sub, user.id);
  assert.equal(payload.sid, session.session_id);
  assert.match(String(payload.sid), /^ses_[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.deepEqual(payload.amr, ['pwd']);
  assert.equal(payload.email_verified, true);
  assert.equal(payload.test_mode, false);
  assert.equal(typeof payload.iat, 'number');
  assert.equal(payload.exp, payload.iat! + 900);
  assert.equal(session.expires_in, 900);
  assert.match(String(payload.jti), /^atk_[0-9A-HJKMNP-TV-Z]{26}$/);
  // Even a superadmin's token carries no permission or role claims (the exact claim list above).
  for (const v of Object.values(payload)) assert.doesNotMatch(JSON.stringify(v), /users\.(manage|list)/);
});

test('every access token gets a fresh atk_ jti', async () => {
  const user = await createUser(t);
  const a = decodeJwt(await login(t, user));
  const b = decodeJwt(await login(t, user));
  assert.notEqual(a.jti, b.jti);
  assert.notEqual(a.sid, b.sid, 'every login creates a session');
});

test('the discovery document lists issuer, jwks_uri, token_endpoint and authorization_endpoint', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' });
  assert.equal(res.statusCode, 200);
  const doc = res.json();
  assert.equal(doc.issuer, ISSUER);
  assert.equal(doc.jwks_uri, `${ISSUER}/.well-known/jwks.json`);
  assert.equal(doc.token_endpoint, `${ISSUER}/v1/auth/oauth/token`);
  // The authorization endpoint is the hosted sign-in page (operations.md: "The hosted sign-in page under /signin").
  assert.equal(doc.authorization_endpoint, `${ISSUER}/signin`);
  // Fields OpenID Connect Discovery 1.0 §3 marks REQUIRED in an openid-configuration document.
  assert.ok(doc.response_types_supported.includes('code'), 'response_types_supported');
  assert.ok(Array.isArray(doc.subject_types_supported) && doc.subject_types_supported.length > 0, 'subject_types_supported');
  assert.deepEqual(doc.id_token_signing_alg_values_supported, ['RS256']);
  // The JWKS it points at is served at that path.
  const jwksRes = await t.app.inject({ method: 'GET', url: new URL(doc.jwks_uri).pathname });
  assert.equal(jwksRes.statusCode, 200);
  assert.ok(Array.isArray(jwksRes.json().keys), 'Array.isArray(jwksRes.json().keys)');
});

// ---------------------------------------------------------------------------------------------
// Invalid access tokens: 401 with error="invalid_token"
// ---------------------------------------------------------------------------------------------

test('a token with alg none is refused with 401 invalid_token', async () => {
  const { token } = await userToken(t);
  const [, payload] = token.split('.');
  const kid = decodeProtectedHeader(token).kid;
  for (const alg of ['none', 'None', 'NONE']) {
    const header = base64url.encode(JSON.stringify({ alg, typ: 'JWT', kid }));
    assertInvalidToken(await me(`${header}.${payload}.`), alg);
  }
  // The genuine token still works, so the refusal is about the algorithm.
  assert.equal((await me(token)).statusCode, 200);
});

test('a token HS256-signed with the public key (algorithm confusion) is refused with 401 invalid_token', async () => {
  const { token } = await userToken(t);
  const claims = decodeJwt(token);
  const kid = decodeProtectedHeader(token).kid!;
  const jwk = (await jwks()).keys.find((k) => k.kid === kid)!;
  const pem = await exportSPKI((await importJWK(jwk, 'RS256')) as CryptoKey);
  const secrets = [pem, JSON.stringify(jwk), jwk.n!];
  for (const secret of secrets) {
    const forged = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT', kid }).sign(new TextEncoder().encode(secret));
    assertInvalidToken(await me(forged), secret.slice(0, 20));
  }
});

test('a token for another audience is refused with 401 invalid_token', async () => {
  const { token } = await userToken(t);
  const { sub, sid, jti, amr, email_verified, test_mode } = decodeJwt(token) as Record<string, any>;
  // Signed with the service's own current key, valid session: only the audience is wrong.
  for (const audience of ['app_other', 'platform-admin', '']) {
    const wrongAud = await t.deps.keys.sign({ sub, sid, jti, amr, email_verified, test_mode }, audience, 900);
    assert.equal(decodeJwt(wrongAud).aud, audience);
    assertInvalidToken(await me(wrongAud), `aud ${audience}`);
  }
  const rightAud = await t.deps.keys.sign({ sub, sid, jti, amr, email_verified, test_mode }, 'platform', 900);
  assert.equal((await me(rightAud)).statusCode, 200, 'same claims with the platform audience verify');
});

test('a token from another issuer or signed by an unknown key is refused with 401 invalid_token', async () => {
  const { token } = await userToken(t);
  const claims = decodeJwt(token);
  const kid = decodeProtectedHeader(token).kid!;
  // The service's real private key, but a foreign issuer.
  const { rows } = await t.database.scoped('system').query<{ private_jwk: string }>('SELECT private_jwk FROM signing_keys WHERE kid = $1', [kid]);
  const servicePrivate = await importJWK(JSON.parse(t.deps.secrets.open(rows[0].private_jwk, `signing_key:${kid}`)) as JWK, 'RS256');
  const foreignIssuer = await new SignJWT({ ...claims, iss: 'https://evil.example' })
    .setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid })
    .sign(servicePrivate);
  assertInvalidToken(await me(foreignIssuer), 'foreign iss');
  // Right issuer and kid, but a key the service never made.
  const { privateKey } = await generateKeyPair('RS256');
  const unknownKey = await new SignJWT(claims).setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid }).sign(privateKey);
  assertInvalidToken(await me(unknownKey), 'unknown key');
});

test('a token whose payload was tampered with is refused with 401 invalid_token', async () => {
  const { token } = await userToken(t);
  const [header, payload, signature] = token.split('.');
  const claims = JSON.parse(new TextDecoder().decode(base64url.decode(payload)));
  const variants = [
    { ...claims, exp: claims.exp + 86400 },
    { ...claims, jti: 'atk_01ARZ3NDEKTSV4RRFFQ69G5FAV' },
    { ...claims, email_verified: !claims.email_verified },
    { ...claims, perms: ['users.manage'] },
  ];
  for (const v of variants) {
    const tampered = `${header}.${base64url.encode(JSON.stringify(v))}.${signature}`;
    assertInvalidToken(await me(tampered), JSON.stringify(v).slice(0, 60));
  }
  assert.equal((await me(token)).statusCode, 200, 'the untampered token works');
});

test('a revoked session (logout) makes its access token fail at once with 401', async () => {
  const { user, token } = await userToken(t);
  assert.equal((await me(token)).statusCode, 200);
  const out = await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(token), payload: {} });
  assert.equal(out.statusCode, 204);
  assertInvalidToken(await me(token));
  const { rows } = await t.database.scoped('system').query('SELECT revoked_at FROM sessions WHERE id = $1', [decodeJwt(token).sid]);
  assert.ok(rows[0].revoked_at instanceof Date, 'rows[0].revoked_at instanceof Date');
  // Only that session: the user can sign in again and use the new token.
  assert.equal((await me(await login(t, user))).statusCode, 200);
});

// ---------------------------------------------------------------------------------------------
// API keys
// ---------------------------------------------------------------------------------------------

test('an API key secret is stored only as its SHA-256 hash, never in any column', async () => {
  const target = await createUser(t);
  const key = await createApiKey(t, { permissions: ['users.list'] });
  assert.ok(key.secret.startsWith('plat_live_'), 'key.secret.startsWith(\'plat_live_\')');
  const row = await keyRow(key.id);
  assert.equal(row.secret_hash, sha256Hex(key.secret));
  assert.match(row.secret_hash, /^[0-9a-f]{64}$/);
  assert.equal(row.secret_hint, key.secret.slice(-4));
  const { rows } = await t.database.scoped('system').query<{ j: string }>('SELECT row_to_json(k)::text AS j FROM api_keys k WHERE id = $1', [key.id]);
  const secretBody = key.secret.slice('plat_live_'.length);
  assert.ok(!rows[0].j.includes(key.secret), 'full secret stored');
  assert.ok(!rows[0].j.includes(secretBody), 'secret body stored');
  // The hash is what the credential resolves against.
  assert.equal((await getUser(key.secret, target.id)).statusCode, 200);
});

test('a valid platform key with users.list can fetch a live user', async () => {
  const target = await createUser(t);
  const key = await createApiKey(t, { permissions: ['users.list'] });
  const res = await getUser(key.secret, target.id);
  assert.equal(res.statusCode, 200);
  const body = res.json();
  assert.equal(body.id, target.id);
  assert.equal(body.email, target.email);
  assert.equal(body.test_mode, false);
});

test('the Bearer auth-scheme is case-insensitive (RFC 7235 section 2.1) for access tokens and API keys alike', async () => {
  const { user, token } = await userToken(t);
  const key = await createApiKey(t, { permissions: ['users.list'] });
  for (const scheme of ['bearer', 'BEARER', 'bEaReR']) {
    const own = await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { authorization: `${scheme} ${token}` } });
    assert.equal(own.statusCode, 200, `${scheme} with an access token: ${own.body}`);
    assert.equal(own.json().id, user.id);
    const read = await t.app.inject({ method: 'GET', url: `/v1/users/${user.id}`, headers: { authorization: `${scheme} ${key.secret}` } });
    assert.equal(read.statusCode, 200, `${scheme} with an API key: ${read.body}`);
    assert.equal(read.json().id, user.id);
  }
});

test('a revoked API key gets 401', async () => {
  const target = await createUser(t);
  const key = await createApiKey(t, { permissions: ['users.list'] });
  assert.equal((await getUser(key.secret, target.id)).statusCode, 200);
  await t.database.scoped('system').query('UPDATE api_keys SET revoked_at = $2 WHERE id = $1', [key.id, t.clock.now()]);
  assertInvalidToken(await getUser(key.secret, target.id));
});

test('an expired API key behaves as revoked (401)', async () => {
  const target = await createUser(t);
  const past = await createApiKey(t, { permissions: ['users.list'], expiresAt: new Date(t.clock.now().getTime() - 1000) });
  assertInvalidToken(await getUser(past.secret, target.id), 'expires_at in the past');

  // Reaching expires_at makes a working key behave as revoked.
  const soon = await createApiKey(t, { permissions: ['users.list'], expiresAt: new Date(t.clock.now().getTime() + 60_000) });
  assert.equal((await getUser(soon.secret, target.id)).statusCode, 200);
  t.clock.advance(61);
  assertInvalidToken(await getUser(soon.secret, target.id), 'expires_at reached');
});

test('a plat_test_ secret on a live key, or a plat_live_ secret on a test key, gets 401', async () => {
  const liveTarget = await createUser(t);
  const testTarget = await createUser(t, { mode: 'test' });
  // Secret minted test (plat_test_), row switched to live.
  const a = await createApiKey(t, { permissions: ['users.list'], mode: 'test' });
  await t.database.scoped('system').query('UPDATE api_keys SET test_mode = false WHERE id = $1', [a.id]);
  assert.ok(a.secret.startsWith('plat_test_'), 'a.secret.startsWith(\'plat_test_\')');
  assertInvalidToken(await getUser(a.secret, liveTarget.id), 'plat_test_ on live row');
  assertInvalidToken(await getUser(a.secret, testTarget.id), 'plat_test_ on live row (test user)');
  // Secret minted live (plat_live_), row switched to test.
  const b = await createApiKey(t, { permissions: ['users.list'], mode: 'live' });
  await t.database.scoped('system').query('UPDATE api_keys SET test_mode = true WHERE id = $1', [b.id]);
  assert.ok(b.secret.startsWith('plat_live_'), 'b.secret.startsWith(\'plat_live_\')');
  assertInvalidToken(await getUser(b.secret, liveTarget.id), 'plat_live_ on test row');
  assertInvalidToken(await getUser(b.secret, testTarget.id), 'plat_live_ on test row (test user)');
});

test('API key last_used_at is set on use and updated at most once a minute: a use exactly a minute after the last write moves it', async () => {
  const target = await createUser(t);
  const key = await createApiKey(t, { permissions: ['users.list'] });
  assert.equal((await keyRow(key.id)).last_used_at, null);
  // The write is off the request's path: each use waits for its UPDATE to settle (no 3 s poll that a
  // loaded machine outlasts), on a stopped clock (only advance() moves it), so the instants are exact
  // instead of within a 5 s tolerance of the test's run time.
  const LAST_USED = /UPDATE api_keys SET last_used_at/;
  await withStoppedClock(t, async () => {
    const firstUse = t.clock.now();
    await withStatementsSettled(t, LAST_USED, async () => assert.equal((await getUser(key.secret, target.id)).statusCode, 200));
    const first = await keyRow(key.id);
    assert.ok(first.last_used_at instanceof Date, 'last_used_at set after use');
    assert.equal(first.last_used_at.getTime(), firstUse.getTime(), 'last_used_at is the instant of the use');

    // Within the minute: further uses do not rewrite it.
    t.clock.advance(30);
    await withStatementsSettled(t, LAST_USED, async () => {
      assert.equal((await getUser(key.secret, target.id)).statusCode, 200);
      assert.equal((await getUser(key.secret, target.id)).statusCode, 200);
    });
    const second = await keyRow(key.id);
    assert.equal(second.last_used_at.getTime(), first.last_used_at.getTime(), 'not rewritten within a minute');

    // A minute after the last write the next use moves it: two writes a minute apart are at most once a minute.
    t.clock.advance(30);
    await withStatementsSettled(t, LAST_USED, async () => assert.equal((await getUser(key.secret, target.id)).statusCode, 200));
    const third = await keyRow(key.id);
    assert.equal(third.last_used_at.getTime(), first.last_used_at.getTime() + 60_000, 'updated a minute later, to the instant of that use');
  });
});

test('"me" with an API key gets 400 user_token_required', async () => {
  const key = await createApiKey(t, { permissions: ['users.list', 'users.manage'] });
  for (const url of ['/v1/users/me', '/v1/users/me/sessions']) {
    const res = await t.app.inject({ method: 'GET', url, headers: bearer(key.secret) });
    assert.equal(res.statusCode, 400, url);
    assert.equal(res.json().error.code, 'user_token_required', url);
  }
});

// ---------------------------------------------------------------------------------------------
// Test mode: test credentials see only test rows, live credentials only live rows
// ---------------------------------------------------------------------------------------------

test('a test-mode key cannot see a live user (404 user_not_found) and can see a test user', async () => {
  const liveUser = await createUser(t);
  const testUser = await createUser(t, { mode: 'test' });
  const key = await createApiKey(t, { permissions: ['users.list'], mode: 'test' });
  assert.ok(key.secret.startsWith('plat_test_'), 'key.secret.startsWith(\'plat_test_\')');
  const live = await getUser(key.secret, liveUser.id);
  assert.equal(live.statusCode, 404);
  assert.equal(live.json().error.code, 'user_not_found');
  const testRes = await getUser(key.secret, testUser.id);
  assert.equal(testRes.statusCode, 200);
  assert.equal(testRes.json().id, testUser.id);
  assert.equal(testRes.json().test_mode, true);
});

test('a live key cannot see a test user (404 user_not_found)', async () => {
  const testUser = await createUser(t, { mode: 'test' });
  const key = await createApiKey(t, { permissions: ['users.list', 'users.manage'] });
  const res = await getUser(key.secret, testUser.id);
  assert.equal(res.statusCode, 404);
  assert.equal(res.json().error.code, 'user_not_found');
});

test("a test user's token carries test_mode true and works on /v1/users/me", async () => {
  const testUser = await createUser(t, { mode: 'test' });
  const res = await loginRes(testUser, true);
  assert.equal(res.statusCode, 200);
  const token = res.json().access_token;
  assert.equal(decodeJwt(token).test_mode, true);
  const meRes = await me(token);
  assert.equal(meRes.statusCode, 200);
  assert.equal(meRes.json().id, testUser.id);
  assert.equal(meRes.json().test_mode, true);
  // A test user's token cannot reach live users, even ones it names.
  const liveUser = await createUser(t);
  const cross = await getUser(token, liveUser.id);
  assert.equal(cross.statusCode, 404);
  assert.equal(cross.json().error.code, 'user_not_found');
});

test("login with test_mode false for a test user's email gets 401 invalid_credentials", async () => {
  const testUser = await createUser(t, { mode: 'test' });
  const res = await loginRes(testUser, false);
  assert.equal(res.statusCode, 401);
  assert.equal(res.json().error.code, 'invalid_credentials');
  // And the reverse: a live user's email in test mode.
  const liveUser = await createUser(t);
  const rev = await loginRes(liveUser, true);
  assert.equal(rev.statusCode, 401);
  assert.equal(rev.json().error.code, 'invalid_credentials');
});

test('uniqueness of email is per mode: the same email signs in to a different user in each mode', async () => {
  const email = uniqueEmail('both');
  const liveUser = await createUser(t, { email });
  const testUser = await createUser(t, { email, mode: 'test' });
  assert.notEqual(liveUser.id, testUser.id);
  const live = await loginRes({ email, password: PASSWORD }, false);
  const testRes = await loginRes({ email, password: PASSWORD }, true);
  assert.equal(live.statusCode, 200);
  assert.equal(testRes.statusCode, 200);
  assert.equal(live.json().user_id, liveUser.id);
  assert.equal(testRes.json().user_id, testUser.id);
  assert.equal(decodeJwt(live.json().access_token).test_mode, false);
  assert.equal(decodeJwt(testRes.json().access_token).test_mode, true);
});

// ---------------------------------------------------------------------------------------------
// Time-dependent rules (these advance the clock, so they run last)
// ---------------------------------------------------------------------------------------------

test('an expired access token (after 15 minutes) gets 401 invalid_token', async () => {
  const { token } = await userToken(t);
  assert.equal((await me(token)).statusCode, 200);
  t.clock.advance(890);
  assert.equal((await me(token)).statusCode, 200, 'still valid before exp');
  t.clock.advance(11);
  assertInvalidToken(await me(token));
});

test('an access token is refused from the second of its exp on (15 minutes after iat), also when it was accepted before', async () => {
  const { token } = await userToken(t);
  assert.equal((await me(token)).statusCode, 200, 'accepted (and remembered) while valid');
  const { exp } = decodeJwt(token);
  // The service clock held at the first millisecond of exp: no longer valid (RFC 7519 §4.1.4, "on or after").
  const realNow = t.clock.now;
  t.clock.now = () => new Date(exp! * 1000);
  try {
    assertInvalidToken(await me(token), 'at exp');
  } finally {
    t.clock.now = realNow;
  }
});

/** The claims of `token` signed again by the current key with a 30-day lifetime and its own jti. */
async function longLivedTwin(token: string, jti: string): Promise<string> {
  const c = decodeJwt(token) as Record<string, any>;
  return t.deps.keys.sign({ sub: c.sub, sid: c.sid, jti, amr: c.amr, email_verified: c.email_verified, test_mode: c.test_mode }, 'platform', 30 * 86400);
}

test('signing key rotation: the new key is published at once and signs from 7 minutes later (every process lists it within a minute, and a JWKS cached for its 5-minute max-age has been refetched), the old key until then; old tokens keep working; a key retired over 24 h ago no longer verifies', async () => {
  const user = await createUser(t);
  const oldToken = await login(t, user);
  const oldKid = decodeProtectedHeader(oldToken).kid!;
  // A long-lived token signed by the old key, to outlive the 15-minute access tokens.
  const longLived = await longLivedTwin(oldToken, 'atk_01ARZ3NDEKTSV4RRFFQ69G5FAV');
  assert.equal(decodeProtectedHeader(longLived).kid, oldKid);

  const { kid: newKid, signsFrom } = await t.deps.keys.rotate();
  assert.notEqual(newKid, oldKid);
  assert.ok(Math.abs(signsFrom.getTime() - t.clock.now().getTime() - KEY_PUBLISH_AHEAD_SECONDS * 1000) < 5000, 'Math.abs(signsFrom.getTime() - t.clock.now().getTime() - KEY_PUBLISH_AHEAD_SECONDS * 1000) < 5000');
  // One key reload (60 s) plus the JWKS's max-age (300 s) plus a minute: a verifier honouring
  // Cache-Control has refetched the JWKS, with the new kid, before the new key signs.
  assert.equal(KEY_PUBLISH_AHEAD_SECONDS, 420);
  assert.equal((await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).headers['cache-control'], 'public, max-age=300');

  const kids = (await jwks()).keys.map((k) => k.kid);
  assert.ok(kids.includes(oldKid), 'old kid still published');
  assert.ok(kids.includes(newKid), 'new kid published before it signs');
  // Until signs_from the old key signs, in this process and in any other.
  t.clock.advance(KEY_PUBLISH_AHEAD_SECONDS - 10);
  assert.equal(decodeProtectedHeader(await login(t, user)).kid, oldKid);
  t.clock.advance(10);

  assert.equal((await me(oldToken)).statusCode, 200, 'old token still works');
  assert.equal((await me(longLived)).statusCode, 200, 'old-key long-lived token still works');

  const newToken = await login(t, user);
  assert.equal(decodeProtectedHeader(newToken).kid, newKid);
  assert.equal((await me(newToken)).statusCode, 200);
  // Both verify against the published set.
  const keySet = createLocalJWKSet(await jwks());
  for (const tok of [oldToken, newToken]) {
    await jwtVerify(tok, keySet, { algorithms: ['RS256'], issuer: ISSUER, audience: 'platform', currentDate: t.clock.now() });
  }

  // 25 hours later the retired key is past its grace period.
  t.clock.advance(25 * 3600);
  assertInvalidToken(await me(longLived), 'token of a key retired over 24 h ago');
  const fresh = await login(t, user);
  assert.equal(decodeProtectedHeader(fresh).kid, newKid);
  assert.equal((await me(fresh)).statusCode, 200, 'the current key keeps working');
});

test('signing key rotation: a retired key stays in the JWKS and verifies for 24 hours after it stops signing, then leaves both for good (a later rotation does not bring it back)', async () => {
  const user = await createUser(t);
  const token = await login(t, user);
  const retiringKid = decodeProtectedHeader(token).kid!;
  // A token outliving the 15-minute access tokens, to watch the key's grace period.
  const longLived = await longLivedTwin(token, 'atk_01ARZ3NDEKTSV4RRFFQ69G5FAW');
  await t.deps.keys.rotate();
  const published = async () => (await jwks()).keys.map((k) => k.kid);
  // It stops signing KEY_PUBLISH_AHEAD_SECONDS after the rotation; a minute short of 24 hours later it still verifies.
  t.clock.advance(KEY_PUBLISH_AHEAD_SECONDS + 24 * 3600 - 60);
  assert.ok((await published()).includes(retiringKid), 'the retired key is still published within its 24 hours');
  assert.equal((await me(longLived)).statusCode, 200, 'a token of the retired key still verifies within its 24 hours');
  // Measured on the service clock, not at the next reload of the keys.
  t.clock.advance(120);
  assert.ok(!(await published()).includes(retiringKid), 'the retired key leaves the JWKS after 24 hours');
  assertInvalidToken(await me(longLived), 'a token of a key retired over 24 h ago');
  // The next rotation retires only the key that signs now.
  await t.deps.keys.rotate();
  assert.ok(!(await published()).includes(retiringKid), 'a later rotation does not bring back a key retired long ago');
  assertInvalidToken(await me(longLived), 'nor does it make its tokens verify again');
});

test('signing key rotation: the new key signs from the millisecond of signs_from, exactly 7 minutes after the rotation, and the old key until the millisecond before', async () => {
  t.clock.advance(KEY_PUBLISH_AHEAD_SECONDS + 1); // any key an earlier test rotated in signs by now
  const user = await createUser(t);
  const oldKid = decodeProtectedHeader(await login(t, user)).kid!;
  const rotatedAt = t.clock.now();
  const { kid: newKid, signsFrom } = await atOneInstant(t, () => t.deps.keys.rotate(), rotatedAt);
  assert.equal(signsFrom.getTime(), rotatedAt.getTime() + 7 * 60 * 1000);
  const kidAt = (ms: number) => atOneInstant(t, async () => decodeProtectedHeader(await login(t, user)).kid, new Date(ms));
  assert.equal(await kidAt(signsFrom.getTime() - 1), oldKid, 'the old key signs until the millisecond before signs_from');
  assert.equal(await kidAt(signsFrom.getTime()), newKid, 'the new key signs from signs_from on');
});

test('signing key rotation: a retired key verifies and is published until 24 hours after it stops signing, and neither from that instant on (a millisecond before it does; at the instant and after it does not, in a process that reloaded its keys or not)', async () => {
  t.clock.advance(KEY_PUBLISH_AHEAD_SECONDS + 1); // any key an earlier test rotated in signs by now
  const user = await createUser(t);
  const token = await login(t, user);
  const retiringKid = decodeProtectedHeader(token).kid!;
  // Two 30-day tokens of the retiring key: one verified (and remembered) before the rotation, one never presented before the end.
  const remembered = await longLivedTwin(token, 'atk_01ARZ3NDEKTSV4RRFFQ69G5FAX');
  const unseen = await longLivedTwin(token, 'atk_01ARZ3NDEKTSV4RRFFQ69G5FAY');
  assert.equal((await me(remembered)).statusCode, 200);
  const { signsFrom } = await atOneInstant(t, () => t.deps.keys.rotate(), t.clock.now());
  const end = signsFrom.getTime() + 24 * 3600 * 1000;
  await atOneInstant(t, async () => {
    assert.ok((await jwks()).keys.some((k) => k.kid === retiringKid), 'published a millisecond before its 24 hours end');
    assert.equal((await me(remembered)).statusCode, 200, 'a remembered token of the retired key verifies a millisecond before the end');
  }, new Date(end - 1));
  // At the instant itself: the loaded keys say no (this process has not reloaded since), as a reload does.
  await atOneInstant(t, async () => {
    assert.ok(!(await jwks()).keys.some((k) => k.kid === retiringKid), 'not published at the instant its 24 hours end');
    assertInvalidToken(await me(remembered), 'remembered token at the instant its 24 hours end');
    await t.deps.keys.reload();
    assert.ok(!(await jwks()).keys.some((k) => k.kid === retiringKid), 'not published after a reload at that instant');
    assertInvalidToken(await me(unseen), 'unseen token at the instant, after a reload');
  }, new Date(end));
  await atOneInstant(t, async () => {
    assert.ok(!(await jwks()).keys.some((k) => k.kid === retiringKid), 'no longer published a millisecond after its 24 hours');
    assertInvalidToken(await me(remembered), 'remembered token a millisecond after the end');
    assertInvalidToken(await me(unseen), 'unseen token a millisecond after the end');
  }, new Date(end + 1));
});

test('sign-in keeps working when the in-memory signing keys are old: keys are refreshed in the background, never inside the session transaction', async () => {
  // Before this was fixed, a login more than a minute after the last key load re-read the keys from
  // inside the session transaction and failed with 500.
  (t.deps.keys as unknown as { loadedAt: number }).loadedAt = 0;
  const user = await createUser(t);
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: user.password } });
  assert.equal(res.statusCode, 200);
  const refreshed = await t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', payload: { refresh_token: res.json().refresh_token } });
  assert.equal(refreshed.statusCode, 200);
});

test('an access token stops working when its session ends, 90 days after sign-in, although the token itself is inside its 15 minutes', async () => {
  const DAY = 24 * 3600;
  const user = await createUser(t);
  const start = t.clock.now().getTime();
  const signIn = await loginRes(user, false);
  assert.equal(signIn.statusCode, 200, signIn.body);
  let current = signIn.json().refresh_token as string;
  const refresh = async () => {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', payload: { refresh_token: current } });
    assert.equal(res.statusCode, 200, res.body);
    current = res.json().refresh_token;
    return res.json().access_token as string;
  };
  for (let i = 0; i < 3; i++) {
    t.clock.advance(29 * DAY);
    await refresh();
  }
  // Five minutes before the session's end: a fresh access token, valid for 15 minutes.
  t.clock.advance((start + 90 * DAY * 1000 - 300_000 - t.clock.now().getTime()) / 1000);
  const lastToken = await refresh();
  assert.equal((await me(lastToken)).statusCode, 200);
  // One second past the session's end the token is refused, though its exp is 9 minutes ahead.
  t.clock.advance(301);
  assert.ok((decodeJwt(lastToken).exp as number) * 1000 > t.clock.now().getTime(), 'the token has not expired by itself');
  assertInvalidToken(await me(lastToken));
});
