// POST /v1/auth/oauth/token, grant_type=authorization_code (public client, PKCE S256).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { decodeProtectedHeader } from 'jose';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import { appKey, assertStatus, auditOf, call, inSeconds, patchEnt, platformKey, sql, type AppFixture } from '../access/support.js';
import { alignToWindow } from '../auth/support.js';
import {
  assertOAuthError, codeFor, codeGrant, member, oauthApp, pausedAfter, pkce, refreshGrant, REDIRECT, TOKEN, tokenReq, verifyAppToken,
} from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin);
});
after(() => t.close());

test('a code exchange returns the app token (access_token, token_type, expires_in 300, application_id, organization_id null) plus refresh_token and refresh_token_expires_in; the app token verifies with aud = application id', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const res = await tokenReq(t, codeGrant(c, app.id));
  const body = assertStatus(res, 200);
  // RFC 6749 §5.1: Cache-Control no-store "as well as the Pragma response header field with a value of no-cache".
  assert.equal(res.headers['cache-control'], 'no-store');
  assert.equal(res.headers.pragma, 'no-cache');
  assert.deepEqual(Object.keys(body).sort(), ['access_token', 'application_id', 'expires_in', 'organization_id', 'refresh_token', 'refresh_token_expires_in', 'token_type']);
  assert.equal(body.token_type, 'Bearer');
  assert.equal(body.expires_in, 300);
  assert.equal(body.application_id, app.id);
  assert.equal(body.organization_id, null);
  assert.match(body.refresh_token, /^rtk_/);
  assert.equal(body.refresh_token_expires_in, 30 * 86400);
  assert.equal(decodeProtectedHeader(body.access_token).alg, 'RS256');
  const claims = await verifyAppToken(t, body.access_token, app.id);
  assert.equal(claims.sub, user.id);
  assert.equal(claims.sid, user.sid);
  assert.equal(claims.test_mode, false);
  assert.match(String(claims.jti), /^atk_/);
  assert.equal(claims.exp! - claims.iat!, 300);
  await assert.rejects(verifyAppToken(t, body.access_token, 'platform'));
  // The app token is not a platform credential; the refresh token is stored only as a hash.
  assert.equal((await call(t, 'GET', '/v1/users/me', body.access_token)).statusCode, 401);
  const rows = await sql(t, 'SELECT * FROM oauth_refresh_tokens WHERE session_id = $1', [user.sid]);
  assert.equal(rows.length, 1);
  assert.equal(rows[0].application_id, app.id);
  assert.ok(!JSON.stringify(rows[0]).includes(body.refresh_token), '!JSON.stringify(rows[0]).includes(body.refresh_token)');
});

test('the token endpoint accepts application/x-www-form-urlencoded bodies, errors included', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const body = assertStatus(await tokenReq(t, codeGrant(c, app.id), true), 200);
  await verifyAppToken(t, body.access_token, app.id);
  assertStatus(await tokenReq(t, refreshGrant(body.refresh_token, app.id), true), 200);
  assertOAuthError(await tokenReq(t, { grant_type: 'password' }, true), 'unsupported_grant_type');
});

test('a browser application on another origin can read the token endpoint, the JWKS and the discovery document (public clients: Access-Control-Allow-Origin *, Retry-After exposed); other routes stay same-origin', async () => {
  const origin = { origin: 'https://spa.example' };
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const form = { 'content-type': 'application/x-www-form-urlencoded', ...origin };
  const ok = await t.app.inject({ method: 'POST', url: TOKEN, headers: form, payload: new URLSearchParams(codeGrant(c, app.id) as Record<string, string>).toString() });
  assertStatus(ok, 200);
  const refused = await t.app.inject({ method: 'POST', url: TOKEN, headers: form, payload: 'grant_type=password' });
  assertOAuthError(refused, 'unsupported_grant_type');
  for (const res of [ok, refused, await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json', headers: origin }), await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration', headers: origin }), await t.app.inject({ method: 'GET', url: '/.well-known/oauth-authorization-server', headers: origin })]) {
    assert.equal(res.headers['access-control-allow-origin'], '*', res.raw.req.url);
    assert.equal(res.headers['access-control-expose-headers'], 'Retry-After', res.raw.req.url);
    assert.equal(res.headers['access-control-allow-credentials'], undefined, 'no credentials');
  }
  const me = await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { ...origin, authorization: `Bearer ${user.token}` } });
  assert.equal(me.headers['access-control-allow-origin'], undefined, 'the rest of the API is not readable cross-origin');
});

