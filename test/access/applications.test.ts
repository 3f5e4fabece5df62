// Applications (Part B): creation, field rules, plan limits, visibility for reading, list filters and
// the list view, PATCH field rights.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { client, blockedBy as waitForBlocked, endedOrWaiting as waitEndedOrWaiting } from '../helpers/locks.js';
import {
  appKey, assertError, assertInvalid, assertStatus, auditOf, call, createOrg, grant, grantReq, newApp, person, platformKey, rand, setReview, slugOf, sql,
} from './support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const LIST_KEYS = ['description', 'icon_url', 'id', 'name', 'review_status', 'slug', 'visibility'];
const post = (cred: string, body: Record<string, unknown>) => call(t, 'POST', '/v1/applications', cred, body);
const base = (ownerId: string, extra: Record<string, unknown> = {}) => ({
  slug: slugOf(), name: 'App', launch_url: 'https://app.example.com', visibility: 'public', owner_user_id: ownerId, ...extra,
});
const get = (cred: string, id: string) => call(t, 'GET', `/v1/applications/${id}`, cred);
const list = async (cred: string, query = '') => assertStatus(await call(t, 'GET', `/v1/applications?limit=100${query}`, cred), 200);
const listIds = async (cred: string, query = '') => (await list(cred, query)).data.map((a: { id: string }) => a.id);

test('POST /v1/applications needs applications.manage and creates the Application approved, with app_<slug> id, audit application.created', async () => {
  const owner = await person(t);
  const denied = await post(owner.token, base(owner.id));
  assertError(denied, 403, 'forbidden');

  const slug = slugOf('created');
  // visibility left out: it defaults to public (docs/decisions.md "Registering an Application").
  const { visibility: _omitted, ...body } = base(owner.id, { slug, description: 'd' });
  const res = await post(admin, body);
  const app = assertStatus(res, 201);
  assert.equal(app.id, `app_${slug}`);
  assert.equal(app.slug, slug);
  assert.equal(app.review_status, 'approved');
  assert.equal(app.visibility, 'public');
  assert.equal(app.owner_user_id, owner.id);
  assert.equal(app.owner_organization_id, null);
  assert.equal(app.test_mode, false);
  assert.deepEqual(app.redirect_uris, []);
  assert.deepEqual(app.permissions, []);
  assert.deepEqual(app.available_app_roles, []);
  assert.equal(app.default_app_role, null);
  assert.deepEqual(app.settings_schema_stats, { stale_override_counts: {} });
  assert.match(app.tenant_id, /^tnt_/);
  const audit = await auditOf(t, app.id, 'application.created');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].application_id, app.id);
  assert.equal(audit[0].tenant_id, app.tenant_id);
});

test("the owner's Tenant is created with the first Application: tier shared, region us-east-1, plan starter for a user owner", async () => {
  const { tenant_id, owner } = await newApp(t, admin);
  const [tenant] = await sql(t, 'SELECT * FROM tenants WHERE id = $1', [tenant_id]);
  assert.equal(tenant.owner_type, 'user');
  assert.equal(tenant.owner_user_id, owner!.id);
  assert.equal(tenant.tier, 'shared');
  assert.equal(tenant.region, 'us-east-1');
  assert.equal(tenant.plan, 'starter');
});

test("an Organization owner's new Tenant is on plan team; further Applications of that owner reuse the same Tenant", async () => {
  const member = await person(t);
  const org = await createOrg(t, [{ userId: member.id, role: 'org_admin' }]);
  const first = await newApp(t, admin, { owner_organization_id: org });
  const second = await newApp(t, admin, { owner_organization_id: org });
  assert.equal(first.tenant_id, second.tenant_id);
  const [tenant] = await sql(t, 'SELECT * FROM tenants WHERE id = $1', [first.tenant_id]);
  assert.equal(tenant.owner_type, 'organization');
  assert.equal(tenant.owner_organization_id, org);
  assert.equal(tenant.plan, 'team');
  assert.equal(tenant.tier, 'shared');
  assert.equal(tenant.region, 'us-east-1');
});

test('an Application changes hands only within its mode: a test-mode key naming a test user or test Organization as the owner of a live Application is 422 validation_failed naming the field, and the live owner keeps it (no audit row)', async () => {
  const app = await newApp(t, admin);
  const testKey = await platformKey(t, undefined, 'test');
  const testUser = await person(t, { mode: 'test' });
  const testOrg = await createOrg(t, [{ userId: testUser.id, role: 'org_admin' }], { mode: 'test' });
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, testKey, { owner_user_id: testUser.id }), 'owner_user_id');
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, testKey, { owner_organization_id: testOrg }), 'owner_organization_id');
  // A live caller cannot hand it to a test user either.
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: testUser.id }), 'owner_user_id');
  const read = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
  assert.equal(read.owner_user_id, app.owner!.id);
  assert.equal(read.tenant_id, app.tenant_id);
  assert.deepEqual((await auditOf(t, app.id, 'application.updated')).length, 0);
  // Within its mode the move still works.
  const liveUser = await person(t);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: liveUser.id }), 200).owner_user_id, liveUser.id);
});

test('POST requires exactly one of owner_user_id or owner_organization_id', async () => {
  const owner = await person(t);
  const member = await person(t);
  const org = await createOrg(t, [{ userId: member.id, role: 'org_admin' }]);
  assertError(await post(admin, { slug: slugOf(), name: 'x', launch_url: 'https://x.example.com' }), 422, 'validation_failed');
  assertError(await post(admin, base(owner.id, { owner_organization_id: org })), 422, 'validation_failed');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1 OR owner_organization_id = $2', [owner.id, org]))[0].n, 0);
});

test('slug must match ^[a-z][a-z0-9-]{1,63}$ (422 validation_failed otherwise); 2 and 64 characters are accepted', async () => {
  const owner = await person(t);
  for (const slug of ['a', 'Abc', '1abc', 'ab_c', 'ab.c', `a${'b'.repeat(64)}`, '-abc', 'ab c']) {
    assertInvalid(await post(admin, base(owner.id, { slug })), 'slug');
  }
  assertStatus(await post(admin, base(owner.id, { slug: `z${rand(1)}`.slice(0, 2) })), 201);
  const other = await person(t);
  const long = `l${rand(4)}${'x'.repeat(55)}`;
  assert.equal(long.length, 64);
  assertStatus(await post(admin, base(other.id, { slug: long })), 201);
});

test('slug `platform` is reserved (422)', async () => {
  const owner = await person(t);
  const res = await post(admin, base(owner.id, { slug: 'platform' }));
  assertInvalid(res, 'slug');
  assert.equal((await sql(t, `SELECT 1 FROM applications WHERE slug = 'platform'`)).length, 0);
});

test('slug is unique across live and test: a test key creating the same slug gets 409 slug_taken', async () => {
  const { slug } = await newApp(t, admin);
  const testKey = await platformKey(t, ['applications.manage'], 'test');
  const testOwner = await person(t, { mode: 'test' });
  const res = await post(testKey, base(testOwner.id, { slug }));
  assertError(res, 409, 'slug_taken');
  const again = await post(admin, base((await person(t)).id, { slug }));
  assertError(again, 409, 'slug_taken');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE slug = $1', [slug]))[0].n, 1);
});

test('slug collision under concurrent creation for one Starter owner: one 201, every other 409 slug_taken (not plan_limit_reached), one row', async () => {
  const owner = await person(t);
  const slug = slugOf('dup');
  const rs = await Promise.all(Array.from({ length: 4 }, () => post(admin, base(owner.id, { slug }))));
  assert.equal(rs.filter((r) => r.statusCode === 201).length, 1, rs.map((r) => r.statusCode).join(','));
  for (const r of rs) if (r.statusCode !== 201) assertError(r, 409, 'slug_taken');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE slug = $1', [slug]))[0].n, 1);
  assert.equal((await auditOf(t, `app_${slug}`, 'application.created')).length, 1);
});

test('slug collision under concurrent creation by owners of different Tenants (no shared lock: the unique index decides): one 201, every other 409 slug_taken, never a 500; one row', async () => {
  const owners = await Promise.all(Array.from({ length: 4 }, () => person(t)));
  const slug = slugOf('race');
  const rs = await Promise.all(owners.map((owner) => post(admin, base(owner.id, { slug }))));
  assert.equal(rs.filter((r) => r.statusCode === 201).length, 1, rs.map((r) => r.statusCode).join(','));
  for (const r of rs) if (r.statusCode !== 201) assertError(r, 409, 'slug_taken');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE slug = $1', [slug]))[0].n, 1);
});

test('slug is immutable: PATCH slug gets 422 read_only_field, for the owner and for applications.manage; tenant_id too', async () => {
  const { id, slug, owner } = await newApp(t, admin);
  for (const cred of [admin, owner!.token]) {
    const err = assertError(await call(t, 'PATCH', `/v1/applications/${id}`, cred, { slug: `${slug}x` }), 422, 'read_only_field');
    assert.ok(JSON.stringify(err.details).includes('slug'), 'JSON.stringify(err.details).includes(\'slug\')');
    assertError(await call(t, 'PATCH', `/v1/applications/${id}`, cred, { tenant_id: 'tnt_other' }), 422, 'read_only_field');
    assertError(await call(t, 'PATCH', `/v1/applications/${id}`, cred, { id: 'app_other' }), 422, 'read_only_field');
    assertError(await call(t, 'PATCH', `/v1/applications/${id}`, cred, { created_at: new Date().toISOString() }), 422, 'read_only_field');
  }
  const current = assertStatus(await get(admin, id), 200);
  assert.equal(current.slug, slug);
});

