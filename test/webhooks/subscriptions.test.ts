// Webhook subscriptions (Part B Webhooks): scope per caller, visibility, plan limits, PATCH rules,
// delete, rotate-secret and the audit rows of every write.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { atOneInstant, storageName, type TestApp } from '../helpers/app.js';
import { blockedBy, client, commitWhileWaiting, endedOrWaiting, withDeadlockCount } from '../helpers/locks.js';
import { createApiKey } from '../helpers/fixtures.js';
import { appKey, assertError, assertStatus, buildApp, call, createWebhook, newApp, person, platformKey, sql, type AppFixture } from './support.js';

let t: TestApp;
let admin: string;
let app: AppFixture;
before(async () => {
  t = await buildApp();
  admin = await platformKey(t);
  app = await newApp(t, admin);
});
after(() => t.close());

const url = (label: string) => `http://127.0.0.1:9/${label}`;
const SUB_KEYS = ['api_version', 'consecutive_failures', 'created_at', 'description', 'events', 'id', 'last_delivery_at', 'scope', 'status', 'test_mode', 'updated_at', 'url'];

test('POST /v1/webhooks: 201 with the Webhook subscription fields and a whsec_ signing secret shown only on create', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: url('a'), events: ['access.granted', 'access.revoked'], description: 'ops' });
  assert.deepEqual(Object.keys(sub).sort(), [...SUB_KEYS, 'signing_secret'].sort());
  assert.match(sub.id, /^whk_[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.match(sub.signing_secret, /^whsec_[A-Za-z0-9_-]{43}$/);
  assert.equal(sub.status, 'healthy');
  assert.equal(sub.api_version, '2026-01-01');
  assert.equal(sub.test_mode, false);
  assert.equal(sub.consecutive_failures, 0);
  assert.equal(sub.last_delivery_at, null);
  const fetched = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 200);
  assert.equal(fetched.signing_secret, undefined, 'the secret is never shown again');
  assert.deepEqual(Object.keys(fetched).sort(), SUB_KEYS);
  const listed = assertStatus(await call(t, 'GET', '/v1/webhooks?scope=platform', admin), 200);
  assert.ok(listed.data.some((w: any) => w.id === sub.id && w.signing_secret === undefined), 'listed.data.some((w: any) => w.id === sub.id && w.signing_secret === undefined)');
});

