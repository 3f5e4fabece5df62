// POST /v1/auth/app-tokens (Part A Rule 7): a 5-minute RS256 token for one Application.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JWTPayload } from 'jose';
import { buildTestApp, withStoppedClock, type TestApp } from '../helpers/app.js';
import {
  assertError, assertStatus, call, createOrg, customPlatformRole, grant, newApp, orgGrant, patchEnt, person, platformKey, session, setReview, sql, type AppFixture,
} from './support.js';
import { createUser } from '../helpers/fixtures.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
});
after(() => t.close());

const issue = (cred: string, body: Record<string, unknown>) => call(t, 'POST', '/v1/auth/app-tokens', cred, body);

async function verify(token: string, audience: string): Promise<JWTPayload> {
  const jwks = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }), 200);
  const { payload } = await jwtVerify(token, createLocalJWKSet(jwks), {
    algorithms: ['RS256'],
    audience,
    issuer: t.config.publicUrl,
    currentDate: t.clock.now(),
  });
  return payload;
}

test('an active user gets {token_type Bearer, access_token, expires_in 300, application_id, organization_id}; the JWT verifies (RS256, JWKS, aud = application id)', async () => {
  const user = await createUser(t);
  const auth = await session(t, user);
  await grant(t, admin, user.id, app.id);
  const res = await issue(auth.access_token, { application_id: app.id });
  const body = assertStatus(res, 200);
  assert.deepEqual(Object.keys(body).sort(), ['access_token', 'application_id', 'expires_in', 'organization_id', 'token_type']);
  assert.equal(body.token_type, 'Bearer');
  assert.equal(body.expires_in, 300);
  assert.equal(body.application_id, app.id);
  assert.equal(body.organization_id, null);
  assert.equal(decodeProtectedHeader(body.access_token).alg, 'RS256');
  const claims = await verify(body.access_token, app.id);
  assert.equal(claims.aud, app.id);
  assert.equal(claims.sub, user.id);
  assert.equal(claims.sid, auth.session_id);
  assert.match(String(claims.jti), /^atk_/);
  assert.equal(claims.test_mode, false);
  assert.equal(claims.exp! - claims.iat!, 300);
  assert.ok(!('org_id' in claims), '!(\'org_id\' in claims)');
  // Bound to this Application: another audience or the platform audience does not verify.
  await assert.rejects(verify(body.access_token, 'platform'));
  await assert.rejects(verify(body.access_token, 'app_other'));
});

test('an app token is not a platform credential (401 on the API)', async () => {
  const user = await createUser(t);
  const auth = await session(t, user);
  const other = await newApp(t, admin);
  await grant(t, admin, user.id, other.id);
  const { access_token } = assertStatus(await issue(auth.access_token, { application_id: other.id }), 200);
  assert.equal((await call(t, 'GET', '/v1/users/me', access_token)).statusCode, 401);
});

test('the app token lives 5 minutes: it no longer verifies after exp', async () => {
  const user = await createUser(t);
  const auth = await session(t, user);
  const other = await newApp(t, admin);
  await grant(t, admin, user.id, other.id);
  const { access_token } = assertStatus(await issue(auth.access_token, { application_id: other.id }), 200);
  const jwks = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }), 200);
  const at = (s: number) => new Date(t.clock.now().getTime() + s * 1000);
  await jwtVerify(access_token, createLocalJWKSet(jwks), { audience: other.id, currentDate: at(290) });
  await assert.rejects(jwtVerify(access_token, createLocalJWKSet(jwks), { audience: other.id, currentDate: at(301) }));
});

/** Verifies an app token as its Application would, locally, at `at`. */
async function verifiesAt(token: string, audience: string, at: Date): Promise<boolean> {
  const jwks = assertStatus(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }), 200);
  return jwtVerify(token, createLocalJWKSet(jwks), { audience, currentDate: at }).then(() => true, () => false);
}