test('redirect_uris: https URLs and reverse-DNS private-use schemes are accepted; other schemes are 422', async () => {
  const owner = await person(t);
  const ok = await post(admin, base(owner.id, { redirect_uris: ['https://app.example.com/cb', 'com.example.app:/oauth2redirect'] }));
  assert.deepEqual(assertStatus(ok, 201).redirect_uris, ['https://app.example.com/cb', 'com.example.app:/oauth2redirect']);
  const other = await person(t);
  for (const uri of ['http://app.example.com/cb', 'ftp://example.com/x', 'not a uri', 'javascript:alert(1)']) {
    assertInvalid(await post(admin, base(other.id, { redirect_uris: [uri] })), 'redirect_uris');
  }
});

test('redirect_uris: any userinfo is 422, an empty one (https://@host, https://:@host) included, as a username or a password alone', async () => {
  for (const uri of ['https://@app.example.com/cb', 'https://:@app.example.com/cb', 'https://u@app.example.com/cb', 'https://:p@app.example.com/cb', 'com.example.app://@cb/x']) {
    const owner = await person(t);
    assertInvalid(await post(admin, base(owner.id, { redirect_uris: [uri] })), 'redirect_uris.0');
  }
  const owner = await person(t);
  const ok = assertStatus(await post(admin, base(owner.id, { redirect_uris: ['https://app.example.com/cb?next=a@b'] })), 201);
  assert.deepEqual(ok.redirect_uris, ['https://app.example.com/cb?next=a@b'], 'an @ in the query is no userinfo');
});

test('redirect_uris: http://localhost and http://127.0.0.1 with any port only on a test_mode Application', async () => {
  const owner = await person(t);
  for (const uri of ['http://localhost:3000/cb', 'http://127.0.0.1:8080/cb', 'http://localhost/cb']) {
    assertInvalid(await post(admin, base(owner.id, { redirect_uris: [uri] })), 'redirect_uris');
  }
  const testKey = await platformKey(t, ['applications.manage'], 'test');
  const testOwner = await person(t, { mode: 'test' });
  const uris = ['http://localhost:3000/cb', 'http://127.0.0.1:8080/cb'];
  const created = assertStatus(await post(testKey, base(testOwner.id, { redirect_uris: uris })), 201);
  assert.equal(created.test_mode, true);
  assert.deepEqual(created.redirect_uris, uris);
  // The live app cannot take them by PATCH either.
  const live = await newApp(t, admin);
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${live.id}`, admin, { redirect_uris: ['http://localhost:3000/cb'] }), 'redirect_uris');
});

test('redirect_uris: at most 10 entries (11 is 422), 10 is accepted', async () => {
  const owner = await person(t);
  const uris = (n: number) => Array.from({ length: n }, (_, i) => `https://app.example.com/cb${i}`);
  assertInvalid(await post(admin, base(owner.id, { redirect_uris: uris(11) })), 'redirect_uris');
  assert.equal(assertStatus(await post(admin, base(owner.id, { redirect_uris: uris(10) })), 201).redirect_uris.length, 10);
});

test('permissions: keys must start with app.<slug>. then [a-z0-9_.]{1,64}; wrong prefix is 422; 0–100 entries', async () => {
  const owner = await person(t);
  const slug = slugOf('perm');
  for (const key of ['app.other.read', `${slug}.read`, `app.${slug}.`, `app.${slug}.Read`, `app.${slug}.${'x'.repeat(65)}`, 'users.list']) {
    assertInvalid(await post(admin, base(owner.id, { slug, permissions: [{ key, description: 'x' }] })), 'permissions');
  }
  const many = Array.from({ length: 101 }, (_, i) => ({ key: `app.${slug}.p${i}`, description: 'd' }));
  assertInvalid(await post(admin, base(owner.id, { slug, permissions: many })), 'permissions');
  assertInvalid(await post(admin, base(owner.id, { slug, permissions: [{ key: `app.${slug}.read`, description: 'x'.repeat(256) }] })), 'permissions');
  const app = assertStatus(await post(admin, base(owner.id, { slug, permissions: many.slice(0, 100) })), 201);
  assert.equal(app.permissions.length, 100);
  assert.deepEqual(app.permissions[0], { key: `app.${slug}.p0`, description: 'd' });
});

test('"permission description 255" and "name 1–100 characters" count code points: a 255-emoji description and a 100-emoji name are accepted; 256 and 101 are 422 validation_failed', async () => {
  const E = '\u{1F600}'; // one code point, two UTF-16 units
  const slug = slugOf('cp');
  const app = assertStatus(await post(admin, base((await person(t)).id, { slug, name: E.repeat(100), permissions: [{ key: `app.${slug}.read`, description: E.repeat(255) }] })), 201);
  assert.equal([...app.name].length, 100);
  assert.equal([...app.permissions[0].description].length, 255);
  const other = await person(t);
  const slug2 = slugOf('cp');
  assertInvalid(await post(admin, base(other.id, { slug: slug2, permissions: [{ key: `app.${slug2}.read`, description: E.repeat(256) }] })), 'permissions');
  assertInvalid(await post(admin, base(other.id, { name: E.repeat(101) })), 'name');
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { name: E.repeat(101) }), 'name');
});

test('available_app_roles: 0–20 names matching ^[a-z][a-z0-9_]{1,40}$ (21 is 422)', async () => {
  const member = await person(t);
  const org = await createOrg(t, [{ userId: member.id, role: 'org_admin' }]);
  const names = (n: number) => Array.from({ length: n }, (_, i) => `role_${i}`);
  const body = { slug: slugOf(), name: 'x', launch_url: 'https://x.example.com', owner_organization_id: org };
  assertInvalid(await post(admin, { ...body, available_app_roles: names(21) }), 'available_app_roles');
  assertInvalid(await post(admin, { ...body, available_app_roles: ['Admin'] }), 'available_app_roles');
  assertInvalid(await post(admin, { ...body, available_app_roles: ['a'] }), 'available_app_roles');
  const app = assertStatus(await post(admin, { ...body, available_app_roles: names(20) }), 201);
  assert.equal(app.available_app_roles.length, 20);
});

test('default_app_role must be null or one of available_app_roles (422 otherwise)', async () => {
  const owner = await person(t);
  assertInvalid(await post(admin, base(owner.id, { available_app_roles: ['viewer'], default_app_role: 'editor' })), 'default_app_role');
  assertInvalid(await post(admin, base(owner.id, { default_app_role: 'viewer' })), 'default_app_role');
  const app = assertStatus(await post(admin, base(owner.id, { available_app_roles: ['viewer'], default_app_role: 'viewer' })), 201);
  assert.equal(app.default_app_role, 'viewer');
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { default_app_role: 'nope' }), 'default_app_role');
});

test('settings_schema: an invalid schema is 422 invalid_settings_schema; reserved names locale, timezone, theme, notifications are 422 reserved_settings_key', async () => {
  const owner = await person(t);
  assertError(await post(admin, base(owner.id, { settings_schema: { type: 'object', properties: { x: { type: 'nope' } } } })), 422, 'invalid_settings_schema');
  for (const name of ['locale', 'timezone', 'theme', 'notifications']) {
    assertError(await post(admin, base(owner.id, { settings_schema: { type: 'object', properties: { [name]: { type: 'string' } } } })), 422, 'reserved_settings_key');
  }
  const schema = { type: 'object', properties: { nickname: { type: 'string', 'x-pii': true }, volume: { type: 'integer', minimum: 0 } } };
  const app = assertStatus(await post(admin, base(owner.id, { settings_schema: schema })), 201);
  assert.deepEqual(app.settings_schema, schema);
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { settings_schema: { type: 'object', properties: { locale: { type: 'string' } } } }), 422, 'reserved_settings_key');
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { settings_schema: { type: 'object', properties: { x: { type: 'nope' } } } }), 422, 'invalid_settings_schema');
  assert.deepEqual(assertStatus(await get(admin, app.id), 200).settings_schema, schema);
});

test('Starter allows 1 Application: a second one for the same user owner is 409 plan_limit_reached with details.resource applications', async () => {
  const { owner } = await newApp(t, admin);
  const err = assertError(await post(admin, base(owner!.id)), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'applications');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [owner!.id]))[0].n, 1);
});

test('Team allows 5 Applications per Tenant: the 5th is created, the 6th is 409 plan_limit_reached with details.resource applications and nothing is written', async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const body = () => ({ slug: slugOf(), name: 'x', launch_url: 'https://x.example.com', owner_organization_id: org });
  const created = [];
  for (let i = 0; i < 5; i++) created.push(assertStatus(await post(admin, body()), 201));
  assert.equal((await sql(t, 'SELECT plan FROM tenants WHERE id = $1', [created[0].tenant_id]))[0].plan, 'team');
  const err = assertError(await post(admin, body()), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'applications');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_organization_id = $1', [org]))[0].n, 5);
});

