// Part A, Profiles: the global Profile, its field rules, who may read and write it, and audit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, buildTestApp, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser, userToken, type TestUser } from '../helpers/fixtures.js';
import { assertError, assertFields, assertStatus, auditFor, call, createApplication, grant, sql } from './support.js';

let t: TestApp;
let admin: { user: TestUser; token: string };
let support: { user: TestUser; token: string };

before(async () => {
  t = await buildTestApp();
  admin = await userToken(t, { roles: ['superadmin'] });
  support = await userToken(t, { roles: ['support'] });
});
after(() => t.close());

const getProfile = (id: string, token: string) => call(t, 'GET', `/v1/users/${id}/profile`, token);
const patchProfile = (id: string, token: string, payload: object) => call(t, 'PATCH', `/v1/users/${id}/profile`, token, payload);
const stored = async (id: string) => (await sql(t, 'SELECT p.*, s.locale FROM profiles p JOIN settings s USING (user_id) WHERE p.user_id = $1', [id]))[0];

test('GET /v1/users/{id}/profile returns the Profile fields (self)', async () => {
  const { user, token } = await userToken(t);
  const body = assertStatus(await getProfile('me', token), 200);
  assert.deepEqual(Object.keys(body).sort(), ['avatar_url', 'contact_email', 'contact_phone', 'display_name', 'locale', 'updated_at', 'user_id']);
  assert.equal(body.user_id, user.id);
  assert.equal(typeof body.display_name, 'string');
  assert.ok(body.display_name.length >= 1, 'body.display_name.length >= 1');
  assert.equal(body.avatar_url, null);
  assert.equal(body.contact_email, null);
  assert.equal(body.contact_phone, null);
  assert.equal(typeof body.locale, 'string');
  assert.equal(assertStatus(await getProfile(user.id, support.token), 200).user_id, user.id, 'users.list reads it too');
});

test('a self-service Profile change: only fields sent change, and it writes no audit event', async () => {
  const { user, token } = await userToken(t);
  const body = assertStatus(
    await patchProfile('me', token, { display_name: 'Ada Self', avatar_url: 'https://cdn.example/a.png', contact_email: 'ada@contact.example', contact_phone: '+14155550123', locale: 'fr-CA' }),
    200,
  );
  assert.equal(body.display_name, 'Ada Self');
  assert.equal(body.avatar_url, 'https://cdn.example/a.png');
  assert.equal(body.contact_email, 'ada@contact.example');
  assert.equal(body.contact_phone, '+14155550123');
  assert.equal(body.locale, 'fr-CA');
  const partial = assertStatus(await patchProfile(user.id, token, { contact_phone: null }), 200);
  assert.equal(partial.contact_phone, null);
  assert.equal(partial.display_name, 'Ada Self', 'unsent fields stay');
  assert.equal(partial.locale, 'fr-CA');
  const row = await stored(user.id);
  assert.equal(row.display_name, 'Ada Self');
  assert.equal(row.locale, 'fr-CA');
  assert.deepEqual(await auditFor(t, user.id, 'profile.updated'), []);
});

