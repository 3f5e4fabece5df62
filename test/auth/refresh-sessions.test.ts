import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, withStoppedClock, type TestApp } from '../helpers/app.js';
import { bearer, createUser, login, type TestUser } from '../helpers/fixtures.js';
import { assertAuthSession, assertError, assertFields, auditRows, get, jwtPayload, post, sql } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const DAY = 24 * 3600;
const refresh = (refreshToken: unknown) => post(t, '/v1/auth/token/refresh', { refresh_token: refreshToken });

async function signIn(user: TestUser, userAgent = 'auth-tests/1.0') {
  const res = await t.app.inject({
    method: 'POST',
    url: '/v1/auth/login',
    headers: { 'user-agent': userAgent },
    payload: { email: user.email, password: user.password },
  });
  assert.equal(res.statusCode, 200, res.body);
  return res.json() as { access_token: string; refresh_token: string; session_id: string; user_id: string };
}

const works = async (accessToken: string) => (await get(t, '/v1/users/me', accessToken)).statusCode === 200;

test('token/refresh returns a new AuthSession on the same session with a new rtk_ refresh token; the old refresh token is then invalid (single use, rotating)', async () => {
  const user = await createUser(t);
  const first = await signIn(user);
  const res = await refresh(first.refresh_token);
  assert.equal(res.statusCode, 200, res.body);
  const next = res.json();
  assertAuthSession(next, user.id);
  assert.equal(next.session_id, first.session_id);
  assert.notEqual(next.refresh_token, first.refresh_token);
  assert.notEqual(jwtPayload(next.access_token).jti, jwtPayload(first.access_token).jti);
  assert.equal(jwtPayload(next.access_token).sid, first.session_id);
  // The user's email is verified: the new AuthSession and its access token say so, as the sign-in's did.
  assert.equal(next.email_verified, true);
  assert.equal(jwtPayload(next.access_token).email_verified, true);
  assert.ok(await works(next.access_token), 'await works(next.access_token)');
  const rows = await sql(t, 'SELECT token_hash FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id WHERE s.user_id = $1', [user.id]);
  for (const row of rows) assert.ok(!String(row.token_hash).includes(next.refresh_token.slice(4)), 'refresh tokens are stored hashed');

  // Rotation continues from the new token.
  const again = await refresh(next.refresh_token);
  assert.equal(again.statusCode, 200, again.body);
  assert.equal(again.json().session_id, first.session_id);
});

test('reusing an already-used refresh token revokes the whole session: the newest access token and refresh token stop working, and audit session.refresh_token_reused is written', async () => {
  const user = await createUser(t);
  const other = await signIn(user);
  const first = await signIn(user);
  const rotated = (await refresh(first.refresh_token)).json();
  assert.ok(await works(rotated.access_token), 'await works(rotated.access_token)');

  const reuse = await refresh(first.refresh_token);
  assertError(reuse, 401, 'invalid_refresh_token');
  assertError(await get(t, '/v1/users/me', rotated.access_token), 401, 'unauthenticated');
  assertError(await refresh(rotated.refresh_token), 401, 'invalid_refresh_token');
  const [session] = await sql(t, 'SELECT revoked_at FROM sessions WHERE id = $1', [first.session_id]);
  assert.notEqual(session.revoked_at, null);

  const audit = await auditRows(t, 'session.refresh_token_reused', user.id);
  assert.equal(audit.length, 1);
  assert.equal(audit[0].target_id, first.session_id);
  assert.equal(audit[0].after.revoked, true, 'this reuse ended the session');

  // Other sessions of the user are untouched.
  assert.ok(await works(other.access_token), 'await works(other.access_token)');
  assert.equal((await refresh(other.refresh_token)).statusCode, 200);
});

test('a used refresh token replayed after the session ended otherwise (logout) is still refused and audited session.refresh_token_reused, once per token', async () => {
  const user = await createUser(t);
  const first = await signIn(user);
  const rotated = (await refresh(first.refresh_token)).json();
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(rotated.access_token) })).statusCode, 204);
  for (let i = 0; i < 2; i++) assertError(await refresh(first.refresh_token), 401, 'invalid_refresh_token');
  const audit = await auditRows(t, 'session.refresh_token_reused', user.id);
  assert.equal(audit.length, 1);
  assert.equal(audit[0].target_id, first.session_id);
  assert.equal(audit[0].after.revoked, false, 'the logout had ended the session already');
});