test('Starter allows 3 app roles: available_app_roles of 4 is 409 plan_limit_reached (resource app_roles) on create and PATCH', async () => {
  const owner = await person(t);
  const err = assertError(await post(admin, base(owner.id, { available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d'] })), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'app_roles');
  const app = assertStatus(await post(admin, base(owner.id, { available_app_roles: ['r_a', 'r_b', 'r_c'] })), 201);
  const patch = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d'] }), 409, 'plan_limit_reached');
  assert.equal(patch.details.resource, 'app_roles');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 3);
});

test('plan_limit_reached for app_roles reports the Application\'s current count of app roles (0 on create), not the requested length minus one', async () => {
  const owner = await person(t);
  const created = assertError(await post(admin, base(owner.id, { available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d', 'r_e'] })), 409, 'plan_limit_reached');
  assert.deepEqual([created.details.resource, created.details.limit, created.details.current, created.details.plan], ['app_roles', 3, 0, 'starter']);
  const app = assertStatus(await post(admin, base(owner.id, { available_app_roles: ['r_a'] })), 201);
  const patch = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d', 'r_e'] }), 409, 'plan_limit_reached');
  assert.deepEqual(patch.details, { resource: 'app_roles', limit: 3, current: 1, plan: 'starter', tenant_id: app.tenant_id });
  assert.deepEqual(assertStatus(await get(admin, app.id), 200).available_app_roles, ['r_a']);
});

// ---- visibility ----------------------------------------------------------------------------------

test('public: every authenticated caller reads an approved public Application; unauthenticated gets 401', async () => {
  const { id } = await newApp(t, admin, { visibility: 'public' });
  const stranger = await person(t);
  const res = assertStatus(await get(stranger.token, id), 200);
  assert.equal(res.id, id);
  assert.ok((await listIds(stranger.token)).includes(id), '(await listIds(stranger.token)).includes(id)');
  assert.equal((await call(t, 'GET', `/v1/applications/${id}`, null)).statusCode, 401);
});

test('invite_only: visible to users with an access path, its owner, its own key and applications.manage; others get 404 application_not_found', async () => {
  const app = await newApp(t, admin, { visibility: 'invite_only' });
  const stranger = await person(t);
  const holder = await person(t);
  const ent = await grant(t, admin, holder.id, app.id);
  const appsManager = await person(t, { roles: ['superadmin'] });
  const ownKey = await appKey(t, app.id);
  const other = await newApp(t, admin);
  const otherKey = await appKey(t, other.id, ['entitlements.manage', 'users.list']);

  for (const cred of [holder.token, app.owner!.token, ownKey, admin, appsManager.token]) assertStatus(await get(cred, app.id), 200);
  for (const cred of [stranger.token, otherKey]) assertError(await get(cred, app.id), 404, 'application_not_found');
  assert.ok((await listIds(holder.token)).includes(app.id), '(await listIds(holder.token)).includes(app.id)');
  assert.ok(!(await listIds(stranger.token)).includes(app.id), '!(await listIds(stranger.token)).includes(app.id)');

  // A disabled personal row is still an access path.
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { status: 'disabled', disabled_reason: 'paused' }), 200);
  assertStatus(await get(holder.token, app.id), 200);
});

test('invite_only: an active member of an Organization holding a grant has an access path and sees it', async () => {
  const app = await newApp(t, admin, { visibility: 'invite_only' });
  const member = await person(t);
  const pending = await person(t);
  const org = await createOrg(t, [{ userId: member.id }, { userId: pending.id, status: 'pending' }]);
  await sql(
    t,
    `INSERT INTO entitlements (id, organization_id, application_id, status, source, starts_at, member_scope, member_overrides, test_mode, created_at, updated_at, start_notified_at)
     VALUES ($1, $2, $3, 'active', 'org_seat', now(), 'all_members', '{}', false, now(), now(), now())`,
    [`ent_${rand(8)}`, org, app.id],
  );
  assertStatus(await get(member.token, app.id), 200);
  assertError(await get(pending.token, app.id), 404, 'application_not_found');
});

test('invite_only: an org grant row that excludes a member is "listed but never an access path": a member on the denylist does not see the Application, an included member does', async () => {
  const app = await newApp(t, admin, { visibility: 'invite_only' });
  const included = await person(t);
  const excluded = await person(t);
  const org = await createOrg(t, [{ userId: included.id }, { userId: excluded.id }]);
  await sql(
    t,
    `INSERT INTO entitlements (id, organization_id, application_id, status, source, starts_at, member_scope, member_overrides, test_mode, created_at, updated_at, start_notified_at)
     VALUES ($1, $2, $3, 'active', 'org_seat', now(), 'denylist', $4, false, now(), now(), now())`,
    [`ent_${rand(8)}`, org, app.id, [excluded.id]],
  );
  assertStatus(await get(included.token, app.id), 200);
  assertError(await get(excluded.token, app.id), 404, 'application_not_found');
});

test('internal: only applications.manage and its own app key; its owner, users with a grant and other callers get 404', async () => {
  const app = await newApp(t, admin, { visibility: 'internal' });
  const holder = await person(t);
  await grant(t, admin, holder.id, app.id);
  const stranger = await person(t);
  const ownKey = await appKey(t, app.id);
  const entManager = await platformKey(t, ['entitlements.manage', 'users.list']);
  for (const cred of [admin, ownKey]) assertStatus(await get(cred, app.id), 200);
  for (const cred of [app.owner!.token, holder.token, stranger.token, entManager]) assertError(await get(cred, app.id), 404, 'application_not_found');
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { name: 'x' }), 404, 'application_not_found');
  for (const token of [app.owner!.token, holder.token]) assert.ok(!(await listIds(token)).includes(app.id), '!(await listIds(token)).includes(app.id)');
  assert.ok(!(await listIds(app.owner!.token, '&owned=true')).includes(app.id), '!(await listIds(app.owner!.token, \'&owned=true\')).includes(app.id)');
  assert.ok((await listIds(admin)).includes(app.id), '(await listIds(admin)).includes(app.id)');
});

test('internal: owner rights go with seeing the Application, so its owner cannot list its Entitlements, mint or see its API keys, or create its webhooks', async () => {
  const app = await newApp(t, admin, { visibility: 'internal' });
  const holder = await person(t);
  await grant(t, admin, holder.id, app.id);
  const owner = app.owner!.token;
  const superadminToken = (await person(t, { roles: ['superadmin'] })).token;
  // Owning nothing else, the owner is a caller who owns no Application.
  assertError(await call(t, 'GET', `/v1/entitlements?application_id=${app.id}`, owner), 403, 'forbidden');
  assertError(await call(t, 'GET', '/v1/entitlements', owner), 403, 'forbidden');
  // As for anyone who may not see it, the Application is as unknown there: 404, not 403.
  assertError(await call(t, 'POST', '/v1/api-keys', owner, { name: 'k', scope: app.id, intended_use: 'service', permissions: [] }), 404, 'application_not_found');
  const adminKey = assertStatus(await call(t, 'POST', '/v1/api-keys', superadminToken, { name: 'k', scope: app.id, intended_use: 'service', permissions: [] }), 201);
  assert.ok(!assertStatus(await call(t, 'GET', '/v1/api-keys', owner), 200).data.some((k: { id: string }) => k.id === adminKey.id), '!assertStatus(await call(t, \'GET\', \'/v1/api-keys\', owner), 200).data.some((k: { id: string }) => k.id === adminKey.id)');
  assertError(await call(t, 'GET', `/v1/api-keys/${adminKey.id}`, owner), 404, 'api_key_not_found');
  assertError(await call(t, 'POST', '/v1/webhooks', owner, { url: 'https://hooks.example.com/x', scope: app.id, events: ['*'] }), 403, 'forbidden');
  // The same owner of a public Application has all of them.
  await sql(t, `UPDATE applications SET visibility = 'public' WHERE id = $1`, [app.id]);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/entitlements?application_id=${app.id}`, owner), 200).data.map((e: { user_id: string }) => e.user_id), [holder.id]);
  assertStatus(await call(t, 'GET', `/v1/api-keys/${adminKey.id}`, owner), 200);
});

test('non-approved Applications are visible only to the owner, the own key and applications.manage', async () => {
  const app = await newApp(t, admin, { visibility: 'public' });
  const holder = await person(t);
  await grant(t, admin, holder.id, app.id);
  const stranger = await person(t);
  const ownKey = await appKey(t, app.id);
  for (const status of ['suspended', 'pending_review', 'rejected']) {
    await setReview(t, app.id, status);
    for (const cred of [app.owner!.token, ownKey, admin]) assert.equal(assertStatus(await get(cred, app.id), 200).review_status, status);
    for (const cred of [holder.token, stranger.token]) assertError(await get(cred, app.id), 404, 'application_not_found');
    assert.ok(!(await listIds(stranger.token)).includes(app.id), '!(await listIds(stranger.token)).includes(app.id)');
    assert.ok((await listIds(app.owner!.token)).includes(app.id), '(await listIds(app.owner!.token)).includes(app.id)');
  }
  await setReview(t, app.id, 'approved');
});

test("an app-confined key reaches only its own Application: another (public) Application is 404 application_not_found and absent from its list", async () => {
  const mine = await newApp(t, admin, { visibility: 'public' });
  const theirs = await newApp(t, admin, { visibility: 'public' });
  const key = await appKey(t, mine.id, ['entitlements.manage', 'users.list', 'roles.manage', 'audit.view']);
  assertStatus(await get(key, mine.id), 200);
  assertError(await get(key, theirs.id), 404, 'application_not_found');
  const ids = await listIds(key);
  assert.deepEqual(ids, [mine.id]);
});

test('GET of an unknown Application id is 404 application_not_found', async () => {
  assertError(await get(admin, 'app_doesnotexist'), 404, 'application_not_found');
});

// ---- list ----------------------------------------------------------------------------------------

test('the list view contains only id, slug, name, description, icon_url, visibility, review_status', async () => {
  const app = await newApp(t, admin, { description: 'hello', icon_url: 'https://cdn.example.com/i.png' });
  const viewer = await person(t);
  const item = (await list(viewer.token)).data.find((a: { id: string }) => a.id === app.id);
  assert.deepEqual(Object.keys(item).sort(), LIST_KEYS);
  assert.deepEqual(item, { id: app.id, slug: app.slug, name: 'Test App', description: 'hello', icon_url: 'https://cdn.example.com/i.png', visibility: 'public', review_status: 'approved' });
  const adminItem = (await list(admin)).data.find((a: { id: string }) => a.id === app.id);
  assert.deepEqual(Object.keys(adminItem).sort(), LIST_KEYS);
  const body = await list(viewer.token);
  assert.deepEqual(Object.keys(body.page).sort(), ['has_more', 'next_cursor']);
});

test('list filter visibility returns only that visibility', async () => {
  const pub = await newApp(t, admin, { visibility: 'public' });
  const inv = await newApp(t, admin, { visibility: 'invite_only' });
  const data = (await list(admin, '&visibility=invite_only')).data;
  assert.ok(data.every((a: { visibility: string }) => a.visibility === 'invite_only'), 'data.every((a: { visibility: string }) => a.visibility === \'invite_only\')');
  const ids = data.map((a: { id: string }) => a.id);
  assert.ok(ids.includes(inv.id), 'ids.includes(inv.id)');
  assert.ok(!ids.includes(pub.id), '!ids.includes(pub.id)');
});

test('list filter review_status: non-admins only see approved plus their own', async () => {
  const mine = await newApp(t, admin);
  const theirs = await newApp(t, admin);
  await setReview(t, mine.id, 'suspended');
  await setReview(t, theirs.id, 'suspended');
  const ownerView = await listIds(mine.owner!.token, '&review_status=suspended');
  assert.ok(ownerView.includes(mine.id), 'ownerView.includes(mine.id)');
  assert.ok(!ownerView.includes(theirs.id), '!ownerView.includes(theirs.id)');
  const stranger = await person(t);
  assert.deepEqual(await listIds(stranger.token, '&review_status=suspended'), []);
  const adminView = await listIds(admin, '&review_status=suspended');
  assert.ok(adminView.includes(mine.id) && adminView.includes(theirs.id), 'adminView.includes(mine.id) && adminView.includes(theirs.id)');
  await setReview(t, mine.id, 'approved');
  await setReview(t, theirs.id, 'approved');
});

test('review_status=pending_review with applications.manage is the review queue, oldest first', async () => {
  const a = await newApp(t, admin);
  const b = await newApp(t, admin);
  const c = await newApp(t, admin);
  const base = Date.now() - 10 * 86400_000;
  // b is the oldest, then c, then a.
  await setReview(t, a.id, 'pending_review', new Date(base + 3000));
  await setReview(t, b.id, 'pending_review', new Date(base + 1000));
  await setReview(t, c.id, 'pending_review', new Date(base + 2000));
  const queue = (await listIds(admin, '&review_status=pending_review')).filter((id: string) => [a.id, b.id, c.id].includes(id));
  assert.deepEqual(queue, [b.id, c.id, a.id]);
  // Paging the queue keeps the order.
  const first = await list(admin, '&review_status=pending_review');
  const all = first.data.map((x: { id: string }) => x.id);
  const pageOne = assertStatus(await call(t, 'GET', '/v1/applications?review_status=pending_review&limit=1', admin), 200);
  assert.equal(pageOne.data[0].id, all[0]);
  const pageTwo = assertStatus(await call(t, 'GET', `/v1/applications?review_status=pending_review&limit=1&cursor=${encodeURIComponent(pageOne.page.next_cursor)}`, admin), 200);
  assert.equal(pageTwo.data[0].id, all[1]);
  for (const x of [a, b, c]) await setReview(t, x.id, 'approved');
});

test('list filter owned=true returns only Applications the caller owns (owner_user_id or org_admin of the owning Organization)', async () => {
  const owner = await person(t);
  const mine = await newApp(t, admin, { owner_user_id: owner.id });
  const org = await createOrg(t, [{ userId: owner.id, role: 'org_admin' }]);
  const orgApp = await newApp(t, admin, { owner_organization_id: org });
  const member = await person(t);
  const memberOrg = await createOrg(t, [{ userId: (await person(t)).id, role: 'org_admin' }, { userId: member.id, role: 'member' }]);
  const notAdminApp = await newApp(t, admin, { owner_organization_id: memberOrg });
  await newApp(t, admin);
  assert.deepEqual((await listIds(owner.token, '&owned=true')).sort(), [mine.id, orgApp.id].sort());
  assert.ok(!(await listIds(member.token, '&owned=true')).includes(notAdminApp.id), '!(await listIds(member.token, \'&owned=true\')).includes(notAdminApp.id)');
});

test('owner rights go to "any active org_admin of owner_organization_id": a plain member or a pending org_admin of the owning Organization may not create a key scoped to the Application (403 forbidden) nor list it as owned; its active org_admin may (201)', async () => {
  const orgAdmin = await person(t);
  const member = await person(t);
  const pendingAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: member.id, role: 'member' }, { userId: pendingAdmin.id, role: 'org_admin', status: 'pending' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  const body = { name: 'app', scope: app.id, permissions: [] };
  for (const notOwner of [member, pendingAdmin]) {
    assertError(await call(t, 'POST', '/v1/api-keys', notOwner.token, body), 403, 'forbidden');
    assert.ok(!(await listIds(notOwner.token, '&owned=true')).includes(app.id), 'not listed as owned');
  }
  const key = assertStatus(await call(t, 'POST', '/v1/api-keys', orgAdmin.token, body), 201);
  assert.ok((await listIds(orgAdmin.token, '&owned=true')).includes(app.id), 'listed as owned');
  // Its keys are listed to the owner only.
  const keyIds = async (cred: string) => assertStatus(await call(t, 'GET', `/v1/api-keys?scope=${app.id}`, cred), 200).data.map((k: { id: string }) => k.id);
  assert.deepEqual(await keyIds(orgAdmin.token), [key.id]);
  for (const notOwner of [member, pendingAdmin]) assert.deepEqual(await keyIds(notOwner.token), []);
});

test('docs/decisions.md "Owners": owner rights go with seeing the Application, so the owner of an internal one (shown only to applications.manage and its own key) may not create its keys: 404 application_not_found, as for an unknown id', async () => {
  const owner = await person(t);
  const internal = await newApp(t, admin, { owner_user_id: owner.id, visibility: 'internal' });
  assertError(await call(t, 'POST', '/v1/api-keys', owner.token, { name: 'app', scope: internal.id, permissions: [] }), 404, 'application_not_found');
});

test('list filters tenant_id, owner_user_id, owner_organization_id need applications.manage or tenants.manage', async () => {
  const app = await newApp(t, admin);
  const user = await person(t);
  for (const q of [`&tenant_id=${app.tenant_id}`, `&owner_user_id=${app.owner!.id}`]) {
    assertError(await call(t, 'GET', `/v1/applications?${q.slice(1)}`, user.token), 403, 'forbidden');
    assertError(await call(t, 'GET', `/v1/applications?${q.slice(1)}`, app.owner!.token), 403, 'forbidden');
  }
  assert.deepEqual(await listIds(admin, `&tenant_id=${app.tenant_id}`), [app.id]);
  assert.deepEqual(await listIds(admin, `&owner_user_id=${app.owner!.id}`), [app.id]);
  const tenants = await platformKey(t, ['tenants.manage']);
  assert.ok((await listIds(tenants, `&tenant_id=${app.tenant_id}`)).includes(app.id), '(await listIds(tenants, `&tenant_id=${app.tenant_id}`)).includes(app.id)');
});

// ---- PATCH field rights --------------------------------------------------------------------------

test('PATCH: the owner changes configuration fields (200 full object, audit application.updated with before and after)', async () => {
  const app = await newApp(t, admin);
  const res = await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, {
    name: 'Renamed', description: 'new', support_url: 'https://help.example.com', email_from_name: 'Team', redirect_uris: ['https://app.example.com/cb'],
  });
  const body = assertStatus(res, 200);
  assert.equal(body.name, 'Renamed');
  assert.equal(body.description, 'new');
  assert.equal(body.support_url, 'https://help.example.com');
  assert.equal(body.email_from_name, 'Team');
  assert.equal(body.launch_url, 'https://app.example.com/launch', 'unsent fields stay');
  assert.equal(body.tenant_id, app.tenant_id);
  const audit = await auditOf(t, app.id, 'application.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].before.name, 'Test App');
  assert.equal(audit[0].after.name, 'Renamed');
  assert.equal(audit[0].actor_id, app.owner!.id);
});

test('PATCH that changes nothing (every field sent as it is, settings_schema keys in another order, a review move repeated with its notes) answers 200 with the Application unchanged: no updated_at, no application.updated', async () => {
  const slug = slugOf();
  const app = await newApp(t, admin, {
    slug,
    settings_schema: { type: 'object', properties: { color: { type: 'string' }, size: { type: 'integer' } } },
    permissions: [{ key: `app.${slug}.read`, description: 'read' }],
    available_app_roles: ['viewer'],
    default_app_role: 'viewer',
    redirect_uris: ['https://app.example.com/cb'],
  });
  const fields = ['name', 'description', 'icon_url', 'launch_url', 'redirect_uris', 'support_url', 'email_from_name', 'permissions', 'available_app_roles', 'default_app_role', 'visibility'];
  const same = Object.fromEntries(fields.map((f) => [f, app.body[f]]));
  same.settings_schema = { properties: { size: { type: 'integer' }, color: { type: 'string' } }, type: 'object' };
  const { visibility, ...ownerFields } = same;
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, ownerFields), 200), app.body);
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { ...same, visibility }), 200), app.body);
  const suspended = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { review_status: 'suspended', review_notes: 'policy' }), 200);
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { review_status: 'suspended', review_notes: 'policy' }), 200), suspended);
  assert.deepEqual((await auditOf(t, app.id)).map((r) => r.action), ['application.created', 'application.updated', 'application.review_status_changed']);
});

test('PATCH: an org_admin of the owning Organization is an owner; a plain member is not (403 forbidden)', async () => {
  const orgAdmin = await person(t);
  const member = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }, { userId: member.id, role: 'member' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, orgAdmin.token, { name: 'By admin' }), 200).name, 'By admin');
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, member.token, { name: 'By member' }), 403, 'forbidden');
});

test('PATCH: an owner touching visibility, review_status, review_notes or ownership gets 403 moderation_field_forbidden and nothing changes', async () => {
  const app = await newApp(t, admin);
  const other = await person(t);
  for (const body of [{ visibility: 'internal' }, { review_status: 'suspended', review_notes: 'x' }, { review_notes: 'hi' }, { owner_user_id: other.id }, { name: 'n', visibility: 'internal' }]) {
    assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, body), 403, 'moderation_field_forbidden');
  }
  const now = assertStatus(await get(admin, app.id), 200);
  assert.equal(now.visibility, 'public');
  assert.equal(now.name, 'Test App');
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('PATCH: applications.manage changes moderation fields (visibility)', async () => {
  const app = await newApp(t, admin);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { visibility: 'invite_only' }), 200).visibility, 'invite_only');
});

test('PATCH: a caller who is neither owner nor applications.manage gets 403 forbidden on a visible Application, 404 on an invisible one', async () => {
  const pub = await newApp(t, admin);
  const internal = await newApp(t, admin, { visibility: 'internal' });
  const user = await person(t);
  assertError(await call(t, 'PATCH', `/v1/applications/${pub.id}`, user.token, { name: 'x' }), 403, 'forbidden');
  assertError(await call(t, 'PATCH', `/v1/applications/${internal.id}`, user.token, { name: 'x' }), 404, 'application_not_found');
  assert.equal(assertStatus(await get(admin, pub.id), 200).name, 'Test App');
});

// ---- plan caps on PATCH, owners, URL fields ----------------------------------------------------------

test("ownership change: available_app_roles longer than the new owner's Tenant plan cap is 409 plan_limit_reached (resource app_roles), even when no name is added", async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org, available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d'] });
  const newOwner = await person(t);
  const res = await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id, owner_organization_id: null });
  const err = assertError(res, 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'app_roles');
  assert.equal(err.details.plan, 'starter');
  assert.equal(err.details.limit, 3);
  const current = assertStatus(await get(admin, app.id), 200);
  assert.equal(current.tenant_id, app.tenant_id);
  assert.equal(current.owner_organization_id, org);
  assert.equal(current.owner_user_id, null);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 4);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM tenants WHERE owner_user_id = $1', [newOwner.id]))[0].n, 0);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test("ownership change: app roles added in the same PATCH are checked against the new owner's Tenant plan (Team: no cap)", async () => {
  const app = await newApp(t, admin, { available_app_roles: ['r_a', 'r_b', 'r_c'] });
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const res = await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_organization_id: org, owner_user_id: null, available_app_roles: ['r_a', 'r_b', 'r_c', 'r_d'] });
  const body = assertStatus(res, 200);
  assert.notEqual(body.tenant_id, app.tenant_id);
  assert.equal(body.owner_organization_id, org);
  assert.deepEqual(body.available_app_roles, ['r_a', 'r_b', 'r_c', 'r_d']);
  const [tenant] = await sql(t, 'SELECT plan, owner_organization_id FROM tenants WHERE id = $1', [body.tenant_id]);
  assert.deepEqual({ ...tenant }, { plan: 'team', owner_organization_id: org });
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 4);
  const audit = await auditOf(t, app.id, 'application.updated');
  assert.equal(audit.length, 1);
  assert.equal(audit[0].tenant_id, body.tenant_id);
});

test('PATCH on a restricted Tenant: adding an app role or moving an Application into it is 402 subscription_required, documented in OpenAPI, and nothing changes', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer'] });
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [app.tenant_id]);
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { available_app_roles: ['viewer', 'editor'] }), 402, 'subscription_required');
  assert.equal(err.details.resource, 'app_roles');
  assert.equal(err.details.tenant_id, app.tenant_id);
  assert.deepEqual(assertStatus(await get(admin, app.id), 200).available_app_roles, ['viewer']);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 1);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);

  // Moving another Application into the restricted Tenant.
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const orgApp = await newApp(t, admin, { owner_organization_id: org });
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [orgApp.tenant_id]);
  const moved = await newApp(t, admin);
  assertError(await call(t, 'PATCH', `/v1/applications/${moved.id}`, admin, { owner_organization_id: org, owner_user_id: null }), 402, 'subscription_required');
  const after = assertStatus(await get(admin, moved.id), 200);
  assert.equal(after.tenant_id, moved.tenant_id);
  assert.equal(after.owner_user_id, moved.owner!.id);

  const doc = assertStatus(await call(t, 'GET', '/v1/openapi.json', null), 200);
  const responses = doc.paths['/v1/applications/{id}'].patch.responses;
  assert.ok(responses['402'], 'PATCH /v1/applications/{id} documents 402');
  assert.match(JSON.stringify(responses['402']), /subscription_required/);
});

test('PATCH ownership to a deleted or erased user is refused as POST refuses it: 422 validation_failed on owner_user_id, nothing changes', async () => {
  const deleted = await person(t);
  await sql(t, `UPDATE users SET status = 'deleted', deleted_at = now() WHERE id = $1`, [deleted.id]);
  const erased = await person(t);
  await sql(t, `UPDATE users SET erased_at = now() WHERE id = $1`, [erased.id]);
  const app = await newApp(t, admin);
  for (const gone of [deleted, erased]) {
    assertInvalid(await post(admin, base(gone.id)), 'owner_user_id');
    assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: gone.id }), 'owner_user_id');
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM tenants WHERE owner_user_id = $1', [gone.id]))[0].n, 0);
  }
  const current = assertStatus(await get(admin, app.id), 200);
  assert.equal(current.owner_user_id, app.owner!.id);
  assert.equal(current.tenant_id, app.tenant_id);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('a URL field is stored exactly as sent or refused: white space, control characters (a CR/LF meant for a header) and `https:` without `//` are 422 in launch_url, icon_url, support_url and redirect_uris', async () => {
  const owner = await person(t);
  for (const [field, value] of [
    ['launch_url', ' https://app.example.com'],
    ['launch_url', 'https:app.example.com'],
    ['launch_url', 'https://app.example.com/\r\nX-Injected: 1'],
    ['icon_url', 'https://cdn.example.com/x" onerror="alert(1)'],
    ['support_url', 'https://help.example.com/\t'],
  ] as const) {
    assertInvalid(await post(admin, base(owner.id, { [field]: value })), field);
  }
  for (const uri of ['https://app.example.com/cb\r\nSet-Cookie: a=b', 'com.example.app:/cb\nX: y', 'https://app.example.com/c b']) {
    assertInvalid(await post(admin, base(owner.id, { redirect_uris: [uri] })), 'redirect_uris.0');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [owner.id]))[0].n, 0);
});

test('icon_url is an http or https URL and support_url an http(s) or mailto: URL (no https rule); launch_url stays https; other values are 422', async () => {
  const owner = await person(t);
  const created = assertStatus(await post(admin, base(owner.id, { icon_url: 'http://cdn.example.com/i.png', support_url: 'mailto:help@example.com' })), 201);
  assert.equal(created.icon_url, 'http://cdn.example.com/i.png');
  assert.equal(created.support_url, 'mailto:help@example.com');
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${created.id}`, owner.token, { icon_url: 'https://cdn.example.com/i.png', support_url: 'http://help.example.com' }), 200);
  assert.equal(patched.icon_url, 'https://cdn.example.com/i.png');
  assert.equal(patched.support_url, 'http://help.example.com');

  const other = await person(t);
  for (const icon_url of ['ftp://cdn.example.com/i.png', 'mailto:help@example.com', '/i.png', 'https://user:pw@cdn.example.com/i.png', 'javascript:alert(1)']) {
    assertInvalid(await post(admin, base(other.id, { icon_url })), 'icon_url');
  }
  for (const support_url of ['ftp://help.example.com', 'mailto:', 'mailto:nobody', 'help@example.com', 'http://user:pw@help.example.com', 'javascript:alert(1)']) {
    assertInvalid(await post(admin, base(other.id, { support_url })), 'support_url');
  }
  assertInvalid(await post(admin, base(other.id, { launch_url: 'http://app.example.com' })), 'launch_url');
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${created.id}`, owner.token, { launch_url: 'http://app.example.com' }), 'launch_url');
  assertInvalid(await post(admin, base(other.id, { icon_url: `https://cdn.example.com/${'x'.repeat(2048)}` })), 'icon_url');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [other.id]))[0].n, 0);
  const current = assertStatus(await get(admin, created.id), 200);
  assert.equal(current.launch_url, 'https://app.example.com');
});