test('a form body that is not validly percent-encoded (%FF, %ZZ, a lone %) is invalid_request, and the code stays usable', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const form = { 'content-type': 'application/x-www-form-urlencoded' };
  const valid = new URLSearchParams(codeGrant(c, app.id) as Record<string, string>).toString();
  for (const bad of ['&state=%FF', '&state=%ZZ', '&state=50%']) {
    assertOAuthError(await t.app.inject({ method: 'POST', url: '/v1/auth/oauth/token', headers: form, payload: valid + bad }), 'invalid_request');
  }
  assertStatus(await tokenReq(t, codeGrant(c, app.id), true), 200);
});

test('a parameter repeated in a form body is invalid_request (RFC 6749 §3.1) and the code stays usable', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const form = { 'content-type': 'application/x-www-form-urlencoded' };
  for (const repeated of ['code', 'grant_type', 'client_id']) {
    const q = new URLSearchParams(codeGrant(c, app.id) as Record<string, string>);
    q.append(repeated, q.get(repeated)!);
    assertOAuthError(await t.app.inject({ method: 'POST', url: '/v1/auth/oauth/token', headers: form, payload: q.toString() }), 'invalid_request');
  }
  assertStatus(await tokenReq(t, codeGrant(c, app.id), true), 200);
});

test('only the token endpoint (and the hosted sign-in page) takes form bodies: any other route answers 415 unsupported_media_type', async () => {
  const form = { 'content-type': 'application/x-www-form-urlencoded' };
  const user = await member(t, admin, app.id);
  for (const [url, payload, headers] of [
    ['/v1/auth/login', { email: 'someone@example.com', password: 'whatever-password' }, {}],
    ['/v1/auth/oauth/authorization-codes', { application_id: app.id, redirect_uri: REDIRECT }, { authorization: `Bearer ${user.token}` }],
    ['/v1/auth/password/forgot', { email: 'someone@example.com' }, {}],
  ] as const) {
    const res = await t.app.inject({ method: 'POST', url, headers: { ...form, ...headers }, payload: new URLSearchParams(payload as Record<string, string>).toString() });
    assert.equal(res.statusCode, 415, `${url}: ${res.body}`);
    assert.equal(res.json().error.code, 'unsupported_media_type');
  }
});

test('a test-mode user gets test_mode true in the app token', async () => {
  const testKey = await platformKey(t, ['entitlements.manage'], 'test');
  const user = await member(t, testKey, app.id, { mode: 'test' });
  const c = await codeFor(t, user, app.id);
  const body = assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
  assert.equal((await verifyAppToken(t, body.access_token, app.id)).test_mode, true);
  assertStatus(await tokenReq(t, refreshGrant(body.refresh_token, app.id)), 200);
});

test('a reused code is invalid_grant and revokes every token issued from it (RFC 6749 §4.1.2), audited', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const first = assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
  const rotated = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id)), 'invalid_grant');
  assertOAuthError(await tokenReq(t, refreshGrant(rotated.refresh_token, app.id)), 'invalid_grant');
  const audit = await auditOf(t, user.id, 'oauth.authorization_code_reused');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_type, 'system');
  // The platform session itself is untouched.
  assert.equal((await call(t, 'GET', '/v1/users/me', user.token)).statusCode, 200);
});

test('a reused code\'s audit row names the user and the grant: target the user, actor system, after = { authorization_code_id, revoked_refresh_tokens: how many tokens the replay revoked }', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id)), 'invalid_grant');
  const [code] = await sql<{ id: string }>(t, 'SELECT id FROM oauth_authorization_codes WHERE user_id = $1', [user.id]);
  const audit = await auditOf(t, user.id, 'oauth.authorization_code_reused');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].target_type, 'user');
  assert.equal(audit[0].target_user_id, user.id);
  assert.deepEqual(audit[0].after, { authorization_code_id: code.id, revoked_refresh_tokens: 1 });
  // A second replay revokes nothing more: it is not audited again.
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id)), 'invalid_grant');
  assert.equal((await auditOf(t, user.id, 'oauth.authorization_code_reused')).length, 1);
});

