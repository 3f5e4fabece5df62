// OA-4, OA-5, OA-6: what test/oauth/*.test.ts leaves open. state echoed verbatim at its 512 limit and
// codes that survive mis-bound redemptions; the app refresh token refused after every way its grant
// ends; no-store on every token-endpoint answer and no password grant anywhere.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { latestToken } from '../../helpers/mail.js';
import { NEW_PASSWORD } from '../../auth/support.js';
import { assertStatus, call, patchEnt, platformKey, sql, type AppFixture } from '../../access/support.js';
import {
  assertOAuthError, authorize, codeFor, codeGrant, member, oauthApp, pkce, REDIRECT, refreshGrant, signIn, TOKEN, tokenReq,
} from '../../oauth/support.js';
import { figure } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin);
});
after(() => t.close());

test('OA-4 "state echoed verbatim up to 512": 512 code points of reserved, percent, fragment and non-ASCII characters come back byte for byte as the only other redirect parameter beside the issuer (RFC 9207); 513 are 422', async () => {
  const user = await member(t, admin, app.id);
  const unit = [...'a+b %2F&c=d#é/?\u{1F600}'];
  const state = Array.from({ length: 512 }, (_, i) => unit[i % unit.length]).join('');
  const request = (s: string) => authorize(t, user.token, { application_id: app.id, redirect_uri: REDIRECT, code_challenge: pkce().challenge, code_challenge_method: 'S256', state: s });
  const to = new URL(assertStatus(await request(state), 201).redirect_to);
  assert.equal(to.searchParams.get('state'), state);
  assert.equal(to.hash, '');
  assert.deepEqual([...to.searchParams.keys()].sort(), ['code', 'iss', 'state']);
  assert.equal((await request(`${state}x`)).statusCode, 422);
});

test('OA-4 code binding: "rejected (invalid_grant)" with another application_id or a redirect_uri differing by a query or the host case; those refusals do not burn the code, which redeems at 59 s', async () => {
  const other = await oauthApp(t, admin);
  const user = await member(t, admin, app.id);
  const c = await codeFor(t, user, app.id);
  assertOAuthError(await tokenReq(t, codeGrant(c, other.id)), 'invalid_grant');
  for (const redirect_uri of [`${REDIRECT}?x=1`, 'https://APP.example.com/callback', `${REDIRECT}/`]) {
    assertOAuthError(await tokenReq(t, codeGrant(c, app.id, { redirect_uri })), 'invalid_grant');
  }
  t.clock.advance(59);
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
});

/** A fresh Application, a member with access and their app tokens from a full code flow. */
async function grantedTokens() {
  const a = await oauthApp(t, admin);
  const user = await member(t, admin, a.id);
  return { a, user, tokens: await signIn(t, user, a.id) };
}

test('OA-5 the app refresh token after its hosted session ends (admin revoke, suspend, delete, password reset), after the entitlement is revoked, the app or its Tenant suspended: "refused each time with {error, error_description} and status 400"', async () => {
  const endings: [string, (g: Awaited<ReturnType<typeof grantedTokens>>) => Promise<void>][] = [
    ['hosted session revoked by an admin', async ({ user }) => {
      assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}/sessions/${user.sid}`, admin)).statusCode, 204);
    }],
    ['user suspended', async ({ user }) => assertStatus(await call(t, 'POST', `/v1/users/${user.id}/suspend`, admin, {}), 200)],
    ['user deleted', async ({ user }) => {
      assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin)).statusCode, 204);
    }],
    ['password reset', async ({ user }) => {
      assert.equal((await call(t, 'POST', '/v1/auth/password/forgot', null, { email: user.email })).statusCode, 202);
      const token = await latestToken(t, user.email, 'password_reset');
      assert.equal((await call(t, 'POST', '/v1/auth/password/reset', null, { token, password: NEW_PASSWORD })).statusCode, 204);
    }],
    ['entitlement revoked', async ({ user }) => assertStatus(await patchEnt(t, admin, user.entitlementId, { status: 'revoked', disabled_reason: 'OA-5' }), 200)],
    ['Application suspended', async ({ a }) => assertStatus(await call(t, 'PATCH', `/v1/applications/${a.id}`, admin, { review_status: 'suspended', review_notes: 'incident' }), 200)],
    ['Tenant suspended', async ({ a }) => {
      await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [a.tenant_id]);
    }],
  ];
  let accepted = 0;
  for (const [name, end] of endings) {
    const granted = await grantedTokens();
    await end(granted);
    const res = await tokenReq(t, refreshGrant(granted.tokens.refresh_token, granted.a.id));
    if (res.statusCode === 200) accepted++;
    else assertOAuthError(res, 'invalid_grant');
    assert.equal(res.headers['cache-control'], 'no-store', name);
  }
  figure('OA-5', `refresh tokens accepted after their grant ended: ${accepted} / ${endings.length}`);
  assert.equal(accepted, 0);
});

test('OA-6 "JSON and form-urlencoded both accepted" (with a charset parameter too); "Cache-Control: no-store on token responses" for code and refresh grants and errors; "no password grant"', async () => {
  const a = await oauthApp(t, admin);
  const noStore: string[] = [];
  for (const type of ['application/json; charset=utf-8', 'application/x-www-form-urlencoded; charset=UTF-8', 'application/x-www-form-urlencoded;charset=utf-8']) {
    const body = codeGrant(await codeFor(t, await member(t, admin, a.id), a.id), a.id) as Record<string, string>;
    const payload = type.startsWith('application/json') ? JSON.stringify(body) : new URLSearchParams(body).toString();
    const res = await t.app.inject({ method: 'POST', url: TOKEN, headers: { 'content-type': type }, payload });
    assert.equal(res.statusCode, 200, `${type}: ${res.body}`);
    noStore.push(`${type}: ${res.headers['cache-control']}`);
    let refreshToken: string = res.json().refresh_token;
    for (const form of [false, true]) {
      const rotated = await tokenReq(t, refreshGrant(refreshToken, a.id), form);
      assert.equal(rotated.statusCode, 200, rotated.body);
      noStore.push(`refresh grant (${form ? 'form' : 'JSON'}): ${rotated.headers['cache-control']}`);
      refreshToken = rotated.json().refresh_token;
    }
    const replay = await tokenReq(t, body);
    assertOAuthError(replay, 'invalid_grant');
    noStore.push(`error: ${replay.headers['cache-control']}`);
  }
  assert.deepEqual(noStore.filter((line) => !line.endsWith(': no-store')), []);

  const doc = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' }), 200);
  assert.ok(!doc.grant_types_supported.includes('password'), JSON.stringify(doc.grant_types_supported));
  const user = await member(t, admin, a.id);
  const refused = await tokenReq(t, { grant_type: 'password', username: user.email, password: user.password, client_id: a.id });
  assertOAuthError(refused, 'unsupported_grant_type');
  assert.equal(refused.headers['cache-control'], 'no-store');
});
