import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { exportJWK, generateKeyPair } from 'jose';
import { openTestDatabase, testConfig, type TestApp } from '../helpers/app.js';
import { createApiKey } from '../helpers/fixtures.js';
import { SystemClock } from '../../src/clock.js';
import type { Config } from '../../src/config.js';
import { boot } from '../../src/boot.js';
import { SecretBox } from '../../src/auth/secret-box.js';
import { loadMigrations, migrate } from '../../src/db/migrate.js';
import type { Database, Db } from '../../src/db/types.js';
import { pathApplicationIds } from '../../src/outbox/emit.js';

// Upgrades of a populated database: a database migrated by the release just before a migration,
// holding rows as that release wrote them, then the rest of the migrations (as `migrate` at start-up).

/** A fresh database migrated up to (not including) `version`; `seed` writes the old release's rows; then every migration. */
async function upgradedFrom(t: TestContext, version: string, seed: (db: Db) => Promise<void>): Promise<{ database: Database; db: Db }> {
  const { database, drop } = await openTestDatabase();
  t.after(async () => {
    await database.close();
    await drop();
  });
  const all = loadMigrations();
  const k = all.findIndex((m) => m.version.startsWith(`${version}_`));
  assert.ok(k > 0, `migration ${version} exists`);
  await migrate(database, all.slice(0, k));
  const db = database.scoped('system');
  await seed(db);
  assert.deepEqual(await migrate(database, all), all.slice(k).map((m) => m.version), 'the upgrade applies every later migration');
  return { database, db };
}

const rows = async (db: Db, text: string, params: unknown[] = []) => (await db.query<any>(text, params)).rows;

/** Boots the service on the upgraded database (as buildTestApp does), closed after the test. */
async function bootOn(t: TestContext, database: Database, overrides: Partial<Config> = {}) {
  const clock = new SystemClock();
  const { app, deps } = await boot({ config: testConfig(overrides), database, clock, logger: false, compileSchemas: 'on-first-use' });
  t.after(async () => {
    await app.close();
    await deps.jobs.stop();
  });
  await app.ready();
  return { app, clock, database };
}

// Rows as the early releases wrote them (columns of 0001–0016).
const T0 = '2026-01-01T00:00:00.000Z';
async function user(db: Db, id: string, mode: 'live' | 'test' = 'live') {
  await db.query(`INSERT INTO users (id, email, status, test_mode, created_at, updated_at) VALUES ($1, $2, 'active', $3, $4, $4)`, [id, `${id}@example.com`, mode === 'test', T0]);
}
async function application(db: Db, id: string) {
  await db.query(`INSERT INTO tenants (id, owner_type, plan, created_at, updated_at) VALUES ($1, 'user', 'starter', $2, $2) ON CONFLICT DO NOTHING`, ['tnt_upgrade', T0]);
  await db.query(`INSERT INTO applications (id, slug, name, launch_url, tenant_id, created_at, updated_at) VALUES ($1, $1, $1, 'https://example.com', 'tnt_upgrade', $2, $2)`, [id, T0]);
}
async function grant(db: Db, id: string, app: string, owner: { user?: string; org?: string }, extra: { status?: string; scope?: string; overrides?: string[] } = {}) {
  await db.query(
    `INSERT INTO entitlements (id, user_id, organization_id, application_id, status, source, starts_at, member_scope, member_overrides, test_mode, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, 'admin_grant', $6, $7, $8, false, $6, $6)`,
    [id, owner.user ?? null, owner.org ?? null, app, extra.status ?? 'active', T0, owner.org ? (extra.scope ?? 'all_members') : null, extra.overrides ?? null],
  );
}

test('0015_access_states_recorded: every access state recorded before the upgrade holds as of the upgrade (updated_at is now, not the time of its last flip)', async (t) => {
  let before = new Date(0);
  const { db } = await upgradedFrom(t, '0015', async (db) => {
    await db.query(`INSERT INTO access_states (user_id, application_id, allowed, updated_at) VALUES ('usr_a', 'app_a', true, $1), ('usr_b', 'app_a', false, $1)`, [T0]);
    before = (await rows(db, 'SELECT now() AS now'))[0].now;
  });
  const states = await rows(db, 'SELECT user_id, allowed, updated_at FROM access_states ORDER BY user_id');
  assert.deepEqual(states.map((s) => [s.user_id, s.allowed]), [['usr_a', true], ['usr_b', false]], 'the states themselves are kept');
  for (const s of states) assert.ok(s.updated_at.getTime() >= before.getTime(), `${s.user_id}: ${s.updated_at.toISOString()} is the upgrade's time`);
});