test('GET /v1/webhooks lists the visible subscriptions; its scope and status filters keep only the matching ones', async () => {
  const platformSub = await createWebhook(t, admin, { scope: 'platform', url: url('list-p') });
  const appSub = await createWebhook(t, admin, { scope: app.id, url: url('list-a') });
  const ids = async (query: string) => (assertStatus(await call(t, 'GET', `/v1/webhooks?${query}`, admin), 200).data as any[]);
  const ofApp = await ids(`scope=${app.id}&limit=100`);
  assert.ok(ofApp.some((w) => w.id === appSub.id) && ofApp.every((w) => w.scope === app.id), 'scope=<application_id>: that scope only');
  const ofPlatform = await ids('scope=platform&limit=100');
  assert.ok(ofPlatform.some((w) => w.id === platformSub.id) && ofPlatform.every((w) => w.scope === 'platform'), 'scope=platform: platform only');
  await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = now() WHERE id = $1`, [appSub.id]);
  const disabled = await ids('status=disabled&limit=100');
  assert.ok(disabled.some((w) => w.id === appSub.id) && disabled.every((w) => w.status === 'disabled'), 'status=disabled: disabled only');
  assert.ok(!(await ids('status=healthy&limit=100')).some((w) => w.id === appSub.id), 'status=healthy leaves the disabled one out');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = ANY($1)', [[platformSub.id, appSub.id]]);
});

test('scope: an app-scoped key may omit scope or pass its own Application; another scope is 403 forbidden', async () => {
  const other = await newApp(t, admin);
  const key = await appKey(t, other.id);
  const omitted = await createWebhook(t, key, { url: url('k1') });
  assert.equal(omitted.scope, other.id);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [omitted.id]); // Starter: one per Tenant
  const own = await createWebhook(t, key, { scope: other.id, url: url('k2') });
  assert.equal(own.scope, other.id);
  assertError(await call(t, 'POST', '/v1/webhooks', key, { scope: 'platform', url: url('k3'), events: ['*'] }), 403, 'forbidden');
  assertError(await call(t, 'POST', '/v1/webhooks', key, { scope: app.id, url: url('k4'), events: ['*'] }), 403, 'forbidden');
});

test("scope: an Application owner's User token must pass the Application id; platform, another app or no scope are refused with 403 forbidden (\"anything else 403 forbidden\")", async () => {
  const mine = await newApp(t, admin);
  const sub = await createWebhook(t, mine.owner.token, { scope: mine.id, url: url('o1') });
  assert.equal(sub.scope, mine.id);
  assertError(await call(t, 'POST', '/v1/webhooks', mine.owner.token, { scope: 'platform', url: url('o2'), events: ['*'] }), 403, 'forbidden');
  assertError(await call(t, 'POST', '/v1/webhooks', mine.owner.token, { scope: app.id, url: url('o3'), events: ['*'] }), 403, 'forbidden');
  assertError(await call(t, 'POST', '/v1/webhooks', mine.owner.token, { url: url('o4'), events: ['*'] }), 403, 'forbidden');
  const stranger = await person(t);
  assertError(await call(t, 'POST', '/v1/webhooks', stranger.token, { scope: mine.id, url: url('o5'), events: ['*'] }), 403, 'forbidden');
  const noManage = await platformKey(t, ['users.list']);
  assertError(await call(t, 'POST', '/v1/webhooks', noManage, { scope: 'platform', url: url('o6'), events: ['*'] }), 403, 'forbidden');
});

test("scope of an Organization's Application: its owners are the Organization's active org_admins (\"Owner means the owner_user_id user or any org_admin of owner_organization_id\"): an org admin creates, lists and fetches its subscription; a plain member and a pending org_admin get 403 forbidden and 404", async () => {
  const orgAdmin = await person(t);
  const member = await person(t);
  const pendingAdmin = await person(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgAdmin.token, { name: 'Hook owners' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgAdmin.token, { email: member.email }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members/me/accept`, member.token, {}), 200);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, orgAdmin.token, { email: pendingAdmin.email, role: 'org_admin' }), 201);
  const slug = `whorg${Date.now()}`;
  const owned = assertStatus(await call(t, 'POST', '/v1/applications', admin, { slug, name: `App ${slug}`, launch_url: `https://${slug}.example.com/`, owner_organization_id: org.id }), 201);

  const sub = await createWebhook(t, orgAdmin.token, { scope: owned.id, url: url('org-owner') });
  assert.equal(sub.scope, owned.id);
  assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, orgAdmin.token), 200);
  assert.ok(assertStatus(await call(t, 'GET', '/v1/webhooks', orgAdmin.token), 200).data.some((w: any) => w.id === sub.id), 'the org admin lists it');
  for (const who of [member, pendingAdmin]) {
    assertError(await call(t, 'POST', '/v1/webhooks', who.token, { scope: owned.id, url: url('org-not-owner'), events: ['*'] }), 403, 'forbidden');
    assertError(await call(t, 'GET', `/v1/webhooks/${sub.id}`, who.token), 404, 'webhook_not_found');
    assert.ok(!assertStatus(await call(t, 'GET', '/v1/webhooks', who.token), 200).data.some((w: any) => w.id === sub.id), 'not listed for a non-owner');
  }
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('scope: webhooks.manage passes platform or any application_id (unknown Application: 404)', async () => {
  const manager = await person(t, { roles: ['superadmin'] });
  const target = await newApp(t, admin);
  assert.equal((await createWebhook(t, manager.token, { scope: 'platform', url: url('m1') })).scope, 'platform');
  assert.equal((await createWebhook(t, manager.token, { scope: target.id, url: url('m2') })).scope, target.id);
  assertError(await call(t, 'POST', '/v1/webhooks', manager.token, { scope: 'app_nope', url: url('m3'), events: ['*'] }), 404, 'application_not_found');
});