test('an admin (users.manage) changing someone else\'s Profile writes audit profile.updated with before and after', async () => {
  const user = await createUser(t);
  const before = assertStatus(await getProfile(user.id, admin.token), 200);
  const body = assertStatus(await patchProfile(user.id, admin.token, { display_name: 'Renamed By Admin' }), 200);
  assert.equal(body.display_name, 'Renamed By Admin');
  const audit = await auditFor(t, user.id, 'profile.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].actor_type, 'user');
  assert.equal(audit[0].actor_id, admin.user.id);
  assert.equal(audit[0].before.display_name, before.display_name);
  assert.equal(audit[0].after.display_name, 'Renamed By Admin');
});

test('display_name "1–100 characters" counts code points (as passwords do): 100 emoji are accepted on the Profile, at signup and on POST /v1/users; 101 emoji are 422 validation_failed naming display_name', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units
  const { user, token } = await userToken(t);
  assertFields(await patchProfile('me', token, { display_name: E.repeat(101) }), ['display_name']);
  assert.equal(assertStatus(await patchProfile('me', token, { display_name: E.repeat(100) }), 200).display_name, E.repeat(100));
  assert.equal((await stored(user.id)).display_name, E.repeat(100));
  const signup = (display_name: string) =>
    t.app.inject({ method: 'POST', url: '/v1/auth/signup', payload: { email: `cp-${Math.random().toString(36).slice(2)}@example.com`, password: 'violet-harbor-cinnamon-42', display_name } });
  assertFields(await signup(E.repeat(101)), ['display_name']);
  assert.equal((await signup(E.repeat(100))).statusCode, 201);
  const admin = (await createApiKey(t, { scope: 'platform', permissions: ['users.manage', 'users.list'] })).secret;
  const create = (display_name: string) => call(t, 'POST', '/v1/users', admin, { email: `cp-${Math.random().toString(36).slice(2)}@example.com`, display_name });
  assertFields(await create(E.repeat(101)), ['display_name']);
  const created = assertStatus(await create(E.repeat(100)), 201);
  assert.equal((await stored(created.id)).display_name, E.repeat(100));
});

test('display_name: 1–100 characters and never null; otherwise 422 validation_failed naming display_name', async () => {
  const { user, token } = await userToken(t);
  for (const bad of ['', 'x'.repeat(101), null, 42]) assertFields(await patchProfile('me', token, { display_name: bad }), ['display_name']);
  assert.equal(assertStatus(await patchProfile('me', token, { display_name: 'x'.repeat(100) }), 200).display_name.length, 100);
  assert.equal(assertStatus(await patchProfile('me', token, { display_name: 'y' }), 200).display_name, 'y');
  assert.equal((await stored(user.id)).display_name, 'y');
});

test('avatar_url: an https URL of at most 2048 characters, or null; http or longer gets 422 validation_failed naming avatar_url', async () => {
  const { user, token } = await userToken(t);
  const base = 'https://cdn.example/';
  for (const bad of ['http://cdn.example/a.png', 'ftp://cdn.example/a.png', 'not a url', 'https://', 'https://exa mple.com/a.png', base + 'a'.repeat(2049 - base.length)]) {
    assertFields(await patchProfile('me', token, { avatar_url: bad }), ['avatar_url']);
  }
  const longest = base + 'a'.repeat(2048 - base.length);
  assert.equal(assertStatus(await patchProfile('me', token, { avatar_url: longest }), 200).avatar_url, longest);
  assert.equal(assertStatus(await patchProfile('me', token, { avatar_url: null }), 200).avatar_url, null);
  assert.equal((await stored(user.id)).avatar_url, null);
});

test('avatar_url: an https URL whatever the case of its scheme (RFC 3986 §3.1): HTTPS:// is accepted and stored as sent; HTTP:// gets 422 naming avatar_url', async () => {
  const { user, token } = await userToken(t);
  for (const url of ['HTTPS://cdn.example/a.png', 'Https://cdn.example/b.png']) {
    assert.equal(assertStatus(await patchProfile('me', token, { avatar_url: url }), 200).avatar_url, url);
    assert.equal((await stored(user.id)).avatar_url, url);
  }
  assertFields(await patchProfile('me', token, { avatar_url: 'HTTP://cdn.example/a.png' }), ['avatar_url']);
  assert.equal((await stored(user.id)).avatar_url, 'Https://cdn.example/b.png', 'a rejected PATCH changes nothing');
});

test('avatar_url: an https URL carrying userinfo (RFC 9110 §4.2.4), a user and password, a user alone or an empty one, gets 422 naming avatar_url and changes nothing', async () => {
  const { user, token } = await userToken(t);
  assert.equal(assertStatus(await patchProfile('me', token, { avatar_url: 'https://cdn.example/a.png' }), 200).avatar_url, 'https://cdn.example/a.png');
  for (const bad of ['https://user:secret@cdn.example/a.png', 'https://cdn.example@evil.example/a.png', 'https://:pw@cdn.example/a.png', 'https://@cdn.example/a.png']) {
    assertFields(await patchProfile('me', token, { avatar_url: bad }), ['avatar_url']);
  }
  assert.equal((await stored(user.id)).avatar_url, 'https://cdn.example/a.png');
  const at = 'https://cdn.example/u/@ada/a.png?by=@ada';
  assert.equal(assertStatus(await patchProfile('me', token, { avatar_url: at }), 200).avatar_url, at, 'an @ in the path or query is no userinfo');
});

