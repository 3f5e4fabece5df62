// POST /v1/auth/oauth/authorization-codes (Part A Rule 8): codes for the hosted sign-in page.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { assertError, assertInvalid, assertStatus, call, patchEnt, person, platformKey, setReview, sql, type AppFixture } from '../access/support.js';
import { authorize, member, oauthApp, pkce, REDIRECT, CODES } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin);
});
after(() => t.close());

const body = (extra: Record<string, unknown> = {}) => ({
  application_id: app.id, redirect_uri: REDIRECT, code_challenge: pkce().challenge, code_challenge_method: 'S256', ...extra,
});

test('RFC 9207: the authorization response names its issuer (redirect_to carries iss, the discovery issuer), and both metadata documents (OpenID discovery and RFC 8414) say so', async () => {
  const user = await member(t, admin, app.id);
  const out = assertStatus(await authorize(t, user.token, body({ state: 's1' })), 201);
  const to = new URL(out.redirect_to);
  assert.equal(to.searchParams.get('iss'), t.config.publicUrl);
  const openid = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/openid-configuration' }), 200);
  const oauth = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/oauth-authorization-server' }), 200);
  assert.equal(openid.issuer, t.config.publicUrl);
  for (const doc of [openid, oauth]) assert.equal(doc.authorization_response_iss_parameter_supported, true);
  const { subject_types_supported: _s, id_token_signing_alg_values_supported: _i, ...shared } = openid;
  assert.deepEqual(oauth, shared, 'RFC 8414 metadata: the same server, without the OpenID-only fields');
});

test('201 {code, expires_in 60, redirect_to}: redirect_to carries code and state; the code is stored hashed and bound to app, redirect_uri, challenge and session', async () => {
  const user = await member(t, admin, app.id);
  const { challenge } = pkce();
  const res = await authorize(t, user.token, body({ code_challenge: challenge, state: 'xyz &=/ state' }));
  const out = assertStatus(res, 201);
  assert.deepEqual(Object.keys(out).sort(), ['code', 'expires_in', 'redirect_to']);
  assert.equal(out.expires_in, 60);
  const to = new URL(out.redirect_to);
  assert.equal(`${to.origin}${to.pathname}`, REDIRECT);
  assert.equal(to.searchParams.get('code'), out.code);
  assert.equal(to.searchParams.get('state'), 'xyz &=/ state');

  const rows = await sql(t, 'SELECT * FROM oauth_authorization_codes WHERE user_id = $1', [user.id]);
  assert.equal(rows.length, 1);
  const row = rows[0];
  assert.equal(row.code_hash, createHash('sha256').update(out.code).digest('hex'));
  assert.ok(!JSON.stringify(row).includes(out.code), 'the code itself is never stored');
  assert.equal(row.application_id, app.id);
  assert.equal(row.redirect_uri, REDIRECT);
  assert.equal(row.code_challenge, challenge);
  assert.equal(row.session_id, user.sid);
  assert.equal(row.used_at, null);
  assert.equal(new Date(row.expires_at).getTime() - new Date(row.created_at).getTime(), 60_000);
});

test('without state, redirect_to has only code and iss; a registered query string is kept', async () => {
  const withQuery = 'https://app.example.com/cb?tenant=acme';
  const other = await oauthApp(t, admin, { redirect_uris: [REDIRECT, withQuery] });
  const user = await member(t, admin, other.id);
  const plain = new URL(assertStatus(await authorize(t, user.token, body({ application_id: other.id })), 201).redirect_to);
  assert.deepEqual([...plain.searchParams.keys()], ['code', 'iss']);
  const kept = new URL(assertStatus(await authorize(t, user.token, body({ application_id: other.id, redirect_uri: withQuery, state: 's1' })), 201).redirect_to);
  assert.equal(kept.searchParams.get('tenant'), 'acme');
  assert.equal(kept.searchParams.get('state'), 's1');
  assert.ok(kept.searchParams.get('code'), 'kept.searchParams.get(\'code\')');
});

test('RFC 6749 §3.1.2: the registered query component "MUST be retained when adding additional query parameters": redirect_to is the registered URI as registered, then code, state and iss (a registered code, state or iss is replaced, never doubled)', async () => {
  const registered = 'https://app.example.com/cb?next=/home&flag&x=a%20b&y=~';
  const clashing = 'https://app.example.com/cb?code=registered&keep=1&state=old&iss=elsewhere';
  const other = await oauthApp(t, admin, { redirect_uris: [registered, clashing] });
  const user = await member(t, admin, other.id);
  const out = assertStatus(await authorize(t, user.token, body({ application_id: other.id, redirect_uri: registered, state: 'a b+c~' })), 201);
  const issuer = encodeURIComponent(t.config.publicUrl);
  assert.equal(out.redirect_to, `${registered}&code=${out.code}&state=a+b%2Bc%7E&iss=${issuer}`);
  assert.equal(new URL(out.redirect_to).searchParams.get('state'), 'a b+c~');

  const replaced = assertStatus(await authorize(t, user.token, body({ application_id: other.id, redirect_uri: clashing, state: 's1' })), 201);
  assert.equal(replaced.redirect_to, `https://app.example.com/cb?keep=1&code=${replaced.code}&state=s1&iss=${issuer}`);
});

test('404 application_not_found for an unknown Application', async () => {
  const user = await person(t);
  assertError(await authorize(t, user.token, body({ application_id: 'app_nosuchapp' })), 404, 'application_not_found');
});