test('a used refresh token replayed after its session ended by itself (90 days after sign-in, or idled out after 30 days unused) is refused and audited session.refresh_token_reused once, with after.revoked false: the replay ended nothing', async () => {
  const user = await createUser(t);
  const aged = await signIn(user);
  const idle = await signIn(user);
  assert.equal((await refresh(idle.refresh_token)).statusCode, 200);
  let current = (await refresh(aged.refresh_token)).json().refresh_token;
  for (let i = 0; i < 3; i++) {
    t.clock.advance(29 * DAY);
    const renewed = await refresh(current);
    assert.equal(renewed.statusCode, 200, renewed.body);
    current = renewed.json().refresh_token;
  }
  t.clock.advance(3 * DAY + 1);
  // Day 90 and a second: `aged` is over by its 90 days, `idle` idled out on day 30.
  for (let i = 0; i < 2; i++) {
    assertError(await refresh(aged.refresh_token), 401, 'invalid_refresh_token');
    assertError(await refresh(idle.refresh_token), 401, 'invalid_refresh_token');
  }
  const audit = await auditRows(t, 'session.refresh_token_reused', user.id);
  assert.deepEqual(
    audit.map((r) => [r.target_id, r.after.revoked]).sort(),
    [[aged.session_id, false], [idle.session_id, false]].sort(),
  );
  assert.deepEqual(await sql(t, 'SELECT id FROM sessions WHERE user_id = $1 AND revoked_at IS NOT NULL', [user.id]), [], 'no session was revoked');
});

test('concurrent replays of a used refresh token, after logout or while they end the session, are audited session.refresh_token_reused once per token', async () => {
  for (const endedBefore of [true, true, true, false, false]) {
    const user = await createUser(t);
    const first = await signIn(user);
    const rotated = (await refresh(first.refresh_token)).json();
    if (endedBefore) assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(rotated.access_token) })).statusCode, 204);
    const replays = await Promise.all(Array.from({ length: 10 }, () => refresh(first.refresh_token)));
    for (const res of replays) assertError(res, 401, 'invalid_refresh_token');
    const audit = await auditRows(t, 'session.refresh_token_reused', user.id);
    assert.equal(audit.length, 1, `${audit.length} rows for one replayed token (session ended ${endedBefore ? 'by logout' : 'by the replay'})`);
    assert.equal(audit[0].after.revoked, !endedBefore);
    assert.equal(await works(rotated.access_token), false);
  }
});

test('20 concurrent refreshes with one refresh token give exactly one success', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  const results = await Promise.all(Array.from({ length: 20 }, () => refresh(session.refresh_token)));
  const ok = results.filter((r) => r.statusCode === 200);
  assert.equal(ok.length, 1, results.map((r) => r.statusCode).join(','));
  for (const res of results.filter((r) => r.statusCode !== 200)) assertError(res, 401, 'invalid_refresh_token');
  const issued = await sql(t, 'SELECT count(*)::int AS n FROM refresh_tokens WHERE session_id = $1', [session.session_id]);
  assert.equal(issued[0].n, 2, 'one rotation, not twenty');
});

test('a refresh token idles out after 30 days: unused for 30 days and 1 second it gets 401 invalid_refresh_token', async () => {
  const user = await createUser(t);
  const kept = await signIn(user);
  const idle = await signIn(user);
  t.clock.advance(29 * DAY);
  assert.equal((await refresh(kept.refresh_token)).statusCode, 200, 'still valid after 29 days');
  t.clock.advance(DAY + 1);
  assertError(await refresh(idle.refresh_token), 401, 'invalid_refresh_token');
});

test('a rotated refresh token idles out after 30 days too: the token a refresh returned, unused for 30 days, gets 401 invalid_refresh_token from that instant on', async () => {
  // On a stopped clock: the test's own run time on a loaded machine must not count toward the limits.
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const kept = (await refresh((await signIn(user)).refresh_token)).json();
    const idle = (await refresh((await signIn(user)).refresh_token)).json();
    assertAuthSession(kept, user.id);
    assertAuthSession(idle, user.id);
    t.clock.advance(30 * DAY - 1);
    assert.equal((await refresh(kept.refresh_token)).statusCode, 200, 'still valid 1 second before 30 days');
    t.clock.advance(1);
    assertError(await refresh(idle.refresh_token), 401, 'invalid_refresh_token');
  });
});