test('avatar_url: an https URL names its host after `//` as every parser reads it: an empty host (`https:///a`, or `https:////evil.example/a.png`, which browsers load from evil.example while RFC 3986 reads no host) and a backslash before the query (browsers read it as `/`) get 422 naming avatar_url and change nothing', async () => {
  const { user, token } = await userToken(t);
  assert.equal(assertStatus(await patchProfile('me', token, { avatar_url: 'https://cdn.example/a.png' }), 200).avatar_url, 'https://cdn.example/a.png');
  for (const bad of ['https:///a', 'https:////evil.example/a.png', 'HTTPS:///evil.example/', 'https://cdn.example\\evil.example/a.png', 'https://cdn.example/a\\b.png']) {
    assertFields(await patchProfile('me', token, { avatar_url: bad }), ['avatar_url']);
  }
  assert.equal((await stored(user.id)).avatar_url, 'https://cdn.example/a.png');
  const query = 'https://cdn.example/a.png?path=a\\b';
  assert.equal(assertStatus(await patchProfile('me', token, { avatar_url: query }), 200).avatar_url, query, 'a backslash in the query is kept as sent by every parser');
});

test('contact_email: a valid email or null; otherwise 422 validation_failed naming contact_email', async () => {
  const { token } = await userToken(t);
  for (const bad of ['nope', 'a@', '@b.example']) assertFields(await patchProfile('me', token, { contact_email: bad }), ['contact_email']);
  assert.equal(assertStatus(await patchProfile('me', token, { contact_email: 'reach@me.example' }), 200).contact_email, 'reach@me.example');
  assert.equal(assertStatus(await patchProfile('me', token, { contact_email: null }), 200).contact_email, null);
});

test('contact_phone: E.164, + then 8–15 digits; otherwise 422 validation_failed naming contact_phone', async () => {
  const { token } = await userToken(t);
  for (const bad of ['+1234567', '+1234567890123456', '14155550123', '+1 415 555 0123', '+1415555012a', '']) {
    assertFields(await patchProfile('me', token, { contact_phone: bad }), ['contact_phone']);
  }
  for (const good of ['+12345678', '+123456789012345']) assert.equal(assertStatus(await patchProfile('me', token, { contact_phone: good }), 200).contact_phone, good);
});

test('locale: a BCP 47 tag the service recognizes (fr-CA, zh-Hant-TW, es-419) is accepted; xx-YY, an unknown region (en-XY, fr-QQ), script (zh-Xyzw) or variant (de-1234), or "not a tag" gets 422 validation_failed naming locale', async () => {
  const { user, token } = await userToken(t);
  for (const good of ['zh-Hant-TW', 'es-419']) assert.equal(assertStatus(await patchProfile('me', token, { locale: good }), 200).locale, good);
  assert.equal(assertStatus(await patchProfile('me', token, { locale: 'fr-CA' }), 200).locale, 'fr-CA');
  for (const bad of ['xx-YY', 'en-XY', 'fr-QQ', 'zh-Xyzw', 'de-1234', 'not a tag']) assertFields(await patchProfile('me', token, { locale: bad }), ['locale']);
  assert.equal((await stored(user.id)).locale, 'fr-CA', 'unchanged by the rejected writes');
  assert.equal(assertStatus(await getProfile('me', token), 200).locale, 'fr-CA');
});

test('unknown Profile fields get 422 validation_failed and a rejected PATCH changes nothing', async () => {
  const { user, token } = await userToken(t);
  const before = await stored(user.id);
  assertFields(await patchProfile('me', token, { display_name: 'Fine', nickname: 'x' }), ['nickname']);
  assertFields(await patchProfile('me', token, { display_name: 'Fine', contact_phone: '123' }), ['contact_phone']);
  assert.equal((await stored(user.id)).display_name, before.display_name);
});