/** A user signed in with a trial of a new Application ending a minute from now (whole seconds), the clock stopped. */
async function withTrialEndingInAMinute(fn: (f: { user: { id: string }; other: { id: string }; auth: { access_token: string }; endsAt: Date }) => Promise<void>): Promise<void> {
  const user = await createUser(t);
  const other = await newApp(t, admin);
  await withStoppedClock(t, async () => {
    const auth = await session(t, user);
    const endsAt = new Date(Math.floor(t.clock.now().getTime() / 1000) * 1000 + 60_000);
    await grant(t, admin, user.id, other.id, { source: 'trial', ends_at: endsAt.toISOString() });
    await fn({ user, other, auth, endsAt });
  });
}

/** An app token issued now for `appId` ends at `end` (its exp), `seconds` from now give or take the second being cut. */
async function assertAppTokenEndsAt(accessToken: string, appId: string, end: Date, seconds: number): Promise<void> {
  const body = assertStatus(await issue(accessToken, { application_id: appId }), 200);
  assert.equal((await verify(body.access_token, appId)).exp, end.getTime() / 1000);
  assert.ok(body.expires_in <= seconds && body.expires_in >= seconds - 1, `expires_in ${body.expires_in}`);
}

test('an app token never outlives the access it stands for (Part B: ends_at <= now is expired at once): issued a minute before a trial\'s ends_at, its exp is ends_at and expires_in the seconds left, so the Application refuses it from ends_at on', async () => {
  await withTrialEndingInAMinute(async ({ other, auth, endsAt }) => {
    const body = assertStatus(await issue(auth.access_token, { application_id: other.id }), 200);
    const claims = await verify(body.access_token, other.id);
    assert.equal(claims.exp, endsAt.getTime() / 1000);
    assert.equal(body.expires_in, claims.exp! - claims.iat!);
    assert.ok(body.expires_in <= 60 && body.expires_in >= 59, `expires_in ${body.expires_in}`);
    assert.equal(await verifiesAt(body.access_token, other.id, new Date(endsAt.getTime() - 1)), true);
    assert.equal(await verifiesAt(body.access_token, other.id, endsAt), false);
    // At ends_at the platform refuses too: the two agree on the instant (a millisecond before, it still issues).
    // Moved in whole milliseconds: ends_at is a whole second, the stopped clock is not.
    t.clock.offsetMs += endsAt.getTime() - 1 - t.clock.now().getTime();
    assertStatus(await issue(auth.access_token, { application_id: other.id }), 200);
    t.clock.offsetMs += 1;
    assert.equal(t.clock.now().getTime(), endsAt.getTime());
    const refused = assertError(await issue(auth.access_token, { application_id: other.id }), 403, 'entitlement_required');
    assert.equal(refused.details.entitlement_status, 'expired');
  });
});

test('an app token\'s exp is the latest end among the paths giving access: an unending grant beside one that ends gives the full 5 minutes; with organization_id only that Organization\'s grant counts', async () => {
  const user = await createUser(t);
  const other = await newApp(t, admin);
  await withStoppedClock(t, async () => {
    const auth = await session(t, user);
    const endsAt = new Date(Math.floor(t.clock.now().getTime() / 1000) * 1000 + 120_000);
    const org = await createOrg(t, [{ userId: user.id }]);
    await orgGrant(t, org, other.id, { endsAt });
    const unlimited = await createOrg(t, [{ userId: user.id }]);
    await orgGrant(t, unlimited, other.id);
    assert.equal(assertStatus(await issue(auth.access_token, { application_id: other.id }), 200).expires_in, 300);
    const viaOrg = assertStatus(await issue(auth.access_token, { application_id: other.id, organization_id: org }), 200);
    assert.equal((await verify(viaOrg.access_token, other.id)).exp, endsAt.getTime() / 1000);
    assert.ok(viaOrg.expires_in <= 120 && viaOrg.expires_in >= 119, `expires_in ${viaOrg.expires_in}`);
    assert.equal(assertStatus(await issue(auth.access_token, { application_id: other.id, organization_id: unlimited }), 200).expires_in, 300);
  });
});