test('ownership change across non-shared Tenants is 409 ownership_change_requires_migration (source or destination not on the shared tier) and nothing changes', async () => {
  const app = await newApp(t, admin);
  const newOwner = await person(t);
  await sql(t, `UPDATE tenants SET tier = 'isolated' WHERE id = $1`, [app.tenant_id]);
  const move = () => call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id });
  assertError(await move(), 409, 'ownership_change_requires_migration');
  // Source back on shared, destination (the new owner's existing Tenant) isolated: refused too.
  await sql(t, `UPDATE tenants SET tier = 'shared' WHERE id = $1`, [app.tenant_id]);
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const orgApp = await newApp(t, admin, { owner_organization_id: org });
  await sql(t, `UPDATE tenants SET tier = 'isolated' WHERE id = $1`, [orgApp.tenant_id]);
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_organization_id: org, owner_user_id: null }), 409, 'ownership_change_requires_migration');
  const current = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([current.owner_user_id, current.owner_organization_id, current.tenant_id], [app.owner!.id, null, app.tenant_id]);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test("ownership change into a Tenant already at its Applications cap is 409 plan_limit_reached (resource applications): Starter allows 1 Application", async () => {
  const app = await newApp(t, admin);
  const full = await newApp(t, admin);
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: full.owner!.id }), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'applications');
  const current = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([current.owner_user_id, current.tenant_id], [app.owner!.id, app.tenant_id]);
});

