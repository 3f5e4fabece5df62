// Part A, API Keys: the key resource, its lifecycle (expiry, rotation, revocation), who manages
// which key, the permissions a key may hold, destructive restriction and test keys.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, pausedAfter, withStatementsSettled, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, login, uniqueEmail, userToken, type TestUser } from '../helpers/fixtures.js';
import {
  assertError, assertFields, assertStatus, auditOfTarget, call, createApplication, createOrganization, createPlatformRole, sql,
} from './support.js';

let t: TestApp;
let adminUser: TestUser;
let admin: string;
let support: { user: TestUser; token: string };

before(async () => {
  t = await buildTestApp();
  adminUser = await createUser(t, { roles: ['superadmin'] });
  admin = await login(t, adminUser);
  support = await userToken(t, { roles: ['support'] });
});
after(() => t.close());

const KEY_FIELDS = [
  'created_at', 'created_by', 'expires_at', 'id', 'intended_use', 'last_used_at', 'mode', 'name', 'permissions', 'restrict_destructive', 'revoked_at', 'scope', 'secret_hint',
];

const createKey = (payload: object, token = admin) => call(t, 'POST', '/v1/api-keys', token, payload);
const getKey = (id: string, token = admin) => call(t, 'GET', `/v1/api-keys/${id}`, token);
const patchKey = (id: string, payload: object, token = admin) => call(t, 'PATCH', `/v1/api-keys/${id}`, token, payload);
const rotateKey = (id: string, token = admin) => call(t, 'POST', `/v1/api-keys/${id}/rotate`, token);
const revokeKey = (id: string, token = admin) => call(t, 'DELETE', `/v1/api-keys/${id}`, token);
const listKeys = (query = '', token = admin) => call(t, 'GET', `/v1/api-keys?${query}`, token);
/** A call authenticated by the key: 200 with users.list, 401 when the secret is not valid. */
const useKey = (secret: string) => call(t, 'GET', '/v1/users?limit=1', secret);

async function newKey(payload: object = {}, token = admin) {
  return assertStatus(await createKey({ name: 'svc', scope: 'platform', permissions: ['users.list'], ...payload }, token), 201);
}

