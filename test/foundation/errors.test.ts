import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { deflateSync, gzipSync } from 'node:zlib';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { bearer, createUser, login, userToken } from '../helpers/fixtures.js';
import { schemaErrorMessage } from '../../src/http/validation.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

const assertEnvelope = (body: any, code: string) => {
  assert.equal(body.error.code, code);
  assert.equal(typeof body.error.message, 'string');
  assert.equal(typeof body.error.details, 'object');
  assert.doesNotMatch(JSON.stringify(body), /\bat .+:\d+:\d+/, 'no stack trace');
};

test('every request gets a req_ id in the Request-Id header', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/health' });
  assert.match(String(res.headers['request-id']), /^req_[0-9A-HJKMNP-TV-Z]{26}$/);
});

test('malformed JSON gets 400 malformed_json in the error envelope', async () => {
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'application/json' }, payload: '{"email": ' });
  assert.equal(res.statusCode, 400);
  assertEnvelope(res.json(), 'malformed_json');
});

test('an empty body with a JSON content type is no body: a bodyless POST (logout) succeeds', async () => {
  for (const payload of ['', '  \n']) {
    const { token } = await userToken(t);
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/logout', headers: { ...bearer(token), 'content-type': 'application/json' }, payload });
    assert.equal(res.statusCode, 204, res.body);
  }
});

test('an empty body with a JSON content type on a route that needs fields gets 422 validation_failed naming them', async () => {
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'application/json' }, payload: '' });
  assert.equal(res.statusCode, 422, res.body);
  assertEnvelope(res.json(), 'validation_failed');
  assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path).sort(), ['email', 'password']);
});

test('schema violations get 422 validation_failed naming each offending field', async () => {
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: 42, test_mode: 'yes', extra: 1 } });
  assert.equal(res.statusCode, 422);
  const body = res.json();
  assertEnvelope(body, 'validation_failed');
  const paths = body.error.details.fields.map((f: { path: string }) => f.path).sort();
  assert.deepEqual(paths, ['email', 'extra', 'password', 'test_mode']);
});

test('a nullable field given a wrong value gets one entry naming it, saying what it takes ("must be string or null"; a too-long text its length), not the union\'s "must be null" and "must match a schema in anyOf"', async () => {
  const { token } = await userToken(t);
  const patch = (body: unknown) => t.app.inject({ method: 'PATCH', url: '/v1/users/me/profile', headers: bearer(token), payload: body as object });
  const wrongType = await patch({ avatar_url: 5 });
  assert.equal(wrongType.statusCode, 422);
  assert.deepEqual(wrongType.json().error.details.fields, [{ path: 'avatar_url', message: 'must be string or null' }]);
  const tooLong = await patch({ avatar_url: `https://a.example/${'x'.repeat(2048)}` });
  assert.equal(tooLong.statusCode, 422);
  assert.deepEqual(tooLong.json().error.details.fields.map((f: { path: string }) => f.path), ['avatar_url'], tooLong.body);
  assert.doesNotMatch(tooLong.body, /must be null|anyOf/);
  assert.equal((await patch({ avatar_url: null })).statusCode, 200);
});

test('wrong types are never coerced in bodies ("true" is not a boolean)', async () => {
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: 'a@example.com', password: 'x', test_mode: 'true' } });
  assert.equal(res.statusCode, 422);
  assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['test_mode']);
});

test('JSON nested 10,000 levels deep (IV-3) gets 422 validation_failed, never a 500, with or without a credential', async () => {
  const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
  const login = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'application/json' }, payload: `{"email":${deep(10_000)},"password":"x"}` });
  assert.equal(login.statusCode, 422, login.body);
  assertEnvelope(login.json(), 'validation_failed');
  assert.match(login.json().error.details.fields[0].message, /nest deeper than 64 levels/);
  const { token } = await userToken(t);
  const me = await t.app.inject({ method: 'PATCH', url: '/v1/users/me', headers: { ...bearer(token), 'content-type': 'application/json' }, payload: `{"display_name":${deep(10_000)}}` });
  assert.equal(me.statusCode, 422, me.body);
  assertEnvelope(me.json(), 'validation_failed');
});

/** A platform key, an Application and a user with access to it (for the per-application routes). */
async function userWithApp() {
  const { createApiKey, createUser } = await import('../helpers/fixtures.js');
  const auth = { authorization: `Bearer ${(await createApiKey(t, { scope: 'platform', permissions: ['applications.manage', 'entitlements.manage'] })).secret}` };
  const owner = await createUser(t);
  const app = await t.app.inject({ method: 'POST', url: '/v1/applications', headers: auth, payload: { slug: `js${Date.now() % 1e6}`, name: 'JSON', launch_url: 'https://json.example.com/', owner_user_id: owner.id } });
  assert.equal(app.statusCode, 201, app.body);
  const { user, token } = await userToken(t);
  const ent = await t.app.inject({ method: 'POST', url: `/v1/users/${user.id}/entitlements`, headers: { ...auth, 'idempotency-key': `js-${user.id}` }, payload: { application_id: app.json().id, source: 'admin_grant' } });
  assert.equal(ent.statusCode, 201, ent.body);
  return { token, appId: app.json().id as string };
}