test('an app-scoped key with users.list can read, never write (403 forbidden), the global Profile of users with an access path to its Application; others are 404 user_not_found', async () => {
  const app = await createApplication(t);
  const inside = await createUser(t);
  const disabled = await createUser(t);
  const outside = await createUser(t);
  await grant(t, inside.id, app.id);
  await grant(t, disabled.id, app.id, { status: 'disabled' });
  const key = await createApiKey(t, { scope: app.id, permissions: ['users.list'] });
  for (const u of [inside, disabled]) assert.equal(assertStatus(await getProfile(u.id, key.secret), 200).user_id, u.id);
  const before = await stored(inside.id);
  assertError(await patchProfile(inside.id, key.secret, { display_name: 'From App' }), 403, 'forbidden');
  assert.equal((await stored(inside.id)).display_name, before.display_name);
  assertError(await getProfile(outside.id, key.secret), 404, 'user_not_found');
  assertError(await patchProfile(outside.id, key.secret, { display_name: 'From App' }), 404, 'user_not_found');
  assert.deepEqual(await auditFor(t, inside.id, 'profile.updated'), []);
});

test('Part A Errors, user_not_found ("soft-deleted (to non-admins)"): a soft-deleted user and their global Profile are 404 to a users.list holder and to an app-scoped users.list key of an Application they have a path to; users.manage still reads both', async () => {
  const app = await createApplication(t);
  const user = await createUser(t);
  await grant(t, user.id, app.id);
  const key = await createApiKey(t, { scope: app.id, permissions: ['users.list'] });
  for (const cred of [support.token, key.secret]) assert.equal(assertStatus(await getProfile(user.id, cred), 200).user_id, user.id);
  assert.equal((await call(t, 'DELETE', `/v1/users/${user.id}`, admin.token)).statusCode, 204);
  for (const cred of [support.token, key.secret]) {
    assertError(await call(t, 'GET', `/v1/users/${user.id}`, cred), 404, 'user_not_found');
    assertError(await getProfile(user.id, cred), 404, 'user_not_found');
  }
  assert.equal(assertStatus(await call(t, 'GET', `/v1/users/${user.id}`, admin.token), 200).status, 'deleted');
  assert.equal(assertStatus(await getProfile(user.id, admin.token), 200).user_id, user.id);
});

test('Profile writes: a users.list holder gets 403 forbidden, another user 404 user_not_found; reads by another user 404', async () => {
  const user = await createUser(t);
  const other = await userToken(t);
  const before = await stored(user.id);
  assertError(await patchProfile(user.id, support.token, { display_name: 'Support Edit' }), 403, 'forbidden');
  assertError(await patchProfile(user.id, other.token, { display_name: 'Other Edit' }), 404, 'user_not_found');
  assertError(await getProfile(user.id, other.token), 404, 'user_not_found');
  assert.equal((await stored(user.id)).display_name, before.display_name);
});

test('Profile read-only fields (user_id, updated_at) in a PATCH get 422 read_only_field naming them, and change nothing', async () => {
  const { user, token } = await userToken(t);
  const before = await stored(user.id);
  for (const [who, cred] of [['me', token], [user.id, admin.token]] as const) {
    const error = assertError(await patchProfile(who, cred, { display_name: 'Sneaky', user_id: 'usr_other' }), 422, 'read_only_field');
    assert.deepEqual(error.details.fields, ['user_id']);
    assertError(await patchProfile(who, cred, { updated_at: new Date().toISOString() }), 422, 'read_only_field');
  }
  assert.equal((await stored(user.id)).display_name, before.display_name);
  assert.deepEqual(await auditFor(t, user.id, 'profile.updated'), []);
});

