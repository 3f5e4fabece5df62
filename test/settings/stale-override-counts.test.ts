// Part B, Application: settings_schema_stats.stale_override_counts "maps key to number of users holding
// overrides that no longer validate". Each AppSettings row carries its stale keys, stamped with the
// schema and the row's updated_at (migration 0041, docs/decisions.md "Settings"): these check the counts
// wherever that stamp could go wrong (a schema PATCH, a user's PATCH, an erasure, rows without a stamp).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, storageName, type TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { assertStatus, call, grant, newApp, person, platformKey, sql, type AppFixture, type Person } from '../access/support.js';
import { SCHEMA } from './support.js';

let t: TestApp;
let admin: string;
const NARROWED = { type: 'object', properties: { density: { type: 'string', enum: ['comfortable'] }, page_size: { type: 'integer', minimum: 50 }, beta: { type: 'boolean' } } };
const DAY = 24 * 3600;

before(async () => {
  t = await buildTestApp();
  admin = await platformKey(t);
});
after(() => t.close());

const patchOverrides = (u: Person, appId: string, overrides: unknown) => call(t, 'PATCH', `/v1/users/me/apps/${appId}/settings`, u.token, { overrides });
const countsOf = async (appId: string) => assertStatus(await call(t, 'GET', `/v1/applications/${appId}`, admin), 200).settings_schema_stats.stale_override_counts;
const patchSchema = async (appId: string, settings_schema: unknown) =>
  assertStatus(await call(t, 'PATCH', `/v1/applications/${appId}`, admin, { settings_schema }), 200).settings_schema_stats.stale_override_counts;

async function appWithUsers(n: number): Promise<{ owned: AppFixture; users: Person[] }> {
  const owned = await newApp(t, admin, { settings_schema: SCHEMA });
  const users: Person[] = [];
  for (let i = 0; i < n; i++) {
    const u = await person(t);
    await grant(t, admin, u.id, owned.id);
    users.push(u);
  }
  return { owned, users };
}

test('stale_override_counts right after a settings_schema PATCH, then after users PATCH their overrides: a user who replaces a stale value is no longer counted, one who changes only another key still is, and a schema accepting the values again counts none', async () => {
  const { owned, users: [a, b, c] } = await appWithUsers(3);
  assertStatus(await patchOverrides(a, owned.id, { density: 'compact', page_size: 20 }), 200);
  assertStatus(await patchOverrides(b, owned.id, { density: 'compact' }), 200);
  assertStatus(await patchOverrides(c, owned.id, { density: 'comfortable', page_size: 60 }), 200);
  assert.deepEqual(await countsOf(owned.id), {});

  assert.deepEqual(await patchSchema(owned.id, NARROWED), { density: 2, page_size: 1 }, 'the PATCH answer');
  assert.deepEqual(await countsOf(owned.id), { density: 2, page_size: 1 }, 'the GET right after it');

  // a replaces its stale density: only its page_size is stale now.
  assertStatus(await patchOverrides(a, owned.id, { density: 'comfortable' }), 200);
  assert.deepEqual(await countsOf(owned.id), { density: 1, page_size: 1 });
  // b sets another key and keeps its stale density: still counted.
  assertStatus(await patchOverrides(b, owned.id, { beta: true }), 200);
  assert.deepEqual(await countsOf(owned.id), { density: 1, page_size: 1 });
  // a removes its stale page_size (null removes a key); c's values were valid all along.
  assertStatus(await patchOverrides(a, owned.id, { page_size: null }), 200);
  assert.deepEqual(await countsOf(owned.id), { density: 1 });

  assert.deepEqual(await patchSchema(owned.id, SCHEMA), {}, 'the first schema accepts every value held');
  assert.deepEqual(await countsOf(owned.id), {});
  assert.deepEqual(await patchSchema(owned.id, {}), { density: 3, page_size: 1, beta: 1 }, 'an empty schema accepts no key');
  assert.deepEqual(await countsOf(owned.id), { density: 3, page_size: 1, beta: 1 });
});