test('"JSON nested deeper than 64 levels (objects and arrays) is refused": a body 64 levels deep is accepted, one 65 levels deep gets 422 validation_failed', async () => {
  const { token, appId } = await userWithApp();
  // The body is level 1, custom level 2, then arrays.
  const nested = (levels: number) => `{"custom":{"k":${'['.repeat(levels - 2)}${']'.repeat(levels - 2)}}}`;
  const send = (levels: number) =>
    t.app.inject({ method: 'PATCH', url: `/v1/users/me/apps/${appId}/profile`, headers: { ...bearer(token), 'content-type': 'application/json' }, payload: nested(levels) });
  const deepest = await send(64);
  assert.equal(deepest.statusCode, 200, deepest.body);
  const tooDeep = await send(65);
  assert.equal(tooDeep.statusCode, 422, tooDeep.body);
  assertEnvelope(tooDeep.json(), 'validation_failed');
  assert.match(tooDeep.json().error.details.fields[0].message, /nest deeper than 64 levels/);
});

test('IV-3 "invalid UTF-8 … Passes when: 4xx": a JSON body with bytes that are not UTF-8 gets 400 malformed_json and changes nothing', async () => {
  const { token } = await userToken(t);
  const send = (payload: string | Buffer) =>
    t.app.inject({ method: 'PATCH', url: '/v1/users/me/profile', headers: { ...bearer(token), 'content-type': 'application/json' }, payload });
  assert.equal((await send('{"display_name":"Zoë 東京 🎉"}')).statusCode, 200, 'well-formed multi-byte UTF-8 is accepted');
  // FF FE, an overlong "/", a UTF-8-encoded surrogate, a truncated sequence.
  for (const bytes of [[0xff, 0xfe], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe6, 0x9d]]) {
    const res = await send(Buffer.concat([Buffer.from('{"display_name":"ab'), Buffer.from(bytes), Buffer.from('cd"}')]));
    assert.equal(res.statusCode, 400, `${Buffer.from(bytes).toString('hex')}: ${res.body}`);
    assertEnvelope(res.json(), 'malformed_json');
  }
  const profile = await t.app.inject({ method: 'GET', url: '/v1/users/me/profile', headers: bearer(token) });
  assert.equal(profile.json().display_name, 'Zoë 東京 🎉', 'never stored as U+FFFD');
});

test('"Text that cannot be stored as sent is refused": a text beginning with U+FEFF (a byte order mark, which embedded storage drops on read) gets 422 validation_failed naming the field, in a body field, a custom key or value and a query parameter, and changes nothing; U+FEFF after the first character is stored and read back as sent', async () => {
  const { token, appId } = await userWithApp();
  const patch = (url: string, payload: unknown) => t.app.inject({ method: 'PATCH', url, headers: bearer(token), payload: payload as object });
  const profileUrl = '/v1/users/me/profile';
  const kept = await patch(profileUrl, { display_name: 'Ada\uFEFF Lovelace' });
  assert.equal(kept.statusCode, 200, kept.body);
  const refusals: [string, () => Promise<Awaited<ReturnType<typeof patch>>>][] = [
    ['display_name', () => patch(profileUrl, { display_name: '\uFEFF' })],
    ['display_name', () => patch(profileUrl, { display_name: '\uFEFFGrace' })],
    ['custom.k', () => patch(`/v1/users/me/apps/${appId}/profile`, { custom: { k: '\uFEFFv' } })],
    ['custom.\uFEFFk', () => patch(`/v1/users/me/apps/${appId}/profile`, { custom: { '\uFEFFk': 'v' } })],
    ['query.q', () => t.app.inject({ method: 'GET', url: `/v1/organizations?q=${encodeURIComponent('\uFEFFabc')}`, headers: bearer(token) })],
  ];
  for (const [field, send] of refusals) {
    const res = await send();
    assert.equal(res.statusCode, 422, `${JSON.stringify(field)}: ${res.body}`);
    assertEnvelope(res.json(), 'validation_failed');
    assert.deepEqual(res.json().error.details.fields, [{ path: field, message: 'must not begin with U+FEFF (a byte order mark)' }]);
  }
  const profile = await t.app.inject({ method: 'GET', url: profileUrl, headers: bearer(token) });
  assert.equal(profile.json().display_name, 'Ada\uFEFF Lovelace');
  const appProfile = await t.app.inject({ method: 'GET', url: `/v1/users/me/apps/${appId}/profile`, headers: bearer(token) });
  assert.deepEqual(appProfile.json().custom, {});
});

