// TK-2: token-type confusion. Six genuine credentials of one user (a platform access token, an app
// token, a platform and an app refresh token, an mfa_token, a plat_ key) are each presented in every
// slot that expects another kind: the bearer of User-token routes, refresh_token at token/refresh and
// at oauth/token, mfa_token at mfa/verify, code at oauth/token. Each is refused with the slot's own
// code, and none of them is used up by the attempt: every genuine one still works in its own slot.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../../helpers/app.js';
import { createMfaUser, mfaChallenge, totpCode } from '../../auth/support.js';
import { assertError, assertInvalid, assertStatus, call, grant, platformKey, type AppFixture, type InjectResponse } from '../../access/support.js';
import { assertOAuthError, oauthApp, pkce, refreshGrant, signIn, tokenReq } from '../../oauth/support.js';
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

type Kind = 'access' | 'app_token' | 'platform_rtk' | 'app_rtk' | 'mfa' | 'plat_key';

test('TK-2 "401 (or OAuth invalid_grant) for each": an app token as a platform bearer, mfa_/rtk_/plat_ strings where a JWT is expected, a platform access token as refresh_token at oauth/token, and every other cross-presentation are refused; a plat_ key on a User-token route is 400 user_token_required (Part A); nothing is used up', async () => {
  const mfa = await createMfaUser(t);
  await grant(t, admin, mfa.user.id, app.id);
  const mfaToken = await mfaChallenge(t, mfa.user);
  const verified = assertStatus(await t.app.inject({ method: 'POST', url: '/v1/auth/mfa/verify', payload: { mfa_token: await mfaChallenge(t, mfa.user), code: await totpCode(t, mfa.secret) } }), 200);
  const tokens: Record<Kind, string> = {
    access: verified.access_token,
    app_token: assertStatus(await call(t, 'POST', '/v1/auth/app-tokens', verified.access_token, { application_id: app.id }), 200).access_token,
    platform_rtk: verified.refresh_token,
    app_rtk: (await signIn(t, { token: verified.access_token }, app.id)).refresh_token,
    mfa: mfaToken,
    plat_key: admin,
  };
  assert.match(tokens.platform_rtk, /^rtk_/);
  assert.match(tokens.app_rtk, /^rtk_/);
  assert.match(tokens.mfa, /^mfa_/);
  assert.match(tokens.plat_key, /^plat_live_/);
  // A JWT dressed in the other prefixes: still not a credential of either kind.
  const dressed = ['mfa_', 'rtk_', 'plat_live_'].map((p) => [`${p}+access token`, `${p}${tokens.access}`] as const);
  const others = (own: Kind[]) => [...(Object.entries(tokens) as [Kind, string][]).filter(([k]) => !own.includes(k)), ...dressed];

  const unauthenticated = (r: InjectResponse) => {
    assertError(r, 401, 'unauthenticated');
    assert.match(String(r.headers['www-authenticate']), /error="invalid_token"/);
  };
  const slots: { slot: string; own: Kind[]; send: (cred: string) => Promise<InjectResponse>; refuse: (r: InjectResponse, kind: string, cred: string) => void }[] = [
    {
      slot: 'Bearer on GET /v1/users/me',
      own: ['access'],
      send: (cred) => call(t, 'GET', '/v1/users/me', cred),
      // An API key is a platform credential, just not a person: Part A's 400 user_token_required.
      refuse: (r, kind) => (kind === 'plat_key' ? assertError(r, 400, 'user_token_required') : unauthenticated(r)),
    },
    {
      slot: 'Bearer on POST /v1/auth/app-tokens',
      own: ['access'],
      send: (cred) => call(t, 'POST', '/v1/auth/app-tokens', cred, { application_id: app.id }),
      refuse: (r, kind) => (kind === 'plat_key' ? assertError(r, 400, 'user_token_required') : unauthenticated(r)),
    },
    {
      slot: 'refresh_token at POST /v1/auth/token/refresh',
      own: ['platform_rtk'],
      send: (cred) => t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', payload: { refresh_token: cred } }),
      refuse: (r) => assertError(r, 401, 'invalid_refresh_token'),
    },
    {
      slot: 'refresh_token at oauth/token',
      own: ['app_rtk'],
      send: (cred) => tokenReq(t, refreshGrant(cred, app.id)),
      refuse: (r) => assertOAuthError(r, 'invalid_grant'),
    },
    {
      slot: 'code at oauth/token',
      own: [],
      send: (cred) => tokenReq(t, { grant_type: 'authorization_code', code: cred, code_verifier: pkce().verifier, redirect_uri: app.body.redirect_uris[0], client_id: app.id }),
      refuse: (r) => assertOAuthError(r, 'invalid_grant'),
    },
    {
      slot: 'mfa_token at POST /v1/auth/mfa/verify (with a right code)',
      own: ['mfa'],
      send: async (cred) => t.app.inject({ method: 'POST', url: '/v1/auth/mfa/verify', payload: { mfa_token: cred, code: await totpCode(t, mfa.secret) } }),
      // The schema caps mfa_token at 200 characters, so a JWT there is a field error (422) first.
      refuse: (r, _kind, cred) => (cred.length > 200 ? assertInvalid(r, 'mfa_token') : assertError(r, 401, 'invalid_credentials')),
    },
  ];

  // A step on, so the TOTP code sent with each wrong mfa_token is one nobody has used.
  t.clock.advance(30);
  const accepted: string[] = [];
  let tried = 0;
  for (const { slot, own, send, refuse } of slots) {
    for (const [kind, cred] of others(own)) {
      tried++;
      const res = await send(cred);
      if (res.statusCode < 400) {
        accepted.push(`${kind} as ${slot}: ${res.statusCode} ${res.body.slice(0, 120)}`);
        continue;
      }
      try {
        refuse(res, kind, cred);
      } catch (err) {
        accepted.push(`${kind} as ${slot}: ${(err as Error).message.split('\n')[0]}`);
      }
    }
  }
  figure('TK-2', `confusions accepted: ${accepted.length} / ${tried}`);
  assert.deepEqual(accepted, []);

  // Nothing above used a genuine credential up or ended its session: each works in its own slot.
  assertStatus(await call(t, 'GET', '/v1/users/me', tokens.access), 200);
  assertStatus(await call(t, 'GET', '/v1/users?limit=1', tokens.plat_key), 200);
  assertStatus(await t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', payload: { refresh_token: tokens.platform_rtk } }), 200);
  assertStatus(await tokenReq(t, refreshGrant(tokens.app_rtk, app.id)), 200);
  assertStatus(await t.app.inject({ method: 'POST', url: '/v1/auth/mfa/verify', payload: { mfa_token: tokens.mfa, code: await totpCode(t, mfa.secret) } }), 200);
});
