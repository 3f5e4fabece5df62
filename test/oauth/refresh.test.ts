// POST /v1/auth/oauth/token, grant_type=refresh_token: app refresh tokens (Part A "App refresh token").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { blockedBy, client, transactionsInSchema, withDeadlockCount, withTransactionStatements } from '../helpers/locks.js';
import { assertError, assertStatus, auditOf, call, grant, patchEnt, platformKey, session, sql, type AppFixture } from '../access/support.js';
import { createUser } from '../helpers/fixtures.js';
import { assertOAuthError, codeFor, codeGrant, member, oauthApp, pausedAfter, refreshGrant, signIn, tokenReq, verifyAppToken } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await oauthApp(t, admin);
});
after(() => t.close());

test('a refresh returns a new app token and a new refresh token; the old one is single use', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const next = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  assert.deepEqual(Object.keys(next).sort(), ['access_token', 'application_id', 'expires_in', 'organization_id', 'refresh_token', 'refresh_token_expires_in', 'token_type']);
  assert.equal(next.application_id, app.id);
  assert.notEqual(next.refresh_token, first.refresh_token);
  assert.match(next.refresh_token, /^rtk_/);
  assert.equal(next.expires_in, 300);
  const claims = await verifyAppToken(t, next.access_token, app.id);
  assert.equal(claims.sub, user.id);
  assert.equal(claims.sid, user.sid);
  assertStatus(await tokenReq(t, refreshGrant(next.refresh_token, app.id)), 200);
});

test('reuse of a used refresh token is invalid_grant and revokes the whole grant (the live successor too), audited', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const next = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 'invalid_grant');
  assertOAuthError(await tokenReq(t, refreshGrant(next.refresh_token, app.id)), 'invalid_grant');
  assert.equal((await auditOf(t, user.id, 'oauth.refresh_token_reused')).length, 1);
  // Another grant of the same session is not affected, nor is the platform session.
  const again = await signIn(t, user, app.id);
  assertStatus(await tokenReq(t, refreshGrant(again.refresh_token, app.id)), 200);
  assert.equal((await call(t, 'GET', '/v1/users/me', user.token)).statusCode, 200);
});

test('a used refresh token replayed with another client_id still revokes the grant (RFC 9700 §4.14.2: whoever presents it)', async () => {
  const other = await oauthApp(t, admin);
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const next = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, other.id)), 'invalid_grant');
  assertOAuthError(await tokenReq(t, refreshGrant(next.refresh_token, app.id)), 'invalid_grant');
});

if (storageName === 'postgres') test('App refresh token "single use, rotating" with reuse detection: a replay that arrives while a rotation of the same grant is committing revokes the token that rotation issues too (RFC 9700 §4.14.2: the whole family)', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const next = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  // The rotation of `next` pauses inside its transaction (its token row issued, not yet committed)
  // until the replay of `first` waits on it; then it commits and the replay goes on.
  const watcher = await client(t);
  const keys = t.deps.keys;
  const signUntil = keys.signUntil.bind(keys);
  // The replay is started from the test, not from inside the rotation's transaction.
  let rotationPaused!: () => void;
  const paused = new Promise<void>((resolve) => { rotationPaused = resolve; });
  const replay = paused.then(() => tokenReq(t, refreshGrant(first.refresh_token, app.id)));
  let seen = false;
  keys.signUntil = async (...args) => {
    if (!seen) {
      seen = true;
      // The rotation is this app's only transaction under way: the replay must wait for it (its own
      // backend, not another test file's lock wait on the shared server).
      const [rotationPid, ...others] = await transactionsInSchema(watcher);
      assert.ok(rotationPid !== undefined && others.length === 0, `one transaction under way, not ${others.length + 1}`);
      rotationPaused();
      await blockedBy(watcher, rotationPid, 'the replay, behind the rotation');
    }
    return signUntil(...args);
  };
  let rotated: any;
  try {
    rotated = assertStatus(await tokenReq(t, refreshGrant(next.refresh_token, app.id)), 200);
    assertOAuthError(await replay, 'invalid_grant');
  } finally {
    keys.signUntil = signUntil;
    await watcher.end();
  }
  assertOAuthError(await tokenReq(t, refreshGrant(rotated.refresh_token, app.id)), 'invalid_grant');
  assert.equal((await auditOf(t, user.id, 'oauth.refresh_token_reused')).length, 1);
});