test('a session ends 90 days after sign-in even when refreshed every 29 days', async () => {
  // On a stopped clock: the session's end is checked at its exact instant.
  await withStoppedClock(t, async () => {
    const user = await createUser(t);
    const start = t.clock.now().getTime();
    let current = (await signIn(user)).refresh_token;
    for (let i = 1; i <= 3; i++) {
      t.clock.advance(29 * DAY);
      const res = await refresh(current);
      assert.equal(res.statusCode, 200, `refresh on day ${29 * i}: ${res.body}`);
      current = res.json().refresh_token;
      assert.ok(await works(res.json().access_token), 'await works(res.json().access_token)');
    }
    // Day 89: still inside the 90 days.
    t.clock.advance(2 * DAY);
    const last = await refresh(current);
    assert.equal(last.statusCode, 200, last.body);
    // docs/decisions.md "Refresh lifetime": refresh_token_expires_in is the smaller of 30 idle days and what is left of the 90.
    assert.ok(last.json().refresh_token_expires_in <= DAY, `refresh_token_expires_in ${last.json().refresh_token_expires_in}`);
    current = last.json().refresh_token;
    // 90 days after sign-in the session is over from that instant on, although this token is a day old.
    t.clock.advance((start + 90 * DAY * 1000 - t.clock.now().getTime()) / 1000);
    assertError(await refresh(current), 401, 'invalid_refresh_token');
    assertError(await get(t, '/v1/users/me', last.json().access_token), 401, 'unauthenticated');
    const [session] = await sql(t, 'SELECT expires_at, created_at FROM sessions WHERE user_id = $1', [user.id]);
    assert.equal(session.expires_at.getTime() - session.created_at.getTime(), 90 * DAY * 1000);
  });
});

test('an access token lasts 15 minutes; after that it gets 401 and the refresh token issues a new one', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  t.clock.advance(14 * 60);
  assert.ok(await works(session.access_token), 'await works(session.access_token)');
  t.clock.advance(60 + 1);
  assertError(await get(t, '/v1/users/me', session.access_token), 401, 'unauthenticated');
  const res = await refresh(session.refresh_token);
  assert.equal(res.statusCode, 200, res.body);
  assert.ok(await works(res.json().access_token), 'await works(res.json().access_token)');
});

test('token/refresh bad input: an unknown token gets 401 invalid_refresh_token; a missing or mistyped refresh_token gets 422 validation_failed naming refresh_token', async () => {
  assertError(await refresh('rtk_not-a-real-token'), 401, 'invalid_refresh_token');
  // Any other string is a bad refresh token too, a platform access token (TK-2) or a long one included.
  const session = await signIn(await createUser(t));
  assertError(await refresh(session.access_token), 401, 'invalid_refresh_token');
  assertError(await refresh(`rtk_${'x'.repeat(300)}`), 401, 'invalid_refresh_token');
  assertFields(await post(t, '/v1/auth/token/refresh', {}), ['refresh_token']);
  assertFields(await refresh(12345), ['refresh_token']);
  assertFields(await refresh(''), ['refresh_token']);
  assertFields(await post(t, '/v1/auth/token/refresh', { refresh_token: 'rtk_x', grant_type: 'refresh_token' }), ['grant_type']);
});

test('"Any non-empty string that is not a live refresh token (up to 4,096 characters) is 401 invalid_refresh_token; a longer one is 422": 4,096 characters, also 4,096 emoji (code points), are 401; 4,097 are 422 validation_failed naming refresh_token', async () => {
  assertError(await refresh('r'.repeat(4096)), 401, 'invalid_refresh_token');
  assertError(await refresh('\u{1F600}'.repeat(4096)), 401, 'invalid_refresh_token');
  assertFields(await refresh('r'.repeat(4097)), ['refresh_token']);
});

test('a session whose refresh token idled out (30 days unused) is no longer listed in GET /v1/users/me/sessions', async () => {
  const user = await createUser(t);
  const kept = await signIn(user);
  const idle = await signIn(user);
  t.clock.advance(29 * DAY);
  const renewed = await refresh(kept.refresh_token);
  assert.equal(renewed.statusCode, 200, renewed.body);
  const listed = async (token: string) => {
    const res = await get(t, '/v1/users/me/sessions', token);
    assert.equal(res.statusCode, 200, res.body);
    return res.json().data.map((s: any) => s.id).sort();
  };
  assert.deepEqual(await listed(renewed.json().access_token), [kept.session_id, idle.session_id].sort(), 'both in use on day 29');
  t.clock.advance(DAY + 1);
  const again = await refresh(renewed.json().refresh_token);
  assert.equal(again.statusCode, 200, again.body);
  assert.deepEqual(await listed(again.json().access_token), [kept.session_id], 'the idle one is gone on day 30 and a second');
});

