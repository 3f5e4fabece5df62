// Applications (Part B): creation, the owner's Tenant, slugs, plan limits, and the field rules of POST
// and PATCH (redirect_uris, permissions, app roles, settings_schema, URL fields, limits at their boundaries).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { assertError, assertInvalid, assertStatus, auditOf, call, createOrg, newApp, person, platformKey, rand, slugOf, sql } from './support.js';
import { applicationCalls, base } from './applications-support.js';

let t: TestApp;
let admin: string;
before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const { post, get } = applicationCalls(() => t);

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

// ---- URL fields ----------------------------------------------------------------------------------

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

test('redirect_uris: the loopback exception is http only: on a test_mode Application another scheme to localhost or 127.0.0.1 (ftp, ws) is 422; an https URL to a loopback host is a test_mode Application\'s too (OA-3 "localhost only on a test_mode app"): on a live one it is 422 on create and PATCH, and nothing is stored', async () => {
  const testKey = await platformKey(t, ['applications.manage'], 'test');
  const testOwner = await person(t, { mode: 'test' });
  for (const uri of ['ftp://localhost/cb', 'ws://127.0.0.1:8080/cb']) {
    assertInvalid(await post(testKey, base(testOwner.id, { redirect_uris: [uri] })), 'redirect_uris.0');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [testOwner.id]))[0].n, 0);
  const loopbacks = ['https://localhost/cb', 'https://127.0.0.1:8443/cb', 'https://app.localhost/cb', 'https://localhost./cb', 'https://127.1/cb', 'https://2130706433/cb', 'https://[::1]/cb', 'https://[::ffff:127.0.0.1]/cb', 'https://0.0.0.0/cb'];
  const liveOwner = await person(t);
  for (const uri of loopbacks) {
    assertInvalid(await post(admin, base(liveOwner.id, { redirect_uris: ['https://app.example.com/cb', uri] })), 'redirect_uris.1');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM applications WHERE owner_user_id = $1', [liveOwner.id]))[0].n, 0);
  const live = await newApp(t, admin);
  const before = (await sql(t, 'SELECT redirect_uris FROM applications WHERE id = $1', [live.id]))[0].redirect_uris;
  for (const uri of loopbacks) assertInvalid(await call(t, 'PATCH', `/v1/applications/${live.id}`, admin, { redirect_uris: [uri] }), 'redirect_uris.0');
  assert.deepEqual((await sql(t, 'SELECT redirect_uris FROM applications WHERE id = $1', [live.id]))[0].redirect_uris, before);
  // A host that merely starts or ends like one is no loopback host.
  const near = ['https://localhost.example.com/cb', 'https://127.0.0.1.example.com/cb', 'https://mylocalhost/cb'];
  assert.deepEqual(assertStatus(await call(t, 'PATCH', `/v1/applications/${live.id}`, admin, { redirect_uris: near }), 200).redirect_uris, near);
  const onTest = assertStatus(await post(testKey, base(testOwner.id, { redirect_uris: ['https://localhost/cb', 'https://127.0.0.1:8443/cb'] })), 201);
  assert.equal(onTest.test_mode, true);
  assert.deepEqual(onTest.redirect_uris, ['https://localhost/cb', 'https://127.0.0.1:8443/cb']);
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