test('scope: webhooks.manage "passes `platform` or any application_id"; sending no scope is "anything else 403 forbidden" (a platform key and a User token), and nothing is created', async () => {
  const manager = await person(t, { roles: ['superadmin'] });
  for (const cred of [admin, manager.token]) {
    assertError(await call(t, 'POST', '/v1/webhooks', cred, { url: url('no-scope'), events: ['*'] }), 403, 'forbidden');
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE url = $1', [url('no-scope')]))[0].n, 0);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'webhook.created' AND after->>'url' = $1`, [url('no-scope')]))[0].n, 0);
});

test("others' subscriptions are 404 webhook_not_found on every {id} route, and absent from their list", async () => {
  const a = await newApp(t, admin);
  const b = await newApp(t, admin);
  const sub = await createWebhook(t, a.owner.token, { scope: a.id, url: url('v1') });
  const keyB = await appKey(t, b.id);
  for (const cred of [b.owner.token, keyB]) {
    for (const [method, path, body] of [
      ['GET', `/v1/webhooks/${sub.id}`],
      ['PATCH', `/v1/webhooks/${sub.id}`, { description: 'x' }],
      ['DELETE', `/v1/webhooks/${sub.id}`],
      ['POST', `/v1/webhooks/${sub.id}/rotate-secret`],
      ['POST', `/v1/webhooks/${sub.id}/test`],
      ['GET', `/v1/webhooks/${sub.id}/deliveries`],
      ['POST', `/v1/webhooks/${sub.id}/deliveries/dlv_x/redeliver`],
    ] as const) {
      assertError(await call(t, method, path, cred, body), 404, 'webhook_not_found');
    }
    const list = assertStatus(await call(t, 'GET', '/v1/webhooks', cred), 200);
    assert.ok(!list.data.some((w: any) => w.id === sub.id), '!list.data.some((w: any) => w.id === sub.id)');
  }
  assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, await appKey(t, a.id)), 200);
  assertError(await call(t, 'GET', '/v1/webhooks', null), 401, 'unauthenticated');
});

test('events: one or more known types or *; unknown types and an empty list are 422', async () => {
  assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: url('e1'), events: [] }), 422, 'validation_failed');
  assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: url('e2'), events: ['user.renamed'] }), 422, 'validation_failed');
  assert.deepEqual((await createWebhook(t, admin, { scope: 'platform', url: url('e3'), events: ['*'] })).events, ['*']);
});

test('plan limits: Starter allows 1 subscription per Tenant (409 plan_limit_reached), Team 10, a restricted Tenant 402; platform scope counts against none', async () => {
  const starter = await newApp(t, admin);
  await createWebhook(t, admin, { scope: starter.id, url: url('p1') });
  const capped = assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: starter.id, url: url('p2'), events: ['*'] }), 409, 'plan_limit_reached');
  assert.equal(capped.details.resource, 'webhooks');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE application_id = $1', [starter.id]))[0].n, 1);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'webhook.created' AND application_id = $1`, [starter.id]))[0].n, 1, 'the refused create wrote nothing');

  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [starter.tenantId]);
  for (let i = 2; i <= 10; i++) await createWebhook(t, admin, { scope: starter.id, url: url(`p${i}`) });
  assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: starter.id, url: url('p11'), events: ['*'] }), 409, 'plan_limit_reached');

  await sql(t, `UPDATE tenants SET restricted = true WHERE id = $1`, [starter.tenantId]);
  assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: starter.id, url: url('p12'), events: ['*'] }), 402, 'subscription_required');
  await createWebhook(t, admin, { scope: 'platform', url: url('p13') });
});

test('plan limits are "per Tenant across its Applications": a Team Tenant with two Applications holding 6 and 4 subscriptions refuses an 11th on either with 409 plan_limit_reached (resource webhooks)', async () => {
  const first = await newApp(t, admin);
  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [first.tenantId]);
  const second = await newApp(t, admin, first.owner);
  assert.equal(second.tenantId, first.tenantId, 'one Tenant holds both Applications');
  for (let i = 0; i < 6; i++) await createWebhook(t, admin, { scope: first.id, url: url(`across-a${i}`) });
  for (let i = 0; i < 4; i++) await createWebhook(t, admin, { scope: second.id, url: url(`across-b${i}`) });
  for (const scope of [first.id, second.id]) {
    const capped = assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope, url: url(`across-11-${scope}`), events: ['*'] }), 409, 'plan_limit_reached');
    assert.deepEqual([capped.details.resource, capped.details.limit, capped.details.current], ['webhooks', 10, 10]);
  }
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE application_id = ANY($1)', [[first.id, second.id]]))[0].n, 10);
});