test("stale_override_counts after an erasure: the cascade removes the erased user's AppSettings, so that user no longer counts among the users holding overrides that no longer validate", async () => {
  const { owned, users: [kept, erased] } = await appWithUsers(2);
  for (const u of [kept, erased]) assertStatus(await patchOverrides(u, owned.id, { density: 'compact' }), 200);
  assert.deepEqual(await patchSchema(owned.id, NARROWED), { density: 2 });
  assertStatus(await call(t, 'POST', `/v1/users/${erased.id}/erasure-requests`, admin, {}), 202);
  t.clock.advance(7 * DAY + 1);
  await t.deps.jobs.runNow('erasure-cascade');
  assert.equal((await sql(t, 'SELECT 1 FROM app_settings WHERE user_id = $1', [erased.id])).length, 0);
  assert.deepEqual(await countsOf(owned.id), { density: 1 });
  // (users.manage: the user's own token expired with the 7 days.)
  assertStatus(await call(t, 'PATCH', `/v1/users/${kept.id}/apps/${owned.id}/settings`, admin, { overrides: { density: 'comfortable' } }), 200);
  assert.deepEqual(await countsOf(owned.id), {});
});

test('stale_override_counts counts rows stored before migration 0041 (no stale keys recorded) and rows the release before it wrote during a deploy (overrides changed, stale keys not) by the values they hold, until a schema PATCH judges them again', async () => {
  const { owned, users: [old, rewritten, current] } = await appWithUsers(3);
  for (const u of [old, rewritten, current]) assertStatus(await patchOverrides(u, owned.id, { density: 'comfortable' }), 200);
  assert.deepEqual(await patchSchema(owned.id, NARROWED), {});
  // As 0041 leaves a row written before it.
  await sql(t, 'UPDATE app_settings SET overrides = $2, stale_keys = NULL, stale_schema = NULL, stale_at = NULL WHERE user_id = $1', [old.id, JSON.stringify({ density: 'compact', page_size: 20 })]);
  // As the release before 0041 writes a row (its upsert sets overrides and updated_at only).
  await sql(t, 'UPDATE app_settings SET overrides = $2, updated_at = $3 WHERE user_id = $1', [rewritten.id, JSON.stringify({ density: 'compact' }), new Date(Date.now() + 1000)]);
  assert.deepEqual(await countsOf(owned.id), { density: 2, page_size: 1 });
  // A user's PATCH of another key judges the whole unstamped row: its stale values stay counted.
  assertStatus(await patchOverrides(rewritten, owned.id, { beta: false }), 200);
  assert.deepEqual(await countsOf(owned.id), { density: 2, page_size: 1 });
  assert.deepEqual(await patchSchema(owned.id, { ...NARROWED, properties: { ...NARROWED.properties, page_size: { type: 'integer', minimum: 10 } } }), { density: 2 });
  assert.deepEqual(await countsOf(owned.id), { density: 2 });
  const stamped = await sql<{ n: number }>(t, 'SELECT count(*)::int AS n FROM app_settings WHERE application_id = $1 AND stale_at = updated_at', [owned.id]);
  assert.equal(stamped[0].n, 3, 'the schema PATCH recorded every row\'s stale keys');
});

if (storageName === 'postgres') test("stale_override_counts after a settings_schema PATCH that waited for a user's AppSettings write to the same row: the PATCH judges the overrides that write committed, not the ones it found before. PostgreSQL only: the embedded database runs one transaction at a time", async () => {
  const { owned, users: [u] } = await appWithUsers(1);
  assertStatus(await patchOverrides(u, owned.id, { density: 'compact' }), 200);
  const narrowedToCompact = { ...NARROWED, properties: { ...NARROWED.properties, density: { type: 'string', enum: ['compact'] } } };
  const res = await commitWhileWaiting(
    t,
    [['UPDATE app_settings SET overrides = $2, updated_at = $3 WHERE user_id = $1', [u.id, JSON.stringify({ density: 'comfortable' }), new Date(Date.now() + 1000)]]],
    () => call(t, 'PATCH', `/v1/applications/${owned.id}`, admin, { settings_schema: narrowedToCompact }),
  );
  assert.deepEqual(assertStatus(res, 200).settings_schema_stats.stale_override_counts, { density: 1 });
  assert.deepEqual(await countsOf(owned.id), { density: 1 });
});
