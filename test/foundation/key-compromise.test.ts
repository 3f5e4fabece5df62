// A signing key that leaked (docs/decisions.md "Signing keys"): `keys rotate --retire-now` makes the
// new key sign at once and every older key stop verifying at once. Its own app: it retires every key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { decodeProtectedHeader } from 'jose';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createUser } from '../helpers/fixtures.js';
import { KEY_PUBLISH_AHEAD_SECONDS, RETIRED_KEY_GRACE_SECONDS } from '../../src/auth/signing-keys.js';
import { sql } from '../helpers/http.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const me = (token: string) => t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) });
const signIn = async (user: { email: string; password: string }) =>
  (await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: user.password } })).json();

test('a leaked signing key: rotate with retireNow signs with the new key at once, every token the old key signed is refused at once (a long-lived one too), the JWKS lists only the new key, and a refresh token still gets a new access token', async () => {
  const user = await createUser(t);
  const first = await signIn(user);
  const oldKid = decodeProtectedHeader(first.access_token).kid!;
  const longLived = await t.deps.keys.sign({ sub: user.id, sid: first.session_id, jti: 'atk_01ARZ3NDEKTSV4RRFFQ69G5FAV' }, 'platform', 30 * 86400);
  assert.equal((await me(first.access_token)).statusCode, 200);

  const { kid: newKid, signsFrom } = await t.deps.keys.rotate({ retireNow: true });
  assert.notEqual(newKid, oldKid);
  assert.ok(Math.abs(signsFrom.getTime() - t.clock.now().getTime()) < 5000, 'the new key signs at once');
  for (const token of [first.access_token, longLived]) assert.equal((await me(token)).statusCode, 401, 'a token of the retired key is refused');
  const kids = (await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json().keys.map((k: { kid: string }) => k.kid);
  assert.deepEqual(kids, [newKid]);
  const [old] = await sql<{ retired_at: Date }>(t, 'SELECT retired_at FROM signing_keys WHERE kid = $1', [oldKid]);
  assert.ok(t.clock.now().getTime() - old.retired_at.getTime() > RETIRED_KEY_GRACE_SECONDS * 1000, 'its grace is spent');

  const refreshed = await t.app.inject({ method: 'POST', url: '/v1/auth/token/refresh', payload: { refresh_token: first.refresh_token } });
  assert.equal(refreshed.statusCode, 200, refreshed.body);
  assert.equal(decodeProtectedHeader(refreshed.json().access_token).kid, newKid);
  assert.equal((await me(refreshed.json().access_token)).statusCode, 200);
  const again = await signIn(user);
  assert.equal(decodeProtectedHeader(again.access_token).kid, newKid, 'a new sign-in signs with the new key');
});

test('rotate with retireNow ends verification of every older key, also of one an earlier rotation retired that is still inside its 24 hours: its tokens are refused and only the new key is published', async () => {
  const user = await createUser(t);
  const first = await signIn(user);
  const kidA = decodeProtectedHeader(first.access_token).kid!;
  const longLived = await t.deps.keys.sign({ sub: user.id, sid: first.session_id, jti: 'atk_01ARZ3NDEKTSV4RRFFQ69G5FAW' }, 'platform', 30 * 86400);
  const { kid: kidB } = await t.deps.keys.rotate();
  t.clock.advance(KEY_PUBLISH_AHEAD_SECONDS + 1);
  const second = await signIn(user);
  assert.equal(decodeProtectedHeader(second.access_token).kid, kidB, 'the rotated key signs after 7 minutes');
  // Key A stopped signing but is inside its 24 hours: its token still verifies (and is remembered).
  assert.equal((await me(longLived)).statusCode, 200);
  assert.equal((await me(second.access_token)).statusCode, 200);

  const { kid: kidC } = await t.deps.keys.rotate({ retireNow: true });
  for (const [name, token] of [['key A (retired earlier, in its grace)', longLived], ['key B', second.access_token]]) {
    const res = await me(token);
    assert.equal(res.statusCode, 401, name);
    assert.equal(res.json().error.code, 'unauthenticated', name);
  }
  const kids = (await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json().keys.map((k: { kid: string }) => k.kid);
  assert.deepEqual(kids, [kidC]);
  const older = await sql<{ kid: string; retired_at: Date }>(t, 'SELECT kid, retired_at FROM signing_keys WHERE kid = ANY($1)', [[kidA, kidB]]);
  for (const row of older) assert.ok(t.clock.now().getTime() - row.retired_at.getTime() > RETIRED_KEY_GRACE_SECONDS * 1000, `${row.kid}: its grace is spent`);
  assert.equal(older.length, 2);
});