test('plan limits: "Webhook subscriptions per Tenant | 1" on Starter counts a disabled subscription (it can be re-enabled by PATCH): the second is 409 plan_limit_reached with current 1; once the disabled one is deleted it no longer counts and the next is 201', async () => {
  const starter = await newApp(t, admin);
  const first = await createWebhook(t, admin, { scope: starter.id, url: url('dis1') });
  await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = $2, disabled_reason = 'gone' WHERE id = $1`, [first.id, t.clock.now()]);
  const capped = assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: starter.id, url: url('dis2'), events: ['*'] }), 409, 'plan_limit_reached');
  assert.deepEqual([capped.details.resource, capped.details.limit, capped.details.current, capped.details.tenant_id], ['webhooks', 1, 1, starter.tenantId]);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE application_id = $1', [starter.id]))[0].n, 1, 'nothing was created');

  assert.equal((await call(t, 'DELETE', `/v1/webhooks/${first.id}`, admin)).statusCode, 204);
  const next = await createWebhook(t, admin, { scope: starter.id, url: url('dis3') });
  assert.deepEqual((await sql(t, 'SELECT id FROM webhook_subscriptions WHERE application_id = $1', [starter.id])).map((r) => r.id), [next.id]);
});

test('PATCH: url, events, description and api_version change; scope and test_mode are read-only (422 read_only_field); status only disabled → healthy', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: url('u1') });
  const patched = assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { url: url('u2'), events: ['user.suspended'], description: 'new', api_version: '2026-01-01' }), 200);
  assert.equal(patched.url, url('u2'));
  assert.deepEqual(patched.events, ['user.suspended']);
  assert.equal(patched.description, 'new');
  for (const field of ['scope', 'test_mode']) {
    const err = assertError(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { [field]: field === 'scope' ? 'platform' : true }), 422, 'read_only_field');
    assert.deepEqual(err.details.fields, [field]);
  }
  assertError(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { api_version: '2020-01-01' }), 422, 'validation_failed');
  assertError(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'disabled' }), 422, 'validation_failed');
  assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'healthy' }), 200); // already healthy: no change

  await sql(t, `UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 3, unhealthy_since = $2 WHERE id = $1`, [sub.id, t.clock.now()]);
  assertError(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'healthy' }), 409, 'invalid_status_transition');

  await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = $2 WHERE id = $1`, [sub.id, t.clock.now()]);
  const healed = assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'healthy' }), 200);
  assert.equal(healed.status, 'healthy');
  assert.equal(healed.consecutive_failures, 0, 'counters reset');
  const audit = await sql(t, `SELECT action, actor_type, before, after FROM audit_events WHERE target_id = $1 AND action = 'webhook.updated' ORDER BY created_at, id`, [sub.id]);
  assert.ok(audit.length >= 2, 'audit.length >= 2');
  const last = audit[audit.length - 1];
  assert.equal(last.before.status, 'disabled');
  assert.equal(last.after.status, 'healthy');
});

test('PATCH "change url, events, …": a PATCH of events alone or of url alone changes that field (response, GET and a webhook.updated audit row each)', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: url('single1'), events: ['user.suspended'] });
  for (const [field, value] of [['events', ['access.revoked']], ['url', url('single2')]] as const) {
    const patched = assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { [field]: value }), 200);
    assert.deepEqual(patched[field], value, field);
    assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 200)[field], value, `${field} (GET)`);
  }
  const audit = await sql(t, `SELECT after FROM audit_events WHERE target_id = $1 AND action = 'webhook.updated' ORDER BY created_at, id`, [sub.id]);
  assert.deepEqual(audit.map((r) => JSON.stringify([r.after.events, r.after.url])).sort(), [JSON.stringify([['access.revoked'], url('single1')]), JSON.stringify([['access.revoked'], url('single2')])]);
});

test('PATCH that changes nothing (same values, or status healthy on a healthy subscription): 200 with the subscription as it is, no webhook.updated audit row, updated_at kept', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: url('n1'), events: ['user.suspended'], description: 'same' });
  t.clock.advance(60);
  for (const body of [{ status: 'healthy' }, { url: url('n1'), events: ['user.suspended'], description: 'same', api_version: sub.api_version }]) {
    const res = assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, body), 200);
    assert.equal(res.updated_at, sub.updated_at, JSON.stringify(body));
  }
  const audit = await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE target_id = $1 AND action = 'webhook.updated'`, [sub.id]);
  assert.equal(audit[0].n, 0, 'no-op PATCHes write no audit row');
  assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { description: 'changed' }), 200);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE target_id = $1 AND action = 'webhook.updated'`, [sub.id]))[0].n, 1, 'a change is audited once');
});