test('every login creates a session; GET /v1/users/me/sessions lists the active ones with id, created_at, ip_address, user_agent and expires_at', async () => {
  const user = await createUser(t);
  const a = await signIn(user, 'Agent-A/1.0');
  const b = await signIn(user, 'Agent-B/2.0');
  const gone = await signIn(user, 'Agent-C/3.0');
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(gone.access_token), payload: {} })).statusCode, 204);
  const res = await get(t, '/v1/users/me/sessions', a.access_token);
  assert.equal(res.statusCode, 200, res.body);
  const body = res.json();
  assert.deepEqual(body.page, { next_cursor: null, has_more: false });
  const byId = new Map(body.data.map((s: any) => [s.id, s]));
  assert.deepEqual([...byId.keys()].sort(), [a.session_id, b.session_id].sort(), 'revoked sessions are not listed');
  for (const [id, agent] of [[a.session_id, 'Agent-A/1.0'], [b.session_id, 'Agent-B/2.0']]) {
    const s: any = byId.get(id);
    for (const field of ['id', 'created_at', 'ip_address', 'user_agent', 'expires_at']) assert.ok(field in s, `${field} in ${JSON.stringify(s)}`);
    assert.match(s.id, /^ses_/);
    assert.equal(s.user_agent, agent);
    assert.equal(s.ip_address, '127.0.0.1');
    assert.equal(new Date(s.expires_at).getTime() - new Date(s.created_at).getTime(), 90 * DAY * 1000);
    assert.ok(new Date(s.created_at).toISOString() === s.created_at, 'new Date(s.created_at).toISOString() === s.created_at');
  }
  const own = await get(t, `/v1/users/${user.id}/sessions`, a.access_token);
  assert.deepEqual(own.json().data.map((s: any) => s.id).sort(), [...byId.keys()].sort());
});

test('the sessions list shows the user agent the sign-in sent, whole up to 512 characters; a longer one is kept to its first 512 (a bounded free-text field)', async () => {
  const user = await createUser(t);
  const whole = `Agent/${'w'.repeat(512 - 6)}`;
  const long = `Agent/${'x'.repeat(700)}`;
  const a = await signIn(user, whole);
  const b = await signIn(user, long);
  const res = await get(t, '/v1/users/me/sessions', a.access_token);
  assert.equal(res.statusCode, 200, res.body);
  const agents = new Map(res.json().data.map((s: any) => [s.id, s.user_agent]));
  assert.equal(agents.get(a.session_id), whole, 'a 512-character user agent is listed whole');
  assert.equal(agents.get(b.session_id), long.slice(0, 512), 'a longer one is cut to its first 512 characters');
});

test('sessions list items carry current (docs/decisions.md "Payloads not shown in the spec"): true only for the session of the calling token, false for the others and for every session an admin lists; newest first, keyset-paginated (docs/conventions.md)', async () => {
  const user = await createUser(t);
  const older = await signIn(user);
  t.clock.advance(1);
  const middle = await signIn(user);
  t.clock.advance(1);
  const newer = await signIn(user);
  const listed = async (accessToken: string, query = '') => {
    const res = await get(t, `/v1/users/${user.id}/sessions${query}`, accessToken);
    assert.equal(res.statusCode, 200, res.body);
    return res.json() as { data: { id: string; current: boolean }[]; page: { next_cursor: string | null; has_more: boolean } };
  };
  for (const caller of [older, middle, newer]) {
    const { data } = await listed(caller.access_token);
    assert.deepEqual(data.map((s) => s.id), [newer.session_id, middle.session_id, older.session_id], 'newest first');
    assert.deepEqual(data.map((s) => s.current), data.map((s) => s.id === caller.session_id), `current marks ${caller.session_id} alone`);
  }
  const first = await listed(older.access_token, '?limit=2');
  assert.deepEqual(first.data.map((s) => s.id), [newer.session_id, middle.session_id]);
  assert.equal(first.page.has_more, true);
  const rest = await listed(older.access_token, `?limit=2&cursor=${encodeURIComponent(first.page.next_cursor!)}`);
  assert.deepEqual(rest.data.map((s) => [s.id, s.current]), [[older.session_id, true]]);
  assert.deepEqual(rest.page, { next_cursor: null, has_more: false });
  const { data } = await listed(await login(t, await createUser(t, { roles: ['superadmin'] })));
  assert.deepEqual(data.map((s) => [s.id, s.current]), [[newer.session_id, false], [middle.session_id, false], [older.session_id, false]]);
});

