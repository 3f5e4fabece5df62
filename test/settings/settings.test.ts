// Settings (Part A: "Settings endpoints … not shown"; the project's, docs/decisions.md "Settings"):
// global Settings and per-application AppSettings validated against the Application's settings_schema.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { settingsCompileCount } from '../../src/modules/applications/validation.js';
import {
  appKey, assertError, assertInvalid, assertStatus, auditOf, call, grant, newApp, person, platformKey, sql, type AppFixture,
} from '../access/support.js';
import { SCHEMA } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
  app = await newApp(t, admin, { settings_schema: SCHEMA });
});
after(() => t.close());

const settingsOf = (cred: string, user = 'me') => call(t, 'GET', `/v1/users/${user}/settings`, cred);
const patchSettings = (cred: string, body: unknown, user = 'me') => call(t, 'PATCH', `/v1/users/${user}/settings`, cred, body);
const appSettingsOf = (cred: string, user = 'me', appId = app.id) => call(t, 'GET', `/v1/users/${user}/apps/${appId}/settings`, cred);
const patchAppSettings = (cred: string, body: unknown, user = 'me', appId = app.id) => call(t, 'PATCH', `/v1/users/${user}/apps/${appId}/settings`, cred, body);

test('GET /v1/users/me/settings: a new user has the defaults (theme system, timezone UTC, locale en, email on, sms off)', async () => {
  const u = await person(t);
  const body = assertStatus(await settingsOf(u.token), 200);
  assert.deepEqual({ ...body, updated_at: undefined }, { user_id: u.id, theme: 'system', timezone: 'UTC', locale: 'en', notifications: { email: true, sms: false }, updated_at: undefined });
  assert.match(body.updated_at, /Z$/);
});

test('PATCH settings changes only what it names (notifications field by field), canonicalizes timezone and locale, and the Profile shows the same locale', async () => {
  const u = await person(t);
  t.clock.advance(5);
  const at = t.clock.now().getTime();
  const body = assertStatus(await patchSettings(u.token, { theme: 'dark', timezone: 'europe/paris', locale: 'pt-br', notifications: { sms: true } }), 200);
  assert.equal(body.theme, 'dark');
  assert.equal(body.timezone, 'Europe/Paris');
  assert.equal(body.locale, 'pt-BR');
  assert.deepEqual(body.notifications, { email: true, sms: true });
  assert.ok(Date.parse(body.updated_at) >= at, body.updated_at);
  assert.equal(assertStatus(await call(t, 'GET', '/v1/users/me/profile', u.token), 200).locale, 'pt-BR');
  assert.deepEqual(assertStatus(await settingsOf(u.token), 200), body);
  // A self-service change writes no audit event.
  assert.deepEqual(await auditOf(t, u.id, 'settings.updated'), []);
});

test('docs/decisions.md Settings: timezone is stored as the time zone database names it, never renamed to an older link the runtime\'s ICU data keeps: Asia/Kolkata, Europe/Kyiv and Asia/Ho_Chi_Minh read back as sent (not Asia/Calcutta, Europe/Kiev, Asia/Saigon); a link sent by its own name (US/Eastern, Etc/UTC) stays it; another case gets the database\'s (utc → UTC)', async () => {
  const u = await person(t);
  for (const [sent, stored] of [['Asia/Kolkata', 'Asia/Kolkata'], ['Europe/Kyiv', 'Europe/Kyiv'], ['Asia/Ho_Chi_Minh', 'Asia/Ho_Chi_Minh'], ['US/Eastern', 'US/Eastern'], ['Etc/UTC', 'Etc/UTC'], ['utc', 'UTC'], ['america/new_york', 'America/New_York']]) {
    assert.equal(assertStatus(await patchSettings(u.token, { timezone: sent }), 200).timezone, stored, sent);
    assert.equal(assertStatus(await settingsOf(u.token), 200).timezone, stored, `${sent} read back`);
  }
});

test('PATCH settings refuses bad values with 422 validation_failed naming the field, and changes nothing', async () => {
  const u = await person(t);
  assertInvalid(await patchSettings(u.token, { theme: 'neon' }), 'theme');
  assertInvalid(await patchSettings(u.token, { timezone: 'Mars/Olympus' }), 'timezone');
  assertInvalid(await patchSettings(u.token, { locale: 'xx-QQ-notalocale' }), 'locale');
  assertInvalid(await patchSettings(u.token, { notifications: { email: 'yes' } }), 'notifications');
  assertInvalid(await patchSettings(u.token, { notifications: { push: true } }), 'notifications');
  assertError(await patchSettings(u.token, { wallpaper: 'x' }), 422, 'validation_failed');
  const body = assertStatus(await settingsOf(u.token), 200);
  assert.equal(body.theme, 'system');
  assert.equal(body.timezone, 'UTC');
});