test('an app token\'s exp is the latest end among the paths giving access: of two grants that both end, the later ends_at bounds exp, not the earlier', async () => {
  const user = await createUser(t);
  const other = await newApp(t, admin);
  await withStoppedClock(t, async () => {
    const auth = await session(t, user);
    const second = Math.floor(t.clock.now().getTime() / 1000) * 1000;
    const soon = new Date(second + 60_000);
    const later = new Date(second + 180_000);
    const first = await createOrg(t, [{ userId: user.id }]);
    await orgGrant(t, first, other.id, { endsAt: soon });
    const next = await createOrg(t, [{ userId: user.id }]);
    await orgGrant(t, next, other.id, { endsAt: later });
    await assertAppTokenEndsAt(auth.access_token, other.id, later, 180);
  });
});

test('an app token never outlives the access it stands for: only paths giving access count, so an unending personal grant that is disabled does not stretch exp past the organization grant\'s ends_at', async () => {
  const user = await createUser(t);
  const other = await newApp(t, admin);
  await withStoppedClock(t, async () => {
    const auth = await session(t, user);
    const endsAt = new Date(Math.floor(t.clock.now().getTime() / 1000) * 1000 + 120_000);
    const ent = await grant(t, admin, user.id, other.id);
    assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'refund pending' }), 200);
    const org = await createOrg(t, [{ userId: user.id }]);
    await orgGrant(t, org, other.id, { endsAt });
    await assertAppTokenEndsAt(auth.access_token, other.id, endsAt, 120);
  });
});

test('an app token never outlives the access it stands for: an unending organization grant that excludes the user (denylist) gives no access, so it does not stretch exp past the personal trial\'s ends_at', async () => {
  await withTrialEndingInAMinute(async ({ user, other, auth, endsAt }) => {
    const org = await createOrg(t, [{ userId: user.id }]);
    await orgGrant(t, org, other.id, { memberScope: 'denylist', overrides: [user.id] });
    await assertAppTokenEndsAt(auth.access_token, other.id, endsAt, 60);
  });
});

test('an app token never outlives its session (90 days absolute): issued 2 minutes before the session ends, its exp is the session\'s end', async () => {
  const user = await createUser(t);
  const other = await newApp(t, admin);
  await grant(t, admin, user.id, other.id);
  await withStoppedClock(t, async () => {
    const signIn = assertStatus(await call(t, 'POST', '/v1/auth/login', null, { email: user.email, password: user.password }), 200);
    const [{ expires_at: sessionEnd }] = await sql<{ expires_at: Date }>(t, 'SELECT expires_at FROM sessions WHERE id = $1', [signIn.session_id]);
    // Refreshed within every 30 idle days, up to 2 minutes before the session's 90 days end.
    let auth = signIn;
    for (const step of [29 * 86400, 29 * 86400, 29 * 86400, (sessionEnd.getTime() - t.clock.now().getTime()) / 1000 - 87 * 86400 - 120]) {
      t.clock.advance(step);
      auth = assertStatus(await call(t, 'POST', '/v1/auth/token/refresh', null, { refresh_token: auth.refresh_token }), 200);
    }
    const body = assertStatus(await issue(auth.access_token, { application_id: other.id }), 200);
    const claims = await verify(body.access_token, other.id);
    assert.equal(claims.exp, Math.floor(sessionEnd.getTime() / 1000));
    assert.equal(body.expires_in, claims.exp! - claims.iat!);
    assert.ok(body.expires_in <= 120 && body.expires_in >= 119, `expires_in ${body.expires_in}`);
  });
});

test('a test-mode user gets test_mode true in the token', async () => {
  const user = await createUser(t, { mode: 'test' });
  const auth = await session(t, user);
  const testKey = await platformKey(t, ['entitlements.manage'], 'test');
  const ent = await grant(t, testKey, user.id, app.id);
  assert.equal(ent.test_mode, true);
  const body = assertStatus(await issue(auth.access_token, { application_id: app.id }), 200);
  const claims = await verify(body.access_token, app.id);
  assert.equal(claims.test_mode, true);
  assert.equal(claims.sub, user.id);
});