test('a reused code presented with another or an unknown client_id still revokes every token issued from it (RFC 6749 §4.1.2); the answer is about the request as sent (invalid_client for an unknown client_id)', async () => {
  const other = await oauthApp(t, admin);
  const user = await member(t, admin, app.id);
  for (const [clientId, error] of [[other.id, 'invalid_grant'], ['app_nosuchclient', 'invalid_client']]) {
    const c = await codeFor(t, user, app.id);
    const first = assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
    assertOAuthError(await tokenReq(t, codeGrant(c, clientId)), error);
    assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 'invalid_grant');
  }
});

test('a replay\'s audit event is one of the Application\'s events (application_id and its tenant_id): the app-scoped key with audit.view and the Tenant owner see oauth.authorization_code_reused and oauth.refresh_token_reused', async () => {
  const own = await oauthApp(t, admin);
  const user = await member(t, admin, own.id);
  const c = await codeFor(t, user, own.id);
  assertStatus(await tokenReq(t, codeGrant(c, own.id)), 200);
  assertOAuthError(await tokenReq(t, codeGrant(c, own.id)), 'invalid_grant');
  const first = assertStatus(await tokenReq(t, codeGrant(await codeFor(t, user, own.id), own.id)), 200);
  assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, own.id)), 200);
  assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, own.id)), 'invalid_grant');
  const actions = ['oauth.authorization_code_reused', 'oauth.refresh_token_reused'];
  for (const action of actions) {
    const [row] = await auditOf(t, user.id, action);
    assert.equal(row.application_id, own.id, action);
    assert.equal(row.tenant_id, own.tenant_id, action);
  }
  const query = `/v1/audit-events?target_user_id=${user.id}&action=${actions[0]}&action=${actions[1]}`;
  const seen = (res: any) => (assertStatus(res, 200).data as any[]).map((e) => e.action).sort();
  // An app-scoped key sees only its own Application's events (Part B, Audit).
  assert.deepEqual(seen(await call(t, 'GET', query, await appKey(t, own.id, ['audit.view']))), actions);
  assert.deepEqual(seen(await call(t, 'GET', `${query}&application_id=${own.id}`, admin)), actions);
  assert.deepEqual(seen(await call(t, 'GET', `/v1/audit-events?tenant_id=${own.tenant_id}&action=${actions[0]}&action=${actions[1]}`, own.owner!.token)), actions);
});

test('concurrent exchanges of one code: exactly one succeeds', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const results = await Promise.all([1, 2, 3].map(() => tokenReq(t, codeGrant(c, app.id))));
  assert.equal(results.filter((r) => r.statusCode === 200).length, 1, results.map((r) => r.body).join('\n'));
  for (const r of results.filter((x) => x.statusCode !== 200)) assertOAuthError(r, 'invalid_grant');
});

test('a code used up by another exchange while this one was checking it is invalid_grant, and every token issued from it is revoked (single use; RFC 6749 §4.1.2), audited', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  let winner: any = null;
  const loser = await pausedAfter(t, 'FROM oauth_authorization_codes', async () => {
    winner = assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
  }, () => tokenReq(t, codeGrant(c, app.id)));
  assertOAuthError(loser, 'invalid_grant');
  assertOAuthError(await tokenReq(t, refreshGrant(winner.refresh_token, app.id)), 'invalid_grant');
  assert.equal((await auditOf(t, user.id, 'oauth.authorization_code_reused')).length, 1);
});

test('PKCE: a wrong verifier is invalid_grant (and does not burn the code); a malformed one invalid_request', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  // 43 and 128 characters are well-formed (RFC 7636 §4.1), so only the digest refuses them.
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { code_verifier: 'x'.repeat(43) })), 'invalid_grant');
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { code_verifier: 'x'.repeat(128) })), 'invalid_grant');
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { code_verifier: 'x'.repeat(42) })), 'invalid_request');
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { code_verifier: 'x'.repeat(129) })), 'invalid_request');
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { code_verifier: `${'x'.repeat(42)}+` })), 'invalid_request');
  // The challenge itself is not a verifier.
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { code_verifier: c.challenge })), 'invalid_grant');
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
});

test('PKCE S256: the verifier\'s digest must equal the whole code_challenge; a challenge that merely begins with it never redeems', async () => {
  const user = await member(t, admin, app.id);
  const p = pkce();
  const c = await codeFor(t, user, app.id, { code_challenge: `${p.challenge}A` });
  assertOAuthError(await tokenReq(t, codeGrant({ code: c.code, verifier: p.verifier }, app.id)), 'invalid_grant');
});