/** `count` active users, each with an active admin_grant to the Application; their id prefix. */
async function seedHolders(appId: string, count: number): Promise<string> {
  const now = t.clock.now();
  const prefix = `usr_seat${rand(6)}_`;
  await sql(t, `INSERT INTO users (id, email, status, test_mode, created_at, updated_at)
                SELECT $1 || g, $1 || g || '@example.com', 'active', false, $2, $2 FROM generate_series(1, $3::int) g`, [prefix, now, count]);
  await sql(t, `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
                SELECT 'ent_' || $1 || g, $1 || g, $3, 'active', 'admin_grant', $2, false, $2, $2 FROM generate_series(1, $4::int) g`, [prefix, now, appId, count]);
  return prefix;
}

test("ownership change into a Starter Tenant that would hold more than its 1,000 seats is 409 plan_limit_reached (resource seats) and nothing changes", async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  const prefix = await seedHolders(app.id, 1001);
  const newOwner = await person(t);
  const err = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id, owner_organization_id: null }), 409, 'plan_limit_reached');
  assert.equal(err.details.resource, 'seats');
  assert.equal(err.details.plan, 'starter');
  assert.equal(err.details.limit, 1000);
  const current = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([current.owner_organization_id, current.owner_user_id, current.tenant_id], [org, null, app.tenant_id]);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM tenants WHERE owner_user_id = $1', [newOwner.id]))[0].n, 0);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);

  // With one of those users' grants ended, the 1,000 that remain fit.
  await sql(t, `UPDATE entitlements SET status = 'revoked', disabled_reason = 'x' WHERE id = $1`, [`ent_${prefix}1`]);
  const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { owner_user_id: newOwner.id, owner_organization_id: null }), 200);
  assert.notEqual(moved.tenant_id, app.tenant_id);
});