test('organization_id attributes the token to that Organization\'s grant: org_id claim and organization_id in the response', async () => {
  const user = await createUser(t);
  const auth = await session(t, user);
  const other = await newApp(t, admin);
  const org = await createOrg(t, [{ userId: user.id }]);
  await orgGrant(t, org, other.id);
  const body = assertStatus(await issue(auth.access_token, { application_id: other.id, organization_id: org }), 200);
  assert.equal(body.organization_id, org);
  const claims = await verify(body.access_token, other.id);
  assert.equal(claims.org_id, org);
  assert.equal(claims.exp! - claims.iat!, 300);
});

test('organization_id attributes org_id only through an active, included grant of that Organization: otherwise 403 entitlement_required, even with active access by another path', async () => {
  const user = await createUser(t);
  const auth = await session(t, user);
  const other = await newApp(t, admin);
  await grant(t, admin, user.id, other.id);
  // Access is active through the personal grant and through another Organization's grant; none of these Organizations gives it a path.
  await orgGrant(t, await createOrg(t, [{ userId: user.id }]), other.id);
  const noGrant = await createOrg(t, [{ userId: user.id }]);
  const disabled = await createOrg(t, [{ userId: user.id }]);
  await orgGrant(t, disabled, other.id, { status: 'disabled' });
  const excluding = await createOrg(t, [{ userId: user.id }]);
  await orgGrant(t, excluding, other.id, { memberScope: 'denylist', overrides: [user.id] });
  const stranger = await createOrg(t, [{ userId: (await createUser(t)).id }]);
  await orgGrant(t, stranger, other.id);
  for (const org of [noGrant, disabled, excluding, stranger]) {
    const error = assertError(await issue(auth.access_token, { application_id: other.id, organization_id: org }), 403, 'entitlement_required');
    assert.equal(error.details.organization_id, org);
  }
  assert.equal(assertStatus(await issue(auth.access_token, { application_id: other.id }), 200).organization_id, null);
});

test('403 entitlement_required unless resolved access is active (no grant, disabled, scheduled)', async () => {
  const user = await person(t);
  const other = await newApp(t, admin);
  assertError(await issue(user.token, { application_id: other.id }), 403, 'entitlement_required');
  const ent = await grant(t, admin, user.id, other.id);
  assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
  assertError(await issue(user.token, { application_id: other.id }), 403, 'entitlement_required');
  const scheduled = await person(t);
  await grant(t, admin, scheduled.id, other.id, { starts_at: new Date(t.clock.now().getTime() + 3600_000).toISOString() });
  assertError(await issue(scheduled.token, { application_id: other.id }), 403, 'entitlement_required');
});