test('settings are self or users.manage: a users.list reader gets 403 forbidden, a stranger 404 user_not_found; an admin change is audited settings.updated', async () => {
  const u = await person(t);
  const reader = await platformKey(t, ['users.list']);
  const stranger = await person(t);
  assertError(await settingsOf(reader, u.id), 403, 'forbidden');
  assertError(await patchSettings(reader, { theme: 'dark' }, u.id), 403, 'forbidden');
  assertError(await settingsOf(stranger.token, u.id), 404, 'user_not_found');
  assertError(await patchSettings(stranger.token, { theme: 'dark' }, u.id), 404, 'user_not_found');
  const manager = await platformKey(t, ['users.manage']);
  assert.equal(assertStatus(await patchSettings(manager, { theme: 'light' }, u.id), 200).theme, 'light');
  const audit = await auditOf(t, u.id, 'settings.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.theme, 'system');
  assert.equal(audit[0].after.theme, 'light');
});

test('GET AppSettings without a record: no overrides, updated_at null, nothing written', async () => {
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  assert.deepEqual(assertStatus(await appSettingsOf(u.token), 200), { user_id: u.id, application_id: app.id, overrides: {}, updated_at: null });
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [u.id])).length, 0);
});

test("PATCH AppSettings stores values that validate against the Application's settings_schema; merges one level deep, null removes a key", async () => {
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  const at = t.clock.now().getTime();
  const first = assertStatus(await patchAppSettings(u.token, { overrides: { density: 'compact', page_size: 50 } }), 200);
  assert.deepEqual(first.overrides, { density: 'compact', page_size: 50 });
  assert.ok(Date.parse(first.updated_at) >= at, first.updated_at);
  const second = assertStatus(await patchAppSettings(u.token, { overrides: { page_size: null, beta: true } }), 200);
  assert.deepEqual(second.overrides, { density: 'compact', beta: true });
  assert.deepEqual(assertStatus(await appSettingsOf(u.token), 200), second);
  // The export carries them.
  const bundle = assertStatus(await call(t, 'GET', '/v1/users/me/export', u.token), 200);
  assert.deepEqual(bundle.applications.find((a: any) => a.application_id === app.id).app_settings, { density: 'compact', beta: true });
});

test('PATCH AppSettings: a key the schema does not declare, or a value its property refuses, is 422 validation_failed naming overrides.<key>, and nothing is stored', async () => {
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  assertInvalid(await patchAppSettings(u.token, { overrides: { colour: 'red' } }), 'overrides.colour');
  assertInvalid(await patchAppSettings(u.token, { overrides: { density: 'cosy' } }), 'overrides.density');
  assertInvalid(await patchAppSettings(u.token, { overrides: { page_size: 5 } }), 'overrides.page_size');
  assertInvalid(await patchAppSettings(u.token, {}), 'overrides');
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [u.id])).length, 0);
  const bare = await newApp(t, admin);
  await grant(t, admin, u.id, bare.id);
  assertInvalid(await patchAppSettings(u.token, { overrides: { density: 'compact' } }, 'me', bare.id), 'overrides.density');
});

test('AppSettings callers are the AppProfile\'s: self and the own key need active access (403 entitlement_required), users.manage is exempt, another Application\'s key gets 404', async () => {
  const u = await person(t);
  assertError(await appSettingsOf(u.token), 403, 'entitlement_required');
  assertError(await patchAppSettings(u.token, { overrides: { beta: true } }), 403, 'entitlement_required');
  const ownKey = await appKey(t, app.id);
  assertError(await appSettingsOf(ownKey, u.id), 403, 'entitlement_required');
  assertError(await patchAppSettings(ownKey, { overrides: { beta: true } }, u.id), 403, 'entitlement_required');
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [u.id])).length, 0, 'nothing stored without access');
  const manager = await platformKey(t, ['users.manage']);
  assertStatus(await patchAppSettings(manager, { overrides: { beta: true } }, u.id), 200);
  const audit = await auditOf(t, `${u.id}:${app.id}`, 'settings.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].application_id, app.id);
  assert.equal(audit[0].tenant_id, app.tenant_id);
  const other = await newApp(t, admin);
  assertError(await appSettingsOf(await appKey(t, other.id, ['users.list']), u.id), 404, 'application_not_found');
  await grant(t, admin, u.id, app.id);
  const own = await appKey(t, app.id);
  assert.deepEqual(assertStatus(await appSettingsOf(own, u.id), 200).overrides, { beta: true });
  assertError(await appSettingsOf((await person(t)).token, u.id), 404, 'user_not_found');
  // A users.list holder sees the user, not its per-Application data (docs/decisions.md "403 or 404").
  const lister = await platformKey(t, ['users.list']);
  assertError(await appSettingsOf(lister, u.id), 403, 'forbidden');
  assertError(await patchAppSettings(lister, { overrides: { beta: false } }, u.id), 403, 'forbidden');
});

test('overrides a later settings_schema no longer accepts stay stored and are counted in settings_schema_stats.stale_override_counts', async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  assertStatus(await patchAppSettings(u.token, { overrides: { density: 'compact', page_size: 20 } }, 'me', owned.id), 200);
  const narrowed = { type: 'object', properties: { density: { type: 'string', enum: ['comfortable'] }, page_size: SCHEMA.properties.page_size } };
  assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: narrowed }), 200);
  const read = assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200);
  assert.deepEqual(read.settings_schema_stats.stale_override_counts, { density: 1 });
  assert.deepEqual(assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200).overrides, { density: 'compact', page_size: 20 });
});