/**
 * An Application of a Team Organization held by 1,000 users (exactly a Starter Tenant's seats), a
 * newcomer to grant it to and a new (Starter) owner to move it to; `run` gets a connection of its
 * own to hold locks on (`holder`), a way to wait until a backend waits for a lock `pid` holds, and one
 * to wait until an operation has ended or waits for one of `blockers` (endedOrWaiting).
 */
async function moveAndGrantRace(
  run: (f: { appId: string; tenantId: string; org: string; newcomer: string; newOwner: string; holder: pg.Client; blockedBy: (pid: number, what: string) => Promise<number>; endedOrWaiting: (op: Promise<unknown>, blockers: number[], known: number[], what: string) => Promise<void> }) => Promise<void>,
): Promise<void> {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  await seedHolders(app.id, 1000);
  const connect = () => client(t);
  const [holder, watcher] = [await connect(), await connect()];
  const blockedBy = (pid: number, what: string) => waitForBlocked(watcher, pid, what);
  const endedOrWaiting = (op: Promise<unknown>, blockers: number[], known: number[], what: string) => waitEndedOrWaiting(watcher, op, blockers, known, what);
  try {
    await run({ appId: app.id, tenantId: app.tenant_id, org, newcomer: (await person(t)).id, newOwner: (await person(t)).id, holder, blockedBy, endedOrWaiting });
  } finally {
    for (const c of [holder, watcher]) await c.end();
  }
}

const seatsOf = async (tenantId: string) => (await sql(t, `SELECT count(DISTINCT user_id)::int AS n FROM entitlements e JOIN applications a ON a.id = e.application_id
  WHERE a.tenant_id = $1 AND e.status = 'active' AND e.user_id IS NOT NULL`, [tenantId]))[0].n;

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers these tests.
if (storageName === 'postgres') test("a grant of an Application and its ownership move into a Starter Tenant at once do not leave the Tenant over its 1,000 seats (PostgreSQL): a move after the grant read the Application's Tenant waits for it and counts its user, 409 plan_limit_reached (resource seats)", async () => {
  await moveAndGrantRace(async ({ appId, tenantId, org, newcomer, newOwner, holder, blockedBy, endedOrWaiting }) => {
    // The newcomer's row is held: the grant has read the Application's Tenant and waits for the user
    // before it counts the seats, while the move runs.
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM users WHERE id = $1 FOR UPDATE', [newcomer]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const granting = grantReq(t, admin, newcomer, { application_id: appId, source: 'admin_grant' });
    const grantPid = await blockedBy(holderPid, 'the grant');
    const moving = call(t, 'PATCH', `/v1/applications/${appId}`, admin, { owner_user_id: newOwner, owner_organization_id: null });
    // The move either ends at once (the grant's seat uncounted) or waits for the grant.
    await endedOrWaiting(moving, [holderPid, grantPid], [grantPid], 'the move');
    await holder.query('ROLLBACK');
    const [granted, moved] = await Promise.all([granting, moving]);
    assertStatus(granted, 201);
    const err = assertError(moved, 409, 'plan_limit_reached');
    assert.equal(err.details.resource, 'seats');
    const [current] = await sql(t, 'SELECT tenant_id, owner_organization_id FROM applications WHERE id = $1', [appId]);
    assert.deepEqual([current.tenant_id, current.owner_organization_id], [tenantId, org]);
  });
});

if (storageName === 'postgres') test("a grant of an Application that starts while its ownership move into a Starter Tenant is under way counts against the new Tenant once the move commits (PostgreSQL): 409 plan_limit_reached (resource seats), the Tenant stays at its 1,000 seats", async () => {
  await moveAndGrantRace(async ({ appId, tenantId, newcomer, newOwner, holder, blockedBy, endedOrWaiting }) => {
    // The new owner's (empty) Starter Tenant and the Tenant the Application leaves are held: the move
    // has locked the Application and waits for them (it locks both), so a grant that reads the
    // Application's Tenant meanwhile waits for the move to commit.
    const destination = `tnt_race${rand(6)}`;
    await sql(t, `INSERT INTO tenants (id, owner_type, owner_user_id, plan, created_at, updated_at) VALUES ($1, 'user', $2, 'starter', now(), now())`, [destination, newOwner]);
    await holder.query('BEGIN');
    // FOR NO KEY UPDATE, as the seat and Application counters take them (a FOR UPDATE would stop the
    // move already at its migrating check, which reads the Tenant FOR KEY SHARE, before the Application).
    await holder.query('SELECT 1 FROM tenants WHERE id = ANY($1::text[]) FOR NO KEY UPDATE', [[destination, tenantId]]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const moving = call(t, 'PATCH', `/v1/applications/${appId}`, admin, { owner_user_id: newOwner, owner_organization_id: null });
    const movePid = await blockedBy(holderPid, 'the move');
    const granting = grantReq(t, admin, newcomer, { application_id: appId, source: 'admin_grant' });
    await endedOrWaiting(granting, [holderPid, movePid], [movePid], 'the grant');
    await holder.query('ROLLBACK');
    assert.equal(assertStatus(await moving, 200).tenant_id, destination);
    const err = assertError(await granting, 409, 'plan_limit_reached');
    assert.equal(err.details.resource, 'seats');
    assert.equal(err.details.tenant_id, destination);
    assert.equal(await seatsOf(destination), 1000);
  });
});

test('list filter owner_organization_id needs applications.manage or tenants.manage: 403 forbidden for others, the org_admin owner included', async () => {
  const orgAdmin = await person(t);
  const org = await createOrg(t, [{ userId: orgAdmin.id, role: 'org_admin' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  await newApp(t, admin);
  for (const cred of [orgAdmin.token, (await person(t)).token]) {
    assertError(await call(t, 'GET', `/v1/applications?owner_organization_id=${org}`, cred), 403, 'forbidden');
  }
  assert.deepEqual(await listIds(admin, `&owner_organization_id=${org}`), [app.id]);
});

test('PATCH: a pending (unaccepted) org_admin of the owning Organization is not an owner (a pending membership grants nothing): 403 forbidden, nothing changes', async () => {
  const activeAdmin = await person(t);
  const pendingAdmin = await person(t);
  const org = await createOrg(t, [{ userId: activeAdmin.id, role: 'org_admin' }, { userId: pendingAdmin.id, role: 'org_admin', status: 'pending' }]);
  const app = await newApp(t, admin, { owner_organization_id: org });
  assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, pendingAdmin.token, { name: 'Taken over' }), 403, 'forbidden');
  assert.equal(assertStatus(await get(admin, app.id), 200).name, 'Test App');
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, activeAdmin.token, { name: 'Renamed' }), 200);
});

// ---- field limits at their boundaries ------------------------------------------------------------

test('permissions: a key is accepted with exactly 64 characters after app.<slug>. ("permission key up to 64 characters after the prefix"); 65 is 422', async () => {
  const owner = await person(t);
  const slug = slugOf('perm');
  const key = `app.${slug}.${'k'.repeat(64)}`;
  assertInvalid(await post(admin, base(owner.id, { slug, permissions: [{ key: `${key}k`, description: 'x' }] })), 'permissions');
  const app = assertStatus(await post(admin, base(owner.id, { slug, permissions: [{ key, description: 'x' }] })), 201);
  assert.deepEqual(app.permissions, [{ key, description: 'x' }]);
});

test('name is 1–100 characters: 100 is accepted on POST and PATCH; 101 and the empty string are 422', async () => {
  const owner = await person(t);
  for (const name of ['', 'n'.repeat(101)]) assertInvalid(await post(admin, base(owner.id, { name })), 'name');
  const app = assertStatus(await post(admin, base(owner.id, { name: 'n'.repeat(100) })), 201);
  assert.equal(app.name, 'n'.repeat(100));
  for (const name of ['', 'm'.repeat(101)]) assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { name }), 'name');
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { name: 'm'.repeat(100) }), 200).name, 'm'.repeat(100));
});