test('IV-3 "1e309 … Passes when: 4xx": a JSON number beyond a double gets 400 malformed_json, never stored as null', async () => {
  const { token, appId } = await userWithApp();
  const send = (payload: string) =>
    t.app.inject({ method: 'PATCH', url: `/v1/users/me/apps/${appId}/profile`, headers: { ...bearer(token), 'content-type': 'application/json' }, payload });
  assert.equal((await send('{"custom":{"n":1.5e308,"m":1e-400}}')).statusCode, 200, 'large finite numbers (and underflow to 0) are accepted');
  for (const payload of ['{"custom":{"n":1e309}}', '{"custom":{"n":-1e309}}', '{"custom":{"k":[1,{"deep":1E+400}]}}', `{"custom":{"n":1${'0'.repeat(400)}}}`]) {
    const res = await send(payload);
    assert.equal(res.statusCode, 400, `${payload.slice(0, 40)}: ${res.body}`);
    assertEnvelope(res.json(), 'malformed_json');
  }
  const profile = await t.app.inject({ method: 'GET', url: `/v1/users/me/apps/${appId}/profile`, headers: bearer(token) });
  assert.deepEqual(profile.json().custom, { n: 1.5e308, m: 0 });
});

test('unknown route gets 404 not_found in the envelope', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/v1/nothing-here' });
  assert.equal(res.statusCode, 404);
  assertEnvelope(res.json(), 'not_found');
});

test('unsupported method on a known route gets 405 method_not_allowed with Allow', async () => {
  const res = await t.app.inject({ method: 'DELETE', url: '/v1/auth/login' });
  assert.equal(res.statusCode, 405);
  assert.equal(res.headers.allow, 'POST');
  assertEnvelope(res.json(), 'method_not_allowed');
});

test('"Allow lists them": a path with GET also lists HEAD, which every GET route answers (OPTIONS, PUT and DELETE on GET routes)', async () => {
  for (const [method, url, allow] of [['OPTIONS', '/health', 'GET, HEAD'], ['PUT', '/v1/users', 'GET, HEAD, POST'], ['DELETE', '/v1/openapi.json', 'GET, HEAD']] as const) {
    const res = await t.app.inject({ method, url });
    assert.equal(res.statusCode, 405, `${method} ${url}`);
    assert.equal(res.headers.allow, allow, `${method} ${url}`);
    assertEnvelope(res.json(), 'method_not_allowed');
    assert.equal((await t.app.inject({ method: 'HEAD', url })).statusCode === 405, false, `HEAD ${url} is answered`);
  }
});

test('Part A "Mapping: 400 malformed": a client error Fastify raises that no other rule names (a QUERY request, the HTTP QUERY method draft, without a Content-Type) is 400 bad_request in the error envelope, never a 500, on a route and off one', async () => {
  for (const url of ['/v1/users/me', '/v1/nothing-here']) {
    const res = await t.app.inject({ method: 'QUERY' as any, url });
    assert.equal(res.statusCode, 400, `${url}: ${res.body}`);
    assertEnvelope(res.json(), 'bad_request');
    assert.match(res.json().error.message, /Content-Type/, url);
  }
});

test('oversize body gets 413 payload_too_large', async () => {
  const res = await t.app.inject({
    method: 'POST',
    url: '/v1/auth/login',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({ email: 'a@example.com', password: 'x'.repeat(2 * 1024 * 1024) }),
  });
  assert.equal(res.statusCode, 413);
  assertEnvelope(res.json(), 'payload_too_large');
});

test('a query parameter the operation does not take is 422 validation_failed naming query.<name>, as on the lists, never ignored: logout?all_sessions=true ends no session, PATCH settings?theme=dark changes nothing, GET users/me?expand=x is refused', async () => {
  const user = await createUser(t);
  const [first, second] = [await login(t, user), await login(t, user)];
  const logout = await t.app.inject({ method: 'POST', url: '/v1/auth/logout?all_sessions=true', headers: bearer(first) });
  assert.equal(logout.statusCode, 422, logout.body);
  assertEnvelope(logout.json(), 'validation_failed');
  assert.deepEqual(logout.json().error.details.fields, [{ path: 'query.all_sessions', message: 'is not a known field' }]);
  for (const token of [first, second]) assert.equal((await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) })).statusCode, 200, 'no session ended');

  const patch = await t.app.inject({ method: 'PATCH', url: '/v1/users/me/settings?theme=dark', headers: bearer(first), payload: { locale: 'fr' } });
  assert.equal(patch.statusCode, 422, patch.body);
  assert.deepEqual(patch.json().error.details.fields, [{ path: 'query.theme', message: 'is not a known field' }]);
  const settings = (await t.app.inject({ method: 'GET', url: '/v1/users/me/settings', headers: bearer(first) })).json();
  assert.deepEqual([settings.theme, settings.locale], ['system', 'en'], 'nothing changed');

  const me = await t.app.inject({ method: 'GET', url: '/v1/users/me?expand=x', headers: bearer(first) });
  assert.equal(me.statusCode, 422, me.body);
  assert.deepEqual(me.json().error.details.fields, [{ path: 'query.expand', message: 'is not a known field' }]);
});