test('stale_override_counts after settings_schema is emptied ({}): the schema accepts no key, so every stored override is counted stale, in the PATCH answer and the GET alike', async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  assertStatus(await patchAppSettings(u.token, { overrides: { density: 'compact', page_size: 20 } }, 'me', owned.id), 200);
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: {} }), 200);
  assert.deepEqual(patched.settings_schema_stats.stale_override_counts, { density: 1, page_size: 1 });
  const read = assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200);
  assert.deepEqual(read.settings_schema_stats.stale_override_counts, { density: 1, page_size: 1 });
  // They are stale indeed: the schema refuses them now, and they stay stored until changed.
  assertInvalid(await patchAppSettings(u.token, { overrides: { density: 'compact' } }, 'me', owned.id), 'overrides.density');
  assert.deepEqual(assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200).overrides, { density: 'compact', page_size: 20 });
  const audit = await auditOf(t, owned.id, 'application.updated');
  assert.deepEqual(audit.at(-1)!.after.settings_schema_stats.stale_override_counts, { density: 1, page_size: 1 });
});

test('application.updated: the audit before snapshot carries the stale_override_counts the GET showed before the PATCH, as after carries those after it (a rename changes none)', async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  assertStatus(await patchAppSettings(u.token, { overrides: { density: 'compact' } }, 'me', owned.id), 200);
  const narrowed = { type: 'object', properties: { density: { type: 'string', enum: ['comfortable'] } } };
  assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: narrowed }), 200);
  const shown = assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema_stats;
  assert.deepEqual(shown.stale_override_counts, { density: 1 });
  const renamed = assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { name: 'Renamed' }), 200);
  assert.deepEqual(renamed.settings_schema_stats, shown);
  const audit = await auditOf(t, owned.id, 'application.updated');
  assert.equal(audit.length, 2);
  assert.deepEqual(audit[0].before.settings_schema_stats.stale_override_counts, {}, 'before the narrowing nothing was stale');
  assert.deepEqual(audit[0].after.settings_schema_stats, shown);
  assert.deepEqual(audit[1].before.settings_schema_stats, shown);
  assert.deepEqual(audit[1].after.settings_schema_stats, shown);
  assert.equal(audit[1].before.name, 'Test App');
  assert.equal(audit[1].after.name, 'Renamed');
});

test("stale_override_counts counts the users of the caller's mode only (users are mode-isolated, the Application is shared): a test-mode key never counts a live user's overrides, and the reverse", async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const testAdmin = await platformKey(t, undefined, 'test');
  const live = await person(t);
  await grant(t, admin, live.id, owned.id);
  assertStatus(await patchAppSettings(live.token, { overrides: { density: 'compact', page_size: 20 } }, 'me', owned.id), 200);
  const tester = await person(t, { mode: 'test' });
  await grant(t, testAdmin, tester.id, owned.id);
  assertStatus(await patchAppSettings(tester.token, { overrides: { page_size: 30 } }, 'me', owned.id), 200);
  const narrowed = { type: 'object', properties: { density: { type: 'string', enum: ['comfortable'] }, page_size: { type: 'integer', minimum: 50, maximum: 100 } } };
  assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: narrowed }), 200);
  const countsFor = async (cred: string) => assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, cred), 200).settings_schema_stats.stale_override_counts;
  assert.deepEqual(await countsFor(admin), { density: 1, page_size: 1 }, 'the live user only');
  assert.deepEqual(await countsFor(testAdmin), { page_size: 1 }, 'the test user only');
  // A PATCH answers with the same counts as the GET of its mode.
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, testAdmin, { description: 'test-mode edit' }), 200);
  assert.deepEqual(patched.settings_schema_stats.stale_override_counts, { page_size: 1 });
});

test('stale_override_counts counts keys named like Object.prototype members (constructor, toString) as numbers: GET and PATCH of the Application answer 200, never 500', async () => {
  const named = { type: 'object', properties: { constructor: { type: 'string' }, toString: { type: 'string' }, hasOwnProperty: { type: 'string' }, density: { type: 'string' } } };
  const owned = await newApp(t, admin, { settings_schema: named });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  assertStatus(await patchAppSettings(u.token, { overrides: { constructor: 'a', toString: 'b', hasOwnProperty: 'c', density: 'd' } }, 'me', owned.id), 200);
  const narrowed = { type: 'object', properties: { density: { type: 'string' } } };
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: narrowed }, { 'idempotency-key': `k-${owned.id}` }), 200);
  const counts = { constructor: 1, toString: 1, hasOwnProperty: 1 };
  assert.deepEqual(patched.settings_schema_stats.stale_override_counts, counts);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema_stats.stale_override_counts, counts);
  assert.equal((await t.app.inject({ method: 'GET', url: '/health' })).statusCode, 200);
});

test('settings_schema property names holding line breaks (\\n, \\r, U+2028) are keys like any other: their overrides are read back as stored (PATCH answer and GET) and their stale counts are shown, never silently left out of the answer', async () => {
  const keys = ['a\nb', 'c\r\nd', 'e\u2028f'];
  const named = { type: 'object', properties: Object.fromEntries([...keys, 'plain'].map((k) => [k, { type: 'string' }])) };
  const owned = await newApp(t, admin, { settings_schema: named });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  const overrides = Object.fromEntries([...keys, 'plain'].map((k, i) => [k, `v${i}`]));
  assert.deepEqual(assertStatus(await patchAppSettings(u.token, { overrides }, 'me', owned.id), 200).overrides, overrides);
  assert.deepEqual(assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200).overrides, overrides);
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: { type: 'object', properties: { plain: { type: 'string' } } } }), 200);
  const counts = Object.fromEntries(keys.map((k) => [k, 1]));
  assert.deepEqual(patched.settings_schema_stats.stale_override_counts, counts);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema_stats.stale_override_counts, counts);
});