test('email_from_name is null or 1–50 characters: 50 is accepted; 51 and the empty string are 422 on POST and PATCH', async () => {
  const owner = await person(t);
  for (const email_from_name of ['', 'e'.repeat(51)]) assertInvalid(await post(admin, base(owner.id, { email_from_name })), 'email_from_name');
  const app = assertStatus(await post(admin, base(owner.id, { email_from_name: 'e'.repeat(50) })), 201);
  assert.equal(app.email_from_name, 'e'.repeat(50));
  for (const email_from_name of ['', 'f'.repeat(51)]) {
    assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { email_from_name }), 'email_from_name');
  }
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { email_from_name: null }), 200).email_from_name, null);
});

test('available_app_roles names match ^[a-z][a-z0-9_]{1,40}$: a name of 41 characters is accepted (and seeds its Role), 42 is 422', async () => {
  const owner = await person(t);
  const name41 = `r${'a'.repeat(40)}`;
  assertInvalid(await post(admin, base(owner.id, { available_app_roles: [`${name41}a`] })), 'available_app_roles');
  const app = assertStatus(await post(admin, base(owner.id, { available_app_roles: [name41] })), 201);
  assert.deepEqual(app.available_app_roles, [name41]);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE id = $1', [`role_${app.slug}_${name41}`]))[0].n, 1);
});

test('default_app_role is null or one of available_app_roles: the empty string is neither (422), on POST and PATCH', async () => {
  const owner = await person(t);
  assertInvalid(await post(admin, base(owner.id, { available_app_roles: ['viewer'], default_app_role: '' })), 'default_app_role');
  const app = assertStatus(await post(admin, base(owner.id, { available_app_roles: ['viewer'] })), 201);
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { default_app_role: '' }), 'default_app_role');
  assert.equal(assertStatus(await get(admin, app.id), 200).default_app_role, null);
});

test('redirect_uris: a test_mode Application takes http://localhost and http://127.0.0.1 by PATCH too (the rule is the Application\'s test_mode, on create and on change)', async () => {
  const testKey = await platformKey(t, ['applications.manage'], 'test');
  const testOwner = await person(t, { mode: 'test' });
  const created = assertStatus(await post(testKey, base(testOwner.id, { redirect_uris: ['https://app.example.com/cb'] })), 201);
  assert.equal(created.test_mode, true);
  const uris = ['http://localhost:5173/cb', 'http://127.0.0.1/cb'];
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${created.id}`, testKey, { redirect_uris: uris }), 200);
  assert.deepEqual(patched.redirect_uris, uris);
});

test('redirect_uris: on a test_mode Application http is still only for http://localhost and http://127.0.0.1; another http host, or one that merely starts like them, is 422', async () => {
  const testKey = await platformKey(t, ['applications.manage'], 'test');
  const testOwner = await person(t, { mode: 'test' });
  for (const uri of ['http://app.example.com/cb', 'http://localhost.evil.example/cb', 'http://127.0.0.1.evil.example/cb', 'http://localhostx:3000/cb']) {
    assertInvalid(await post(testKey, base(testOwner.id, { redirect_uris: [uri] })), 'redirect_uris');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [testOwner.id]))[0].n, 0);
});

test('PATCH: default_app_role may name a role added to available_app_roles in the same request; a PATCH that leaves default_app_role out keeps it', async () => {
  const member = await person(t);
  const org = await createOrg(t, [{ userId: member.id, role: 'org_admin' }]);
  const app = assertStatus(await post(admin, { slug: slugOf(), name: 'x', launch_url: 'https://x.example.com', owner_organization_id: org, available_app_roles: ['viewer'] }), 201);
  const both = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, member.token, { available_app_roles: ['viewer', 'editor'], default_app_role: 'editor' }), 200);
  assert.equal(both.default_app_role, 'editor');
  assert.deepEqual(both.available_app_roles, ['viewer', 'editor']);
  const renamed = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, member.token, { name: 'Renamed' }), 200);
  assert.equal(renamed.default_app_role, 'editor', 'a field not sent stays as it was');
  assert.equal(assertStatus(await get(admin, app.id), 200).default_app_role, 'editor');
});

test('POST and PATCH /v1/applications refuse an unknown field, at the top or in a permissions entry (422 validation_failed, conventions: "unknown body fields are refused, never silently dropped"); nothing changes', async () => {
  const owner = await person(t);
  const slug = slugOf('unk');
  assertInvalid(await post(admin, base(owner.id, { slug, redirect_uri: 'https://app.example.com/cb' })), 'redirect_uri');
  assertInvalid(await post(admin, base(owner.id, { slug, permissions: [{ key: `app.${slug}.read`, description: 'r', scope: 'x' }] })), 'permissions');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [owner.id]))[0].n, 0);
  const app = assertStatus(await post(admin, base(owner.id, { slug })), 201);
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { name: 'Renamed', redirect_uri: 'https://app.example.com/cb' }), 'redirect_uri');
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { permissions: [{ key: `app.${slug}.read`, description: 'r', scope: 'x' }] }), 'permissions');
  const current = assertStatus(await get(admin, app.id), 200);
  assert.equal(current.name, 'App');
  assert.deepEqual(current.permissions, []);
});

test('PATCH: id and created_at are read-only for the owner and for applications.manage (422 read_only_field naming the field) and nothing changes', async () => {
  const app = await newApp(t, admin);
  for (const cred of [app.owner!.token, admin]) {
    for (const [field, value] of [['id', 'app_other'], ['created_at', '2020-01-01T00:00:00.000Z']] as const) {
      const error = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, cred, { name: 'Renamed', [field]: value }), 422, 'read_only_field');
      assert.deepEqual(error.details.fields, [field]);
    }
  }
  const now = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
  assert.equal(now.id, app.id);
  assert.equal(now.name, 'Test App');
  assert.equal(now.created_at, app.body.created_at);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('PATCH is a partial update, also under concurrency: two PATCHes of one Application at the same time with different fields keep both, and the second application.updated audit row starts from the first one\'s after (on PostgreSQL the two run at once)', async () => {
  for (let round = 0; round < 6; round++) {
    const app = await newApp(t, admin);
    const [a, b] = await Promise.all([
      call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { name: 'Renamed App' }),
      call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { description: 'Now described' }),
    ]);
    assertStatus(a, 200);
    assertStatus(b, 200);
    const stored = assertStatus(await call(t, 'GET', `/v1/applications/${app.id}`, admin), 200);
    assert.deepEqual([stored.name, stored.description], ['Renamed App', 'Now described'], `round ${round}`);
    const audit = await auditOf(t, app.id, 'application.updated');
    assert.equal(audit.length, 2);
    const fromOriginal = audit.filter((r) => r.before.name === 'Test App' && r.before.description === null);
    assert.equal(fromOriginal.length, 1, `round ${round}: only the first change starts from the original`);
    const second = audit.find((r) => r !== fromOriginal[0])!;
    assert.deepEqual(second.before, fromOriginal[0].after, `round ${round}: the second change's before is the first one's after`);
    assert.deepEqual([second.after.name, second.after.description], ['Renamed App', 'Now described']);
  }
});

test('a creation and an ownership move into one Starter Tenant at the same time: "exactly the allowed number succeed" (one Application; the other request is 409 plan_limit_reached, resource applications)', async () => {
  for (let round = 0; round < 6; round++) {
    // The owner's Tenant exists and holds no Application: its first one moved to an Organization.
    const owner = await person(t);
    const first = await newApp(t, admin, { owner_user_id: owner.id });
    const orgId = await createOrg(t, [{ userId: (await person(t)).id, role: 'org_admin' }]);
    assertStatus(await call(t, 'PATCH', `/v1/applications/${first.id}`, admin, { owner_organization_id: orgId }), 200);
    const moving = await newApp(t, admin);
    const [created, moved] = await Promise.all([
      call(t, 'POST', '/v1/applications', admin, { slug: slugOf(), name: 'Second', launch_url: 'https://app.example.com/launch', owner_user_id: owner.id }),
      call(t, 'PATCH', `/v1/applications/${moving.id}`, admin, { owner_user_id: owner.id }),
    ]);
    const succeeded = [created.statusCode === 201, moved.statusCode === 200].filter(Boolean).length;
    assert.equal(succeeded, 1, `round ${round}: ${created.statusCode} ${created.body} / ${moved.statusCode} ${moved.body}`);
    const refused = created.statusCode === 201 ? moved : created;
    assert.equal(assertError(refused, 409, 'plan_limit_reached').details.resource, 'applications');
    const owned = await sql(t, 'SELECT a.id FROM applications a JOIN tenants tn ON tn.id = a.tenant_id WHERE tn.owner_user_id = $1', [owner.id]);
    assert.equal(owned.length, 1, `round ${round}`);
  }
});

// ---- redirect_uris, permissions and launch_url entries refused ---------------------------------------

test('redirect_uris refuse a fragment (RFC 6749 §3.1.2), an empty one (`cb#`) included, on a private-use scheme too: 422 validation_failed naming the entry, on POST and PATCH, and nothing is stored', async () => {
  const owner = await person(t);
  for (const uri of ['https://app.example.com/cb#frag', 'https://app.example.com/cb#', 'com.example.app:/cb#x', 'com.example.app:/cb#']) {
    assertInvalid(await post(admin, base(owner.id, { redirect_uris: ['https://app.example.com/ok', uri] })), 'redirect_uris.1');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [owner.id]))[0].n, 0);
  const app = assertStatus(await post(admin, base(owner.id, { redirect_uris: ['https://app.example.com/ok'] })), 201);
  for (const uri of ['https://app.example.com/cb#frag', 'https://app.example.com/cb#']) {
    assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { redirect_uris: [uri] }), 'redirect_uris.0');
  }
  assert.deepEqual(assertStatus(await get(admin, app.id), 200).redirect_uris, ['https://app.example.com/ok']);
});