test('409 application_not_available when the Application is suspended (existing grants untouched)', async () => {
  const user = await person(t);
  const other = await newApp(t, admin);
  const ent = await grant(t, admin, user.id, other.id);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${other.id}`, admin, { review_status: 'suspended', review_notes: 'incident' }), 200);
  assertError(await issue(user.token, { application_id: other.id }), 409, 'application_not_available');
  assert.equal((await sql(t, 'SELECT status FROM entitlements WHERE id = $1', [ent.id]))[0].status, 'active');
  assertStatus(await call(t, 'PATCH', `/v1/applications/${other.id}`, admin, { review_status: 'approved' }), 200);
  assertStatus(await issue(user.token, { application_id: other.id }), 200);
});

test('Part B "an unauthorized reader of a scoped resource gets 404 to avoid revealing existence": a user who can neither see the Application (internal, or not approved and not theirs) nor holds a path to it gets 404 application_not_found, as for an unknown id, never its review_status or Tenant state; its owner and entitled users keep their 409', async () => {
  const stranger = await person(t);
  const unknown = assertError(await issue(stranger.token, { application_id: `app_nope${Date.now()}` }), 404, 'application_not_found');
  const rejected = await newApp(t, admin);
  await setReview(t, rejected.id, 'rejected');
  const pending = await newApp(t, admin);
  await setReview(t, pending.id, 'pending_review');
  const suspended = await newApp(t, admin);
  const entitled = await person(t);
  await grant(t, admin, entitled.id, suspended.id);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${suspended.id}`, admin, { review_status: 'suspended', review_notes: 'incident' }), 200);
  const internal = await newApp(t, admin, { visibility: 'internal' });
  const internalFrozen = await newApp(t, admin, { visibility: 'internal' });
  await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [internalFrozen.tenant_id]);
  for (const hidden of [rejected, pending, suspended, internal, internalFrozen]) {
    const error = assertError(await issue(stranger.token, { application_id: hidden.id }), 404, 'application_not_found');
    assert.deepEqual(error, unknown, hidden.id);
  }
  // Those who may know it still learn why.
  assert.equal(assertError(await issue(rejected.owner!.token, { application_id: rejected.id }), 409, 'application_not_available').details.review_status, 'rejected');
  assert.equal(assertError(await issue(entitled.token, { application_id: suspended.id }), 409, 'application_not_available').details.review_status, 'suspended');
  assertError(await issue(stranger.token, { application_id: app.id }), 403, 'entitlement_required');
});

test("403 tenant_suspended when the Application's Tenant is suspended", async () => {
  const user = await person(t);
  const other = await newApp(t, admin);
  await grant(t, admin, user.id, other.id);
  await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [other.tenant_id]);
  assertError(await issue(user.token, { application_id: other.id }), 403, 'tenant_suspended');
  await sql(t, 'UPDATE tenants SET suspended = false WHERE id = $1', [other.tenant_id]);
  assertStatus(await issue(user.token, { application_id: other.id }), 200);
});

test('docs/decisions.md "App token" refusal order: when several apply, an API key gets 400 user_token_required, then 409 application_not_available, then 403 tenant_suspended, then 403 entitlement_required (resolved access), then 403 entitlement_required for organization_id', async () => {
  const user = await person(t);
  const other = await newApp(t, admin);
  const ent = await grant(t, admin, user.id, other.id);
  const org = await createOrg(t, []);
  try {
    assertStatus(await patchEnt(t, admin, ent.id, { status: 'disabled', disabled_reason: 'x' }), 200);
    assertStatus(await call(t, 'PATCH', `/v1/applications/${other.id}`, admin, { review_status: 'suspended', review_notes: 'incident' }), 200);
    await sql(t, 'UPDATE tenants SET suspended = true WHERE id = $1', [other.tenant_id]);
    const body = { application_id: other.id, organization_id: org };
    assertError(await issue(admin, body), 400, 'user_token_required');
    assertError(await issue(user.token, body), 409, 'application_not_available');
    assertStatus(await call(t, 'PATCH', `/v1/applications/${other.id}`, admin, { review_status: 'approved' }), 200);
    assertError(await issue(user.token, body), 403, 'tenant_suspended');
    await sql(t, 'UPDATE tenants SET suspended = false WHERE id = $1', [other.tenant_id]);
    assert.equal(assertError(await issue(user.token, body), 403, 'entitlement_required').details.entitlement_status, 'disabled');
    assertStatus(await patchEnt(t, admin, ent.id, { status: 'active' }), 200);
    assert.equal(assertError(await issue(user.token, body), 403, 'entitlement_required').details.organization_id, org);
  } finally {
    await sql(t, 'UPDATE tenants SET suspended = false WHERE id = $1', [other.tenant_id]);
  }
});

test('an API key gets 400 user_token_required', async () => {
  for (const key of [admin, await platformKey(t, [])]) {
    assertError(await issue(key, { application_id: app.id }), 400, 'user_token_required');
  }
  assert.equal((await issue('', { application_id: app.id })).statusCode, 401);
});