test("0017_outbox_path_applications: an unrelayed user.* or organization.member_* event written before the upgrade is routed to the Applications its user has an access path to (the service's own rule); relayed, app-scoped and other events stay null", async (t) => {
  const { db } = await upgradedFrom(t, '0017', async (db) => {
    for (const u of ['usr_p', 'usr_q']) await user(db, u);
    for (const a of ['app_personal', 'app_revoked', 'app_org', 'app_allow_other', 'app_deny', 'app_seat', 'app_pending']) await application(db, a);
    await db.query(`INSERT INTO organizations (id, name, created_by, test_mode, created_at, updated_at) VALUES ('org_a', 'A', 'usr_q', false, $1, $1), ('org_b', 'B', 'usr_q', false, $1, $1)`, [T0]);
    await db.query(`INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at) VALUES ('org_a', 'usr_p', 'member', 'active', $1), ('org_b', 'usr_p', 'member', 'pending', $1)`, [T0]);
    await grant(db, 'ent_personal', 'app_personal', { user: 'usr_p' });
    await grant(db, 'ent_revoked', 'app_revoked', { user: 'usr_p' }, { status: 'revoked' });
    await grant(db, 'ent_org', 'app_org', { org: 'org_a' });
    await grant(db, 'ent_allow_other', 'app_allow_other', { org: 'org_a' }, { scope: 'allowlist', overrides: ['usr_q'] });
    await grant(db, 'ent_deny', 'app_deny', { org: 'org_a' }, { scope: 'denylist', overrides: ['usr_p'] });
    await grant(db, 'ent_seat', 'app_seat', { org: 'org_a' });
    await grant(db, 'ent_pending', 'app_pending', { org: 'org_b' });
    await db.query(`INSERT INTO org_seat_limits (entitlement_id, user_id, created_at) VALUES ('ent_seat', 'usr_p', $1)`, [T0]);
    const event = (id: string, type: string, app: string | null, relayed: boolean) =>
      db.query(`INSERT INTO outbox_events (id, type, application_id, test_mode, data, created_at, relayed_at) VALUES ($1, $2, $3, false, $4, $5, $6)`,
        [id, type, app, JSON.stringify({ user_id: 'usr_p' }), T0, relayed ? T0 : null]);
    await event('wev_user', 'user.updated', null, false);
    await event('wev_member', 'organization.member_added', null, false);
    await event('wev_relayed', 'user.updated', null, true);
    await event('wev_app', 'user.updated', 'app_personal', false);
    await event('wev_access', 'access.granted', null, false);
  });
  const paths = Object.fromEntries((await rows(db, 'SELECT id, path_application_ids FROM outbox_events')).map((r) => [r.id, r.path_application_ids?.slice().sort() ?? null]));
  const expected = (await db.transaction((tx) => pathApplicationIds(tx, 'usr_p'))).slice().sort();
  assert.deepEqual(expected, ['app_org', 'app_personal', 'app_revoked'], 'the rule today: a personal grant in any status, an including grant of an active membership');
  assert.deepEqual(paths, { wev_user: expected, wev_member: expected, wev_relayed: null, wev_app: null, wev_access: null });
});