if (storageName === 'postgres') test('a rotation holds its grant before it uses its token (lockGrant), so a replay that arrives in between waits for the rotation instead of deadlocking with it: no deadlock victim, the replay revokes what the rotation issued', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const next = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  const watcher = await client(t);
  // The rotation of `next` pauses inside its transaction right after it marks its token used (before it
  // inserts the new one) until the replay of `first` waits on it. The replay is started from the test,
  // not from inside the rotation's transaction.
  let rotationPaused!: () => void;
  const paused = new Promise<void>((resolve) => { rotationPaused = resolve; });
  const replay = paused.then(() => tokenReq(t, refreshGrant(first.refresh_token, app.id)));
  let seen = false;
  const pauseAfterUse = async (run: () => Promise<unknown>, text: string) => {
    const result = await run();
    if (!seen && text.startsWith('UPDATE oauth_refresh_tokens SET used_at')) {
      seen = true;
      const [rotationPid, ...others] = await transactionsInSchema(watcher);
      assert.ok(rotationPid !== undefined && others.length === 0, `one transaction under way, not ${others.length + 1}`);
      rotationPaused();
      await blockedBy(watcher, rotationPid, 'the replay, behind the rotation');
    }
    return result;
  };
  try {
    const { result: rotated, victims } = await withDeadlockCount(t, () =>
      withTransactionStatements(t, pauseAfterUse, async () => assertStatus(await tokenReq(t, refreshGrant(next.refresh_token, app.id)), 200)));
    assert.ok(seen, 'the rotation paused after using its token');
    assertOAuthError(await replay, 'invalid_grant');
    assert.equal(victims, 0, 'no statement was a deadlock victim');
    assertOAuthError(await tokenReq(t, refreshGrant(rotated.refresh_token, app.id)), 'invalid_grant');
  } finally {
    await watcher.end();
  }
});

test('concurrent refreshes with one token: exactly one succeeds', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const results = await Promise.all([1, 2, 3].map(() => tokenReq(t, refreshGrant(first.refresh_token, app.id))));
  assert.equal(results.filter((r) => r.statusCode === 200).length, 1, results.map((r) => r.body).join('\n'));
});

test('a refresh token used by another request while this one was checking it is invalid_grant, and its whole grant is revoked (single use), audited', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  let winner: any = null;
  const loser = await pausedAfter(t, 'FROM oauth_refresh_tokens', async () => {
    winner = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  }, () => tokenReq(t, refreshGrant(first.refresh_token, app.id)));
  assertOAuthError(loser, 'invalid_grant');
  assertOAuthError(await tokenReq(t, refreshGrant(winner.refresh_token, app.id)), 'invalid_grant');
  assert.equal((await auditOf(t, user.id, 'oauth.refresh_token_reused')).length, 1);
});

test('a refresh under way when a replay revokes its grant is invalid_grant too: nothing issued from the grant outlives the replay', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const next = assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
  const res = await pausedAfter(t, 'FROM oauth_refresh_tokens', async () => {
    assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 'invalid_grant');
  }, () => tokenReq(t, refreshGrant(next.refresh_token, app.id)));
  assertOAuthError(res, 'invalid_grant');
  assert.equal((await auditOf(t, user.id, 'oauth.refresh_token_reused')).length, 1);
});

test('bound to its Application: another client_id is invalid_grant (token not used up), an unknown one invalid_client', async () => {
  const other = await oauthApp(t, admin);
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, other.id)), 'invalid_grant');
  assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, 'app_nosuchclient')), 'invalid_client');
  assertOAuthError(await tokenReq(t, refreshGrant('rtk_unknown', app.id)), 'invalid_grant');
  // An unknown client_id is named as such even when the token is unknown too (as for codes).
  assertOAuthError(await tokenReq(t, refreshGrant('rtk_unknown', 'app_nosuchclient')), 'invalid_client');
  assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
});

test('access is re-checked on each use: a disabled entitlement is invalid_grant; restored access works again', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  assertStatus(await patchEnt(t, admin, user.entitlementId, { status: 'disabled', disabled_reason: 'x' }), 200);
  assert.match(assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 'invalid_grant'), /entitlement_required/);
  assertStatus(await patchEnt(t, admin, user.entitlementId, { status: 'active' }), 200);
  assertStatus(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 200);
});

test('ending the session ends its app refresh tokens (logout)', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  assertStatus(await call(t, 'POST', '/v1/auth/logout', user.token, {}), 204);
  assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 'invalid_grant');
});