test('Profile updated_at is the Profile\'s: a Settings change of theme, timezone or notifications leaves it as it was; a locale change (the Profile shows it) moves it, through Settings too; the export shows the value the GET shows', async () => {
  const { token } = await userToken(t);
  const first = assertStatus(await getProfile('me', token), 200);
  const later = (s: number) => new Date(Date.parse(first.updated_at) + s * 1000).toISOString();
  await atOneInstant(t, async () => {
    assertStatus(await call(t, 'PATCH', '/v1/users/me/settings', token, { theme: 'dark', timezone: 'Europe/Paris', notifications: { sms: true } }), 200);
  }, later(60));
  assert.equal(assertStatus(await getProfile('me', token), 200).updated_at, first.updated_at, 'nothing of the Profile changed');
  await atOneInstant(t, async () => {
    assertStatus(await call(t, 'PATCH', '/v1/users/me/settings', token, { locale: 'fr-CA' }), 200);
  }, later(120));
  const moved = assertStatus(await getProfile('me', token), 200);
  assert.equal(moved.locale, 'fr-CA');
  assert.equal(moved.updated_at, later(120), "the Profile's locale changed");
  const bundle = assertStatus(await call(t, 'GET', '/v1/users/me/export', token), 200);
  assert.equal(bundle.profile.updated_at, moved.updated_at);
});

test("a Profile PATCH of the locale writes the Settings locale (the Profile's locale is the Settings one), and the Settings updated_at moves with it; one of display_name alone leaves the Settings as they were", async () => {
  const { token } = await userToken(t);
  const first = assertStatus(await call(t, 'GET', '/v1/users/me/settings', token), 200);
  const later = (s: number) => new Date(Date.parse(first.updated_at) + s * 1000).toISOString();
  await atOneInstant(t, async () => assertStatus(await patchProfile('me', token, { display_name: 'Name Only' }), 200), later(60));
  assert.deepEqual(assertStatus(await call(t, 'GET', '/v1/users/me/settings', token), 200), first, 'nothing of the Settings changed');
  await atOneInstant(t, async () => assertStatus(await patchProfile('me', token, { locale: 'fr-CA' }), 200), later(120));
  const moved = assertStatus(await call(t, 'GET', '/v1/users/me/settings', token), 200);
  assert.equal(moved.locale, 'fr-CA');
  assert.equal(moved.updated_at, later(120), 'the Settings locale changed');
});

test('a Profile PATCH that changes nothing writes nothing: no profile.updated for an admin, updated_at kept', async () => {
  const user = await createUser(t);
  const current = assertStatus(await getProfile(user.id, admin.token), 200);
  t.clock.advance(5);
  const same = assertStatus(await patchProfile(user.id, admin.token, { display_name: current.display_name, locale: current.locale, contact_phone: null }), 200);
  assert.equal(same.updated_at, current.updated_at);
  assert.equal(assertStatus(await getProfile(user.id, admin.token), 200).updated_at, current.updated_at);
  assert.deepEqual(await auditFor(t, user.id, 'profile.updated'), []);
});

test('PATCH is a partial update, also under concurrency: two admin PATCHes of one Profile at the same time with different fields keep both, and the second profile.updated audit row starts from the first one\'s after (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 6; round++) {
    const user = await createUser(t);
    const original = assertStatus(await getProfile(user.id, admin.token), 200);
    const [a, b] = await Promise.all([
      patchProfile(user.id, admin.token, { display_name: 'Both Kept' }),
      patchProfile(user.id, admin.token, { contact_phone: '+14155550123' }),
    ]);
    assertStatus(a, 200);
    assertStatus(b, 200);
    const stored = assertStatus(await getProfile(user.id, admin.token), 200);
    assert.deepEqual([stored.display_name, stored.contact_phone], ['Both Kept', '+14155550123'], `round ${round}`);
    const audit = await auditFor(t, user.id, 'profile.updated');
    assert.equal(audit.length, 2);
    const fromOriginal = audit.filter((r) => r.before.display_name === original.display_name && r.before.contact_phone === null);
    assert.equal(fromOriginal.length, 1, `round ${round}: only the first change starts from the original`);
    assert.deepEqual(audit.find((r) => r !== fromOriginal[0])!.before, fromOriginal[0].after);
  }
});