test('422 naming redirect_uri: the Application has no redirect_uris, or the URI is not an exact match', async () => {
  const bare = await oauthApp(t, admin, { redirect_uris: [] });
  const user = await member(t, admin, bare.id);
  const none = await authorize(t, user.token, body({ application_id: bare.id }));
  assertInvalid(none, 'redirect_uri');
  assert.deepEqual(none.json().error.details.fields, [{ path: 'redirect_uri', message: 'the Application has no registered redirect_uris' }]);
  assert.equal((await sql(t, 'SELECT 1 FROM oauth_authorization_codes WHERE application_id = $1', [bare.id])).length, 0);
  const member2 = await member(t, admin, app.id);
  for (const uri of [`${REDIRECT}/`, `${REDIRECT}?x=1`, REDIRECT.toUpperCase(), 'https://app.example.com/callbac', 'https://evil.example.com/callback']) {
    assertInvalid(await authorize(t, member2.token, body({ redirect_uri: uri })), 'redirect_uri');
  }
});

test('422 on the PKCE and state limits: challenge 43–128 base64url characters, method only S256, state up to 512', async () => {
  const user = await member(t, admin, app.id);
  assertStatus(await authorize(t, user.token, body({ code_challenge: 'a'.repeat(43) })), 201);
  assertStatus(await authorize(t, user.token, body({ code_challenge: 'A_-9'.repeat(32) })), 201);
  assertStatus(await authorize(t, user.token, body({ state: 's'.repeat(512) })), 201);
  assertInvalid(await authorize(t, user.token, body({ code_challenge: 'a'.repeat(42) })), 'code_challenge');
  assertInvalid(await authorize(t, user.token, body({ code_challenge: 'a'.repeat(129) })), 'code_challenge');
  assertInvalid(await authorize(t, user.token, body({ code_challenge: `${'a'.repeat(42)}=` })), 'code_challenge');
  assertInvalid(await authorize(t, user.token, body({ code_challenge: `${'a'.repeat(42)}+` })), 'code_challenge');
  assertInvalid(await authorize(t, user.token, body({ code_challenge_method: 'plain' })), 'code_challenge_method');
  assertInvalid(await authorize(t, user.token, body({ state: 's'.repeat(513) })), 'state');
  for (const field of ['application_id', 'redirect_uri', 'code_challenge', 'code_challenge_method']) {
    const b: Record<string, unknown> = body();
    delete b[field];
    assertInvalid(await authorize(t, user.token, b), field);
  }
  assertInvalid(await authorize(t, user.token, body({ scope: 'openid' })), 'scope');
});

test('403 entitlement_required without active access (none, or disabled)', async () => {
  const user = await person(t);
  assertError(await authorize(t, user.token, body()), 403, 'entitlement_required');
  const m = await member(t, admin, app.id);
  assertStatus(await patchEnt(t, admin, m.entitlementId, { status: 'disabled', disabled_reason: 'x' }), 200);
  assertError(await authorize(t, m.token, body()), 403, 'entitlement_required');
});

test('409 application_not_available when the Application is not approved; 403 tenant_suspended when its Tenant is suspended', async () => {
  const other = await oauthApp(t, admin);
  const user = await member(t, admin, other.id);
  const b = body({ application_id: other.id });
  await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [other.tenant_id]);
  assertError(await authorize(t, user.token, b), 403, 'tenant_suspended');
  await sql(t, 'UPDATE tenants SET suspended = false WHERE id = $1', [other.tenant_id]);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${other.id}`, admin, { review_status: 'suspended', review_notes: 'incident' }), 200);
  assertError(await authorize(t, user.token, b), 409, 'application_not_available');
});

test('Part B "an unauthorized reader of a scoped resource gets 404 to avoid revealing existence": a user who can neither see the Application (internal, or not approved and not theirs) nor holds a path to it gets 404 application_not_found, as for an unknown id, not its review_status or a redirect_uri complaint; no code is stored', async () => {
  const stranger = await person(t);
  const unknown = assertError(await authorize(t, stranger.token, body({ application_id: `app_nope${Date.now()}` })), 404, 'application_not_found');
  const rejected = await oauthApp(t, admin);
  await setReview(t, rejected.id, 'rejected');
  const internal = await oauthApp(t, admin, { visibility: 'internal' });
  const bare = await oauthApp(t, admin, { visibility: 'internal', redirect_uris: [] });
  for (const [hidden, extra] of [[rejected, {}], [internal, {}], [internal, { redirect_uri: `${REDIRECT}/other` }], [bare, {}]] as const) {
    const error = assertError(await authorize(t, stranger.token, body({ application_id: hidden.id, ...extra })), 404, 'application_not_found');
    assert.deepEqual(error, unknown, hidden.id);
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM oauth_authorization_codes WHERE user_id = $1', [stranger.id]))[0].n, 0);
  // Its owner still learns why.
  assert.equal(assertError(await authorize(t, rejected.owner!.token, body({ application_id: rejected.id })), 409, 'application_not_available').details.review_status, 'rejected');
});

test('a User token is required: anonymous 401, an API key 400 user_token_required', async () => {
  assertError(await authorize(t, null, body()), 401, 'unauthenticated');
  assertError(await call(t, 'POST', CODES, admin, body()), 400, 'user_token_required');
});