test('DELETE /v1/users/me/sessions/{id} revokes that session: its refresh tokens stop and its access tokens fail at once; other sessions keep working', async () => {
  const user = await createUser(t);
  const keep = await signIn(user);
  const doomed = await signIn(user);
  const rotated = (await refresh(doomed.refresh_token)).json();
  const res = await t.app.inject({ method: 'DELETE', url: `/v1/users/me/sessions/${doomed.session_id}`, headers: bearer(keep.access_token) });
  assert.equal(res.statusCode, 204, res.body);
  assertError(await get(t, '/v1/users/me', rotated.access_token), 401, 'unauthenticated');
  assertError(await get(t, '/v1/users/me', doomed.access_token), 401, 'unauthenticated');
  assertError(await refresh(rotated.refresh_token), 401, 'invalid_refresh_token');
  assert.ok(await works(keep.access_token), 'await works(keep.access_token)');
  assert.equal((await refresh(keep.refresh_token)).statusCode, 200);

  // Revoking again, an unknown id, or another user's session: 404 session_not_found, nothing changes.
  const stranger = await signIn(await createUser(t));
  for (const id of [doomed.session_id, 'ses_01ARZ3NDEKTSV4RRFFQ69G5FAV', stranger.session_id]) {
    assertError(await t.app.inject({ method: 'DELETE', url: `/v1/users/me/sessions/${id}`, headers: bearer(keep.access_token) }), 404, 'session_not_found');
  }
  assert.ok(await works(stranger.access_token), 'await works(stranger.access_token)');
});