test('0021_seed_role_timestamps: the seed Roles stamped with now() to the microsecond carry the millisecond their list cursor names', async (t) => {
  const { database, db } = await upgradedFrom(t, '0021', async (db) => {
    await db.query(`UPDATE roles SET created_at = '2026-01-01T00:00:00.123789Z', updated_at = '2026-01-02T00:00:00.456999Z' WHERE seed`);
  });
  const seeds = await rows(db, `SELECT id, to_char(created_at AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS c, to_char(updated_at AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS u FROM roles WHERE seed`);
  assert.equal(seeds.length, 4);
  for (const s of seeds) assert.deepEqual([s.c, s.u], ['00:00:00.123000', '00:00:00.456000'], `${s.id}: the millisecond a cursor (JavaScript Date) names`);
  const booted = await bootOn(t, database);
  const key = await createApiKey(booted as unknown as TestApp, { permissions: ['roles.manage'] });
  const get = async (url: string) => {
    const res = await booted.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${key.secret}` } });
    assert.equal(res.statusCode, 200, res.body);
    return res.json();
  };
  const member = await get('/v1/roles/role_platform_member');
  assert.deepEqual([member.created_at, member.updated_at], ['2026-01-01T00:00:00.123Z', '2026-01-02T00:00:00.456Z'], 'the API shows what the release before showed');
  const all = (await get('/v1/roles?limit=100')).data.map((r: { id: string }) => r.id);
  const walked: string[] = [];
  let cursor: string | null = null;
  do {
    const page = await get(`/v1/roles?limit=1${cursor ? `&cursor=${cursor}` : ''}`);
    walked.push(...page.data.map((r: { id: string }) => r.id));
    cursor = page.page.next_cursor;
  } while (cursor && walked.length <= all.length);
  assert.deepEqual(walked, all, 'one Role at a time, every seed Role exactly once');
});

test('0022_signing_key_publication: a signing key made before the upgrade signs from its creation (signs_from = created_at, never null)', async (t) => {
  const created = '2026-01-01T00:00:00.000Z';
  const { db } = await upgradedFrom(t, '0022', async (db) => {
    await db.query(`INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at, retired_at) VALUES ('k_old', 'RS256', '{}', '{}', $1, $2), ('k_new', 'RS256', '{}', '{}', $2, NULL)`, [created, '2026-02-01T00:00:00.000Z']);
  });
  const keys = await rows(db, 'SELECT kid, signs_from, created_at FROM signing_keys ORDER BY kid');
  assert.deepEqual(keys.map((k) => [k.kid, k.signs_from.toISOString()]), [['k_new', '2026-02-01T00:00:00.000Z'], ['k_old', created]]);
  const [col] = await rows(db, `SELECT is_nullable FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'signing_keys' AND column_name = 'signs_from'`);
  assert.equal(col.is_nullable, 'NO');
});

test('0023_created_at_milliseconds: every created_at column holds milliseconds after the upgrade, and a row stamped to the microsecond before it is rounded to its millisecond', async (t) => {
  const { db } = await upgradedFrom(t, '0023', async (db) => {
    await db.query(`INSERT INTO users (id, email, status, test_mode, created_at, updated_at) VALUES ('usr_us', 'us@example.com', 'active', false, '2026-01-01T00:00:00.123789Z', '2026-01-01T00:00:00.123789Z')`);
  });
  const wide = await rows(db, `SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() AND column_name = 'created_at' AND (data_type <> 'timestamp with time zone' OR datetime_precision > 3) ORDER BY 1`);
  assert.deepEqual(wide.map((r) => r.table_name), [], 'no created_at column keeps microseconds (tables made after 0023 included)');
  const [u] = await rows(db, `SELECT to_char(created_at AT TIME ZONE 'UTC', 'SS.US') AS c FROM users WHERE id = 'usr_us'`);
  assert.equal(u.c, '00.124000');
});

test('0024_private_key_text: signing keys stored before the upgrade (a JWK object in the clear, or a sealed value as a JSON string) still sign after it: the service boots on the database, publishes both and keeps them sealed at rest', async (t) => {
  const encryptionKey = randomBytes(32);
  const box = new SecretBox(null as unknown as Database, new SystemClock(), [encryptionKey]);
  const pair = async (kid: string) => {
    const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
    return { pub: JSON.stringify({ ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' }), priv: JSON.stringify({ ...(await exportJWK(privateKey)), kid, alg: 'RS256' }) };
  };
  const clear = await pair('key_clear_before_0024');
  const sealed = await pair('key_sealed_before_0024');
  const { database, db } = await upgradedFrom(t, '0024', async (db) => {
    await db.query(`DELETE FROM signing_keys`);
    const insert = `INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at, signs_from) VALUES ($1, 'RS256', $2, $3, now() - interval '1 hour', now() - interval '1 hour')`;
    await db.query(insert, ['key_clear_before_0024', clear.pub, clear.priv]);
    await db.query(insert, ['key_sealed_before_0024', sealed.pub, JSON.stringify(box.seal(sealed.priv, 'signing_key:key_sealed_before_0024'))]);
  });
  const stored = async () => Object.fromEntries((await rows(db, 'SELECT kid, private_jwk FROM signing_keys')).map((r) => [r.kid, r.private_jwk]));
  const upgraded = await stored();
  assert.deepEqual(JSON.parse(upgraded.key_clear_before_0024), JSON.parse(clear.priv), 'the JWK as its JSON text');
  assert.match(upgraded.key_sealed_before_0024, /^enc:v1:[^"]*$/, 'the sealed string itself, not its JSON');
  const { app } = await bootOn(t, database, { encryptionKeys: [encryptionKey] });
  const jwks = (await app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).json();
  assert.deepEqual(jwks.keys.map((k: any) => k.kid).sort(), ['key_clear_before_0024', 'key_sealed_before_0024'], 'both keys made before the upgrade are published');
  for (const [kid, value] of Object.entries(await stored()) as [string, string][]) {
    assert.match(value, /^enc:v1:/, `${kid} sealed at start`);
    assert.deepEqual(JSON.parse(box.open(value, `signing_key:${kid}`)), JSON.parse(kid === 'key_clear_before_0024' ? clear.priv : sealed.priv));
  }
});

test('0030_status_subscription_backfill: a Tenant whose linked subscription set its status before 0029 records it; one whose newer checkout has no event of its subscription yet, or with no applied subscription event, stays null', async (t) => {
  const { db } = await upgradedFrom(t, '0030', async (db) => {
    const tenant = (id: string, status: string, sub: string | null) =>
      db.query(`INSERT INTO tenants (id, owner_type, plan, subscription_status, stripe_subscription_id, created_at, updated_at) VALUES ($1, 'user', 'starter', $2, $3, $4, $4)`, [id, status, sub, T0]);
    const event = (id: string, tenantId: string, type: string, receivedAt: string, outcome = 'applied') =>
      db.query(`INSERT INTO processor_events (id, type, created, tenant_id, outcome, received_at) VALUES ($1, $2, $3, $4, $5, $3)`, [id, type, receivedAt, tenantId, outcome]);
    await tenant('tnt_canceled', 'canceled', 'sub_canceled');
    await event('evt_1', 'tnt_canceled', 'customer.subscription.created', '2026-01-01T00:00:00Z');
    await event('evt_2', 'tnt_canceled', 'customer.subscription.deleted', '2026-01-02T00:00:00Z');
    await tenant('tnt_active', 'active', 'sub_active');
    await event('evt_3', 'tnt_active', 'customer.subscription.updated', '2026-01-01T00:00:00Z');
    await event('evt_4', 'tnt_active', 'checkout.session.completed', '2026-01-01T00:00:00Z');
    await tenant('tnt_rechecked', 'canceled', 'sub_new');
    await event('evt_5', 'tnt_rechecked', 'customer.subscription.deleted', '2026-01-01T00:00:00Z');
    await event('evt_6', 'tnt_rechecked', 'checkout.session.completed', '2026-01-02T00:00:00Z');
    await tenant('tnt_stale_only', 'active', 'sub_stale');
    await event('evt_7', 'tnt_stale_only', 'customer.subscription.updated', '2026-01-01T00:00:00Z', 'stale');
    await tenant('tnt_none', 'none', null);
  });
  const recorded = Object.fromEntries((await rows(db, 'SELECT id, status_subscription_id FROM tenants')).map((r) => [r.id, r.status_subscription_id]));
  assert.deepEqual(recorded, { tnt_canceled: 'sub_canceled', tnt_active: 'sub_active', tnt_rechecked: null, tnt_stale_only: null, tnt_none: null });
});

test("0031_role_assignments_mode: every assignment made before the upgrade carries its holder's mode (test_mode NOT NULL), and a later one takes it from the database", async (t) => {
  const { db } = await upgradedFrom(t, '0031', async (db) => {
    await user(db, 'usr_live');
    await user(db, 'usr_test', 'test');
    await db.query(`INSERT INTO role_assignments (user_id, role_id, assigned_at) VALUES ('usr_live', 'role_platform_member', $1), ('usr_test', 'role_platform_member', $1), ('usr_test', 'role_platform_support', $1)`, [T0]);
  });
  const held = await rows(db, 'SELECT user_id, role_id, test_mode FROM role_assignments ORDER BY user_id, role_id');
  assert.deepEqual(held.map((r) => [r.user_id, r.role_id, r.test_mode]), [
    ['usr_live', 'role_platform_member', false],
    ['usr_test', 'role_platform_member', true],
    ['usr_test', 'role_platform_support', true],
  ]);
  await user(db, 'usr_later', 'test');
  await db.query(`INSERT INTO role_assignments (user_id, role_id, assigned_at) VALUES ('usr_later', 'role_platform_member', $1)`, [T0]);
  assert.equal((await rows(db, `SELECT test_mode FROM role_assignments WHERE user_id = 'usr_later'`))[0].test_mode, true);
});

test("0036_profile_updated_at: a Profile keeps the updated_at it showed before the upgrade (the later of its own and its Settings row's), so no client sees it go back", async (t) => {
  const { database, db } = await upgradedFrom(t, '0036', async (db) => {
    for (const u of ['usr_theme', 'usr_name']) await user(db, u);
    const profile = (u: string, at: string) => db.query(`INSERT INTO profiles (user_id, display_name, updated_at) VALUES ($1, $1, $2)`, [u, at]);
    const settings = (u: string, at: string) => db.query(`INSERT INTO settings (user_id, updated_at) VALUES ($1, $2)`, [u, at]);
    await profile('usr_theme', '2026-01-01T00:00:00.000Z');
    await settings('usr_theme', '2026-03-01T00:00:00.000Z');
    await profile('usr_name', '2026-04-01T00:00:00.000Z');
    await settings('usr_name', '2026-02-01T00:00:00.000Z');
  });
  const shown = await rows(db, 'SELECT user_id, updated_at FROM profiles ORDER BY user_id');
  assert.deepEqual(shown.map((p) => [p.user_id, p.updated_at.toISOString()]), [
    ['usr_name', '2026-04-01T00:00:00.000Z'],
    ['usr_theme', '2026-03-01T00:00:00.000Z'],
  ]);
  const booted = await bootOn(t, database);
  const key = await createApiKey(booted as unknown as TestApp, { permissions: ['users.list', 'users.manage'] });
  const read = await booted.app.inject({ method: 'GET', url: '/v1/users/usr_theme/profile', headers: { authorization: `Bearer ${key.secret}` } });
  assert.equal(read.statusCode, 200, read.body);
  assert.equal(read.json().updated_at, '2026-03-01T00:00:00.000Z', 'GET /v1/users/{id}/profile shows what it showed before the upgrade');
});

test("0041_app_settings_stale_keys: overrides stored before the upgrade carry no stale keys, and settings_schema_stats.stale_override_counts still counts the users holding overrides that no longer validate (judged on read; the read writes nothing)", async (t) => {
  const { database, db } = await upgradedFrom(t, '0041', async (db) => {
    for (const u of ['usr_stale', 'usr_fine']) await user(db, u);
    await user(db, 'usr_test_mode', 'test');
    await application(db, 'app_settings_0041');
    await db.query(`UPDATE applications SET settings_schema = $2 WHERE id = $1`, ['app_settings_0041', JSON.stringify({ type: 'object', properties: { density: { enum: ['comfortable'] } } })]);
    const overrides = (u: string, value: object) =>
      db.query(`INSERT INTO app_settings (user_id, application_id, overrides, updated_at) VALUES ($1, 'app_settings_0041', $2, $3)`, [u, JSON.stringify(value), T0]);
    await overrides('usr_stale', { density: 'compact', retired: 1 });
    await overrides('usr_fine', { density: 'comfortable' });
    await overrides('usr_test_mode', { density: 'compact' });
  });
  const booted = await bootOn(t, database);
  const key = await createApiKey(booted as unknown as TestApp, { scope: 'platform', permissions: ['applications.manage'] });
  const read = await booted.app.inject({ method: 'GET', url: '/v1/applications/app_settings_0041', headers: { authorization: `Bearer ${key.secret}` } });
  assert.equal(read.statusCode, 200, read.body);
  assert.deepEqual(read.json().settings_schema_stats.stale_override_counts, { density: 1, retired: 1 }, "the live users' rows, by what they hold");
  assert.deepEqual(await rows(db, 'SELECT user_id FROM app_settings WHERE stale_keys IS NOT NULL OR stale_schema IS NOT NULL OR stale_at IS NOT NULL'), []);
});