test('rotate-secret: 200 {id, signing_secret, previous_secret_expires_at} 24 hours ahead; audited without the secrets', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: url('r1') });
  const instant = t.clock.now();
  const res = assertStatus(await atOneInstant(t, () => call(t, 'POST', `/v1/webhooks/${sub.id}/rotate-secret`, admin), instant), 200);
  assert.deepEqual(Object.keys(res).sort(), ['id', 'previous_secret_expires_at', 'signing_secret']);
  assert.notEqual(res.signing_secret, sub.signing_secret);
  assert.equal(res.previous_secret_expires_at, new Date(instant.getTime() + 24 * 3600 * 1000).toISOString(), '"secret rotation overlap 24 hours", exactly');
  const [row] = await sql(t, `SELECT before, after FROM audit_events WHERE target_id = $1 AND action = 'webhook.secret_rotated'`, [sub.id]);
  assert.ok(row, 'row');
  assert.equal(row.after.previous_secret_expires_at, res.previous_secret_expires_at);
  assert.doesNotMatch(JSON.stringify(row), /whsec_/);
});

test('Idempotency-Key on create and rotate-secret: "a retry with the same key returns the original result" (one subscription, one rotation); another body with the key is 422', async () => {
  const key = { 'idempotency-key': `wh-${Date.now()}-${Math.random()}` };
  const body = { scope: 'platform', url: url('idem'), events: ['access.revoked'] };
  const first = await call(t, 'POST', '/v1/webhooks', admin, body, key);
  const created = assertStatus(first, 201);
  const again = await call(t, 'POST', '/v1/webhooks', admin, body, key);
  assert.equal(again.statusCode, 201);
  assert.equal(again.body, first.body);
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE url = $1', [url('idem')]))[0].n, 1);
  assertError(await call(t, 'POST', '/v1/webhooks', admin, { ...body, url: url('idem-2') }, key), 422, 'idempotency_key_reused');
  const rotateKey = { 'idempotency-key': `rot-${created.id}` };
  const rotated = assertStatus(await call(t, 'POST', `/v1/webhooks/${created.id}/rotate-secret`, admin, undefined, rotateKey), 200);
  const replayed = assertStatus(await call(t, 'POST', `/v1/webhooks/${created.id}/rotate-secret`, admin, undefined, rotateKey), 200);
  assert.equal(replayed.signing_secret, rotated.signing_secret);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE target_id = $1 AND action = 'webhook.secret_rotated'`, [created.id]))[0].n, 1);
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('plan limits: a subscription created for an Application while its ownership moves into a Team Tenant one below its 10 webhooks is counted by the move (PostgreSQL): 201 for the subscription, 409 plan_limit_reached (resource webhooks) for the move, at once, and the Tenant keeps 10', async () => {
  const moving = await newApp(t, admin);
  const target = await newApp(t, admin);
  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = ANY($1::text[])`, [[moving.tenantId, target.tenantId]]);
  await createWebhook(t, admin, { scope: moving.id, url: url('race0') });
  for (let i = 1; i <= 9; i++) await createWebhook(t, admin, { scope: target.id, url: url(`race${i}`) });
  const [holder, watcher] = [await client(t), await client(t)];
  try {
    // The Application's Tenant is held: the creation has read the Application and waits for it
    // before it counts that Tenant's subscriptions, while the move runs.
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE', [moving.tenantId]);
    const holderPid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const { result: [created, moved], victims } = await withDeadlockCount(t, async () => {
      const creating = call(t, 'POST', '/v1/webhooks', admin, { scope: moving.id, url: url('race10'), events: ['*'] });
      const creationPid = await blockedBy(watcher, holderPid, 'the creation');
      const movingReq = call(t, 'PATCH', `/v1/applications/${moving.id}`, admin, { owner_user_id: target.owner.id });
      // The move either ends at once (the new subscription uncounted) or waits for the creation.
      await endedOrWaiting(watcher, movingReq, [holderPid, creationPid], [creationPid], 'the move');
      await holder.query('ROLLBACK');
      return Promise.all([creating, movingReq]);
    });
    assert.equal(victims, 0, 'no deadlock: neither ran again as a deadlock victim after deadlock_timeout');
    assertStatus(created, 201);
    assert.equal(assertError(moved, 409, 'plan_limit_reached').details.resource, 'webhooks');
    const [row] = await sql(t, 'SELECT tenant_id FROM applications WHERE id = $1', [moving.id]);
    assert.equal(row.tenant_id, moving.tenantId, 'the Application stays where it was');
    const counts = await sql(t, `SELECT a.tenant_id, count(*)::int AS n FROM webhook_subscriptions w JOIN applications a ON a.id = w.application_id
      WHERE a.tenant_id = ANY($1::text[]) GROUP BY a.tenant_id`, [[moving.tenantId, target.tenantId]]);
    assert.deepEqual(Object.fromEntries(counts.map((c) => [c.tenant_id, c.n])), { [moving.tenantId]: 2, [target.tenantId]: 9 });
  } finally {
    await holder.end();
    await watcher.end();
  }
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('"Owner means the owner_user_id user": a DELETE, rotate-secret or PATCH by an Application\'s owner that waits for its subscription while an ownership move to another user commits answers 404 webhook_not_found and changes nothing (the right is read again under the lock) (PostgreSQL)', async () => {
  const writes: [string, (id: string) => [string, string, Record<string, unknown>?]][] = [
    ['DELETE', (id) => ['DELETE', `/v1/webhooks/${id}`]],
    ['rotate-secret', (id) => ['POST', `/v1/webhooks/${id}/rotate-secret`]],
    ['PATCH', (id) => ['PATCH', `/v1/webhooks/${id}`, { description: 'changed' }]],
  ];
  for (const [name, request] of writes) {
    const moving = await newApp(t, admin);
    const heir = await person(t);
    const sub = await createWebhook(t, moving.owner.token, { scope: moving.id, url: url(`own-${name}`) });
    const rowOf = async () => (await sql(t, 'SELECT signing_secret, description, updated_at FROM webhook_subscriptions WHERE id = $1', [sub.id]))[0];
    const before = await rowOf();
    // The move commits while the old owner's write waits for the subscription the test holds.
    const [method, path, body] = request(sub.id);
    const res = await commitWhileWaiting(t, [
      ['SELECT 1 FROM webhook_subscriptions WHERE id = $1 FOR UPDATE', [sub.id]],
      ['UPDATE applications SET owner_user_id = $2 WHERE id = $1', [moving.id, heir.id]],
    ], () => call(t, method, path, moving.owner.token, body));
    assertError(res, 404, 'webhook_not_found');
    assert.deepEqual(await rowOf(), before, `${name}: the subscription is unchanged`);
    const audited = await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE target_id = $1 AND action <> 'webhook.created'`, [sub.id]);
    assert.equal(audited[0].n, 0, `${name}: nothing audited`);
    assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, heir.token), 200);
  }
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('scope: "an Application owner\'s User token must pass the Application id … anything else 403 forbidden": a create by the owner that waits for the Application while an ownership move to another user commits answers 403 forbidden and creates nothing (the right is read again under the lock) (PostgreSQL)', async () => {
  const moving = await newApp(t, admin);
  const heir = await person(t);
  // The move commits while the old owner's create waits for the Application the test holds.
  const res = await commitWhileWaiting(t, [
    ['SELECT 1 FROM applications WHERE id = $1 FOR UPDATE', [moving.id]],
    ['UPDATE applications SET owner_user_id = $2 WHERE id = $1', [moving.id, heir.id]],
  ], () => call(t, 'POST', '/v1/webhooks', moving.owner.token, { scope: moving.id, url: url('own-create'), events: ['*'] }));
  assertError(res, 403, 'forbidden');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE application_id = $1', [moving.id]))[0].n, 0, 'nothing was created');
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'webhook.created' AND application_id = $1`, [moving.id]))[0].n, 0, 'nothing audited');
  // The heir, now its owner, creates one as before.
  await createWebhook(t, heir.token, { scope: moving.id, url: url('heir-create') });
});