test('redirect_uri and client_id must match the code: invalid_grant; an unknown client_id is invalid_client', async () => {
  const other = await oauthApp(t, admin);
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { redirect_uri: `${REDIRECT}/` })), 'invalid_grant');
  assertOAuthError(await tokenReq(t, codeGrant(c, other.id)), 'invalid_grant');
  assertOAuthError(await tokenReq(t, codeGrant(c, 'app_nosuchclient')), 'invalid_client');
  assertOAuthError(await tokenReq(t, codeGrant({ code: 'oac_unknown', verifier: c.verifier }, 'app_nosuchclient')), 'invalid_client');
  assertOAuthError(await tokenReq(t, codeGrant({ code: 'oac_unknown', verifier: c.verifier }, app.id)), 'invalid_grant');
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
});

test('an unknown code or refresh token presented by a known client_id is invalid_grant saying the grant is invalid, never that it was issued to another client', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  const code = assertOAuthError(await tokenReq(t, codeGrant({ code: 'oac_unknown', verifier: c.verifier }, app.id)), 'invalid_grant');
  assert.equal(code, 'The authorization code is invalid.');
  const refresh = assertOAuthError(await tokenReq(t, refreshGrant('rtk_unknown', app.id)), 'invalid_grant');
  assert.equal(refresh, 'The refresh token is invalid.');
});

test('the code is bound to the exact redirect_uri it was issued for, whichever registered one that is: another registered one is invalid_grant, that one succeeds', async () => {
  const second = 'https://app.example.com/other-callback';
  const multi = await oauthApp(t, admin, { redirect_uris: [REDIRECT, second] });
  const user = await member(t, admin, multi.id);
  const c = await codeFor(t, user, multi.id, { redirect_uri: second });
  assertOAuthError(await tokenReq(t, codeGrant(c, multi.id)), 'invalid_grant');
  assertStatus(await tokenReq(t, codeGrant(c, multi.id, { redirect_uri: second })), 200);
});

test('access is re-checked at the exchange: a disabled entitlement or a suspended Application is invalid_grant', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  assertStatus(await patchEnt(t, admin, user.entitlementId, { status: 'disabled', disabled_reason: 'x' }), 200);
  assert.match(assertOAuthError(await tokenReq(t, codeGrant(c, app.id)), 'invalid_grant'), /entitlement_required/);

  const other = await oauthApp(t, admin);
  const m = await member(t, admin, other.id);
  const c2 = await codeFor(t, m, other.id);
  await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [other.tenant_id]);
  assert.match(assertOAuthError(await tokenReq(t, codeGrant(c2, other.id)), 'invalid_grant'), /tenant_suspended/);
  await sql(t, 'UPDATE tenants SET suspended = false WHERE id = $1', [other.tenant_id]);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${other.id}`, admin, { review_status: 'suspended', review_notes: 'incident' }), 200);
  assert.match(assertOAuthError(await tokenReq(t, codeGrant(c2, other.id)), 'invalid_grant'), /application_not_available/);
});

test('the code belongs to the session: after logout the exchange is invalid_grant', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  assertStatus(await call(t, 'POST', '/v1/auth/logout', user.token, {}), 204);
  assertOAuthError(await tokenReq(t, codeGrant(c, app.id)), 'invalid_grant');
});

test('the code belongs to the session: once the session reaches its absolute end the exchange is invalid_grant', async () => {
  const user = await member(t, admin, app.id);
  // The session ends in 30 seconds, before the code's own 60.
  await sql(t, 'UPDATE sessions SET expires_at = $2 WHERE id = $1', [user.sid, inSeconds(t, 30)]);
  const c = await codeFor(t, user, app.id);
  t.clock.advance(31);
  assert.match(assertOAuthError(await tokenReq(t, codeGrant(c, app.id)), 'invalid_grant'), /session/);
});

test('missing or non-string parameters are invalid_request; an unknown grant_type unsupported_grant_type', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  assertOAuthError(await tokenReq(t, {}), 'invalid_request');
  assertOAuthError(await tokenReq(t, { grant_type: 'client_credentials' }), 'unsupported_grant_type');
  assertOAuthError(await tokenReq(t, { grant_type: 'implicit', code: c.code }), 'unsupported_grant_type');
  for (const field of ['code', 'code_verifier', 'redirect_uri', 'client_id']) {
    const b: Record<string, unknown> = codeGrant(c, app.id);
    delete b[field];
    assert.match(assertOAuthError(await tokenReq(t, b), 'invalid_request'), new RegExp(field));
    assertOAuthError(await tokenReq(t, { ...codeGrant(c, app.id), [field]: 42 }), 'invalid_request');
  }
  assertOAuthError(await tokenReq(t, { grant_type: 'refresh_token', client_id: app.id }), 'invalid_request');
  assertOAuthError(await tokenReq(t, { grant_type: 'refresh_token', refresh_token: 'rtk_x' }), 'invalid_request');
  // None of these used the code up.
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
});

test('a parameter sent with an empty value counts as missing (RFC 6749 §3.1): invalid_request naming it, JSON or form, and the code stays usable', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  for (const field of ['grant_type', 'code', 'code_verifier', 'redirect_uri', 'client_id']) {
    for (const form of [false, true]) {
      assert.match(assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { [field]: '' }), form), 'invalid_request'), new RegExp(field));
    }
  }
  assert.match(assertOAuthError(await tokenReq(t, { grant_type: 'refresh_token', refresh_token: '', client_id: app.id }), 'invalid_request'), /refresh_token/);
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
});

test('grant_type is matched exactly: near spellings of authorization_code and refresh_token are unsupported_grant_type', async () => {
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  for (const grantType of ['refresh', 'refresh_tokens', 'REFRESH_TOKEN', 'authorization_code ', 'Authorization_Code']) {
    assertOAuthError(await tokenReq(t, { ...codeGrant(c, app.id), grant_type: grantType, refresh_token: 'rtk_x' }), 'unsupported_grant_type');
  }
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
});

test('OAuth token errors use the {error, error_description} shape: error_description stays within RFC 6749 §5.2\'s characters (printable ASCII but " and \\) and never echoes the request', async () => {
  const allowed = /^[\x20-\x21\x23-\x5B\x5D-\x7E]*$/;
  const hostile = `é"\\<x>${'y'.repeat(2000)}`;
  const answers = [
    await tokenReq(t, { grant_type: hostile }),
    await tokenReq(t, { grant_type: hostile }, true),
    await t.app.inject({ method: 'POST', url: TOKEN, headers: { 'content-type': 'application/json' }, payload: `{"grant_type": "é\\"` }),
  ];
  for (const res of answers) {
    assert.equal(res.statusCode, 400, res.body);
    const description = res.json().error_description;
    assert.match(description, allowed, description.slice(0, 80));
    assert.ok(!description.includes('yyyy'), `the request is echoed: ${description.slice(0, 80)}`);
  }
  assertOAuthError(answers[0], 'unsupported_grant_type');
});