test('lists hold no duplicates: a redirect_uris entry or a permissions key listed twice is 422 validation_failed naming the second entry, an available_app_roles name listed twice 422 validation_failed naming available_app_roles, on POST and PATCH, and nothing is stored', async () => {
  const owner = await person(t);
  const slug = slugOf('dup');
  const uri = 'https://app.example.com/cb';
  assertInvalid(await post(admin, base(owner.id, { slug, redirect_uris: [uri, 'https://app.example.com/other', uri] })), 'redirect_uris.2');
  const read = { key: `app.${slug}.read`, description: 'read' };
  assertInvalid(await post(admin, base(owner.id, { slug, permissions: [read, { key: read.key, description: 'again' }] })), 'permissions.1.key');
  assertInvalid(await post(admin, base(owner.id, { slug, available_app_roles: ['viewer', 'editor', 'viewer'] })), 'available_app_roles');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [owner.id]))[0].n, 0);
  const app = assertStatus(await post(admin, base(owner.id, { slug, redirect_uris: [uri], permissions: [read] })), 201);
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { redirect_uris: [uri, uri] }), 'redirect_uris.1');
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { permissions: [read, read] }), 'permissions.1.key');
  assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { available_app_roles: ['viewer', 'viewer'] }), 'available_app_roles');
  const current = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual(current.redirect_uris, [uri]);
  assert.deepEqual(current.permissions, [read]);
  assert.deepEqual(current.available_app_roles, []);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM roles WHERE scope = $1', [app.id]))[0].n, 0);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});

test('a permission sent without its description is stored with an empty description (permissions are `{key, description}`), on POST and PATCH', async () => {
  const slug = slugOf('perm');
  const app = assertStatus(await post(admin, base((await person(t)).id, { slug, permissions: [{ key: `app.${slug}.read` }] })), 201);
  assert.deepEqual(app.permissions, [{ key: `app.${slug}.read`, description: '' }]);
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { permissions: [{ key: `app.${slug}.read` }, { key: `app.${slug}.write`, description: 'w' }] }), 200);
  assert.deepEqual(patched.permissions, [{ key: `app.${slug}.read`, description: '' }, { key: `app.${slug}.write`, description: 'w' }]);
});

test('"no stored URL holds credentials (launch_url included)": a launch_url with a username, a password or both is 422 validation_failed naming launch_url, on POST and PATCH, and nothing changes', async () => {
  const owner = await person(t);
  const bad = ['https://user:pw@app.example.com/launch', 'https://user@app.example.com/launch', 'https://:pw@app.example.com/launch'];
  for (const launch_url of bad) assertInvalid(await post(admin, base(owner.id, { launch_url })), 'launch_url');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [owner.id]))[0].n, 0);
  const app = assertStatus(await post(admin, base(owner.id)), 201);
  for (const launch_url of bad) assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { launch_url }), 'launch_url');
  assert.equal(assertStatus(await get(admin, app.id), 200).launch_url, 'https://app.example.com');
});

test('support_url takes a mailto: address with no `/` in it (docs/decisions.md, URL fields): `mailto:help@example.com/x` and `mailto:a/b@example.com` are 422 validation_failed naming support_url, on POST and PATCH', async () => {
  const owner = await person(t);
  const bad = ['mailto:help@example.com/x', 'mailto:a/b@example.com', 'mailto:help@example.com/'];
  for (const support_url of bad) assertInvalid(await post(admin, base(owner.id, { support_url })), 'support_url');
  const app = assertStatus(await post(admin, base(owner.id, { support_url: 'mailto:help@example.com' })), 201);
  for (const support_url of bad) assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { support_url }), 'support_url');
  assert.equal(assertStatus(await get(admin, app.id), 200).support_url, 'mailto:help@example.com');
});

test('redirect_uris: the loopback exception is http only: on a test_mode Application another scheme to localhost or 127.0.0.1 (ftp, ws) is 422; https://localhost is an https URL, accepted on a live Application', async () => {
  const testKey = await platformKey(t, ['applications.manage'], 'test');
  const testOwner = await person(t, { mode: 'test' });
  for (const uri of ['ftp://localhost/cb', 'ws://127.0.0.1:8080/cb']) {
    assertInvalid(await post(testKey, base(testOwner.id, { redirect_uris: [uri] })), 'redirect_uris.0');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [testOwner.id]))[0].n, 0);
  const live = assertStatus(await post(admin, base((await person(t)).id, { redirect_uris: ['https://localhost/cb', 'https://127.0.0.1:8443/cb'] })), 201);
  assert.equal(live.test_mode, false);
  assert.deepEqual(live.redirect_uris, ['https://localhost/cb', 'https://127.0.0.1:8443/cb']);
});

test('settings_schema: `properties` that is not an object (an array, null, a string) is 422 invalid_settings_schema saying so, and nothing is stored', async () => {
  const owner = await person(t);
  const app = assertStatus(await post(admin, base(owner.id, { settings_schema: { type: 'object', properties: { a: { type: 'string' } } } })), 201);
  for (const properties of [[], null, 'locale', ['locale']]) {
    const error = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { settings_schema: { type: 'object', properties } }), 422, 'invalid_settings_schema');
    assert.equal(error.details.reason, 'properties must be an object');
  }
  assert.deepEqual(assertStatus(await get(admin, app.id), 200).settings_schema, { type: 'object', properties: { a: { type: 'string' } } });
});

test("permissions: a key naming another Application's prefix of the same length (app.<other>.read, xpp.<slug>.read) is 422 validation_failed naming permissions.0.key, on POST and PATCH", async () => {
  const owner = await person(t);
  const slug = slugOf('perm');
  const bad = [`app.${'z'.repeat(slug.length)}.read`, `xpp.${slug}.read`, `app.${slug}xread`];
  for (const key of bad) assertInvalid(await post(admin, base(owner.id, { slug, permissions: [{ key, description: 'x' }] })), 'permissions.0.key');
  const app = assertStatus(await post(admin, base(owner.id, { slug })), 201);
  for (const key of bad) assertInvalid(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { permissions: [{ key, description: 'x' }] }), 'permissions.0.key');
  assert.deepEqual(assertStatus(await get(admin, app.id), 200).permissions, []);
});

test('settings_schema may leave `type` out (only a type other than "object" is refused): a schema of properties alone is accepted on POST and PATCH and stored as sent', async () => {
  const owner = await person(t);
  const schema = { properties: { nickname: { type: 'string' } } };
  const app = assertStatus(await post(admin, base(owner.id, { settings_schema: schema })), 201);
  assert.deepEqual(app.settings_schema, schema);
  const next = { properties: { nickname: { type: 'string' }, volume: { type: 'integer' } } };
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, owner.token, { settings_schema: next }), 200).settings_schema, next);
});
test('PATCH: an owner sending owner_organization_id (or owner_user_id) gets 403 moderation_field_forbidden naming exactly the moderation fields sent; the Application keeps its owner and Tenant', async () => {
  const app = await newApp(t, admin);
  const orgId = await createOrg(t, [{ userId: (await person(t)).id, role: 'org_admin' }]);
  const other = await person(t);
  for (const [body, fields] of [
    [{ owner_organization_id: orgId }, ['owner_organization_id']],
    [{ name: 'n', owner_user_id: other.id, owner_organization_id: orgId }, ['owner_user_id', 'owner_organization_id']],
    [{ review_notes: 'hi', visibility: 'internal' }, ['visibility', 'review_notes']],
  ] as const) {
    const error = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, body), 403, 'moderation_field_forbidden');
    assert.deepEqual(error.details.fields, fields);
  }
  const now = assertStatus(await get(admin, app.id), 200);
  assert.deepEqual([now.owner_user_id, now.owner_organization_id, now.tenant_id, now.name], [app.owner!.id, null, app.tenant_id, 'Test App']);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});
test('PATCH default_app_role: null clears the default (default_app_role is "null or one of available_app_roles"); a PATCH leaving it out keeps it', async () => {
  const app = await newApp(t, admin, { available_app_roles: ['viewer'], default_app_role: 'viewer' });
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { name: 'Kept' }), 200).default_app_role, 'viewer');
  const cleared = assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, app.owner!.token, { default_app_role: null }), 200);
  assert.equal(cleared.default_app_role, null);
  assert.deepEqual(cleared.available_app_roles, ['viewer']);
  assert.equal(assertStatus(await get(admin, app.id), 200).default_app_role, null);
  const audit = await auditOf(t, app.id, 'application.updated');
  assert.deepEqual([audit.at(-1)!.before.default_app_role, audit.at(-1)!.after.default_app_role], ['viewer', null]);
});

test('PATCH: test_mode, updated_at and settings_schema_stats are read-only for the owner and for applications.manage (422 read_only_field naming the field) and nothing changes', async () => {
  const app = await newApp(t, admin);
  for (const cred of [app.owner!.token, admin]) {
    for (const [field, value] of [['test_mode', true], ['updated_at', '2020-01-01T00:00:00.000Z'], ['settings_schema_stats', { stale_override_counts: {} }]] as const) {
      const error = assertError(await call(t, 'PATCH', `/v1/applications/${app.id}`, cred, { name: 'Renamed', [field]: value }), 422, 'read_only_field');
      assert.deepEqual(error.details.fields, [field]);
    }
  }
  assert.deepEqual(assertStatus(await get(admin, app.id), 200), app.body);
  assert.equal((await auditOf(t, app.id, 'application.updated')).length, 0);
});