test('plan limits: "Webhook subscriptions per Tenant | 1" on Starter counts each mode apart (docs/decisions.md, Webhook subscriptions per Tenant: "each mode\'s are counted apart, as each mode\'s requests see them"): beside a live subscription a test-mode key creates one, the next test-mode one is 409 plan_limit_reached (current 1), and the usage document (live) counts the live one only', async () => {
  const starter = await newApp(t, admin);
  await createWebhook(t, admin, { scope: starter.id, url: url('mode-live') });
  const testKey = await appKey(t, starter.id, [], 'test');
  const testSub = await createWebhook(t, testKey, { url: url('mode-test1') });
  assert.equal(testSub.test_mode, true);
  const capped = assertError(await call(t, 'POST', '/v1/webhooks', testKey, { url: url('mode-test2'), events: ['*'] }), 409, 'plan_limit_reached');
  assert.deepEqual([capped.details.resource, capped.details.limit, capped.details.current], ['webhooks', 1, 1]);
  assertError(await call(t, 'POST', '/v1/webhooks', admin, { scope: starter.id, url: url('mode-live2'), events: ['*'] }), 409, 'plan_limit_reached');
  const usage = assertStatus(await call(t, 'GET', `/v1/tenants/${starter.tenantId}/usage`, starter.owner.token), 200);
  assert.deepEqual(usage.limits.webhooks, { limit: 1, current: 1 });
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions WHERE application_id = $1', [starter.id]))[0].n, 2);
});