test('POST /v1/api-keys (api_keys.manage): 201 with the key and its secret (plat_live_), secret_hint is its last 4 characters, created_by the User; audit api_key.created; the secret works as a Bearer', async () => {
  const body = await newKey({ name: 'Billing sync' });
  assert.deepEqual(Object.keys(body).sort(), [...KEY_FIELDS, 'secret'].sort());
  assert.match(body.id, /^key_[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.equal(body.name, 'Billing sync');
  assert.equal(body.scope, 'platform');
  assert.deepEqual(body.permissions, ['users.list']);
  assert.equal(body.mode, 'live');
  assert.equal(body.intended_use, 'service');
  assert.equal(body.restrict_destructive, false);
  assert.match(body.secret, /^plat_live_/);
  assert.equal(body.secret_hint, body.secret.slice(-4));
  assert.deepEqual(body.created_by, { type: 'user', id: adminUser.id });
  assert.equal(body.expires_at, null);
  assert.equal(body.revoked_at, null);
  assert.equal(body.last_used_at, null);
  const stored = (await sql(t, 'SELECT secret_hash FROM api_keys WHERE id = $1', [body.id]))[0];
  assert.ok(!JSON.stringify(stored).includes(body.secret), 'stored only as a hash');
  const audit = await auditOfTarget(t, body.id, 'api_key.created');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_id, adminUser.id);
  assert.ok(!JSON.stringify(audit[0].after).includes(body.secret), 'the audit row never holds the secret');
  assert.equal((await useKey(body.secret)).statusCode, 200);
});

test('the secret appears only in the create and rotate responses: GET and list never include secret', async () => {
  const body = await newKey();
  const fetched = assertStatus(await getKey(body.id), 200);
  assert.deepEqual(Object.keys(fetched).sort(), KEY_FIELDS);
  const { secret: _secret, ...withoutSecret } = body;
  assert.deepEqual(fetched, withoutSecret);
  const listed = assertStatus(await listKeys('limit=100'), 200);
  const mine = listed.data.find((k: { id: string }) => k.id === body.id);
  assert.ok(mine, 'the new key is listed');
  for (const k of listed.data) assert.ok(!('secret' in k), 'no secret in the list');
  assert.ok(!JSON.stringify(listed).includes(body.secret), 'the secret appears nowhere in the list');
  const patched = assertStatus(await patchKey(body.id, { name: 'renamed' }), 200);
  assert.ok(!('secret' in patched), 'update response returns the key without a secret');
});

test('expires_at must be in the future: a past value gets 422 validation_failed naming expires_at', async () => {
  const past = new Date(t.clock.now().getTime() - 1000).toISOString();
  const before = (await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n;
  assertFields(await createKey({ name: 'old', scope: 'platform', permissions: [], expires_at: past }), ['expires_at']);
  assertFields(await createKey({ name: 'old', scope: 'platform', permissions: [], expires_at: 'tomorrow' }), ['expires_at']);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n, before);
});

test('"expires_at (optional, future)": exactly now is not in the future (422 validation_failed naming expires_at); a millisecond later is', async () => {
  await atOneInstant(t, async () => {
    const now = t.clock.now();
    assertFields(await createKey({ name: 'now', scope: 'platform', permissions: [], expires_at: now.toISOString() }), ['expires_at']);
    const next = new Date(now.getTime() + 1).toISOString();
    assert.equal(assertStatus(await createKey({ name: 'now', scope: 'platform', permissions: [], expires_at: next }), 201).expires_at, next);
  });
});

test('Create body: name, scope and permissions are required; each left out gets 422 validation_failed naming it and no key is created', async () => {
  const full: Record<string, unknown> = { name: 'svc', scope: 'platform', permissions: ['users.list'] };
  const before = (await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n;
  for (const field of ['name', 'scope', 'permissions']) {
    const { [field]: _left, ...body } = full;
    assertFields(await createKey(body), [field]);
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n, before);
});

test('after expires_at the key behaves as revoked: 401, and the list shows it only with include_inactive', async () => {
  const expiresAt = new Date(t.clock.now().getTime() + 3600_000).toISOString();
  const body = await newKey({ expires_at: expiresAt });
  assert.equal(body.expires_at, expiresAt);
  assert.equal((await useKey(body.secret)).statusCode, 200);
  t.clock.advance(3601);
  admin = await login(t, adminUser);
  support.token = await login(t, support.user);
  const res = await useKey(body.secret);
  assertError(res, 401, 'unauthenticated');
  const active = assertStatus(await listKeys('limit=100'), 200).data.map((k: { id: string }) => k.id);
  assert.ok(!active.includes(body.id), 'an expired key is not listed by default');
  const all = assertStatus(await listKeys('limit=100&include_inactive=true'), 200).data.map((k: { id: string }) => k.id);
  assert.ok(all.includes(body.id), 'an expired key is listed with include_inactive');
});

test('"Reaching expires_at makes it behave as revoked": at the very instant of expires_at the secret gets 401, PATCH and rotate get 409 api_key_revoked, and the list leaves it out without include_inactive', async () => {
  const body = await newKey({ expires_at: new Date(t.clock.now().getTime() + 60_000).toISOString() });
  const expiresAt = new Date(body.expires_at);
  const ids = async (q: string) => assertStatus(await listKeys(q), 200).data.map((k: { id: string }) => k.id);
  await atOneInstant(t, async () => {
    t.clock.now = () => new Date(expiresAt.getTime() - 1);
    assert.equal((await useKey(body.secret)).statusCode, 200, 'usable until expires_at');
    assert.ok((await ids('limit=100')).includes(body.id), 'listed until expires_at');
    t.clock.now = () => new Date(expiresAt);
    assertError(await useKey(body.secret), 401, 'unauthenticated');
    assertError(await patchKey(body.id, { name: 'late' }), 409, 'api_key_revoked');
    assertError(await rotateKey(body.id), 409, 'api_key_revoked');
    assert.ok(!(await ids('limit=100')).includes(body.id), 'not listed once expires_at is reached');
    assert.ok((await ids('limit=100&include_inactive=true')).includes(body.id), 'listed with include_inactive');
  });
  // The wall clock passes expires_at too, so time never runs backwards for the next tests.
  t.clock.advance(60);
  assert.equal(assertStatus(await getKey(body.id), 200).name, 'svc');
});

test('"Reaching expires_at makes it behave as revoked" with an expires_at finer than a millisecond: the key is stored as the API shows it, so at the shown instant the secret gets 401 and the list leaves it out (PostgreSQL keeps microseconds, the API milliseconds)', async () => {
  const ms = new Date(Math.floor(t.clock.now().getTime() / 1000) * 1000 + 120_000);
  const sent = ms.toISOString().replace(/\.(\d{3})Z$/, '.$1500Z');
  const body = await newKey({ expires_at: sent });
  const shown = new Date(body.expires_at);
  assert.equal(shown.getTime(), ms.getTime());
  const [stored] = await sql(t, `SELECT to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS at FROM api_keys WHERE id = $1`, [body.id]);
  assert.equal(`${stored.at}Z`, ms.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z'), 'stored to the millisecond the API shows');
  const ids = async (q: string) => assertStatus(await listKeys(q), 200).data.map((k: { id: string }) => k.id);
  await atOneInstant(t, async () => {
    t.clock.now = () => new Date(shown.getTime() - 1);
    assert.equal((await useKey(body.secret)).statusCode, 200, 'usable until expires_at');
    assert.ok((await ids('limit=100')).includes(body.id), 'listed until expires_at');
    t.clock.now = () => new Date(shown);
    assertError(await useKey(body.secret), 401, 'unauthenticated');
    assert.ok(!(await ids('limit=100')).includes(body.id), 'not listed once the expires_at it shows is reached');
  });
  t.clock.advance(121);
});

test('"afterwards the key behaves as revoked (401)": an expired secret, a revoked one and the secret a rotation replaced get 401 invalid_token on every operation that takes a credential (introspection, OAuth, webhooks and key management included), and none of them runs', async () => {
  const doc = assertStatus(await call(t, 'GET', '/v1/openapi.json', null), 200);
  const everything = ['users.list', 'users.manage', 'entitlements.manage', 'applications.manage', 'roles.manage', 'organizations.manage', 'billing.manage', 'billing.refund', 'audit.view', 'webhooks.manage', 'api_keys.manage', 'tenants.manage'];
  const expiring = await newKey({ permissions: everything, expires_at: new Date(t.clock.now().getTime() + 60_000).toISOString() });
  const revoked = await newKey({ permissions: everything });
  assert.equal((await revokeKey(revoked.id)).statusCode, 204);
  const replaced = await newKey({ permissions: everything });
  assertStatus(await rotateKey(replaced.id), 200);
  const operations = Object.entries<Record<string, { security?: unknown[] }>>(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops)
      .filter(([, op]) => Array.isArray(op.security) && op.security.length > 0)
      .map(([method, op]) => ({ method: method.toUpperCase(), url: path.replace(/\{(\w+)\}/g, (_m, name: string) => (name === 'id' ? 'me' : 'x')), op })),
  );
  assert.ok(operations.some((o) => o.url === '/v1/users/me/apps/x/effective-permissions') && operations.some((o) => o.url === '/v1/webhooks') && operations.some((o) => o.url === '/v1/auth/oauth/authorization-codes'));
  const audit = async () => (await sql(t, 'SELECT count(*)::int AS n FROM audit_events'))[0].n;
  const before = await audit();
  await atOneInstant(t, async () => {
    for (const { method, url } of operations) {
      for (const secret of [expiring.secret, revoked.secret, replaced.secret]) {
        const res = await call(t, method, url, secret, method === 'GET' || method === 'DELETE' ? undefined : {}, { 'idempotency-key': `k-${method}-${url}` });
        assertError(res, 401, 'unauthenticated');
        assert.match(String(res.headers['www-authenticate']), /error="invalid_token"/, `${method} ${url}`);
      }
    }
  }, expiring.expires_at);
  assert.equal(await audit(), before, 'no operation ran');
  // The wall clock passes expires_at too, so time never runs backwards for the next tests.
  t.clock.advance(60);
});

test('POST /v1/api-keys/{id}/rotate: a new secret on the same record, the old secret is invalid at once; secret_hint follows; audit api_key.rotated', async () => {
  const body = await newKey();
  const res = await rotateKey(body.id);
  const rotated = assertStatus(res, 200);
  assert.deepEqual(Object.keys(rotated).sort(), [...KEY_FIELDS, 'secret'].sort());
  assert.equal(rotated.id, body.id);
  assert.match(rotated.secret, /^plat_live_/);
  assert.notEqual(rotated.secret, body.secret);
  assert.equal(rotated.secret_hint, rotated.secret.slice(-4));
  assertError(await useKey(body.secret), 401, 'unauthenticated');
  assert.equal((await useKey(rotated.secret)).statusCode, 200);
  assert.equal(assertStatus(await getKey(body.id), 200).secret_hint, rotated.secret.slice(-4));
  assert.equal((await auditOfTarget(t, body.id, 'api_key.rotated')).length, 1);
});

test('an expired key behaves as revoked: its secret gets 401, and PATCH and rotate get 409 api_key_revoked (no new secret)', async () => {
  const body = await newKey({ expires_at: new Date(t.clock.now().getTime() + 60_000).toISOString() });
  t.clock.advance(61);
  assertError(await useKey(body.secret), 401, 'unauthenticated');
  assertError(await rotateKey(body.id), 409, 'api_key_revoked');
  assertError(await patchKey(body.id, { name: 'renamed' }), 409, 'api_key_revoked');
  assert.equal(assertStatus(await getKey(body.id), 200).secret_hint, body.secret.slice(-4), 'not rotated');
  assert.equal((await auditOfTarget(t, body.id, 'api_key.rotated')).length, 0);
});

test('DELETE /v1/api-keys/{id} revokes permanently: 204, the secret gets 401; PATCH and rotate afterwards get 409 api_key_revoked; audit api_key.revoked', async () => {
  const body = await newKey();
  const res = await revokeKey(body.id);
  assert.equal(res.statusCode, 204, res.body);
  assert.equal(res.body, '');
  assertError(await useKey(body.secret), 401, 'unauthenticated');
  const fetched = assertStatus(await getKey(body.id), 200);
  assert.ok(fetched.revoked_at, 'revoked_at set');
  assertError(await patchKey(body.id, { name: 'back' }), 409, 'api_key_revoked');
  assertError(await patchKey(body.id, { restrict_destructive: true }), 409, 'api_key_revoked');
  assertError(await rotateKey(body.id), 409, 'api_key_revoked');
  assertError(await useKey(body.secret), 401, 'unauthenticated');
  assert.equal(assertStatus(await getKey(body.id), 200).name, 'svc');
  assert.equal((await auditOfTarget(t, body.id, 'api_key.revoked')).length, 1);
  assert.equal((await auditOfTarget(t, body.id, 'api_key.rotated')).length, 0);
  assert.ok(!assertStatus(await listKeys('limit=100'), 200).data.some((k: { id: string }) => k.id === body.id), 'a revoked key is not listed by default');
  assert.ok(assertStatus(await listKeys('limit=100&include_inactive=true'), 200).data.some((k: { id: string }) => k.id === body.id), 'a revoked key is listed with include_inactive');
});

test('DELETE of an already revoked key changes nothing: 204 again, revoked_at stays as it was, one api_key.revoked audit row (also for a DELETE that read the key before another committed)', async () => {
  const body = await newKey();
  assert.equal((await revokeKey(body.id)).statusCode, 204);
  const revokedAt = assertStatus(await getKey(body.id), 200).revoked_at;
  assert.ok(revokedAt, 'revoked_at set');
  t.clock.advance(1);
  const again = await revokeKey(body.id);
  assert.equal(again.statusCode, 204, again.body);
  assert.equal(again.body, '');
  assert.equal(assertStatus(await getKey(body.id), 200).revoked_at, revokedAt);
  assert.equal((await auditOfTarget(t, body.id, 'api_key.revoked')).length, 1);
  // A DELETE that read the key before another DELETE committed its revocation changes nothing either.
  const raced = await newKey();
  let firstRevokedAt = '';
  const late = await pausedAfter(t, 'FROM api_keys WHERE id = $1', async () => {
    assert.equal((await revokeKey(raced.id)).statusCode, 204);
    firstRevokedAt = assertStatus(await getKey(raced.id), 200).revoked_at;
    t.clock.advance(1);
  }, () => revokeKey(raced.id));
  assert.equal(late.statusCode, 204, late.body);
  assert.equal(assertStatus(await getKey(raced.id), 200).revoked_at, firstRevokedAt);
  assert.equal((await auditOfTarget(t, raced.id, 'api_key.revoked')).length, 1);
});

test('GET, PATCH, rotate and DELETE of an unknown key get 404 api_key_not_found', async () => {
  for (const res of [await getKey('key_nope'), await patchKey('key_nope', { name: 'x' }), await rotateKey('key_nope'), await revokeKey('key_nope')]) {
    assertError(res, 404, 'api_key_not_found');
  }
});

test('last_used_at is updated at most once a minute', async () => {
  const body = await newKey();
  const lastUsed = async () => (await sql(t, 'SELECT last_used_at FROM api_keys WHERE id = $1', [body.id]))[0].last_used_at as Date | null;
  // The write is off the request's path: each use is followed until the statements it started have
  // settled (no polling deadline that a loaded machine could outrun).
  const use = () => withStatementsSettled(t, /UPDATE api_keys SET last_used_at/, () => useKey(body.secret));
  assert.equal((await use()).statusCode, 200);
  const first = await lastUsed();
  assert.ok(first, 'the first use sets last_used_at');
  t.clock.advance(30);
  assert.equal((await use()).statusCode, 200);
  assert.equal((await lastUsed())!.getTime(), first.getTime(), 'unchanged within the minute');
  t.clock.advance(31);
  assert.equal((await use()).statusCode, 200);
  const second = await lastUsed();
  assert.ok(second && second.getTime() > first.getTime(), `a newer last_used_at: ${second?.toISOString()} after ${first.toISOString()}`);
  assert.ok(second.getTime() - first.getTime() >= 60_000, 'a minute apart at least');
  assert.equal(assertStatus(await getKey(body.id), 200).last_used_at, second.toISOString());
});

test('a platform key needs api_keys.manage: a support user gets 403 forbidden and no key is created', async () => {
  const before = (await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n;
  assertError(await createKey({ name: 'x', scope: 'platform', permissions: ['users.list'] }, support.token), 403, 'forbidden');
  assertError(await createKey({ name: 'x', scope: 'platform', permissions: [] }, support.token), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n, before);
});

test('every permission on a new platform key must be held by the creator: api_keys.manage without users.manage asking for users.manage gets 403 role_escalation_forbidden (on create and on PATCH)', async () => {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const { token } = await userToken(t, { roles: [role] });
  assertError(await createKey({ name: 'x', scope: 'platform', permissions: ['users.list', 'users.manage'] }, token), 403, 'role_escalation_forbidden');
  const ok = await newKey({ permissions: ['users.list'] }, token);
  assertError(await patchKey(ok.id, { permissions: ['users.list', 'users.manage'] }, token), 403, 'role_escalation_forbidden');
  assert.deepEqual(assertStatus(await getKey(ok.id, token), 200).permissions, ['users.list']);
  assertError(await createKey({ name: 'x', scope: 'platform', permissions: ['users.frobnicate'] }), 422, 'unknown_permission');
});

test('a caller lacking a permission of a platform key cannot rotate it (the new secret would hand them that permission): 403 role_escalation_forbidden naming it, the old secret still works, no audit', async () => {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const { token } = await userToken(t, { roles: [role] });
  const key = await newKey({ permissions: ['users.list', 'users.manage'] });
  const err = assertError(await rotateKey(key.id, token), 403, 'role_escalation_forbidden');
  assert.deepEqual(err.details.permissions, ['users.manage']);
  assertStatus(await call(t, 'GET', '/v1/users?limit=1', key.secret), 200);
  assert.deepEqual((await auditOfTarget(t, key.id)).map((a: any) => a.action), ['api_key.created']);
  // A key within the caller's permissions rotates; so does this one for a caller holding all of them.
  const own = await newKey({ permissions: ['users.list'] }, token);
  assert.match(assertStatus(await rotateKey(own.id, token), 200).secret, /^plat_live_/);
  assert.match(assertStatus(await rotateKey(key.id), 200).secret, /^plat_live_/);
});

test('a caller lacking a permission of a platform key cannot lift its restrict_destructive: 403 role_escalation_forbidden naming the permission, the key unchanged; renaming it is allowed', async () => {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const { token } = await userToken(t, { roles: [role] });
  const key = await newKey({ permissions: ['users.list', 'users.manage'], intended_use: 'agent' });
  assert.equal(key.restrict_destructive, true);
  const err = assertError(await patchKey(key.id, { restrict_destructive: false }, token), 403, 'role_escalation_forbidden');
  assert.deepEqual(err.details.permissions, ['users.manage']);
  assert.equal(assertStatus(await getKey(key.id, token), 200).restrict_destructive, true);
  assert.deepEqual((await auditOfTarget(t, key.id)).map((a: any) => a.action), ['api_key.created']);
  assert.equal(assertStatus(await patchKey(key.id, { name: 'renamed' }, token), 200).name, 'renamed');
  // Holding every permission, the superadmin may.
  assert.equal(assertStatus(await patchKey(key.id, { restrict_destructive: false }), 200).restrict_destructive, false);
});

test('a PATCH of an API key that changes nothing writes nothing: 200, updated key as it was, no api_key.updated audit row', async () => {
  const key = await newKey({ name: 'same', permissions: ['users.list'] });
  for (const body of [{}, { name: 'same' }, { permissions: ['users.list'] }, { restrict_destructive: key.restrict_destructive }]) {
    assertStatus(await patchKey(key.id, body), 200);
  }
  assert.deepEqual((await auditOfTarget(t, key.id)).map((a: any) => a.action), ['api_key.created']);
  assertStatus(await patchKey(key.id, { name: 'other' }), 200);
  assert.deepEqual((await auditOfTarget(t, key.id)).map((a: any) => a.action), ['api_key.created', 'api_key.updated']);
});

test('PATCH permissions replaces the list: dropping one removes it (200, audit api_key.updated) and the key can no longer use it; a list of the same length with another permission replaces it too', async () => {
  const key = await newKey({ permissions: ['users.list', 'audit.view'] });
  assert.equal((await useKey(key.secret)).statusCode, 200);
  assert.deepEqual(assertStatus(await patchKey(key.id, { permissions: ['audit.view'] }), 200).permissions, ['audit.view']);
  assert.deepEqual(assertStatus(await getKey(key.id), 200).permissions, ['audit.view']);
  assertError(await useKey(key.secret), 403, 'forbidden');
  const audit = await auditOfTarget(t, key.id, 'api_key.updated');
  assert.equal(audit.length, 1);
  assert.deepEqual(audit[0].after.permissions, ['audit.view']);
  // One permission for another: as many as before, yet a change (not a PATCH that changes nothing).
  assert.deepEqual(assertStatus(await patchKey(key.id, { permissions: ['users.list'] }), 200).permissions, ['users.list']);
  assert.deepEqual(assertStatus(await getKey(key.id), 200).permissions, ['users.list']);
  assert.equal((await useKey(key.secret)).statusCode, 200);
  const swapped = await auditOfTarget(t, key.id, 'api_key.updated');
  assert.equal(swapped.length, 2);
  const swap = swapped.find((a: any) => a.before.permissions.length === 1);
  assert.deepEqual([swap?.before.permissions, swap?.after.permissions], [['audit.view'], ['users.list']]);
});

test('restrict_destructive false on a key that is already unrestricted lifts nothing: a caller lacking its permissions gets 200, no role_escalation_forbidden and no audit row', async () => {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const { token } = await userToken(t, { roles: [role] });
  const key = await newKey({ permissions: ['users.list', 'users.manage'] });
  assert.equal(key.restrict_destructive, false);
  assert.equal(assertStatus(await patchKey(key.id, { restrict_destructive: false }, token), 200).restrict_destructive, false);
  assert.equal(assertStatus(await patchKey(key.id, { name: 'renamed', restrict_destructive: false }, token), 200).name, 'renamed');
  assert.deepEqual((await auditOfTarget(t, key.id)).map((a: any) => a.action), ['api_key.created', 'api_key.updated']);
});

test('restrict_destructive true on a restricted key lifts nothing: a caller lacking its permissions gets 200 (alone, or with a rename), the key stays restricted, api_key.updated for each rename (one sending restrict_destructive true, one leaving it out) and no api_key.restrict_destructive_disabled', async () => {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const { token } = await userToken(t, { roles: [role] });
  const key = await newKey({ permissions: ['users.list', 'users.manage'], intended_use: 'agent' });
  assert.equal(key.restrict_destructive, true);
  assert.equal(assertStatus(await patchKey(key.id, { restrict_destructive: true }, token), 200).restrict_destructive, true);
  const renamed = assertStatus(await patchKey(key.id, { name: 'renamed', restrict_destructive: true }, token), 200);
  assert.equal(renamed.name, 'renamed');
  assert.equal(renamed.restrict_destructive, true);
  assert.equal(assertStatus(await patchKey(key.id, { name: 'renamed again' }, token), 200).restrict_destructive, true);
  assert.deepEqual((await auditOfTarget(t, key.id)).map((a: any) => a.action), ['api_key.created', 'api_key.updated', 'api_key.updated']);
});

test('an app-scoped key may be created by api_keys.manage or the Application owner (owner_user_id); a non-owner gets 403 forbidden', async () => {
  const owner = await userToken(t);
  const stranger = await userToken(t);
  const app = await createApplication(t, { owner: owner.user.id });
  const byOwner = assertStatus(await createKey({ name: 'app', scope: app.id, permissions: [`app.${app.slug}.read`] }, owner.token), 201);
  assert.equal(byOwner.scope, app.id);
  assert.deepEqual(byOwner.created_by, { type: 'user', id: owner.user.id });
  assertStatus(await createKey({ name: 'app', scope: app.id, permissions: ['users.list'] }), 201);
  assertError(await createKey({ name: 'app', scope: app.id, permissions: [] }, stranger.token), 403, 'forbidden');
  assertError(await createKey({ name: 'app', scope: app.id, permissions: [] }, support.token), 403, 'forbidden');
  // The owner manages its Application's keys; others cannot see them.
  assert.equal(assertStatus(await getKey(byOwner.id, owner.token), 200).id, byOwner.id);
  assert.equal(assertStatus(await patchKey(byOwner.id, { name: 'renamed' }, owner.token), 200).name, 'renamed');
  assertStatus(await rotateKey(byOwner.id, owner.token), 200);
  const listed = assertStatus(await listKeys('limit=100', owner.token), 200).data;
  assert.ok(listed.length >= 2 && listed.every((k: { scope: string }) => k.scope === app.id), 'only keys of its own Application');
  assertError(await getKey(byOwner.id, stranger.token), 404, 'api_key_not_found');
  assertError(await revokeKey(byOwner.id, stranger.token), 404, 'api_key_not_found');
  assert.deepEqual(assertStatus(await listKeys('limit=100', stranger.token), 200).data, []);
  assert.equal((await revokeKey(byOwner.id, owner.token)).statusCode, 204);
  // The owner never reaches platform keys.
  const platformKey = await newKey();
  assertError(await getKey(platformKey.id, owner.token), 404, 'api_key_not_found');
  assertError(await createKey({ name: 'x', scope: 'platform', permissions: [] }, owner.token), 403, 'forbidden');
});

test('Part B "an unauthorized reader of a scoped resource gets 404 to avoid revealing existence": a non-owner naming an internal or unapproved Application as a key\'s scope gets 404 application_not_found, the answer for an unknown id, not 403; a public one 403 forbidden', async () => {
  const stranger = await userToken(t);
  const unknown = assertError(await createKey({ name: 'app', scope: 'app_neverexisted', permissions: [] }, stranger.token), 404, 'application_not_found');
  for (const hide of [`visibility = 'internal'`, `review_status = 'pending_review'`]) {
    const app = await createApplication(t);
    await sql(t, `UPDATE applications SET ${hide} WHERE id = $1`, [app.id]);
    const err = assertError(await createKey({ name: 'app', scope: app.id, permissions: [] }, stranger.token), 404, 'application_not_found');
    assert.deepEqual(err, unknown);
  }
  assertError(await createKey({ name: 'app', scope: (await createApplication(t)).id, permissions: [] }, stranger.token), 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM api_keys WHERE created_by_user_id = $1', [stranger.user.id]))[0].n, 0);
});

test("an app-scoped key may hold only the platform permissions its creator holds, unless the creator owns the Application: api_keys.manage without entitlements.manage gets 403 role_escalation_forbidden (create, PATCH, rotate, lifting restrict_destructive)", async () => {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const { token } = await userToken(t, { roles: [role] });
  const owner = await userToken(t);
  const app = await createApplication(t, { owner: owner.user.id });
  const before = (await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n;
  const err = assertError(await createKey({ name: 'app', scope: app.id, permissions: ['users.list', 'entitlements.manage'] }, token), 403, 'role_escalation_forbidden');
  assert.deepEqual(err.details.permissions, ['entitlements.manage']);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM api_keys'))[0].n, before, 'no key is created');
  // What the caller holds it may hand on; the app's own permission keys are not platform powers.
  const held = assertStatus(await createKey({ name: 'app', scope: app.id, permissions: ['users.list'] }, token), 201);
  assertError(await patchKey(held.id, { permissions: ['users.list', 'roles.manage'] }, token), 403, 'role_escalation_forbidden');
  assert.deepEqual(assertStatus(await getKey(held.id, token), 200).permissions, ['users.list']);
  // A key made by the owner (or the superadmin) with entitlements.manage: this caller cannot take its powers.
  const ownerKey = assertStatus(await createKey({ name: 'app', scope: app.id, permissions: ['entitlements.manage'], intended_use: 'agent' }, owner.token), 201);
  assertError(await rotateKey(ownerKey.id, token), 403, 'role_escalation_forbidden');
  assertError(await patchKey(ownerKey.id, { restrict_destructive: false }, token), 403, 'role_escalation_forbidden');
  assert.deepEqual((await auditOfTarget(t, ownerKey.id)).map((a: any) => a.action), ['api_key.created']);
  // The owner's rights cover its Application: the owner holds no platform permission and may.
  assertStatus(await rotateKey(ownerKey.id, owner.token), 200);
  assertStatus(await createKey({ name: 'app', scope: app.id, permissions: ['entitlements.manage', 'roles.manage', 'audit.view'] }, owner.token), 201);
  assertStatus(await createKey({ name: 'app', scope: app.id, permissions: ['entitlements.manage'] }), 201);
});

test("an Application owned by an Organization: its org_admin may manage the Application's keys; a plain member, or an org_admin whose membership is still pending, gets 403 forbidden and neither sees nor lists them", async () => {
  const orgAdmin = await userToken(t);
  const member = await userToken(t);
  const invited = await userToken(t);
  const org = await createOrganization(t, [orgAdmin.user.id, member.user.id]);
  await sql(t, `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at) VALUES ($1, $2, 'org_admin', 'pending', $3)`, [
    org, invited.user.id, t.clock.now(),
  ]);
  const app = await createApplication(t, { ownerOrganization: org });
  const key = assertStatus(await createKey({ name: 'org app', scope: app.id, permissions: ['users.list'] }, orgAdmin.token), 201);
  assert.equal(assertStatus(await getKey(key.id, orgAdmin.token), 200).id, key.id);
  assert.deepEqual(assertStatus(await listKeys('limit=100', orgAdmin.token), 200).data.map((k: { id: string }) => k.id), [key.id]);
  for (const outsider of [member, invited]) {
    assertError(await createKey({ name: 'org app', scope: app.id, permissions: [] }, outsider.token), 403, 'forbidden');
    assertError(await getKey(key.id, outsider.token), 404, 'api_key_not_found');
    assertError(await revokeKey(key.id, outsider.token), 404, 'api_key_not_found');
    assert.deepEqual(assertStatus(await listKeys('limit=100', outsider.token), 200).data, []);
  }
  assert.equal(assertStatus(await getKey(key.id), 200).revoked_at, null);
  assert.deepEqual((await sql(t, 'SELECT count(*)::int AS n FROM api_keys WHERE scope = $1', [app.id]))[0].n, 1);
});

test("app-scoped keys hold only that Application's declared app.<slug>.* keys plus entitlements.manage, users.list, roles.manage, audit.view; users.manage gets 422 unknown_permission", async () => {
  const app = await createApplication(t);
  const other = await createApplication(t);
  const allowed = [`app.${app.slug}.read`, 'entitlements.manage', 'users.list', 'roles.manage', 'audit.view'];
  const key = assertStatus(await createKey({ name: 'app', scope: app.id, permissions: allowed }), 201);
  assert.deepEqual([...key.permissions].sort(), [...allowed].sort());
  for (const bad of ['users.manage', 'api_keys.manage', `app.${other.slug}.read`, `app.${app.slug}.write`, 'billing.manage']) {
    const error = assertError(await createKey({ name: 'app', scope: app.id, permissions: ['users.list', bad] }), 422, 'unknown_permission');
    assert.ok(JSON.stringify(error.details).includes(bad), JSON.stringify(error.details));
    // A key has a scope, not a Role: the message says so.
    assert.equal(error.message, "A permission is not valid for the key's scope.");
  }
  assertError(await createKey({ name: 'app', scope: 'app_doesnotexist', permissions: [] }), 404, 'application_not_found');
  assertError(await patchKey(key.id, { permissions: ['users.manage'] }), 422, 'unknown_permission');
  assert.deepEqual([...assertStatus(await getKey(key.id), 200).permissions].sort(), [...allowed].sort());
});

test("PATCH permissions of an app-scoped key within its Application's allowed set: 200, audit api_key.updated", async () => {
  const owner = await userToken(t);
  const app = await createApplication(t, { owner: owner.user.id });
  const key = assertStatus(await createKey({ name: 'app', scope: app.id, permissions: ['users.list'] }, owner.token), 201);
  const body = assertStatus(await patchKey(key.id, { permissions: ['users.list', `app.${app.slug}.read`] }, owner.token), 200);
  assert.deepEqual(body.permissions, ['users.list', `app.${app.slug}.read`]);
  const audit = await auditOfTarget(t, key.id, 'api_key.updated');
  assert.equal(audit.length, 1);
  assert.deepEqual(audit[0].before.permissions, ['users.list']);
  assert.deepEqual(audit[0].after.permissions, ['users.list', `app.${app.slug}.read`]);
});

test("the audit rows of an app-scoped key's changes carry its Application: the Application's own audit.view key sees api_key.created, updated, rotated and revoked with its application_id", async () => {
  const app = await createApplication(t);
  const viewer = assertStatus(await createKey({ name: 'auditor', scope: app.id, permissions: ['audit.view'] }), 201);
  const key = assertStatus(await createKey({ name: 'app', scope: app.id, permissions: [] }), 201);
  assertStatus(await patchKey(key.id, { name: 'renamed' }), 200);
  assertStatus(await rotateKey(key.id), 200);
  assert.equal((await revokeKey(key.id)).statusCode, 204);
  const seen = assertStatus(await call(t, 'GET', `/v1/audit-events?target_id=${key.id}`, viewer.secret), 200).data;
  assert.deepEqual(seen.map((e: any) => e.action).sort(), ['api_key.created', 'api_key.revoked', 'api_key.rotated', 'api_key.updated']);
  assert.ok(seen.every((e: any) => e.application_id === app.id), JSON.stringify(seen.map((e: any) => e.application_id)));
});

test("api_key.restrict_destructive_disabled of an app-scoped agent key carries its Application as its other audit rows do: the Application's own audit.view key sees it, for an agent key created unrestricted and for one turned off later", async () => {
  const app = await createApplication(t);
  const viewer = assertStatus(await createKey({ name: 'auditor', scope: app.id, permissions: ['audit.view'] }), 201);
  const created = assertStatus(await createKey({ name: 'agent', scope: app.id, permissions: [], intended_use: 'agent', restrict_destructive: false }), 201);
  const lifted = assertStatus(await createKey({ name: 'agent', scope: app.id, permissions: [], intended_use: 'agent' }), 201);
  assertStatus(await patchKey(lifted.id, { restrict_destructive: false }), 200);
  for (const key of [created, lifted]) {
    const seen = assertStatus(await call(t, 'GET', `/v1/audit-events?target_id=${key.id}`, viewer.secret), 200).data;
    const disabled = seen.filter((e: any) => e.action === 'api_key.restrict_destructive_disabled');
    assert.equal(disabled.length, 1, JSON.stringify(seen.map((e: any) => e.action)));
    assert.equal(disabled[0].application_id, app.id);
  }
});

test('an API key calling any /v1/api-keys route gets 400 user_token_required, even with api_keys.manage', async () => {
  const target = await newKey();
  const key = await createApiKey(t, { permissions: ['api_keys.manage', 'users.list'] });
  const calls = [
    ['GET', '/v1/api-keys', undefined],
    ['POST', '/v1/api-keys', { name: 'x', scope: 'platform', permissions: [] }],
    ['GET', `/v1/api-keys/${target.id}`, undefined],
    ['PATCH', `/v1/api-keys/${target.id}`, { name: 'x' }],
    ['POST', `/v1/api-keys/${target.id}/rotate`, undefined],
    ['DELETE', `/v1/api-keys/${target.id}`, undefined],
    ['PATCH', `/v1/api-keys/${key.id}`, { name: 'self' }],
    ['POST', `/v1/api-keys/${key.id}/rotate`, undefined],
  ] as const;
  for (const [method, url, payload] of calls) assertError(await call(t, method, url, key.secret, payload), 400, 'user_token_required');
  assert.equal((await useKey(target.secret)).statusCode, 200, 'nothing changed');
  assert.equal(assertStatus(await getKey(target.id), 200).name, 'svc');
});

test('restrict_destructive defaults to true for intended_use agent and false for service', async () => {
  assert.equal((await newKey({ intended_use: 'agent' })).restrict_destructive, true);
  assert.equal((await newKey({ intended_use: 'service' })).restrict_destructive, false);
  assert.equal((await newKey()).restrict_destructive, false);
  assert.equal((await newKey({ intended_use: 'agent', restrict_destructive: true })).restrict_destructive, true);
  assert.equal((await newKey({ intended_use: 'service', restrict_destructive: true })).restrict_destructive, true);
});

test('a restrict_destructive key is refused destructive operations (403 destructive_operation_restricted, details.key_id); turning it off on an agent key writes audit api_key.restrict_destructive_disabled', async () => {
  const key = await newKey({ intended_use: 'agent', permissions: ['users.list', 'users.manage'] });
  const victim = await createUser(t);
  const error = assertError(await call(t, 'DELETE', `/v1/users/${victim.id}`, key.secret), 403, 'destructive_operation_restricted');
  assert.equal(error.details.key_id, key.id);
  assert.equal((await sql(t, 'SELECT status FROM users WHERE id = $1', [victim.id]))[0].status, 'active');
  const patched = assertStatus(await patchKey(key.id, { restrict_destructive: false }), 200);
  assert.equal(patched.restrict_destructive, false);
  const audit = await auditOfTarget(t, key.id, 'api_key.restrict_destructive_disabled');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_id, adminUser.id);
  assert.equal((await auditOfTarget(t, key.id, 'api_key.updated')).length, 1);
  assert.equal((await call(t, 'DELETE', `/v1/users/${victim.id}`, key.secret)).statusCode, 204);
  // A service key that was never restricted: no such audit.
  const service = await newKey({ intended_use: 'service', restrict_destructive: true });
  assertStatus(await patchKey(service.id, { restrict_destructive: false }), 200);
  assert.deepEqual(await auditOfTarget(t, service.id, 'api_key.restrict_destructive_disabled'), []);
});

test('"Setting restrict_destructive false on an intended_use agent key writes audit api_key.restrict_destructive_disabled": also when the agent key is created with it false (a service key created so writes none)', async () => {
  const agent = await newKey({ intended_use: 'agent', restrict_destructive: false });
  assert.equal(agent.restrict_destructive, false);
  const audit = await auditOfTarget(t, agent.id, 'api_key.restrict_destructive_disabled');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_id, adminUser.id);
  assert.equal(audit[0].after.restrict_destructive, false);
  const service = await newKey({ intended_use: 'service', restrict_destructive: false });
  assert.deepEqual(await auditOfTarget(t, service.id, 'api_key.restrict_destructive_disabled'), []);
});

test('"restrict_destructive turned off on an agent key" is audited when it turns off: a PATCH sending false to an agent key already unrestricted writes no second api_key.restrict_destructive_disabled', async () => {
  const agent = await newKey({ intended_use: 'agent', restrict_destructive: false });
  assertStatus(await patchKey(agent.id, { name: 'renamed', restrict_destructive: false }), 200);
  assert.equal((await auditOfTarget(t, agent.id, 'api_key.restrict_destructive_disabled')).length, 1);
  assert.equal((await auditOfTarget(t, agent.id, 'api_key.updated')).length, 1);
});

test('PATCH /v1/api-keys/{id} changes name, permissions or restrict_destructive only; audit api_key.updated with before and after; mode and scope never change', async () => {
  const key = await newKey({ permissions: ['users.list'] });
  const body = assertStatus(await patchKey(key.id, { name: 'new name', permissions: ['users.list', 'users.manage'] }), 200);
  assert.equal(body.name, 'new name');
  assert.deepEqual(body.permissions, ['users.list', 'users.manage']);
  assert.equal(body.restrict_destructive, false, 'unsent fields stay');
  const audit = await auditOfTarget(t, key.id, 'api_key.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.name, 'svc');
  assert.equal(audit[0].after.name, 'new name');
  for (const payload of [{ mode: 'test' }, { scope: 'app_x' }, { intended_use: 'agent' }, { expires_at: null }]) {
    assert.deepEqual(assertError(await patchKey(key.id, payload), 422, 'read_only_field').details, { fields: Object.keys(payload) });
  }
  const fetched = assertStatus(await getKey(key.id), 200);
  assert.equal(fetched.mode, 'live');
  assert.equal(fetched.scope, 'platform');
});

test('test keys (mode test) get a plat_test_ secret; a user created with one is test_mode true and invisible to live keys', async () => {
  const testKey = await newKey({ mode: 'test', permissions: ['users.list', 'users.manage'] });
  assert.equal(testKey.mode, 'test');
  assert.match(testKey.secret, /^plat_test_/);
  const liveKey = await newKey({ permissions: ['users.list', 'users.manage'] });
  const email = uniqueEmail('sandbox');
  const created = assertStatus(await call(t, 'POST', '/v1/users', testKey.secret, { email, send_invitation: false }), 201);
  assert.equal(created.test_mode, true);
  assert.equal((await sql(t, 'SELECT test_mode FROM users WHERE id = $1', [created.id]))[0].test_mode, true);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/users/${created.id}`, testKey.secret), 200).id, created.id);
  assertError(await call(t, 'GET', `/v1/users/${created.id}`, liveKey.secret), 404, 'user_not_found');
  assertError(await call(t, 'GET', `/v1/users/${created.id}`, admin), 404, 'user_not_found');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/users?email=${encodeURIComponent(email)}`, liveKey.secret), 200).data, []);
  // The same address is still free in live mode.
  assert.equal(assertStatus(await call(t, 'POST', '/v1/users', liveKey.secret, { email, send_invitation: false }), 201).test_mode, false);
  const audit = (await sql(t, `SELECT test_mode FROM audit_events WHERE target_user_id = $1 AND action = 'user.created'`, [created.id]))[0];
  assert.equal(audit.test_mode, true);
  // Rotation keeps the mode.
  assert.match(assertStatus(await rotateKey(testKey.id), 200).secret, /^plat_test_/);
});

test('"API key rows take the caller\'s" mode (docs/decisions.md, Mode of an audit row): a live admin minting a test key stays in the live trail, read by live audit.view and not by test-mode audit.view', async () => {
  const key = await newKey({ mode: 'test' });
  assert.equal(key.mode, 'test');
  const [row] = await sql<{ test_mode: boolean }>(t, `SELECT test_mode FROM audit_events WHERE target_id = $1 AND action = 'api_key.created'`, [key.id]);
  assert.equal(row.test_mode, false);
  const read = async (cred: string) => assertStatus(await call(t, 'GET', `/v1/audit-events?target_id=${key.id}`, cred), 200).data.map((e: any) => e.action);
  assert.deepEqual(await read((await createApiKey(t, { permissions: ['audit.view'] })).secret), ['api_key.created']);
  assert.deepEqual(await read((await createApiKey(t, { permissions: ['audit.view'], mode: 'test' })).secret), []);
});

test('"Test credentials see only test rows": a test-mode User token creates test keys only; asking for mode live gets 403 forbidden and no key is created', async () => {
  const testAdmin = await login(t, await createUser(t, { mode: 'test', roles: ['superadmin'] }));
  const name = `escape-${Date.now()}`;
  assert.equal(assertError(await createKey({ name, scope: 'platform', permissions: ['users.list'], mode: 'live' }, testAdmin), 403, 'forbidden').details.field, 'mode');
  assert.deepEqual(await sql(t, 'SELECT id FROM api_keys WHERE name = $1', [name]), []);
  const sandbox = assertStatus(await createKey({ name, scope: 'platform', permissions: ['users.list'], mode: 'test' }, testAdmin), 201);
  assert.equal(sandbox.mode, 'test');
  assert.match(sandbox.secret, /^plat_test_/);
});

test('"mode (default live)": a test-mode User token that leaves mode out asks for a live key and gets 403 forbidden (details.field mode), no key is created; with mode test it gets a test key', async () => {
  const testAdmin = await login(t, await createUser(t, { mode: 'test', roles: ['superadmin'] }));
  const name = `default-${Date.now()}`;
  assert.equal(assertError(await createKey({ name, scope: 'platform', permissions: ['users.list'] }, testAdmin), 403, 'forbidden').details.field, 'mode');
  assert.deepEqual(await sql(t, 'SELECT id FROM api_keys WHERE name = $1', [name]), []);
  assert.equal(assertStatus(await createKey({ name, scope: 'platform', permissions: ['users.list'], mode: 'test' }, testAdmin), 201).mode, 'test');
});

test('"A test-mode credential sees and manages only test keys": a live key is 404 api_key_not_found to a test-mode User token (GET, PATCH, rotate, DELETE) and left out of its list whatever mode it asks for; a live credential manages both', async () => {
  const testAdmin = await login(t, await createUser(t, { mode: 'test', roles: ['superadmin'] }));
  const live = await newKey();
  const sandbox = await newKey({ mode: 'test' }, testAdmin);
  for (const res of [await getKey(live.id, testAdmin), await patchKey(live.id, { name: 'x' }, testAdmin), await rotateKey(live.id, testAdmin), await revokeKey(live.id, testAdmin)]) {
    assertError(res, 404, 'api_key_not_found');
  }
  const untouched = assertStatus(await getKey(live.id), 200);
  assert.equal(untouched.name, 'svc');
  assert.equal(untouched.revoked_at, null);
  assert.equal(untouched.secret_hint, live.secret.slice(-4));
  assert.equal((await useKey(live.secret)).statusCode, 200, 'the live key still works');
  for (const q of ['limit=100', 'limit=100&mode=live', 'limit=100&include_inactive=true']) {
    const listed = assertStatus(await listKeys(q, testAdmin), 200).data;
    assert.ok(listed.every((k: { mode: string }) => k.mode === 'test'), `only test keys (${q})`);
    assert.ok(!listed.some((k: { id: string }) => k.id === live.id), `the live key is not listed (${q})`);
    // Not an empty list passing the two checks above: the test key is there, unless live keys are asked for.
    assert.equal(listed.some((k: { id: string }) => k.id === sandbox.id), !q.includes('mode=live'), `the test key is listed unless mode=live (${q})`);
  }
  assert.ok(assertStatus(await listKeys('limit=100', testAdmin), 200).data.some((k: { id: string }) => k.id === sandbox.id), 'its test key is listed');
  assert.equal(assertStatus(await getKey(sandbox.id), 200).mode, 'test', 'a live credential reads the test key');
});

test('GET /v1/api-keys filters by scope, mode and intended_use', async () => {
  const app = await createApplication(t);
  const a = assertStatus(await createKey({ name: 'f', scope: app.id, permissions: [] }), 201);
  const b = assertStatus(await createKey({ name: 'f', scope: app.id, permissions: [], mode: 'test', intended_use: 'agent' }), 201);
  const ids = async (q: string) => assertStatus(await listKeys(q), 200).data.map((k: { id: string }) => k.id);
  assert.deepEqual(await ids(`scope=${app.id}`), [b.id, a.id]);
  assert.deepEqual(await ids(`scope=${app.id}&mode=test`), [b.id]);
  assert.deepEqual(await ids(`scope=${app.id}&mode=live`), [a.id]);
  assert.deepEqual(await ids(`scope=${app.id}&intended_use=agent`), [b.id]);
  assert.deepEqual(await ids(`scope=${app.id}&intended_use=service`), [a.id]);
});

test('Part A Errors, role_escalation_forbidden ("New platform key requests a permission the creator lacks"): 403, no key row and no audit row are written', async () => {
  const role = await createPlatformRole(t, ['api_keys.manage', 'users.list']);
  const { token } = await userToken(t, { roles: [role] });
  const count = async (table: string) => (await sql(t, `SELECT count(*)::int AS n FROM ${table}`))[0].n;
  const before = { keys: await count('api_keys'), audit: await count('audit_events') };
  const error = assertError(await createKey({ name: 'x', scope: 'platform', permissions: ['users.list', 'users.manage', 'audit.view'] }, token), 403, 'role_escalation_forbidden');
  assert.deepEqual([...error.details.permissions].sort(), ['audit.view', 'users.manage']);
  assert.deepEqual({ keys: await count('api_keys'), audit: await count('audit_events') }, before);
});

test('"DELETE sets revoked_at permanently": a rotate or PATCH that read the key before a revocation committed gets 409 api_key_revoked once it goes on, no new secret, the name unchanged and no audit row after api_key.revoked (on both storages, by a pause)', async () => {
  for (const change of [(id: string) => rotateKey(id), (id: string) => patchKey(id, { name: 'renamed' })]) {
    const body = await newKey();
    const res = await pausedAfter(t, 'FROM api_keys WHERE id = $1', async () => {
      assert.equal((await revokeKey(body.id)).statusCode, 204);
    }, () => change(body.id));
    assertError(res, 409, 'api_key_revoked');
    assert.equal((await useKey(body.secret)).statusCode, 401);
    const stored = assertStatus(await getKey(body.id), 200);
    assert.notEqual(stored.revoked_at, null);
    assert.equal(stored.name, 'svc');
    assert.equal(stored.secret_hint, body.secret.slice(-4), 'no new secret');
    assert.deepEqual((await auditOfTarget(t, body.id)).map((a: any) => a.action), ['api_key.created', 'api_key.revoked']);
  }
});

test('rotate and PATCH at the same time as revoking the key: a revoked key is never rotated or changed afterwards (409 api_key_revoked, no new secret, no audit row after api_key.revoked); a rotation that went first hands out a secret that stops working at the revocation (on PostgreSQL the three run at once)', async () => {
  for (let round = 0; round < 8; round++) {
    const body = await newKey();
    const [rotated, revoked, patched] = await Promise.all([rotateKey(body.id), revokeKey(body.id), patchKey(body.id, { name: 'renamed' })]);
    assert.equal(revoked.statusCode, 204);
    for (const res of [rotated, patched]) {
      if (res.statusCode === 200) assert.equal(res.json().revoked_at, null, `round ${round}: a change answered 200 happened before the revocation`);
      else assertError(res, 409, 'api_key_revoked');
    }
    const actions = (await auditOfTarget(t, body.id)).map((a) => a.action);
    assert.equal(actions.filter((a) => a === 'api_key.rotated').length, rotated.statusCode === 200 ? 1 : 0, `round ${round}: ${actions}`);
    assert.equal(actions.filter((a) => a === 'api_key.updated').length, patched.statusCode === 200 ? 1 : 0, `round ${round}: ${actions}`);
    const stored = assertStatus(await getKey(body.id), 200);
    assert.notEqual(stored.revoked_at, null);
    assert.equal(stored.name, patched.statusCode === 200 ? 'renamed' : 'svc');
    if (rotated.statusCode === 200) assert.equal((await useKey(rotated.json().secret)).statusCode, 401);
  }
});

test('docs/decisions.md "API key errors": "Create and rotate take no Idempotency-Key (a stored replay would keep the secret 24 hours)": a key sent with either is not read, so a repeat mints another secret and no answer holding one is stored', async () => {
  const headers = { 'idempotency-key': `keys-${Date.now()}` };
  const payload = { name: 'svc', scope: 'platform', permissions: ['users.list'] };
  const first = assertStatus(await call(t, 'POST', '/v1/api-keys', admin, payload, headers), 201);
  const second = assertStatus(await call(t, 'POST', '/v1/api-keys', admin, payload, headers), 201);
  assert.notEqual(second.id, first.id);
  assert.notEqual(second.secret, first.secret);
  const rotated = assertStatus(await call(t, 'POST', `/v1/api-keys/${first.id}/rotate`, admin, undefined, headers), 200);
  const again = assertStatus(await call(t, 'POST', `/v1/api-keys/${first.id}/rotate`, admin, undefined, headers), 200);
  assert.notEqual(again.secret, rotated.secret);
  assertError(await useKey(rotated.secret), 401, 'unauthenticated');
  assertStatus(await useKey(again.secret), 200);
  const stored = await sql(t, "SELECT operation, response_body FROM idempotency_keys WHERE operation LIKE '% /v1/api-keys%'");
  assert.deepEqual(stored, []);
});