test('only server errors keep the general envelope at the token endpoint: an unexpected failure is 500 internal_error, not an OAuth 400', async () => {
  const res = await pausedAfter(t, 'FROM oauth_refresh_tokens', async () => {
    throw new Error('injected failure');
  }, () => tokenReq(t, refreshGrant('rtk_unknown', app.id)));
  assert.equal(res.statusCode, 500, res.body);
  assert.equal(res.json().error.code, 'internal_error');
});

test('codes live 60 seconds: an expired code is invalid_grant, from its 60th second on; a second before, it still redeems', async () => {
  const user = await member(t, admin, app.id);
  await withStoppedClock(t, async () => {
    const c = await codeFor(t, user, app.id);
    const fresh = await codeFor(t, user, app.id);
    t.clock.advance(59);
    assertStatus(await tokenReq(t, codeGrant(fresh, app.id)), 200);
    t.clock.advance(1);
    assert.match(assertOAuthError(await tokenReq(t, codeGrant(c, app.id)), 'invalid_grant'), /expired/);
  });
});

test('a token request whose body is not valid JSON gets 400 invalid_request in the RFC 6749 shape with no-store; the document lists no 422 for the endpoint', async () => {
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/oauth/token', headers: { 'content-type': 'application/json' }, payload: '{"grant_type":' });
  assert.equal(res.statusCode, 400);
  assert.deepEqual(Object.keys(res.json()).sort(), ['error', 'error_description']);
  assert.equal(res.json().error, 'invalid_request');
  assert.equal(res.headers['cache-control'], 'no-store');
  const doc = (await t.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json();
  assert.equal(doc.paths['/v1/auth/oauth/token'].post.responses['422'], undefined);
});

test('OAuth token errors use the {error, error_description} shape with status 400: a text/plain body, or one with no content type, is invalid_request (not 415), with no-store', async () => {
  for (const headers of [{ 'content-type': 'text/plain' }, {}] as Array<Record<string, string>>) {
    const res = await t.app.inject({ method: 'POST', url: TOKEN, headers, payload: 'grant_type=refresh_token&refresh_token=rtk_x&client_id=x' });
    assert.match(assertOAuthError(res, 'invalid_request'), /application\/x-www-form-urlencoded/, JSON.stringify(headers));
    assert.equal(res.headers['cache-control'], 'no-store');
    assert.match(String(res.headers['request-id']), /^req_/);
  }
  // Every other route keeps the platform envelope.
  const other = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'text/plain' }, payload: 'x' });
  assert.equal(other.statusCode, 415);
  assert.equal(other.json().error.code, 'unsupported_media_type');
});

