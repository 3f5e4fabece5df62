// The hosted sign-in flow driven by a standard relying party library (openid-client, public client,
// PKCE S256) against a real listening server: code → tokens → refresh, app token verified locally.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as client from 'openid-client';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { assertStatus, platformKey, type AppFixture } from '../access/support.js';
import { authorize, member, oauthApp, REDIRECT, verifyAppToken } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
let base: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin);
  base = await t.app.listen({ port: 0, host: '127.0.0.1' });
});
after(() => t.close());

test('openid-client completes the authorization code + PKCE flow and refreshes with the app refresh token', async () => {
  const user = await member(t, admin, app.id);
  const config = new client.Configuration(
    { issuer: t.config.publicUrl, token_endpoint: `${base}/v1/auth/oauth/token`, authorization_endpoint: `${t.config.publicUrl}/signin` },
    app.id,
    undefined,
    client.None(),
  );
  client.allowInsecureRequests(config);
  const verifier = client.randomPKCECodeVerifier();
  const challenge = await client.calculatePKCECodeChallenge(verifier);
  const state = client.randomState();

  // What the hosted sign-in page does for the signed-in user, then redirects the browser.
  const res = await authorize(t, user.token, { application_id: app.id, redirect_uri: REDIRECT, code_challenge: challenge, code_challenge_method: 'S256', state });
  const { redirect_to } = assertStatus(res, 201);

  const tokens = await client.authorizationCodeGrant(config, new URL(redirect_to), { pkceCodeVerifier: verifier, expectedState: state });
  assert.equal(tokens.token_type.toLowerCase(), 'bearer');
  assert.equal(tokens.expires_in, 300);
  const claims = await verifyAppToken(t, tokens.access_token, app.id);
  assert.equal(claims.sub, user.id);
  assert.equal(claims.sid, user.sid);

  const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token!);
  await verifyAppToken(t, refreshed.access_token, app.id);
  assert.notEqual(refreshed.refresh_token, tokens.refresh_token);

  // A replayed code surfaces as the RFC 6749 error the library understands.
  await assert.rejects(
    client.authorizationCodeGrant(config, new URL(redirect_to), { pkceCodeVerifier: verifier, expectedState: state }),
    (err: any) => err.error === 'invalid_grant',
  );
});