test('app-tokens authenticates in its own query: a revoked session or a suspended user gets 401 on the very next call; an API key 400 user_token_required', async () => {
  const user = await createUser(t);
  const auth = await session(t, user);
  await grant(t, admin, user.id, app.id);
  assertStatus(await issue(auth.access_token, { application_id: app.id }), 200);
  assertStatus(await call(t, 'DELETE', `/v1/users/${user.id}/sessions/${auth.session_id}`, admin), 204);
  assertError(await issue(auth.access_token, { application_id: app.id }), 401, 'unauthenticated');
  assertError(await issue(auth.access_token, {}), 401, 'unauthenticated'); // a field error is not described to an ended session
  assertError(await issue(auth.access_token, { application_id: 42 }), 401, 'unauthenticated');
  const other = await createUser(t);
  const otherAuth = await session(t, other);
  await grant(t, admin, other.id, app.id);
  assertStatus(await call(t, 'POST', `/v1/users/${other.id}/suspend`, admin, { reason: 'test' }), 200);
  assertError(await issue(otherAuth.access_token, { application_id: app.id }), 401, 'unauthenticated');
  assertError(await issue(admin, { application_id: app.id }), 400, 'user_token_required');
});

test('app-tokens: a body refused before the route runs (not JSON, another media type, over 1 MB) answers an ended session 401, as every other route does; a live session still gets the body\'s own error', async () => {
  const user = await createUser(t);
  const auth = await session(t, user);
  const send = (token: string, contentType: string, payload: string) =>
    t.app.inject({ method: 'POST', url: '/v1/auth/app-tokens', headers: { authorization: `Bearer ${token}`, 'content-type': contentType }, payload });
  const big = JSON.stringify({ application_id: app.id, pad: 'x'.repeat(1024 * 1024) });
  assertError(await send(auth.access_token, 'application/json', '{'), 400, 'malformed_json');
  assertError(await send(auth.access_token, 'text/plain', 'x'), 415, 'unsupported_media_type');
  assertError(await send(auth.access_token, 'application/json', big), 413, 'payload_too_large');
  assert.equal((await call(t, 'POST', '/v1/auth/logout', auth.access_token, {})).statusCode, 204);
  assertError(await send(auth.access_token, 'application/json', '{'), 401, 'unauthenticated');
  assertError(await send(auth.access_token, 'text/plain', 'x'), 401, 'unauthenticated');
  assertError(await send(auth.access_token, 'application/json', big), 401, 'unauthenticated');
  // The same body on a route the gate authenticates in full: 401 first.
  assertError(await t.app.inject({ method: 'POST', url: '/v1/organizations', headers: { authorization: `Bearer ${auth.access_token}`, 'content-type': 'application/json' }, payload: '{' }), 401, 'unauthenticated');
});

test('the refusal goes to whoever may see the Application, judged on the caller\'s roles as they are now (Part B visibility: internal and non-approved Applications are visible to applications.manage; Part A: roles are resolved on every request): a user holding applications.manage without a path gets 403 entitlement_required for an internal Application and 409 application_not_available for a pending one; once the Role is removed, 404 application_not_found', async () => {
  const roleId = await customPlatformRole(t, ['applications.manage']);
  const moderator = await person(t, { roles: [roleId] });
  const internal = await newApp(t, admin, { visibility: 'internal' });
  const pending = await newApp(t, admin);
  await setReview(t, pending.id, 'pending_review');
  assert.equal(assertError(await issue(moderator.token, { application_id: internal.id }), 403, 'entitlement_required').details.entitlement_status, 'none');
  assert.equal(assertError(await issue(moderator.token, { application_id: pending.id }), 409, 'application_not_available').details.review_status, 'pending_review');
  assertStatus(await call(t, 'DELETE', `/v1/users/${moderator.id}/roles/${roleId}`, admin), 204);
  for (const hidden of [internal, pending]) assertError(await issue(moderator.token, { application_id: hidden.id }), 404, 'application_not_found');
});