test('the OpenAPI document ignores a query (a cache-buster): GET /v1/openapi.json?v=2 is the document', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/v1/openapi.json?v=2' });
  assert.equal(res.statusCode, 200, res.body);
  assert.match(res.json().openapi, /^3\./);
});

test('a non-JSON content type gets 415 unsupported_media_type', async () => {
  const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'text/plain' }, payload: 'hello' });
  assert.equal(res.statusCode, 415);
  assertEnvelope(res.json(), 'unsupported_media_type');
});

test('a body with a Content-Encoding (gzip, deflate, br) gets 415 unsupported_media_type with Accept-Encoding: identity and changes nothing, compressed or not; identity is a plain body; the token endpoint answers invalid_request', async () => {
  const { token } = await userToken(t);
  const patch = (payload: string | Buffer, encoding: string) =>
    t.app.inject({ method: 'PATCH', url: '/v1/users/me/settings', headers: { ...bearer(token), 'content-type': 'application/json', 'content-encoding': encoding }, payload });
  for (const [encoding, payload] of [
    ['gzip', gzipSync('{"theme":"dark"}')],
    ['gzip', '{"theme":"dark"}'],
    ['deflate', deflateSync('{"theme":"dark"}')],
    ['br', '{"theme":"dark"}'],
    ['GZIP', '{"theme":"dark"}'],
    ['identity, gzip', '{"theme":"dark"}'],
  ] as const) {
    const res = await patch(payload, encoding);
    assert.equal(res.statusCode, 415, `${encoding}: ${res.body}`);
    assertEnvelope(res.json(), 'unsupported_media_type');
    assert.equal(res.headers['accept-encoding'], 'identity');
  }
  const settings = await t.app.inject({ method: 'GET', url: '/v1/users/me/settings', headers: bearer(token) });
  assert.equal(settings.json().theme, 'system', 'no refused body changed anything');
  const identity = await patch('{"theme":"dark"}', 'identity');
  assert.equal(identity.statusCode, 200, identity.body);
  assert.equal(identity.json().theme, 'dark');
  const oauth = await t.app.inject({
    method: 'POST', url: '/v1/auth/oauth/token', headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-encoding': 'gzip' },
    payload: gzipSync('grant_type=refresh_token&refresh_token=rtk_x&client_id=app_x'),
  });
  assert.equal(oauth.statusCode, 400, oauth.body);
  assert.equal(oauth.json().error, 'invalid_request');
  assert.match(oauth.json().error_description, /Content-Encoding/);
});

test('missing credential gets 401 with WWW-Authenticate: Bearer', async () => {
  const res = await t.app.inject({ method: 'GET', url: '/v1/users/me' });
  assert.equal(res.statusCode, 401);
  assert.match(String(res.headers['www-authenticate']), /^Bearer realm="platform"$/);
  assertEnvelope(res.json(), 'unauthenticated');
});

test('a garbage bearer gets 401 with error="invalid_token"', async () => {
  for (const authorization of ['Bearer not-a-token', 'Basic abc', 'Bearer plat_live_nope', 'Bearer eyJhbGciOiJub25lIn0.e30.']) {
    const res = await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { authorization } });
    assert.equal(res.statusCode, 401, authorization);
    assert.match(String(res.headers['www-authenticate']), /error="invalid_token"/);
    assertEnvelope(res.json(), 'unauthenticated');
  }
});

test('a bad path parameter gets a clear 404, never a 500', async () => {
  const { token } = await userToken(t);
  const res = await t.app.inject({ method: 'GET', url: `/v1/users/${'%E0%A4%A'}`, headers: bearer(token) });
  assert.ok(res.statusCode >= 400 && res.statusCode < 500, String(res.statusCode));
  assert.ok(res.json().error.code, 'res.json().error.code');
});