// Two transactions at once need PostgreSQL: only the PostgreSQL pass registers this test.
if (storageName === 'postgres') test('"Owner means the owner_user_id user": a test call or redelivery by an Application\'s owner that waits for its subscription while an ownership move to another user commits answers 404 webhook_not_found and queues nothing (the right is read again under the lock) (PostgreSQL)', async () => {
  for (const name of ['test', 'redeliver']) {
    const moving = await newApp(t, admin);
    const heir = await person(t);
    const sub = await createWebhook(t, moving.owner.token, { scope: moving.id, url: url(`own-${name}`) });
    const first = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, moving.owner.token), 202);
    const path = name === 'test' ? `/v1/webhooks/${sub.id}/test` : `/v1/webhooks/${sub.id}/deliveries/${first.id}/redeliver`;
    const count = async () => (await sql(t, 'SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = $1', [sub.id]))[0].n;
    const before = await count();
    // The move commits while the old owner's call waits for the subscription the test holds.
    const res = await commitWhileWaiting(t, [
      ['SELECT 1 FROM webhook_subscriptions WHERE id = $1 FOR UPDATE', [sub.id]],
      ['UPDATE applications SET owner_user_id = $2 WHERE id = $1', [moving.id, heir.id]],
    ], () => call(t, 'POST', path, moving.owner.token));
    assertError(res, 404, 'webhook_not_found');
    assert.equal(await count(), before, `${name}: no delivery queued`);
    const audited = await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE target_id = $1 AND action IN ('webhook.test_sent', 'webhook.redelivered')`, [sub.id]);
    assert.equal(audited[0].n, 1, `${name}: only the first test call audited`);
    assertStatus(await call(t, 'POST', path, heir.token), 202);
  }
});

test('DELETE: 204, audited webhook.deleted, and its queued retries are dropped', async () => {
  const sub = await createWebhook(t, admin, { scope: 'platform', url: url('d1') });
  await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin);
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = $1 AND status = 'pending'`, [sub.id]))[0].n, 1);
  const agent = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], restrictDestructive: true })).secret;
  assertError(await call(t, 'DELETE', `/v1/webhooks/${sub.id}`, agent), 403, 'destructive_operation_restricted');
  assert.equal((await call(t, 'DELETE', `/v1/webhooks/${sub.id}`, admin)).statusCode, 204);
  assertError(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 404, 'webhook_not_found');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = $1', [sub.id]))[0].n, 0);
  const [audit] = await sql(t, `SELECT actor_type, before FROM audit_events WHERE target_id = $1 AND action = 'webhook.deleted'`, [sub.id]);
  assert.equal(audit.before.id, sub.id);
});