test('OAuth token errors use the {error, error_description} shape with status 400: a form body over the 1 MB body limit is invalid_request (not 413)', async () => {
  const big = 'grant_type=refresh_token&refresh_token=' + 'x'.repeat(1024 * 1024 + 10);
  const res = await t.app.inject({ method: 'POST', url: TOKEN, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: big });
  assertOAuthError(res, 'invalid_request');
  assert.equal(res.headers['cache-control'], 'no-store');
  // Every other route keeps the platform envelope.
  const other = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ email: 'x'.repeat(1024 * 1024 + 10) }) });
  assert.equal(other.statusCode, 413);
  assert.equal(other.json().error.code, 'payload_too_large');
});

test('the OAuth token endpoint instead returns {error, error_description} when throttled: 429 temporarily_unavailable with Retry-After, documented so; other auth endpoints keep the envelope', async () => {
  const throttled = await buildTestApp({ authRateLimitPerMinute: 2 });
  try {
    alignToWindow(throttled, 60, 1);
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const send = (url: string) => throttled.app.inject({ method: 'POST', url, headers: form, payload: 'grant_type=password', remoteAddress: '203.0.113.50' });
    for (let i = 0; i < 2; i++) assertOAuthError(await send(TOKEN), 'unsupported_grant_type');
    const res = await send(TOKEN);
    assert.equal(res.statusCode, 429, res.body);
    const body = res.json();
    assert.deepEqual(Object.keys(body).sort(), ['error', 'error_description'], res.body);
    assert.equal(body.error, 'temporarily_unavailable');
    assert.equal(typeof body.error_description, 'string');
    const retryAfter = Number(res.headers['retry-after']);
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${res.headers['retry-after']}`);
    assert.equal(res.headers['cache-control'], 'no-store');
    // The OpenAPI document describes the 429 in the OAuth shape, not the envelope.
    const doc = (await throttled.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json();
    const schema = doc.paths[TOKEN].post.responses['429'].content['application/json'].schema;
    assert.deepEqual([...schema.required].sort(), ['error', 'error_description']);
    assert.deepEqual(schema.properties.error.enum, ['temporarily_unavailable']);
    // Every other route keeps the platform envelope.
    const login = (payload: object) => throttled.app.inject({ method: 'POST', url: '/v1/auth/login', payload, remoteAddress: '203.0.113.50' });
    for (let i = 0; i < 2; i++) await login({ email: 'nobody@example.com', password: 'wrong-password-123' });
    const other = await login({ email: 'nobody@example.com', password: 'wrong-password-123' });
    assert.equal(other.statusCode, 429);
    assert.equal(other.json().error.code, 'rate_limited');
  } finally {
    await throttled.close();
  }
});

test('the app token of a code exchange and of a refresh never outlives the access it is issued on: with the personal grant ending in 90 seconds, its exp is ends_at and expires_in the seconds left', async () => {
  const user = await member(t, admin, app.id);
  await withStoppedClock(t, async () => {
    const endsAt = new Date(Math.floor(t.clock.now().getTime() / 1000) * 1000 + 90_000);
    assertStatus(await patchEnt(t, admin, user.entitlementId, { ends_at: endsAt.toISOString() }), 200);
    const first = assertStatus(await tokenReq(t, codeGrant(await codeFor(t, user, app.id), app.id)), 200);
    t.clock.advance(30);
    const next = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
    for (const body of [first, next]) {
      const claims = await verifyAppToken(t, body.access_token, app.id);
      assert.equal(claims.exp, endsAt.getTime() / 1000);
      assert.equal(body.expires_in, claims.exp! - claims.iat!);
    }
    assert.ok(first.expires_in <= 90 && first.expires_in >= 89, `expires_in ${first.expires_in}`);
    assert.ok(next.expires_in <= 60 && next.expires_in >= 59, `expires_in ${next.expires_in}`);
  });
});