test('a path or query that is not validly percent-encoded gets 400 bad_request in the envelope, with its Request-Id and Cache-Control: no-store', async () => {
  const { token } = await userToken(t);
  for (const url of ['/v1/users/%E0%A4%A', '/v1/users/%zz', '/v1/users?q=%zz']) {
    const res = await t.app.inject({ method: 'GET', url, headers: bearer(token) });
    assert.equal(res.statusCode, 400, `${url}: ${res.body}`);
    assertEnvelope(res.json(), 'bad_request');
    assert.match(String(res.headers['request-id']), /^req_[0-9A-HJKMNP-TV-Z]{26}$/, url);
    assert.equal(res.headers['cache-control'], 'no-store', url);
  }
});

test('"The router refuses a path parameter over 2,048 characters with 422": validation_failed naming path; one of 2,048 characters is an unknown id (404)', async () => {
  const { token } = await userToken(t);
  const over = await t.app.inject({ method: 'GET', url: `/v1/users/${'a'.repeat(2049)}`, headers: bearer(token) });
  assert.equal(over.statusCode, 422, over.body);
  assertEnvelope(over.json(), 'validation_failed');
  assert.deepEqual(over.json().error.details.fields.map((f: { path: string }) => f.path), ['path']);
  const longest = await t.app.inject({ method: 'GET', url: `/v1/users/${'a'.repeat(2048)}`, headers: bearer(token) });
  assert.equal(longest.statusCode, 404, longest.body);
  assertEnvelope(longest.json(), 'user_not_found');
});

test('a Content-Length that does not match the body is a malformed request: 400 in the error envelope, never a 500', async () => {
  const payload = '{"email":"a@example.com","password":"x"}';
  for (const length of ['5', '500']) {
    const res = await t.app.inject({ method: 'POST', url: '/v1/auth/login', headers: { 'content-type': 'application/json', 'content-length': length }, payload });
    assert.equal(res.statusCode, 400, `Content-Length ${length}: ${res.body}`);
    assertEnvelope(res.json(), 'malformed_json');
  }
});

test('a date-time the database cannot store (year 0000, a leap second, an offset beyond 15:59) is 422 validation_failed naming the field, never a 500, in queries and bodies', async () => {
  const { createApiKey, createUser } = await import('../helpers/fixtures.js');
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['users.list', 'users.manage', 'entitlements.manage', 'audit.view', 'applications.manage'] })).secret;
  const auth = { authorization: `Bearer ${key}` };
  const owner = await createUser(t);
  const app = await t.app.inject({ method: 'POST', url: '/v1/applications', headers: auth, payload: { slug: `dt${Date.now() % 1e6}`, name: 'DT', launch_url: 'https://dt.example.com/', owner_user_id: owner.id } });
  assert.equal(app.statusCode, 201, app.body);
  const user = await createUser(t);
  for (const value of ['0000-01-01T00:00:00Z', '2030-06-30T23:59:60.5Z', '2030-01-01T00:00:00-23:59', '2030-01-01T00:00:00+16:00', '2030-02-30T00:00:00Z']) {
    for (const [url, field] of [['/v1/users?created_after=', 'created_after'], ['/v1/entitlements?ends_before=', 'ends_before'], ['/v1/audit-events?since=', 'since'], ['/v1/audit-events?until=', 'until']]) {
      const res = await t.app.inject({ method: 'GET', url: url + encodeURIComponent(value), headers: auth });
      assert.equal(res.statusCode, 422, `${url}${value}: ${res.body}`);
      assertEnvelope(res.json(), 'validation_failed');
      assert.ok(res.json().error.details.fields.some((f: { path: string }) => f.path.endsWith(field)), res.body);
    }
    const res = await t.app.inject({
      method: 'POST',
      url: `/v1/users/${user.id}/entitlements`,
      headers: { ...auth, 'idempotency-key': `dt-${value}` },
      payload: { application_id: app.json().id, source: 'admin_grant', ends_at: value },
    });
    assert.equal(res.statusCode, 422, `ends_at ${value}: ${res.body}`);
    assert.ok(res.json().error.details.fields.some((f: { path: string }) => f.path.endsWith('ends_at')), res.body);
  }
  const fine = await t.app.inject({ method: 'GET', url: `/v1/audit-events?since=${encodeURIComponent('2030-01-01T00:00:00.123456-15:59')}`, headers: auth });
  assert.equal(fine.statusCode, 200, 'offsets up to 15:59 and sub-second digits are stored as sent');
});