if (storageName === 'postgres') test('DELETE "queued retries dropped, nothing new enqueued" (PostgreSQL): a test call or a redelivery meeting a DELETE of its subscription answers 404 webhook_not_found (until 2026-11-30 a bare 500), and queues or audits nothing', async () => {
  for (const op of ['test', 'redeliver'] as const) {
    const sub = await createWebhook(t, admin, { scope: 'platform', url: url(`race-${op}`) });
    const first = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
    await sql(t, `UPDATE webhook_deliveries SET status = 'failed' WHERE id = $1`, [first.id]);
    const path = op === 'test' ? `/v1/webhooks/${sub.id}/test` : `/v1/webhooks/${sub.id}/deliveries/${first.id}/redeliver`;
    // The DELETE holds the subscription's row (uncommitted) when the call arrives, and commits while the call waits for it.
    const res = await commitWhileWaiting(t, [['DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]]], () => call(t, 'POST', path, admin));
    assertError(res, 404, 'webhook_not_found');
    assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = $1', [sub.id]))[0].n, 0, `${op}: nothing queued`);
    const audited = await sql(t, `SELECT action FROM audit_events WHERE target_id = $1 AND action IN ('webhook.test_sent', 'webhook.redelivered')`, [sub.id]);
    assert.deepEqual(audited.map((r) => r.action), ['webhook.test_sent'], `${op}: only the first test call is audited`);
  }
});

test('writes audit webhook.created with actor, target, Application and Tenant, in the same transaction as the row', async () => {
  const owned = await newApp(t, admin);
  const key = await appKey(t, owned.id);
  const sub = await createWebhook(t, key, { url: url('c1') });
  const [row] = await sql(t, `SELECT * FROM audit_events WHERE target_id = $1 AND action = 'webhook.created'`, [sub.id]);
  assert.equal(row.actor_type, 'api_key');
  assert.equal(row.via_api_key_id, row.actor_id);
  assert.equal(row.target_type, 'webhook');
  assert.equal(row.application_id, owned.id);
  assert.equal(row.tenant_id, owned.tenantId);
  assert.equal(row.after.id, sub.id);
  assert.equal(row.after.signing_secret, undefined);
  const [stored] = await sql(t, 'SELECT created_at FROM webhook_subscriptions WHERE id = $1', [sub.id]);
  assert.equal(row.created_at.getTime(), stored.created_at.getTime());
});

test('test-mode keys create test-mode subscriptions, invisible to live callers', async () => {
  const testKey = await platformKey(t, ['webhooks.manage'], 'test');
  const sub = await createWebhook(t, testKey, { scope: 'platform', url: url('t1') });
  assert.equal(sub.test_mode, true);
  assertError(await call(t, 'GET', `/v1/webhooks/${sub.id}`, admin), 404, 'webhook_not_found');
  assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, testKey), 200);
});

test('plan limits: "plan_limit_reached | 409 | A plan cap (… webhooks) would be exceeded" also by an ownership move that brings subscriptions into a Tenant at its cap; nothing moves', async () => {
  const moving = await newApp(t, admin);
  const target = await newApp(t, admin);
  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [target.tenantId]);
  await createWebhook(t, admin, { scope: moving.id, url: url('mv0') });
  for (let i = 1; i <= 10; i++) await createWebhook(t, admin, { scope: target.id, url: url(`mv${i}`) });

  const capped = assertError(await call(t, 'PATCH', `/v1/applications/${moving.id}`, admin, { owner_user_id: target.owner.id }), 409, 'plan_limit_reached');
  assert.equal(capped.details.resource, 'webhooks');
  const [row] = await sql(t, 'SELECT tenant_id, owner_user_id FROM applications WHERE id = $1', [moving.id]);
  assert.deepEqual([row.tenant_id, row.owner_user_id], [moving.tenantId, moving.owner.id], 'the Application stays where it was');
  assert.equal((await sql(t, `SELECT count(*)::int AS n FROM audit_events WHERE action = 'application.updated' AND target_id = $1`, [moving.id]))[0].n, 0, 'the refused move wrote nothing');

  // Below the cap the move goes through, subscriptions and all.
  await sql(t, `DELETE FROM webhook_subscriptions WHERE id IN (SELECT id FROM webhook_subscriptions WHERE application_id = $1 LIMIT 1)`, [target.id]);
  const moved = assertStatus(await call(t, 'PATCH', `/v1/applications/${moving.id}`, admin, { owner_user_id: target.owner.id }), 200);
  assert.equal(moved.tenant_id, target.tenantId);
});