test('DELETE /v1/users/{id}/sessions/{sessionId} of a session that ended by itself (idled out after 30 days unused, or 90 days after sign-in) is 404 session_not_found, as for a revoked one: it is no longer an active session, and nothing is revoked or audited', async () => {
  const user = await createUser(t);
  const adminUser = await createUser(t, { roles: ['superadmin'] });
  const aged = await signIn(user);
  const idle = await signIn(user);
  t.clock.advance(29 * DAY);
  let current = (await refresh(aged.refresh_token)).json().refresh_token;
  t.clock.advance(DAY + 1);
  const admin = await login(t, adminUser);
  assert.ok(!(await get(t, `/v1/users/${user.id}/sessions`, admin)).json().data.some((s: any) => s.id === idle.session_id), 'the idle session is not listed');
  assertError(await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/sessions/${idle.session_id}`, headers: bearer(admin) }), 404, 'session_not_found');
  for (const day of [58, 86]) {
    t.clock.advance(28 * DAY);
    const renewed = await refresh(current);
    assert.equal(renewed.statusCode, 200, `day ${day}: the session is still live`);
    current = renewed.json().refresh_token;
  }
  t.clock.advance(4 * DAY);
  const own = await signIn(user);
  assertError(await t.app.inject({ method: 'DELETE', url: `/v1/users/me/sessions/${aged.session_id}`, headers: bearer(own.access_token) }), 404, 'session_not_found');
  const revoked = await sql(t, 'SELECT id FROM sessions WHERE id = ANY($1) AND revoked_at IS NOT NULL', [[aged.session_id, idle.session_id]]);
  assert.deepEqual(revoked, [], 'nothing was revoked');
  assert.deepEqual(await auditRows(t, 'session.revoked', user.id), [], 'nothing was audited');
});

test('users.manage may list and revoke another user\'s sessions; without it another user\'s sessions are not reachable', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  const admin = await login(t, await createUser(t, { roles: ['superadmin'] }));
  const outsider = await login(t, await createUser(t));
  assertError(await get(t, `/v1/users/${user.id}/sessions`, outsider), 404, 'user_not_found');
  assertError(await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/sessions/${session.session_id}`, headers: bearer(outsider) }), 404, 'user_not_found');
  const list = await get(t, `/v1/users/${user.id}/sessions`, admin);
  assert.equal(list.statusCode, 200);
  assert.deepEqual(list.json().data.map((s: any) => s.id), [session.session_id]);
  const del = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/sessions/${session.session_id}`, headers: bearer(admin) });
  assert.equal(del.statusCode, 204);
  assert.equal(await works(session.access_token), false);
});

test('an admin (users.manage) revoking another user\'s session is audited session.revoked on that user (actor the admin, target the session, request id); revoking one\'s own session, like logout, writes no audit row', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  const other = await signIn(user);
  const adminUser = await createUser(t, { roles: ['superadmin'] });
  const admin = await login(t, adminUser);
  const del = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/sessions/${session.session_id}`, headers: bearer(admin) });
  assert.equal(del.statusCode, 204, del.body);
  const rows = await auditRows(t, 'session.revoked', user.id);
  assert.deepEqual(
    rows.map((r) => [r.actor_type, r.actor_id, r.target_type, r.target_id, r.request_id]),
    [['user', adminUser.id, 'session', session.session_id, del.headers['request-id']]],
  );
  // A repeat finds nothing to revoke (404 session_not_found) and writes nothing.
  assertError(await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/sessions/${session.session_id}`, headers: bearer(admin) }), 404, 'session_not_found');
  const own = await t.app.inject({ method: 'DELETE', url: `/v1/users/me/sessions/${other.session_id}`, headers: bearer((await signIn(user)).access_token) });
  assert.equal(own.statusCode, 204, own.body);
  assert.equal((await auditRows(t, 'session.revoked', user.id)).length, 1);
});

test('logout ends the current session (204): its access and refresh tokens stop working; other sessions continue', async () => {
  const user = await createUser(t);
  const other = await signIn(user);
  const current = await signIn(user);
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(current.access_token) });
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(res.body, '');
  assertError(await get(t, '/v1/users/me', current.access_token), 401, 'unauthenticated');
  assertError(await refresh(current.refresh_token), 401, 'invalid_refresh_token');
  assert.ok(await works(other.access_token), 'await works(other.access_token)');
  assert.equal((await refresh(other.refresh_token)).statusCode, 200);
});

test('logout with all_sessions true ends every session of the user', async () => {
  const user = await createUser(t);
  const sessions = [await signIn(user), await signIn(user), await signIn(user)];
  const bystander = await signIn(await createUser(t));
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(sessions[0].access_token), payload: { all_sessions: true } });
  assert.equal(res.statusCode, 204, res.body);
  for (const s of sessions) {
    assertError(await get(t, '/v1/users/me', s.access_token), 401, 'unauthenticated');
    assertError(await refresh(s.refresh_token), 401, 'invalid_refresh_token');
  }
  const open = await sql(t, 'SELECT id FROM sessions WHERE user_id = $1 AND revoked_at IS NULL', [user.id]);
  assert.deepEqual(open, []);
  assert.ok(await works(bystander.access_token), 'await works(bystander.access_token)');
});

test('logout with all_sessions ends the sessions still active and leaves a session ended earlier as it ended: its revoked_at stays the instant of its own revocation', async () => {
  const user = await createUser(t);
  await withStoppedClock(t, async () => {
    const earlier = await signIn(user);
    const current = await signIn(user);
    assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(earlier.access_token) })).statusCode, 204);
    const revokedAt = async (id: string) => new Date((await sql(t, 'SELECT revoked_at FROM sessions WHERE id = $1', [id]))[0].revoked_at).getTime();
    const first = await revokedAt(earlier.session_id);
    t.clock.advance(60);
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer(current.access_token), payload: { all_sessions: true } });
    assert.equal(res.statusCode, 204, res.body);
    assert.equal(await revokedAt(earlier.session_id), first, 'the session logged out earlier keeps the instant it ended');
    assert.equal(await revokedAt(current.session_id), first + 60_000, 'the session still active ends now');
  });
});

test('logout bad input: no credential gets 401; all_sessions not a boolean gets 422 validation_failed naming all_sessions', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  assertError(await post(t, '/v1/auth/logout', {}), 401, 'unauthenticated');
  assertFields(await post(t, '/v1/auth/logout', { all_sessions: 'yes' }, bearer(session.access_token)), ['all_sessions']);
  assert.ok(await works(session.access_token), 'a refused logout ends nothing');
});

test('a test-mode session refreshes in test mode: the new access token carries test_mode true', async () => {
  const user = await createUser(t, { mode: 'test' });
  const res = await post(t, '/v1/auth/login', { email: user.email, password: user.password, test_mode: true });
  assert.equal(res.statusCode, 200, res.body);
  const next = await refresh(res.json().refresh_token);
  assert.equal(next.statusCode, 200, next.body);
  assert.equal(jwtPayload(next.json().access_token).test_mode, true);
  assert.equal((await get(t, '/v1/users/me', next.json().access_token)).json().test_mode, true);
});

test('sessions list and revoke are for self or users.manage only: a users.list holder gets 403 forbidden for another user\'s sessions, and the session keeps working', async () => {
  const user = await createUser(t);
  const session = await signIn(user);
  const support = await login(t, await createUser(t, { roles: ['support'] }));
  assertError(await get(t, `/v1/users/${user.id}/sessions`, support), 403, 'forbidden');
  const del = await t.app.inject({ method: 'DELETE', url: `/v1/users/${user.id}/sessions/${session.session_id}`, headers: bearer(support) });
  assertError(del, 403, 'forbidden');
  assert.equal(await works(session.access_token), true, 'the session was not revoked');
  assert.equal((await refresh(session.refresh_token)).statusCode, 200);
});

test('refresh chains and sessions do not grow without bound (API4:2023 Unrestricted Resource Consumption): the idempotency-prune job deletes a session 30 days after its 90-day end, with all its refresh tokens, and keeps it until then; live sessions stay', async () => {
  const user = await createUser(t);
  const first = await signIn(user);
  let current = first.refresh_token;
  for (let i = 0; i < 3; i++) current = (await refresh(current)).json().refresh_token;
  assert.equal((await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: bearer((await refresh(current)).json().access_token) })).statusCode, 204);
  const tokensOf = async (sessionId: string) => (await sql(t, 'SELECT count(*)::int AS n FROM refresh_tokens WHERE session_id = $1', [sessionId]))[0].n;
  assert.equal(await tokensOf(first.session_id), 5, 'the sign-in token and four rotations');

  t.clock.advance(120 * DAY - 60);
  await t.deps.jobs.runNow('idempotency-prune');
  assert.equal(await tokensOf(first.session_id), 5, 'kept until 30 days past the 90-day end');
  const later = await signIn(user);

  t.clock.advance(120);
  const result = await t.deps.jobs.runNow('idempotency-prune');
  assert.ok((result.sessions as number) >= 1, JSON.stringify(result));
  assert.deepEqual(await sql(t, 'SELECT id FROM sessions WHERE id = $1', [first.session_id]), []);
  assert.equal(await tokensOf(first.session_id), 0);
  assertError(await refresh(first.refresh_token), 401, 'invalid_refresh_token');
  assert.ok(await works(later.access_token), 'the live session stays');
  assert.equal((await refresh(later.refresh_token)).statusCode, 200);
});

// A PostgreSQL server vacuums by itself: only the embedded pass registers this test.
if (storageName === 'pglite') test('nor do their files on embedded storage, which has no autovacuum: after each round of refreshes, the prune and the db-analyze job, refresh_tokens and the statistics ANALYZE rewrites keep their size (the space of deleted rows is reused)', async () => {
  const user = await createUser(t);
  const sizes: { tokens: number; stats: number }[] = [];
  for (let round = 0; round < 4; round++) {
    let current = (await signIn(user)).refresh_token;
    for (let i = 0; i < 150; i++) {
      const res = await refresh(current);
      assert.equal(res.statusCode, 200, res.body);
      current = res.json().refresh_token;
    }
    t.clock.advance(121 * DAY);
    const pruned = await t.deps.jobs.runNow('idempotency-prune');
    assert.ok((pruned.sessions as number) >= 1, JSON.stringify(pruned));
    for (let i = 0; i < 5; i++) await t.deps.jobs.runNow('db-analyze');
    assert.deepEqual(await sql(t, 'SELECT count(*)::int AS n FROM refresh_tokens'), [{ n: 0 }], 'every token was pruned');
    sizes.push((await sql(t, `SELECT pg_relation_size('refresh_tokens')::int AS tokens, pg_relation_size('pg_catalog.pg_statistic')::int AS stats`))[0] as never);
  }
  assert.ok(sizes[3]!.tokens <= sizes[1]!.tokens, `refresh_tokens grew: ${JSON.stringify(sizes)}`);
  assert.ok(sizes[3]!.stats <= sizes[1]!.stats, `pg_statistic grew: ${JSON.stringify(sizes)}`);
});