test('"years 0001–9999 … Anything else is 422 validation_failed naming the field": a date-time whose offset carries it past 9999-12-31 or before 0001-01-01 in UTC is refused naming the field, in bodies and queries alike, and changes nothing', async () => {
  const { createApiKey, createUser } = await import('../helpers/fixtures.js');
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['users.list', 'entitlements.manage', 'audit.view', 'applications.manage'] })).secret;
  const auth = { authorization: `Bearer ${key}` };
  const owner = await createUser(t);
  const app = await t.app.inject({ method: 'POST', url: '/v1/applications', headers: auth, payload: { slug: `dtu${Date.now() % 1e6}`, name: 'DT', launch_url: 'https://dt.example.com/', owner_user_id: owner.id } });
  assert.equal(app.statusCode, 201, app.body);
  const user = await createUser(t);
  for (const value of ['9999-12-31T23:59:59-15:59', '9999-12-31T23:59:59.999999-00:01', '0001-01-01T00:00:00+00:01']) {
    const res = await t.app.inject({
      method: 'POST',
      url: `/v1/users/${user.id}/entitlements`,
      headers: { ...auth, 'idempotency-key': `dtu-${value}` },
      payload: { application_id: app.json().id, source: 'trial', ends_at: value },
    });
    assert.equal(res.statusCode, 422, `ends_at ${value}: ${res.body}`);
    assertEnvelope(res.json(), 'validation_failed');
    const paths = (res.json().error.details.fields ?? []).map((f: { path: string }) => f.path);
    assert.ok(paths.length > 0 && paths.every((p: string) => p === 'ends_at'), res.body);
    const query = await t.app.inject({ method: 'GET', url: `/v1/audit-events?until=${encodeURIComponent(value)}`, headers: auth });
    assert.equal(query.statusCode, 422, `until ${value}: ${query.body}`);
    assert.deepEqual(query.json().error.details.fields.map((f: { path: string }) => f.path), ['query.until']);
  }
  const rows = await t.database.scoped('system').query('SELECT 1 FROM entitlements WHERE user_id = $1', [user.id]);
  assert.equal(rows.rows.length, 0);
  // The last instants of the range are accepted, whatever offset names them.
  for (const value of ['9999-12-31T23:59:59.999Z', '9999-12-31T09:59:59+14:00']) {
    const res = await t.app.inject({ method: 'GET', url: `/v1/audit-events?until=${encodeURIComponent(value)}`, headers: auth });
    assert.equal(res.statusCode, 200, `${value}: ${res.body}`);
  }
});

test('a path id longer than any id answers like an unknown id: the resource\'s 404, never 422', async () => {
  const { token } = await userToken(t, { roles: ['superadmin'] });
  const spec = (await t.app.inject({ method: 'GET', url: '/v1/openapi.json' })).json();
  const long = `x${'9'.repeat(299)}`;
  let compared = 0;
  for (const [path, ops] of Object.entries<Record<string, unknown>>(spec.paths)) {
    if (!path.startsWith('/v1/') || !path.includes('{')) continue;
    for (const method of Object.keys(ops).filter((m) => ['get', 'post', 'patch', 'delete'].includes(m))) {
      const url = (id: string) => path.replace(/\{[^}]+\}/g, (p) => (p === '{id}' && path.startsWith('/v1/users/') ? 'me' : id));
      const send = (id: string) =>
        t.app.inject({ method: method.toUpperCase() as 'GET', url: url(id), headers: { ...bearer(token), 'idempotency-key': `k-${Math.random()}` }, payload: method === 'get' || method === 'delete' ? undefined : {} });
      if (url(long) === url('x')) continue;
      const [unknown, tooLong] = [await send('zzz_unknown'), await send(long)];
      if (unknown.statusCode !== 404) continue;
      compared++;
      assert.equal(tooLong.statusCode, 404, `${method} ${path}: ${tooLong.body}`);
      assert.equal(tooLong.json().error.code, unknown.json().error.code, `${method} ${path}`);
    }
  }
  assert.ok(compared >= 30, `compared ${compared} operations`);
});

test('a UTC offset beyond 15:59 (+16:00) is 422 validation_failed naming the field, never a 500; +15:59 is accepted', async () => {
  const { createApiKey } = await import('../helpers/fixtures.js');
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['audit.view'] })).secret;
  const get = (value: string) => t.app.inject({ method: 'GET', url: `/v1/audit-events?since=${encodeURIComponent(value)}`, headers: bearer(key) });
  for (const value of ['2030-01-01T00:00:00+16:00', '2030-01-01T00:00:00-16:00']) {
    const res = await get(value);
    assert.equal(res.statusCode, 422, `${value}: ${res.body}`);
    assertEnvelope(res.json(), 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.since']);
  }
  assert.equal((await get('2030-01-01T00:00:00+15:59')).statusCode, 200);
});