test("a settings_schema's $id is its Application's own: the same Application may change a schema that keeps its $id, another Application may use the same $id, and no schema can $ref another's", async () => {
  const id = `https://schemas.example.com/settings-${Date.now()}`;
  const first = await newApp(t, admin, { settings_schema: { $id: id, type: 'object', properties: { a: { type: 'string' } } } });
  const changed = { $id: id, type: 'object', properties: { a: { type: 'string' }, b: { type: 'integer' } } };
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${first.id}`, admin, { settings_schema: changed }), 200).settings_schema, changed);
  const second = await newApp(t, admin, { settings_schema: { $id: id, type: 'object', properties: { c: { type: 'boolean' } } } });
  const u = await person(t);
  await grant(t, admin, u.id, second.id);
  assertStatus(await patchAppSettings(u.token, { overrides: { c: true } }, 'me', second.id), 200);
  assertInvalid(await patchAppSettings(u.token, { overrides: { a: 'x' } }, 'me', second.id), 'overrides.a');
  const error = assertError(await call(t, 'POST', '/v1/applications', admin, {
    slug: `r${Date.now().toString(36)}`, name: 'Ref', launch_url: 'https://app.example.com/launch', visibility: 'public', owner_user_id: (await person(t)).id,
    settings_schema: { type: 'object', properties: { k: { $ref: id } } },
  }), 422, 'invalid_settings_schema');
  assert.match(error.details.reason, /can't resolve reference/);
});

test('settings_schema patterns run in linear time (RE2): `^(a+)+$` against 32 a\'s and a `!` is refused at once, never holding the event loop every tenant shares; a pattern RE2 cannot run (a look-behind) is 422 invalid_settings_schema', async () => {
  const owned = await newApp(t, admin, {
    settings_schema: { type: 'object', properties: { code: { type: 'string', pattern: '^(a+)+$' } }, patternProperties: { '^(x+)+$': { type: 'string' } } },
  });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  const started = process.hrtime.bigint();
  assertInvalid(await patchAppSettings(u.token, { overrides: { code: `${'a'.repeat(32)}!` } }, 'me', owned.id), 'overrides.code');
  // A backtracking engine takes about a minute on this input (V8's: 0.24 s at 24 a's, doubling with each
  // a), and longer on a loaded machine; RE2 answers the whole request in milliseconds, and well under a
  // second on a loaded two-core machine running four test processes. The bound sits between the two, far
  // from both (2 s was close to the loaded case).
  assert.ok(process.hrtime.bigint() - started < 10_000_000_000n, 'answered without backtracking');
  assert.equal(assertStatus(await patchAppSettings(u.token, { overrides: { code: 'aaa' } }, 'me', owned.id), 200).overrides.code, 'aaa');
  assertInvalid(await patchAppSettings(u.token, { overrides: { xxxx: 5 } }, 'me', owned.id), 'overrides.xxxx');
  const error = assertError(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, {
    settings_schema: { type: 'object', properties: { code: { type: 'string', pattern: '(?<=a)b' } } },
  }), 422, 'invalid_settings_schema');
  assert.match(error.details.reason, /regexp|pattern/i);
});

test('settings_schema patterns keep their ECMAScript meaning on RE2: a schema stored before (\\uXXXX, a surrogate pair, \\u{…}, \\cX, [\\b], [^], \\s, \\S, .) validates AppSettings as it did and can be saved again; a stored property RE2 cannot run refuses its key saying so, never a 500', async () => {
  const owned = await newApp(t, admin, { settings_schema: { type: 'object', properties: { x: { type: 'string' } } } });
  const schema = {
    type: 'object',
    properties: {
      name_ar: { type: 'string', pattern: '^[\\u0600-\\u06FF ]+$' },
      smile: { type: 'string', pattern: '^(\\uD83D\\uDE00|\\u{1F642})$' },
      tabbed: { type: 'string', pattern: '^a\\cIb[\\b]?$' },
      any: { type: 'string', pattern: '^[^]{2}$' },
      handle: { type: 'string', pattern: '^\\S+$' },
      line: { type: 'string', pattern: '^.+$' },
      spaced: { type: 'string', pattern: '^a\\sb$' },
      legacy: { type: 'string', pattern: '^(?!admin)[a-z]+$' },
    },
  };
  // As the last release stored it (it compiled these with ECMAScript RegExp).
  await sql(t, 'UPDATE applications SET settings_schema = $2 WHERE id = $1', [owned.id, JSON.stringify(schema)]);
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  const valid = { name_ar: 'سلام عليكم', smile: '😀', tabbed: 'a\tb\b', any: '\n\r', handle: 'ab', line: 'one line', spaced: 'a\u00a0b' };
  assert.deepEqual(assertStatus(await patchAppSettings(u.token, { overrides: valid }, 'me', owned.id), 200).overrides, valid);
  for (const [key, value] of Object.entries({ name_ar: 'salam', smile: '🙁', tabbed: 'a b', any: 'abc', handle: 'a\u00a0b', line: 'a\u2028b', spaced: 'a\u0085b' })) {
    assertInvalid(await patchAppSettings(u.token, { overrides: { [key]: value } }, 'me', owned.id), `overrides.${key}`);
  }
  const app = assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200);
  assert.deepEqual(app.settings_schema, schema);
  assert.deepEqual(app.settings_schema_stats.stale_override_counts, {});
  // The look-ahead RE2 cannot run: its key is refused with the reason, the rest of the schema still works.
  const error = assertError(await patchAppSettings(u.token, { overrides: { legacy: 'alice' } }, 'me', owned.id), 422, 'validation_failed');
  assert.deepEqual(error.details.fields, [{ path: 'overrides.legacy', message: "cannot be set: its settings_schema property no longer compiles (the Application's owner must change it)" }]);
  assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200);
  // The owner saves the schema again without the look-ahead: every ECMAScript escape above is accepted.
  const { legacy: _, ...kept } = schema.properties;
  assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: { ...schema, properties: kept } }), 200);
  assert.deepEqual(assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200).overrides, valid);
});

test('a settings_schema is at most 64 KB serialized and none of its arrays has more than 1,000 entries (their meta-schema check is quadratic, in the shared event loop): 422 invalid_settings_schema and nothing stored; 1,000 enum entries are accepted', async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const withEnum = (n: number) => ({ type: 'object', properties: { plan: { type: 'string', enum: Array.from({ length: n }, (_, i) => `p${i}`) } } });
  const tooMany = assertError(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: withEnum(1001) }), 422, 'invalid_settings_schema');
  assert.match(tooMany.details.reason, /properties\.plan\.enum has 1001 entries; at most 1000/);
  const big = { type: 'object', properties: Object.fromEntries(Array.from({ length: 700 }, (_, i) => [`key_${i}`, { type: 'string', description: 'x'.repeat(80) }])) };
  assert.match(assertError(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: big }), 422, 'invalid_settings_schema').details.reason, /must be at most 65536 bytes serialized/);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema, SCHEMA, 'nothing was stored');
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: withEnum(1000) }), 200).settings_schema.properties.plan.enum.length, 1000);
});

test('a settings_schema\'s anyOf, oneOf and allOf hold at most 100 subschemas each (a value is tried against every branch before the one it matches: 16 KB of items against 1,000 branches held the shared event loop for seconds per write, once per stored row on a schema change): 422 invalid_settings_schema naming the place, nothing stored; 100 are accepted', async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const branches = (n: number) => Array.from({ length: n }, (_, i) => ({ const: `name-${i}` }));
  for (const keyword of ['anyOf', 'oneOf', 'allOf']) {
    const schema = { type: 'object', properties: { tags: { type: 'array', items: { [keyword]: branches(101) } } } };
    const error = assertError(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: schema }), 422, 'invalid_settings_schema');
    assert.match(error.details.reason, new RegExp(`properties\\.tags\\.items\\.${keyword} has 101 subschemas; at most 100`), keyword);
  }
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema, SCHEMA, 'nothing was stored');
  const hundred = { type: 'object', properties: { tags: { type: 'array', items: { anyOf: branches(100) } } } };
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: hundred }), 200).settings_schema.properties.tags.items.anyOf.length, 100);
});

test('PATCH settings: notifications merge field by field with the stored values, not the defaults', async () => {
  const u = await person(t);
  assert.deepEqual(assertStatus(await patchSettings(u.token, { notifications: { email: false } }), 200).notifications, { email: false, sms: false });
  assert.deepEqual(assertStatus(await patchSettings(u.token, { notifications: { sms: true } }), 200).notifications, { email: false, sms: true });
  assert.deepEqual(assertStatus(await patchSettings(u.token, { theme: 'dark' }), 200).notifications, { email: false, sms: true });
  assert.deepEqual(assertStatus(await settingsOf(u.token), 200).notifications, { email: false, sms: true });
});

test('a Settings PATCH that changes nothing writes nothing: no settings.updated for an admin, updated_at kept (a value sent as stored, in another spelling or order too)', async () => {
  const u = await person(t);
  const manager = await platformKey(t, ['users.manage']);
  const current = assertStatus(await patchSettings(u.token, { timezone: 'Europe/Paris', notifications: { sms: true } }), 200);
  t.clock.advance(5);
  const same = assertStatus(await patchSettings(manager, { theme: current.theme, timezone: 'europe/paris', locale: current.locale, notifications: { sms: true, email: true } }, u.id), 200);
  assert.equal(same.updated_at, current.updated_at);
  assert.deepEqual(same, current);
  assert.equal(assertStatus(await settingsOf(u.token), 200).updated_at, current.updated_at);
  assert.deepEqual(await auditOf(t, u.id, 'settings.updated'), []);
});

test('PATCH settings with a read-only field (user_id, updated_at) is 422 read_only_field naming it, and changes nothing', async () => {
  const u = await person(t);
  const error = assertError(await patchSettings(u.token, { theme: 'dark', user_id: 'usr_other' }), 422, 'read_only_field');
  assert.deepEqual(error.details.fields, ['user_id']);
  assertError(await patchSettings(u.token, { updated_at: new Date().toISOString() }), 422, 'read_only_field');
  assert.equal(assertStatus(await settingsOf(u.token), 200).theme, 'system');
});

test('PATCH AppSettings: overrides are at most 16 KB serialized, the merged result counted (422 naming overrides; nothing stored); just 16 KB is accepted', async () => {
  const roomy = await newApp(t, admin, { settings_schema: { type: 'object', properties: { note: { type: 'string' }, extra: { type: 'string' } } } });
  const u = await person(t);
  await grant(t, admin, u.id, roomy.id);
  assertInvalid(await patchAppSettings(u.token, { overrides: { note: 'x'.repeat(16 * 1024) } }, 'me', roomy.id), 'overrides');
  // {"note":"..."} is 11 bytes of framing: one byte over 16 KB is refused too.
  assertInvalid(await patchAppSettings(u.token, { overrides: { note: 'x'.repeat(16 * 1024 - 10) } }, 'me', roomy.id), 'overrides');
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [u.id])).length, 0);
  const fits = { note: 'x'.repeat(16 * 1024 - 11) };
  assert.equal(Buffer.byteLength(JSON.stringify(fits)), 16 * 1024);
  assertStatus(await patchAppSettings(u.token, { overrides: fits }, 'me', roomy.id), 200);
  assertInvalid(await patchAppSettings(u.token, { overrides: { extra: 'y' } }, 'me', roomy.id), 'overrides');
  assert.deepEqual(Object.keys(assertStatus(await appSettingsOf(u.token, 'me', roomy.id), 200).overrides), ['note']);
});

test('PATCH AppSettings whose overrides are all sent as they already are (whatever their key order) changes nothing: 200 as it was, updated_at unchanged, no audit row', async () => {
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  const manager = await platformKey(t, ['users.manage']);
  const first = assertStatus(await patchAppSettings(manager, { overrides: { density: 'compact', beta: true } }, u.id), 200);
  t.clock.advance(5);
  assert.deepEqual(assertStatus(await patchAppSettings(manager, { overrides: { beta: true, density: 'compact' } }, u.id), 200), first);
  assert.equal(assertStatus(await appSettingsOf(u.token), 200).updated_at, first.updated_at);
  assert.equal((await auditOf(t, `${u.id}:${app.id}`, 'settings.updated')).length, 1);
});

test('AppSettings: a self-service change writes no audit event; a users.manage change writes settings.updated with before and after', async () => {
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  assertStatus(await patchAppSettings(u.token, { overrides: { density: 'compact' } }), 200);
  assert.deepEqual(await auditOf(t, `${u.id}:${app.id}`, 'settings.updated'), []);
  const manager = await platformKey(t, ['users.manage']);
  assertStatus(await patchAppSettings(manager, { overrides: { density: 'comfortable', beta: true } }, u.id), 200);
  const audit = await auditOf(t, `${u.id}:${app.id}`, 'settings.updated');
  assert.equal(audit.length, 1);
  assert.deepEqual(audit[0].before.overrides, { density: 'compact' });
  assert.deepEqual(audit[0].after.overrides, { density: 'comfortable', beta: true });
});

test('compiled settings_schemas are not kept for the life of the process: 200 distinct schemas of 60 KB written to an Application (each compiled, its property too for the stale counts) leave the heap within a bounded size', async () => {
  // Ajv kept every function it compiled, with its schema, in the scope of its one instance: every
  // schema text ever seen stayed in memory, and reads of more Applications than the cache holds
  // compiled (and kept) their schemas again on every read.
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const heapAfterGc = async () => {
    await new Promise((resolve) => setTimeout(resolve, 10));
    gc();
    gc();
    return process.memoryUsage().heapUsed;
  };
  const owned = await newApp(t, admin, { settings_schema: { type: 'object', properties: { choice: { type: 'string' } } } });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  assertStatus(await patchAppSettings(u.token, { overrides: { choice: 'c1' } }, 'me', owned.id), 200);
  const schemaOf = (n: number) => ({ type: 'object', properties: { choice: { type: 'integer', description: `${n} ${'x'.repeat(60_000)}` } } });
  const write = async (n: number) => {
    const body = assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: schemaOf(n) }), 200);
    assert.deepEqual(body.settings_schema_stats.stale_override_counts, { choice: 1 });
  };
  for (let n = 0; n < 20; n++) await write(n); // warm up
  const before = await heapAfterGc();
  for (let n = 20; n < 220; n++) await write(n);
  const grown = (await heapAfterGc()) - before;
  // Kept for good: 400 compiled schemas of 60 KB, some 24 MB. Bounded: 2 MB of schema text per compiler.
  assert.ok(grown < 16 * 1024 * 1024, `heap grew by ${Math.round(grown / 1024 / 1024)} MB`);
});

test("a settings_schema property's $ref resolves in its own schema ($defs, definitions, another property, a nested $id; a `true` property takes any value), as when the schema was accepted: values validate through it (200, or 422 naming overrides.<key>), and stored ones count as stale only when they no longer validate", async () => {
  // Each property was compiled on its own, outside the schema its $ref points into: the schema was
  // accepted, and every value of such a key refused ("its settings_schema property no longer compiles").
  const schema = {
    type: 'object',
    required: ['colour'],
    $defs: { colour: { type: 'string', enum: ['red', 'blue'] } },
    definitions: { size: { type: 'integer', minimum: 1, maximum: 9 } },
    properties: {
      colour: { $ref: '#/$defs/colour' },
      size: { $ref: '#/definitions/size' },
      border: { $ref: '#/properties/size' },
      shade: { $id: 'https://schemas.example.com/shade', type: 'string', maxLength: 3 },
      accent: { $ref: 'https://schemas.example.com/shade' },
      anything: true,
    },
  };
  const owned = await newApp(t, admin, { settings_schema: schema });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  const overrides = { colour: 'blue', size: 3, border: 9, shade: 'abc', accent: 'x', anything: { any: ['thing'] } };
  assert.deepEqual(assertStatus(await patchAppSettings(u.token, { overrides }, 'me', owned.id), 200).overrides, overrides);
  assert.deepEqual(assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200).overrides, overrides);
  for (const [key, value] of [['colour', 'green'], ['size', 10], ['border', 0], ['accent', 'abcd']] as const) {
    const error = assertError(await patchAppSettings(u.token, { overrides: { [key]: value } }, 'me', owned.id), 422, 'validation_failed');
    assert.deepEqual(error.details.fields.map((f: { path: string }) => f.path), [`overrides.${key}`]);
    assert.doesNotMatch(error.details.fields[0].message, /no longer compiles/);
  }
  assert.deepEqual(assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200).overrides, overrides, 'nothing refused was stored');
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema_stats.stale_override_counts, {});
  // Narrowed through the $defs entry: the values it no longer takes are stale, the others are not.
  const narrowed = { ...schema, $defs: { colour: { type: 'string', enum: ['red'] } }, definitions: { size: { type: 'integer', maximum: 5 } } };
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: narrowed }), 200);
  assert.deepEqual(patched.settings_schema_stats.stale_override_counts, { colour: 1, border: 1 });
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema_stats.stale_override_counts, { colour: 1, border: 1 });
});

test('settings_schema multipleOf is a decimal multiple (JSON Schema): 0.3 and 1.7 are multiples of 0.1, 0.35 is not (422 naming overrides.<key>), and 1e21 is a multiple of 1', async () => {
  // Ajv divided binary floats: 0.3 / 0.1 is 2.9999999999999996, so 0.3 was refused; 1e21 / 1 failed parseInt.
  const owned = await newApp(t, admin, { settings_schema: { type: 'object', properties: { volume: { type: 'number', multipleOf: 0.1 }, big: { type: 'number', multipleOf: 1 } } } });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  assert.equal(assertStatus(await patchAppSettings(u.token, { overrides: { volume: 0.3 } }, 'me', owned.id), 200).overrides.volume, 0.3);
  assert.equal(assertStatus(await patchAppSettings(u.token, { overrides: { volume: 1.7 } }, 'me', owned.id), 200).overrides.volume, 1.7);
  assert.equal(assertStatus(await patchAppSettings(u.token, { overrides: { big: 1e21 } }, 'me', owned.id), 200).overrides.big, 1e21);
  assertInvalid(await patchAppSettings(u.token, { overrides: { volume: 0.35 } }, 'me', owned.id), 'overrides.volume');
  assert.deepEqual(assertStatus(await appSettingsOf(u.token, 'me', owned.id), 200).overrides, { volume: 1.7, big: 1e21 });
});

test('a settings_schema of many distinct properties is compiled once, not once per property: reads of the Application (stale_override_counts) and AppSettings PATCHes do not recompile it on every request, in the event loop every tenant shares', async () => {
  // Each property was compiled on its own, and more than the 256 a compiler holds replaced it on every
  // call: every GET of such an Application compiled all of them again (about a second each).
  const properties = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, { type: 'integer', minimum: -i }]));
  const owned = await newApp(t, admin, { settings_schema: { type: 'object', properties } });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  const overrides = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`k${i}`, i]));
  assertStatus(await patchAppSettings(u.token, { overrides }, 'me', owned.id), 200);
  // Counted, not timed (about a second per read on a loaded machine, either way).
  const compiled = settingsCompileCount();
  for (let n = 0; n < 10; n++) {
    assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema_stats.stale_override_counts, {});
  }
  assertInvalid(await patchAppSettings(u.token, { overrides: { k999: -1000 } }, 'me', owned.id), 'overrides.k999');
  assert.ok(settingsCompileCount() - compiled <= 1, `10 reads and a PATCH compiled ${settingsCompileCount() - compiled} schemas`);
});

test('PATCH AppSettings: "16 KB" counts the UTF-8 bytes of the merged overrides (docs/conventions.md), not characters: 16,385 bytes in far fewer characters is 422 naming overrides and nothing stored; just 16,384 bytes of two-byte letters is accepted', async () => {
  const roomy = await newApp(t, admin, { settings_schema: { type: 'object', properties: { note: { type: 'string' } } } });
  const u = await person(t);
  await grant(t, admin, u.id, roomy.id);
  // {"note":"..."} is 11 bytes of framing; é is one character and two UTF-8 bytes.
  const over = { note: 'é'.repeat(8187) };
  assert.equal(Buffer.byteLength(JSON.stringify(over)), 16 * 1024 + 1);
  assert.ok(JSON.stringify(over).length < 16 * 1024);
  assertInvalid(await patchAppSettings(u.token, { overrides: over }, 'me', roomy.id), 'overrides');
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [u.id])).length, 0);
  const fits = { note: `${'é'.repeat(8186)}x` };
  assert.equal(Buffer.byteLength(JSON.stringify(fits)), 16 * 1024);
  assert.deepEqual(assertStatus(await patchAppSettings(u.token, { overrides: fits }, 'me', roomy.id), 200).overrides, fits);
});

test('PATCH AppSettings with a read-only field (user_id, application_id, updated_at) is 422 read_only_field naming it, and stores nothing', async () => {
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  const error = assertError(await patchAppSettings(u.token, { overrides: { beta: true }, application_id: 'app_other' }), 422, 'read_only_field');
  assert.deepEqual(error.details.fields, ['application_id']);
  assert.deepEqual(assertError(await patchAppSettings(u.token, { overrides: { beta: true }, user_id: 'usr_other' }), 422, 'read_only_field').details.fields, ['user_id']);
  assert.deepEqual(assertError(await patchAppSettings(u.token, { overrides: { beta: true }, updated_at: t.clock.now().toISOString() }), 422, 'read_only_field').details.fields, ['updated_at']);
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [u.id])).length, 0);
});

test('a settings_schema is at most 64 KB: 65,536 bytes of its compact JSON serialization are accepted, 65,537 are 422 invalid_settings_schema, counted in UTF-8 bytes (two-byte letters under 65,536 characters are refused too); nothing refused is stored', async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const schemaOf = (description: string) => ({ type: 'object', properties: { note: { type: 'string', description } } });
  const framing = Buffer.byteLength(JSON.stringify(schemaOf('')));
  const exact = schemaOf('x'.repeat(64 * 1024 - framing));
  assert.equal(Buffer.byteLength(JSON.stringify(exact)), 64 * 1024);
  const over = schemaOf('x'.repeat(64 * 1024 - framing + 1));
  const wide = schemaOf('é'.repeat(Math.ceil((64 * 1024 + 1 - framing) / 2)));
  assert.ok(Buffer.byteLength(JSON.stringify(wide)) > 64 * 1024 && JSON.stringify(wide).length < 64 * 1024);
  for (const schema of [over, wide]) {
    const error = assertError(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: schema }), 422, 'invalid_settings_schema');
    assert.match(error.details.reason, /must be at most 65536 bytes serialized/);
  }
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema, SCHEMA, 'nothing was stored');
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: exact }), 200).settings_schema, exact);
});

test("settings_schema keywords about the overrides object as a whole do not apply to a value (overrides are partial; docs/decisions.md): a property's value is checked against its property only, not against a patternProperties entry its key also matches", async () => {
  const owned = await newApp(t, admin, { settings_schema: { type: 'object', properties: { code: { type: 'string' } }, patternProperties: { '^co': { maxLength: 2 } } } });
  const u = await person(t);
  await grant(t, admin, u.id, owned.id);
  assert.deepEqual(assertStatus(await patchAppSettings(u.token, { overrides: { code: 'abcd' } }, 'me', owned.id), 200).overrides, { code: 'abcd' });
  assertInvalid(await patchAppSettings(u.token, { overrides: { code: 5 } }, 'me', owned.id), 'overrides.code');
});

test('a settings_schema describes an object (the overrides): a type other than "object" (string, array, a list of types) is 422 invalid_settings_schema naming the reason, on create and on PATCH, and nothing is stored', async () => {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  for (const type of ['string', 'array', ['object', 'null']]) {
    const error = assertError(await call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: { type, properties: { a: { type: 'string' } } } }), 422, 'invalid_settings_schema');
    assert.equal(error.details.reason, 'type must be object');
  }
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${owned.id}`, admin), 200).settings_schema, SCHEMA, 'nothing was stored');
  const created = await call(t, 'POST', '/v1/applications', admin, {
    slug: `s${Date.now().toString(36)}`, name: 'Typed', launch_url: 'https://app.example.com/launch', visibility: 'public', owner_user_id: (await person(t)).id,
    settings_schema: { type: 'string' },
  });
  assertError(created, 422, 'invalid_settings_schema');
});

if (storageName === 'postgres') test("an erased user's AppSettings are not written back: an admin PATCH of a soft-deleted user that waited for the erasure cascade (the cascade removes AppSettings) gets 404 user_not_found and stores no row and no settings.updated audit row", async () => {
  const u = await person(t);
  await grant(t, admin, u.id, app.id);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/erasure-requests`, admin, {}), 202);
  const res = await commitWhileWaiting(
    t,
    [
      ['SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [u.id]],
      ['DELETE FROM app_settings WHERE user_id = $1', [u.id]],
      ['UPDATE users SET erased_at = now() WHERE id = $1', [u.id]],
    ],
    () => patchAppSettings(admin, { overrides: { density: 'compact' } }, u.id),
  );
  assertError(res, 404, 'user_not_found');
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [u.id])).length, 0);
  assert.equal((await sql(t, `SELECT 1 FROM audit_events WHERE action = 'settings.updated' AND target_user_id = $1`, [u.id])).length, 0);
});