test('"ending that session ends it" however the session ends: a revoke of that session (by the user or by users.manage), a logout with all_sessions true from another session, a password change from another session, a suspension and a delete (also after reactivation or restore) leave its app refresh token invalid_grant', async () => {
  const endings: [string, (user: Awaited<ReturnType<typeof member>>) => Promise<void>][] = [
    ['self revoke', async (u) => assertStatus(await call(t, 'DELETE', `/v1/users/me/sessions/${u.sid}`, u.token), 204)],
    ['admin revoke', async (u) => assertStatus(await call(t, 'DELETE', `/v1/users/${u.id}/sessions/${u.sid}`, admin), 204)],
    ['logout all_sessions elsewhere', async (u) => assertStatus(await call(t, 'POST', '/v1/auth/logout', (await session(t, u)).access_token, { all_sessions: true }), 204)],
    ['password change elsewhere', async (u) =>
      assertStatus(await call(t, 'POST', '/v1/users/me/password', (await session(t, u)).access_token, { current_password: u.password, new_password: 'amber-lantern-orchard-77' }), 204)],
    ['suspend and reactivate', async (u) => {
      assertStatus(await call(t, 'POST', `/v1/users/${u.id}/suspend`, admin, {}), 200);
      assertStatus(await call(t, 'PATCH', `/v1/users/${u.id}`, admin, { status: 'active' }), 200);
    }],
    ['delete and restore', async (u) => {
      assertStatus(await call(t, 'DELETE', `/v1/users/${u.id}`, admin), 204);
      assertStatus(await call(t, 'PATCH', `/v1/users/${u.id}`, admin, { status: 'active' }), 200);
    }],
  ];
  for (const [label, end] of endings) {
    const user = await member(t, admin, app.id);
    const first = await signIn(t, user, app.id);
    await end(user);
    const res = await tokenReq(t, refreshGrant(first.refresh_token, app.id));
    assert.equal(res.statusCode, 400, `${label}: ${res.body}`);
    assertOAuthError(res, 'invalid_grant');
  }
});

test('nothing is issued on an ended session: a code exchange or a refresh under way when the session ends (logout) is invalid_grant, and no refresh token is added to it', async () => {
  const user = await member(t, admin, app.id);
  const first = await signIn(t, user, app.id);
  const res = await pausedAfter(t, 'FROM oauth_refresh_tokens t JOIN sessions', async () => {
    assertStatus(await call(t, 'POST', '/v1/auth/logout', user.token, {}), 204);
  }, () => tokenReq(t, refreshGrant(first.refresh_token, app.id)));
  assert.match(assertOAuthError(res, 'invalid_grant'), /session has ended/);

  const other = await member(t, admin, app.id);
  const c = await codeFor(t, other, app.id);
  const exchange = await pausedAfter(t, 'FROM oauth_authorization_codes c JOIN sessions', async () => {
    assertStatus(await call(t, 'POST', '/v1/auth/logout', other.token, {}), 204);
  }, () => tokenReq(t, codeGrant(c, app.id)));
  assert.match(assertOAuthError(exchange, 'invalid_grant'), /session has ended/);
  const rows = await sql(t, 'SELECT session_id, used_at FROM oauth_refresh_tokens WHERE session_id = ANY($1) ORDER BY created_at', [[user.sid, other.sid]]);
  assert.equal(rows.length, 1, 'only the token issued before the logout');
  assert.equal(rows[0].session_id, user.sid);
  assert.equal(rows[0].used_at, null);
});

test('app and platform refresh tokens do not cross: each endpoint refuses the other kind', async () => {
  const user = await createUser(t);
  await grant(t, admin, user.id, app.id);
  const platform = await session(t, user) as { access_token: string; refresh_token?: string };
  const appTokens = await signIn(t, { token: platform.access_token }, app.id);
  assertError(await t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', payload: { refresh_token: appTokens.refresh_token } }), 401, 'invalid_refresh_token');
  assertOAuthError(await tokenReq(t, refreshGrant(platform.refresh_token!, app.id)), 'invalid_grant');
  assertStatus(await tokenReq(t, refreshGrant(appTokens.refresh_token, app.id)), 200);
});

test('app refresh tokens idle out after 30 days: refresh_token_expires_in is 30 days, the token is expired from that instant on (invalid_grant), and still refreshes a second before', async () => {
  const user = await member(t, admin, app.id);
  await withStoppedClock(t, async () => {
    const first = await signIn(t, user, app.id);
    const second = await signIn(t, user, app.id);
    assert.equal(first.refresh_token_expires_in, 30 * 86400);
    t.clock.advance(30 * 86400 - 1);
    assertStatus(await tokenReq(t, refreshGrant(second.refresh_token, app.id)), 200);
    t.clock.advance(1);
    assert.match(assertOAuthError(await tokenReq(t, refreshGrant(first.refresh_token, app.id)), 'invalid_grant'), /expired/);
  });
});

test('an app refresh token never outlives its session (90 days absolute): refresh_token_expires_in counts down to the session\'s end, after which the refresh is invalid_grant', async () => {
  const user = await member(t, admin, app.id);
  let tokens = await signIn(t, user, app.id);
  for (let i = 0; i < 3; i++) {
    t.clock.advance(29 * 86400);
    tokens = assertStatus(await tokenReq(t, refreshGrant(tokens.refresh_token, app.id)), 200);
  }
  // 87 days in, the session ends in 3 days: sooner than the 30-day idle limit.
  const left = tokens.refresh_token_expires_in;
  assert.ok(left <= 3 * 86400 && left > 3 * 86400 - 600, `refresh_token_expires_in ${left}`);
  t.clock.advance(left + 1);
  assertOAuthError(await tokenReq(t, refreshGrant(tokens.refresh_token, app.id)), 'invalid_grant');
});