test('a date-time is RFC 3339 (docs/conventions.md "Date-times"): hour 24, minute 60, month 13 and an offset minute of 60 are 422 validation_failed naming the field; up to nine fractional digits are accepted', async () => {
  const { createApiKey } = await import('../helpers/fixtures.js');
  const key = (await createApiKey(t, { scope: 'platform', permissions: ['audit.view'] })).secret;
  const get = (value: string) => t.app.inject({ method: 'GET', url: `/v1/audit-events?since=${encodeURIComponent(value)}`, headers: bearer(key) });
  for (const value of ['2030-01-01T24:00:00Z', '2030-01-01T23:60:00Z', '2030-13-01T00:00:00Z', '2030-01-01T00:00:00+01:60']) {
    const res = await get(value);
    assert.equal(res.statusCode, 422, `${value}: ${res.body}`);
    assertEnvelope(res.json(), 'validation_failed');
    assert.deepEqual(res.json().error.details.fields.map((f: { path: string }) => f.path), ['query.since']);
  }
  for (const value of ['2030-01-01T00:00:00.123456789Z', '2030-01-01T23:59:59.1234567+01:30']) {
    const res = await get(value);
    assert.equal(res.statusCode, 200, `${value}: ${res.body}`);
  }
});

test('every /v1 response carries Cache-Control: no-store (a session with tokens, a resource, an error); the discovery documents outside /v1 are cacheable', async () => {
  const { user, token } = await userToken(t);
  const login = await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email: user.email, password: user.password } });
  assert.equal(login.statusCode, 200, login.body);
  assert.equal(login.headers['cache-control'], 'no-store');
  const me = await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: bearer(token) });
  assert.equal(me.statusCode, 200);
  assert.equal(me.headers['cache-control'], 'no-store');
  const refused = await t.app.inject({ method: 'GET', url: '/v1/users/me' });
  assert.equal(refused.statusCode, 401);
  assert.equal(refused.headers['cache-control'], 'no-store');
  const jwks = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
  assert.match(String(jwks.headers['cache-control']), /^public, max-age=\d+$/);
});

test('Cache-Control: no-store follows the route that answers, not the URL as sent: a /v1 route reached through a percent-encoded path (/%761/auth/login) still carries it with its tokens', async () => {
  const { user, token } = await userToken(t);
  for (const url of ['/%761/auth/login', '/v%31/auth/login']) {
    const login = await t.app.inject({ method: 'POST', url, payload: { email: user.email, password: user.password } });
    assert.equal(login.statusCode, 200, `${url}: ${login.body}`);
    assert.match(login.json().refresh_token, /^rtk_/);
    assert.equal(login.headers['cache-control'], 'no-store', url);
  }
  const me = await t.app.inject({ method: 'GET', url: '/%761/users/me/export', headers: bearer(token) });
  assert.equal(me.statusCode, 200, me.body);
  assert.equal(me.headers['cache-control'], 'no-store');
  const jwks = await t.app.inject({ method: 'GET', url: '/.well-known/%6Awks.json' });
  assert.equal(jwks.statusCode, 200);
  assert.match(String(jwks.headers['cache-control']), /^public, max-age=\d+$/, 'a route outside /v1 keeps its own caching');
});

test('docs/decisions.md "Content negotiation is not done": every answer is application/json; charset=utf-8 whatever Accept, Accept-Charset or Accept-Language asks (never 406), and never compressed whatever Accept-Encoding offers', async () => {
  const { token } = await userToken(t);
  const asks = { accept: 'application/xml, text/html;q=0.9', 'accept-charset': 'iso-8859-1', 'accept-language': 'fr-CH, de;q=0.5', 'accept-encoding': 'gzip, deflate, br' };
  for (const [method, url, headers] of [['GET', '/v1/users/me', bearer(token)], ['GET', '/v1/users/me/nothing-here', bearer(token)], ['POST', '/v1/auth/login', {}]] as const) {
    const res = await t.app.inject({ method, url, headers: { ...headers, ...asks }, ...(method === 'POST' ? { payload: { email: 'nobody@example.com', password: 'wrong-password-123' } } : {}) });
    assert.notEqual(res.statusCode, 406, `${method} ${url}`);
    assert.equal(res.headers['content-type'], 'application/json; charset=utf-8', `${method} ${url}`);
    assert.equal(res.headers['content-encoding'], undefined, `${method} ${url}`);
    assert.equal(typeof res.json(), 'object', `${method} ${url}: the body is JSON as sent`);
  }
  assert.equal((await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { ...bearer(token), ...asks } })).statusCode, 200);
});

