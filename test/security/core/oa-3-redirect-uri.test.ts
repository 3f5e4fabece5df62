// OA-3: redirect_uri exact match (ASVS 10.4.1, RFC 9700 §4.1.3) where codes are issued and where they
// are redeemed. The hosted page's own 400 walk is in test/oauth/signin-page.test.ts and registration
// of localhost on a live Application in test/access/applications-create.test.ts; this file walks every
// near-miss through POST /v1/auth/oauth/authorization-codes (the verb behind the page) and oauth/token.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { assertInvalid, assertStatus, grant, newApp, person, platformKey, type AppFixture, type InjectResponse } from '../../access/support.js';
import { assertOAuthError, authorize, codeFor, codeGrant, member, oauthApp, pkce, REDIRECT, tokenReq } from '../../oauth/support.js';
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

const request = (applicationId: string, redirectUri: string) => ({
  application_id: applicationId, redirect_uri: redirectUri, code_challenge: pkce().challenge, code_challenge_method: 'S256',
});

/** Near-misses of REDIRECT (https://app.example.com/callback): none is byte-identical to it. */
const NEAR_MISSES = [
  `${REDIRECT}/`,
  'https://APP.example.com/callback',
  'https://app.example.com/Callback',
  'HTTPS://app.example.com/callback',
  `${REDIRECT}?x=1`,
  `${REDIRECT}?`,
  `${REDIRECT}#f`,
  `${REDIRECT}#`,
  'https://app.example.com%2Fcallback',
  'https://app.example.com/%63allback',
  'https://app.example.com/callback%2F',
  'https://app.example.com:444/callback',
  'https://app.example.com:443/callback',
  'http://app.example.com/callback',
  'https://app.example.com@evil.example.com/callback',
  'https://evil.example.com@app.example.com/callback',
  'https://app.example.com/cb/../callback',
  'https://app.example.com/./callback',
  'https://app.example.com./callback',
  ` ${REDIRECT}`,
  `${REDIRECT} `,
  'http://localhost/callback',
  'http://localhost:3000/callback',
  'http://127.0.0.1:8080/callback',
];

test('OA-3 "only the byte-identical registered URI gets a code": 24 near-misses (slash, case, query, fragment, %2F, port, http, userinfo, dot segments, localhost on a live app) are 422 naming redirect_uri at authorization-codes and invalid_grant at oauth/token; an Application with no redirect_uris gets no code', async () => {
  const user = await member(t, admin, app.id);
  assertStatus(await authorize(t, user.token, request(app.id, REDIRECT)), 201);
  const accepted: string[] = [];
  const check = (label: string, res: InjectResponse, refuse: (r: InjectResponse) => void) => {
    if (res.statusCode < 400) accepted.push(`${label}: ${res.statusCode}`);
    else refuse(res);
  };
  for (const uri of NEAR_MISSES) check(`code for ${JSON.stringify(uri)}`, await authorize(t, user.token, request(app.id, uri)), (r) => assertInvalid(r, 'redirect_uri'));

  // Redeemed with anything but the URI it was issued for: refused, and the code is not used up.
  const c = await codeFor(t, user, app.id);
  for (const uri of NEAR_MISSES) check(`token for ${JSON.stringify(uri)}`, await tokenReq(t, codeGrant(c, app.id, { redirect_uri: uri })), (r) => assertOAuthError(r, 'invalid_grant'));

  // No registered URIs: nothing matches, not even the URI other Applications use.
  const bare = await oauthApp(t, admin, { redirect_uris: [] });
  const bareUser = await member(t, admin, bare.id);
  check('code on an Application with no redirect_uris', await authorize(t, bareUser.token, request(bare.id, REDIRECT)), (r) => assertInvalid(r, 'redirect_uri'));

  const total = NEAR_MISSES.length * 2 + 1;
  figure('OA-3', `variants accepted: ${accepted.length} / ${total}`);
  assert.deepEqual(accepted, []);
  // The byte-identical URI still redeems the same code.
  assertStatus(await tokenReq(t, codeGrant(c, app.id)), 200);
});

test('OA-3 "localhost only on a test_mode app": a test_mode Application registering http://localhost:3000/cb and http://127.0.0.1:8080/cb gets codes for exactly those; another port, host spelling or loopback address is 422 naming redirect_uri', async () => {
  const testKey = await platformKey(t, ['applications.manage', 'entitlements.manage'], 'test');
  const registered = ['http://localhost:3000/cb', 'http://127.0.0.1:8080/cb'];
  const local = await newApp(t, testKey, { redirect_uris: registered }, { ownerMode: 'test' });
  assert.equal(local.body.test_mode, true);
  const user = await person(t, { mode: 'test' });
  await grant(t, testKey, user.id, local.id);
  for (const uri of registered) {
    const to = new URL(assertStatus(await authorize(t, user.token, request(local.id, uri)), 201).redirect_to);
    assert.equal(`${to.origin}${to.pathname}`, uri);
  }
  const accepted: string[] = [];
  const misses = [
    'http://localhost:3001/cb', 'http://localhost/cb', 'http://127.0.0.1:3000/cb', 'http://localhost:8080/cb', 'http://[::1]:3000/cb',
    'http://LOCALHOST:3000/cb', 'https://localhost:3000/cb', 'http://localhost:3000/cb/', 'http://127.0.0.1:8080/cb?x=1', 'http://localhost.:3000/cb',
  ];
  for (const uri of misses) {
    const res = await authorize(t, user.token, request(local.id, uri));
    if (res.statusCode < 400) accepted.push(`${uri}: ${res.statusCode}`);
    else assertInvalid(res, 'redirect_uri');
  }
  figure('OA-3', `loopback variants accepted on a test_mode app: ${accepted.length} / ${misses.length}`);
  assert.deepEqual(accepted, []);
});