test('docs/decisions.md "Conditional requests" are answered only where a resource has an ETag: elsewhere If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since are not evaluated (GET /v1/users/me answers 200 with its body, PATCH /v1/users/me/settings applies)', async () => {
  const { token } = await userToken(t);
  const future = new Date(Date.now() + 365 * 86400_000).toUTCString();
  const past = 'Mon, 01 Jan 1990 00:00:00 GMT';
  const get = await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { ...bearer(token), 'if-none-match': '*', 'if-modified-since': future, 'if-match': '"stale"', 'if-unmodified-since': past } });
  assert.equal(get.statusCode, 200, get.body);
  assert.equal(typeof get.json().id, 'string');
  assert.equal(get.headers.etag, undefined, 'no ETag outside Entitlements');
  const patch = await t.app.inject({ method: 'PATCH', url: '/v1/users/me/settings', headers: { ...bearer(token), 'if-match': '"stale"', 'if-unmodified-since': past, 'if-none-match': '*' }, payload: { theme: 'dark' } });
  assert.equal(patch.statusCode, 200, patch.body);
  assert.equal(patch.json().theme, 'dark');
});

test('docs/decisions.md "Methods": "A body sent with a GET is not read" (RFC 9110 §9.3.1): a GET with a malformed JSON body, one of another media type, or a compressed one (Content-Encoding: gzip), answers as without it', async () => {
  const { token } = await userToken(t);
  for (const [type, payload, encoding] of [['application/json', '{"not json'], ['application/xml', '<x/>'], ['application/json', '{"expand":"x"}'], ['application/json', '{}', 'gzip']]) {
    const res = await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { ...bearer(token), 'content-type': type, ...(encoding ? { 'content-encoding': encoding } : {}) }, payload });
    assert.equal(res.statusCode, 200, `${type} ${payload}: ${res.body}`);
    assert.equal(typeof res.json().id, 'string');
  }
});

test('docs/decisions.md "Methods": HEAD answers every GET route with the GET\'s status and headers (Content-Length included) and no body: a resource, a 404 of an id and a 401', async () => {
  const { token } = await userToken(t);
  for (const [url, headers] of [['/v1/users/me', bearer(token)], ['/v1/users/usr_00000000000000000000000000', bearer(token)], ['/v1/users/me', {}]] as const) {
    const get = await t.app.inject({ method: 'GET', url, headers });
    const head = await t.app.inject({ method: 'HEAD', url, headers });
    assert.equal(head.statusCode, get.statusCode, url);
    assert.equal(head.headers['content-length'], get.headers['content-length'], `${url}: Content-Length`);
    assert.ok(Number(head.headers['content-length']) > 0, `${url}: Content-Length ${head.headers['content-length']}`);
    assert.equal(head.headers['content-type'], get.headers['content-type'], `${url}: Content-Type`);
    assert.equal(head.headers['cache-control'], get.headers['cache-control'], `${url}: Cache-Control`);
    assert.equal(head.body, '', `${url}: no body`);
  }
});

test('docs/decisions.md "Methods": OPTIONS is 405 with Allow like any other method a path lacks, a CORS preflight too: no preflight is answered, even on the routes readable from any origin (the token endpoint, the JWKS)', async () => {
  const preflight = { origin: 'https://spa.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' };
  for (const [url, allow] of [['/v1/auth/oauth/token', 'POST'], ['/.well-known/jwks.json', 'GET, HEAD'], ['/v1/auth/login', 'POST']] as const) {
    const res = await t.app.inject({ method: 'OPTIONS', url, headers: preflight });
    assert.equal(res.statusCode, 405, `${url}: ${res.body}`);
    assert.equal(res.headers.allow, allow, url);
    assertEnvelope(res.json(), 'method_not_allowed');
    assert.equal(res.headers['access-control-allow-methods'], undefined, url);
    assert.equal(res.headers['access-control-allow-headers'], undefined, url);
  }
});

test('OWASP API4:2023: the message of a schema error words only the first 100 Ajv errors, as Fastify does ("body/path message", joined by ", "): 1,000,000 errors (what a 1 MB body of wrong-typed webhook events makes) are not joined into hundreds of megabytes of text nobody reads; the app uses it', () => {
  const errors = Array.from({ length: 1_000_000 }, (_, i) => ({ instancePath: `/events/${i}`, message: 'must be equal to constant' }));
  const message = schemaErrorMessage(errors, 'body').message;
  assert.equal(message.split(', ').length, 100);
  assert.ok(message.startsWith('body/events/0 must be equal to constant, body/events/1 must be equal to constant, '), message.slice(0, 200));
  assert.ok(message.endsWith('body/events/99 must be equal to constant'), message.slice(-100));
  assert.equal(schemaErrorMessage([{ instancePath: '', message: "must have required property 'email'" }], 'body').message, "body must have required property 'email'");
  const formatter = Object.getOwnPropertySymbols(t.app).find((s) => s.description === 'fastify.schemaErrorFormatter');
  assert.ok(formatter, 'Fastify keeps the formatter under this symbol');
  assert.equal(((t.app as any)[formatter] as typeof schemaErrorMessage)(errors, 'body').message, message);
});
