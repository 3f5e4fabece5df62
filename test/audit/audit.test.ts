// The audit log (Part B Audit): rows written with their change (actor, target, scope ids,
// before/after, request id), read-only (no write route; append-only in the database), filters,
// visibility per caller, the hot window and its header.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { createApiKey, login } from '../helpers/fixtures.js';
import { seedOrganization, seedTenant } from '../tenancy/support.js';
import { appKey, assertError, assertStatus, buildApp, call, DAY, emitEvent, grant, newApp, person, platformKey, Receiver, runDelivery, sql, type AppFixture } from '../webhooks/support.js';

let t: TestApp;
let admin: string;
let viewer: string;
let app: AppFixture;
before(async () => {
  t = await buildApp();
  admin = await platformKey(t);
  viewer = await platformKey(t, ['audit.view']);
  app = await newApp(t, admin);
});
after(() => t.close());

const EVENT_KEYS = ['action', 'actor', 'after', 'application_id', 'before', 'id', 'organization_id', 'request_id', 'target', 'target_user_id', 'tenant_id', 'timestamp'];
const list = (cred: string, query = '') => call(t, 'GET', `/v1/audit-events${query ? `?${query}` : ''}`, cred);
/** The Audit-Hot-Window-Start header is `expected` (ms), give or take the real time the call took. */
function near(res: Awaited<ReturnType<typeof list>>, expected: number): void {
  const got = Date.parse(String(res.headers['audit-hot-window-start']));
  assert.ok(Math.abs(got - expected) < 5000, `Audit-Hot-Window-Start ${res.headers['audit-hot-window-start']} vs ${new Date(expected).toISOString()}`);
}
const ids = async (cred: string, query: string) => assertStatus(await list(cred, query), 200).data.map((e: any) => e.id);

test('a User change is audited with actor user, target, organization_id, after and the request id', async () => {
  const user = await person(t);
  const res = await call(t, 'POST', '/v1/organizations', user.token, { name: 'Audited Org' });
  const org = assertStatus(res, 201);
  const [row] = await sql(t, `SELECT id FROM audit_events WHERE action = 'organization.created' AND target_id = $1`, [org.id]);
  const event = assertStatus(await call(t, 'GET', `/v1/audit-events/${row.id}`, viewer), 200);
  assert.deepEqual(Object.keys(event).sort(), EVENT_KEYS);
  assert.match(event.id, /^evt_/);
  assert.deepEqual(event.actor, { type: 'user', id: user.id, via_api_key_id: null });
  assert.deepEqual(event.target, { type: 'organization', id: org.id });
  assert.equal(event.organization_id, org.id);
  assert.equal(event.request_id, res.headers['request-id']);
  assert.equal(event.after.name, 'Audited Org');
  assert.equal(event.before, null);
  assert.equal(event.timestamp, org.created_at, 'written with the change, at the same instant');
});

test('an API key change is audited with actor api_key and via_api_key_id, target_user_id, application_id and tenant_id', async () => {
  const key = await createApiKey(t, { scope: 'platform', permissions: ['entitlements.manage'] });
  const user = await person(t);
  const ent = await grant(t, key.secret, user.id, app.id);
  const [row] = await sql(t, `SELECT id FROM audit_events WHERE action = 'entitlement.granted' AND target_id = $1`, [ent.id]);
  const event = assertStatus(await call(t, 'GET', `/v1/audit-events/${row.id}`, viewer), 200);
  assert.deepEqual(event.actor, { type: 'api_key', id: key.id, via_api_key_id: key.id });
  assert.deepEqual(event.target, { type: 'entitlement', id: ent.id });
  assert.equal(event.target_user_id, user.id);
  assert.equal(event.application_id, app.id);
  assert.equal(event.tenant_id, app.tenantId);
  assert.equal(event.after.id, ent.id);
});

test('an event about an Application carries that Application\'s tenant_id also when its change names no Tenant (entitlement.disabled)', async () => {
  const user = await person(t);
  const ent = await grant(t, admin, user.id, app.id);
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${ent.id}`, admin, { status: 'disabled', disabled_reason: 'chargeback' }), 200);
  const [row] = await sql(t, `SELECT id FROM audit_events WHERE action = 'entitlement.disabled' AND target_id = $1`, [ent.id]);
  assert.ok(row, 'entitlement.disabled written');
  const event = assertStatus(await call(t, 'GET', `/v1/audit-events/${row.id}`, viewer), 200);
  assert.equal(event.application_id, app.id);
  assert.equal(event.tenant_id, app.tenantId);
});

test('a system change (a 410 from a receiver disabling a subscription) is audited with actor system and before/after', async () => {
  const receiver = await Receiver.start();
  try {
    const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/gone'), events: ['user.deleted'] }), 201);
    receiver.routes.set('/gone', (_req, res) => res.writeHead(410).end());
    await emitEvent(t, 'user.deleted', { user_id: 'usr_sys' });
    await runDelivery(t);
    const { data } = assertStatus(await list(viewer, `target_id=${sub.id}&actor_type=system`), 200);
    assert.equal(data.length, 1);
    assert.equal(data[0].action, 'webhook.status_changed');
    assert.deepEqual(data[0].actor, { type: 'system', id: null, via_api_key_id: null });
    assert.equal(data[0].before.status, 'healthy');
    assert.equal(data[0].after.status, 'disabled');
    assert.equal(data[0].request_id, null);
  } finally {
    await receiver.close();
  }
});

test('a refused change writes no audit row (the row and its audit commit or roll back together)', async () => {
  const before = (await sql(t, 'SELECT count(*)::int AS n FROM audit_events'))[0].n;
  assertError(await call(t, 'POST', '/v1/applications', admin, { slug: 'dup', name: 'x', launch_url: 'https://x.example.com', owner_user_id: app.owner.id }), 409, 'plan_limit_reached');
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'http://127.0.0.1:9/x', events: ['*'] }), 201);
  assertError(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'healthy', scope: 'x' }), 422, 'read_only_field');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM audit_events'))[0].n, before + 1, 'only webhook.created');

  // And the other way round: when the audit insert fails, the change it records is rolled back.
  await sql(t, `CREATE FUNCTION fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                  IF NEW.action = 'webhook.created' THEN RAISE EXCEPTION 'audit refused'; END IF; RETURN NEW; END $$`);
  await sql(t, 'CREATE TRIGGER fail_audit BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION fail_audit()');
  try {
    const count = async () => (await sql(t, 'SELECT count(*)::int AS n FROM webhook_subscriptions'))[0].n;
    const subs = await count();
    assert.equal((await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: 'http://127.0.0.1:9/y', events: ['*'] })).statusCode, 500);
    assert.equal(await count(), subs, 'no subscription without its audit row');
  } finally {
    await sql(t, 'DROP TRIGGER fail_audit ON audit_events');
    await sql(t, 'DROP FUNCTION fail_audit()');
  }
});

test('"Effects in one transaction": a server error injected after the change, its audit row and its first events were written (the outbox insert of its resource event fails) leaves no change, no audit row and no event; an Idempotency-Key retry then runs the change once (suspend, role assignment, entitlement grant)', async () => {
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${app.id}`, admin, { available_app_roles: ['auditee'] }), 200);
  const roleId = `role_${app.id.slice('app_'.length)}_auditee`;
  const other = await person(t);
  const rows = async () => ({
    audit: (await sql(t, `SELECT action FROM audit_events WHERE target_user_id = ANY($1) ORDER BY created_at, id`, [[user.id, other.id]])).map((r) => r.action),
    events: (await sql(t, `SELECT type FROM outbox_events WHERE coalesce(data->>'user_id', data->'entitlement'->>'user_id') = ANY($1) ORDER BY created_at, id`, [[user.id, other.id]])).map((r) => r.type),
  });
  const before = await rows();
  const steps: [string, () => ReturnType<typeof call>, number][] = [
    ['user.suspended', () => call(t, 'POST', `/v1/users/${user.id}/suspend`, admin, {}, { 'idempotency-key': 'fail-suspend' }), 200],
    ['role.assigned', () => call(t, 'POST', `/v1/users/${other.id}/roles/${roleId}`, admin, {}, { 'idempotency-key': 'fail-assign' }), 201],
    ['entitlement.granted', () => call(t, 'POST', `/v1/users/${other.id}/entitlements`, admin, { application_id: app.id, source: 'admin_grant' }, { 'idempotency-key': 'fail-grant' }), 201],
  ];
  const failOn = (type: string) => sql(t, `CREATE OR REPLACE FUNCTION fail_outbox() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                  IF NEW.type = '${type}' THEN RAISE EXCEPTION 'outbox refused'; END IF; RETURN NEW; END $$`);
  await failOn('none');
  await sql(t, 'CREATE TRIGGER fail_outbox BEFORE INSERT ON outbox_events FOR EACH ROW EXECUTE FUNCTION fail_outbox()');
  try {
    for (const [type, request] of steps) {
      await failOn(type);
      assert.equal((await request()).statusCode, 500, `${type}: the outbox insert fails`);
      assert.deepEqual(await rows(), before, `${type}: no audit row and no event (access.* included) outlive the failed transaction`);
    }
  } finally {
    await sql(t, 'DROP TRIGGER fail_outbox ON outbox_events');
    await sql(t, 'DROP FUNCTION fail_outbox()');
  }
  assert.equal(assertStatus(await call(t, 'GET', `/v1/users/${user.id}`, admin), 200).status, 'active', 'the suspension rolled back');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM role_assignments WHERE user_id = $1 AND role_id = $2', [other.id, roleId]))[0].n, 0, 'the assignment rolled back');
  assert.equal((await sql(t, 'SELECT count(*)::int AS n FROM entitlements WHERE user_id = $1', [other.id]))[0].n, 0, 'the grant rolled back');
  // The 500 released each key: the retry runs the change once, and a second retry replays it.
  for (const [, request, status] of steps) {
    assertStatus(await request(), status);
    const replay = await request();
    assert.equal(replay.statusCode, status);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
  }
  const after = await rows();
  assert.deepEqual(after.audit.slice(before.audit.length), ['user.suspended', 'role.assigned', 'entitlement.granted']);
  assert.deepEqual(after.events.slice(before.events.length).sort(), ['access.granted', 'access.revoked', 'entitlement.granted', 'role.assigned', 'user.suspended']);
});

test('no write path: POST, PUT, PATCH and DELETE are refused; the database keeps rows append-only (only snapshot redaction and test-mode purge)', async () => {
  for (const [method, url] of [['POST', '/v1/audit-events'], ['PUT', '/v1/audit-events'], ['PATCH', '/v1/audit-events/evt_x'], ['DELETE', '/v1/audit-events/evt_x'], ['PUT', '/v1/audit-events/evt_x']]) {
    const res = await call(t, method, url, admin, method === 'DELETE' ? undefined : {});
    assert.ok([404, 405].includes(res.statusCode), `${method} ${url}: ${res.statusCode}`);
  }
  const doc = assertStatus(await call(t, 'GET', '/v1/openapi.json', null), 200);
  assert.deepEqual(Object.keys(doc.paths['/v1/audit-events']), ['get']);
  assert.deepEqual(Object.keys(doc.paths['/v1/audit-events/{id}']), ['get']);
  const [row] = await sql(t, `SELECT id FROM audit_events WHERE test_mode = false AND before IS NULL AND after IS NOT NULL LIMIT 1`);
  await assert.rejects(sql(t, `UPDATE audit_events SET action = 'forged' WHERE id = $1`, [row.id]), /append-only/);
  await assert.rejects(sql(t, `UPDATE audit_events SET created_at = created_at - interval '1 day' WHERE id = $1`, [row.id]), /append-only/);
  await assert.rejects(sql(t, `DELETE FROM audit_events WHERE id = $1`, [row.id]), /append-only/);
  // A snapshot may only be redacted: not rewritten, and a missing one not filled in.
  await assert.rejects(sql(t, `UPDATE audit_events SET after = '{"forged": true}' WHERE id = $1`, [row.id]), /append-only/);
  await assert.rejects(sql(t, `UPDATE audit_events SET before = '{"redacted": true}' WHERE id = $1`, [row.id]), /append-only/);
  await sql(t, `UPDATE audit_events SET after = '{"redacted": true}' WHERE id = $1`, [row.id]);
  // The request role may neither update nor delete, test rows included (only the system's purge deletes them).
  const testRowId = `evt_${Date.now()}`;
  await sql(t, `INSERT INTO audit_events (id, action, actor_type, after, test_mode, created_at) VALUES ($1, 'probe.test', 'system', '{"x": 1}', true, now())`, [testRowId]);
  for (const [scope, id] of [['live', row.id], ['test', testRowId]] as const) {
    await assert.rejects(t.database.scoped(scope).query(`UPDATE audit_events SET after = '{"redacted": true}' WHERE id = $1`, [id]), /permission denied/);
    await assert.rejects(t.database.scoped(scope).query(`DELETE FROM audit_events WHERE id = $1`, [id]), /permission denied/);
  }
  await sql(t, 'DELETE FROM audit_events WHERE id = $1', [testRowId]); // as the test purge may
});

test('filters: repeatable action, since (inclusive), until (exclusive), actor, target, organization, application, tenant and target_user_id', async () => {
  const user = await person(t);
  const stamps: string[] = [];
  const orgs: string[] = [];
  for (let i = 0; i < 3; i++) {
    stamps.push(t.clock.now().toISOString());
    orgs.push(assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: `Filter ${i}` }), 201).id);
    t.clock.advance(10);
  }
  assertStatus(await call(t, 'PATCH', `/v1/organizations/${orgs[0]}`, user.token, { name: 'Renamed' }), 200);
  const evt = async (action: string, org: string) => (await sql(t, 'SELECT id FROM audit_events WHERE action = $1 AND target_id = $2', [action, org]))[0].id;
  const created = await Promise.all(orgs.map((o) => evt('organization.created', o)));
  const updated = await evt('organization.updated', orgs[0]);
  // Each creation also writes organization.member_added for the creator, in the same transaction.
  const added = await Promise.all(orgs.map((o) => evt('organization.member_added', o)));
  const mine = `actor_id=${user.id}`;
  assert.deepEqual(await ids(viewer, `${mine}&action=organization.created`), [...created].reverse());
  assert.deepEqual(await ids(viewer, `${mine}&action=organization.created&action=organization.updated`), [updated, ...[...created].reverse()]);
  assert.deepEqual(await ids(viewer, `${mine}&action=organization.created&since=${encodeURIComponent(stamps[1])}`), [created[2], created[1]]);
  assert.deepEqual(await ids(viewer, `${mine}&action=organization.created&until=${encodeURIComponent(stamps[2])}`), [created[1], created[0]]);
  assert.deepEqual(await ids(viewer, `${mine}&since=${encodeURIComponent(stamps[1])}&until=${encodeURIComponent(stamps[2])}`), [added[1], created[1]]);
  assert.deepEqual(await ids(viewer, `target_type=organization&target_id=${orgs[1]}`), [added[1], created[1]]);
  assert.deepEqual(await ids(viewer, `organization_id=${orgs[2]}&actor_type=user`), [added[2], created[2]]);
  assert.deepEqual(await ids(viewer, `organization_id=${orgs[2]}&actor_type=api_key`), []);

  const member = await person(t);
  const ent = await grant(t, admin, member.id, app.id);
  const granted = await evt('entitlement.granted', ent.id);
  assert.ok((await ids(viewer, `application_id=${app.id}`)).includes(granted), '(await ids(viewer, `application_id=${app.id}`)).includes(granted)');
  assert.ok((await ids(viewer, `tenant_id=${app.tenantId}`)).includes(granted), '(await ids(viewer, `tenant_id=${app.tenantId}`)).includes(granted)');
  assert.deepEqual(await ids(viewer, `target_user_id=${member.id}&action=entitlement.granted`), [granted]);
  assert.equal(assertStatus(await list(viewer, 'limit=1'), 200).data.length, 1);
  assertError(await list(viewer, 'actor_type=robot'), 422, 'validation_failed');
  assertError(await list(viewer, 'since=yesterday'), 422, 'validation_failed');
});

test('visibility: platform audit.view sees everything; a user sees only target_user_id=me, else 403; keys without audit.view 403', async () => {
  const user = await person(t);
  const other = await person(t);
  await grant(t, admin, user.id, app.id);
  await grant(t, admin, other.id, app.id);
  assertError(await list(user.token), 403, 'forbidden');
  assertError(await list(user.token, `target_user_id=${other.id}`), 403, 'forbidden');
  const own = assertStatus(await list(user.token, 'target_user_id=me'), 200).data;
  assert.ok(own.length >= 1, 'own.length >= 1');
  assert.ok(own.every((e: any) => e.target_user_id === user.id), 'own.every((e: any) => e.target_user_id === user.id)');
  assert.deepEqual(await ids(user.token, `target_user_id=${user.id}`), own.map((e: any) => e.id));
  const [theirs] = await sql(t, `SELECT id FROM audit_events WHERE target_user_id = $1 LIMIT 1`, [other.id]);
  assertError(await call(t, 'GET', `/v1/audit-events/${theirs.id}`, user.token), 404, 'audit_event_not_found');
  assertStatus(await call(t, 'GET', `/v1/audit-events/${own[0].id}`, user.token), 200);
  const support = await person(t, { roles: ['support'] });
  assertStatus(await call(t, 'GET', `/v1/audit-events/${theirs.id}`, support.token), 200);
  assertError(await list(await platformKey(t, ['users.list'])), 403, 'forbidden');
  assertError(await list(await appKey(t, app.id)), 403, 'forbidden');
  // "me" names a User: an API key sending it gets 400 user_token_required, with or without audit.view.
  assertError(await list(viewer, 'target_user_id=me'), 400, 'user_token_required');
  assertError(await list(await platformKey(t, ['users.list']), 'target_user_id=me'), 400, 'user_token_required');
  assertError(await call(t, 'GET', '/v1/audit-events', null), 401, 'unauthenticated');
});

test('an app-scoped key with audit.view sees only its own Application\'s events (filter forced)', async () => {
  const mine = await newApp(t, admin);
  const theirs = await newApp(t, admin);
  const user = await person(t);
  await grant(t, admin, user.id, mine.id);
  await grant(t, admin, user.id, theirs.id);
  const key = await appKey(t, mine.id, ['audit.view']);
  const seen = assertStatus(await list(key), 200).data;
  assert.ok(seen.length >= 2, 'seen.length >= 2');
  assert.ok(seen.every((e: any) => e.application_id === mine.id), 'seen.every((e: any) => e.application_id === mine.id)');
  assert.deepEqual(await ids(key, `application_id=${theirs.id}`), []);
  const [foreign] = await sql(t, `SELECT id FROM audit_events WHERE application_id = $1 LIMIT 1`, [theirs.id]);
  assertError(await call(t, 'GET', `/v1/audit-events/${foreign.id}`, key), 404, 'audit_event_not_found');
});

test('a Tenant owner reads their Tenant\'s events with tenant_id; another Tenant is 403', async () => {
  const owned = await newApp(t, admin);
  const token = owned.owner.token;
  const events = assertStatus(await list(token, `tenant_id=${owned.tenantId}`), 200).data;
  assert.ok(events.some((e: any) => e.action === 'application.created' && e.application_id === owned.id), 'events.some((e: any) => e.action === \'application.created\' && e.application_id === owned.id)');
  const [createdEvt] = events.filter((e: any) => e.action === 'application.created');
  assertStatus(await call(t, 'GET', `/v1/audit-events/${createdEvt.id}`, token), 200);
  assertError(await list(token, `tenant_id=${app.tenantId}`), 403, 'forbidden');
});

test('hot window: Audit-Hot-Window-Start by caller (Starter owner 30 days, platform audit.view 730: the longest a Tenant keeps); older events are not listed and are 404; since earlier than the window returns nothing older', async () => {
  const owned = await newApp(t, admin);
  const now = t.clock.now().getTime();
  const res = await list(owned.owner.token, `tenant_id=${owned.tenantId}`);
  near(res, now - 30 * DAY * 1000);
  near(await list(viewer, 'limit=1'), t.clock.now().getTime() - 730 * DAY * 1000);
  const [evt] = assertStatus(res, 200).data.filter((e: any) => e.action === 'application.created');

  t.clock.advance(31 * DAY);
  const token = await login(t, owned.owner); // the old access token expired with the clock move
  const later = await list(token, `tenant_id=${owned.tenantId}&since=${encodeURIComponent(new Date(now - 400 * DAY * 1000).toISOString())}`);
  assert.ok(!assertStatus(later, 200).data.some((e: any) => e.id === evt.id), 'archived for a Starter Tenant');
  near(later, t.clock.now().getTime() - 30 * DAY * 1000);
  assertError(await call(t, 'GET', `/v1/audit-events/${evt.id}`, token), 404, 'audit_event_not_found');
  assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, viewer), 200);

  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [owned.tenantId]);
  const team = await list(token, `tenant_id=${owned.tenantId}`);
  assert.ok(assertStatus(team, 200).data.some((e: any) => e.id === evt.id), 'Team keeps a year');
  near(team, t.clock.now().getTime() - 365 * DAY * 1000);
});

test('"platform audit.view sees everything": an Enterprise Tenant\'s event older than a year, which its owner still reads, is listed and fetched by platform audit.view', async () => {
  const owned = await newApp(t, admin);
  await sql(t, `UPDATE tenants SET plan = 'enterprise' WHERE id = $1`, [owned.tenantId]);
  const [evt] = assertStatus(await list(owned.owner.token, `tenant_id=${owned.tenantId}`), 200).data.filter((e: any) => e.action === 'application.created');
  t.clock.advance(400 * DAY);
  const token = await login(t, owned.owner);
  assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, token), 200);
  assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, viewer), 200);
  assert.ok(assertStatus(await list(viewer, `target_id=${owned.id}&action=application.created`), 200).data.some((e: any) => e.id === evt.id), 'assertStatus(await list(viewer, `target_id=${owned.id}&action=application.created`), 200).data.some((e: any) => e.id === evt.id)');
});

test('404 audit_event_not_found for an unknown id; test-mode callers see only test-mode events', async () => {
  assertError(await call(t, 'GET', '/v1/audit-events/evt_01J0000000000000000000000', viewer), 404, 'audit_event_not_found');
  const testViewer = await platformKey(t, ['audit.view', 'webhooks.manage'], 'test');
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', testViewer, { scope: 'platform', url: 'http://127.0.0.1:9/t', events: ['*'] }), 201);
  const seen = assertStatus(await list(testViewer), 200).data;
  assert.ok(seen.some((e: any) => e.target?.id === sub.id), 'the test-mode subscription\'s events are listed');
  // Every event a test-mode caller sees is a test-mode one: a live caller with audit.view does not find it.
  for (const e of seen) assertError(await call(t, 'GET', `/v1/audit-events/${e.id}`, viewer), 404, 'audit_event_not_found');
  assert.deepEqual(await ids(viewer, `target_id=${sub.id}`), []);
});

test("hot window of an app-scoped key with audit.view is its Application's Tenant plan (Starter 30 days): Audit-Hot-Window-Start, older events not listed and 404", async () => {
  const mine = await newApp(t, admin);
  const key = await appKey(t, mine.id, ['audit.view']);
  near(await list(key), t.clock.now().getTime() - 30 * DAY * 1000);
  const [evt] = await sql(t, `SELECT id FROM audit_events WHERE action = 'application.created' AND target_id = $1`, [mine.id]);
  assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, key), 200);
  t.clock.advance(31 * DAY);
  assert.ok(!(await ids(key, `target_id=${mine.id}`)).includes(evt.id), 'archived for the key of a Starter Tenant\'s Application');
  assertError(await call(t, 'GET', `/v1/audit-events/${evt.id}`, key), 404, 'audit_event_not_found');
  assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, viewer), 200);
});

test('"Audit hot window | 30 days | 1 year" on both sides of each edge for an app-scoped key with audit.view: Starter keeps an event 29 days old and not 31; Team keeps it 364 days old and not 366', async () => {
  const starter = await newApp(t, admin);
  const team = await newApp(t, admin);
  await sql(t, `UPDATE tenants SET plan = 'team' WHERE id = $1`, [team.tenantId]);
  const starterKey = await appKey(t, starter.id, ['audit.view']);
  const teamKey = await appKey(t, team.id, ['audit.view']);
  const created = async (a: AppFixture) => (await sql(t, `SELECT id FROM audit_events WHERE action = 'application.created' AND target_id = $1`, [a.id]))[0].id;
  const [starterEvt, teamEvt] = [await created(starter), await created(team)];
  near(await list(teamKey), t.clock.now().getTime() - 365 * DAY * 1000);
  const visible = async (key: string, a: AppFixture, id: string) => {
    const listed = (await ids(key, `target_id=${a.id}`)).includes(id);
    const fetched = (await call(t, 'GET', `/v1/audit-events/${id}`, key)).statusCode;
    assert.equal(listed, fetched === 200, `list and fetch agree (${fetched})`);
    if (!listed) assert.equal(fetched, 404);
    return listed;
  };
  t.clock.advance(29 * DAY);
  assert.equal(await visible(starterKey, starter, starterEvt), true, 'Starter: 29 days old is in the window');
  t.clock.advance(2 * DAY);
  assert.equal(await visible(starterKey, starter, starterEvt), false, 'Starter: 31 days old is archived');
  t.clock.advance(333 * DAY);
  assert.equal(await visible(teamKey, team, teamEvt), true, 'Team: 364 days old is in the window');
  t.clock.advance(2 * DAY);
  assert.equal(await visible(teamKey, team, teamEvt), false, 'Team: 366 days old is archived');
});

test('hot window of a user reading target_user_id=me is 365 days (Audit-Hot-Window-Start)', async () => {
  const user = await person(t);
  await grant(t, admin, user.id, app.id);
  near(await list(user.token, 'target_user_id=me'), t.clock.now().getTime() - 365 * DAY * 1000);
});

test("a Tenant owner is its owner user or an active org_admin of owner_organization_id: a plain member and a pending org_admin get 403 with tenant_id", async () => {
  const [orgAdmin, member, pendingAdmin] = [await person(t), await person(t), await person(t)];
  const orgId = await seedOrganization(t, [
    { userId: orgAdmin.id, role: 'org_admin' },
    { userId: member.id, role: 'member' },
    { userId: pendingAdmin.id, role: 'org_admin', status: 'pending' },
  ]);
  const tenantId = await seedTenant(t, { ownerOrganizationId: orgId, plan: 'team' });
  assertStatus(await list(orgAdmin.token, `tenant_id=${tenantId}`), 200);
  assertError(await list(member.token, `tenant_id=${tenantId}`), 403, 'forbidden');
  assertError(await list(pendingAdmin.token, `tenant_id=${tenantId}`), 403, 'forbidden');
});

test('filters at the exact instant: since is inclusive and until exclusive of an event\'s own timestamp', async () => {
  const user = await person(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name: 'Boundary' }), 201);
  const [evt] = assertStatus(await list(viewer, `target_id=${org.id}&action=organization.created`), 200).data;
  const at = encodeURIComponent(evt.timestamp);
  assert.deepEqual(await ids(viewer, `target_id=${org.id}&action=organization.created&since=${at}`), [evt.id]);
  assert.deepEqual(await ids(viewer, `target_id=${org.id}&action=organization.created&until=${at}`), []);
});

test('filters: target_type alone selects events by their target type', async () => {
  const mine = await newApp(t, admin);
  const user = await person(t);
  const ent = await grant(t, admin, user.id, mine.id);
  const apps = assertStatus(await list(viewer, `application_id=${mine.id}&target_type=application`), 200).data;
  assert.ok(apps.some((e: any) => e.action === 'application.created'), 'application.created listed');
  assert.ok(apps.every((e: any) => e.target?.type === 'application'), 'only application targets');
  const ents = assertStatus(await list(viewer, `application_id=${mine.id}&target_type=entitlement`), 200).data;
  assert.deepEqual(ents.map((e: any) => e.target.id), [ent.id]);
});

test('filters: tenant_id narrows a platform audit.view list to that Tenant', async () => {
  const a = await newApp(t, admin);
  const b = await newApp(t, admin);
  const seen = assertStatus(await list(viewer, `tenant_id=${a.tenantId}&limit=100`), 200).data;
  assert.ok(seen.some((e: any) => e.application_id === a.id), "the Tenant's events are listed");
  assert.ok(!seen.some((e: any) => e.application_id === b.id || e.tenant_id === b.tenantId), "another Tenant's events are not");
});

test("GET /v1/audit-events/{id}: an app-scoped key without audit.view gets 404 audit_event_not_found, even for its own Application's event", async () => {
  const mine = await newApp(t, admin);
  const [evt] = await sql(t, `SELECT id FROM audit_events WHERE action = 'application.created' AND target_id = $1`, [mine.id]);
  assertError(await call(t, 'GET', `/v1/audit-events/${evt.id}`, await appKey(t, mine.id)), 404, 'audit_event_not_found');
  assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, await appKey(t, mine.id, ['audit.view'])), 200);
});

test("the tenant_id filter also matches events about the Tenant's Applications: after an ownership move, the new Tenant's owner reads the Application's earlier events", async () => {
  const moved = await newApp(t, admin);
  const newOwner = await person(t);
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${moved.id}`, admin, { owner_user_id: newOwner.id }), 200);
  assert.notEqual(patched.tenant_id, moved.tenantId, 'moved to the new owner\'s Tenant');
  const [created] = await sql(t, `SELECT id, tenant_id FROM audit_events WHERE action = 'application.created' AND target_id = $1`, [moved.id]);
  assert.equal(created.tenant_id, moved.tenantId, 'recorded with the old Tenant');
  assert.ok((await ids(newOwner.token, `tenant_id=${patched.tenant_id}`)).includes(created.id), 'listed for the new Tenant');
  assert.ok((await ids(viewer, `tenant_id=${patched.tenant_id}`)).includes(created.id), 'listed for platform audit.view too');
});

test("GET /v1/audit-events/{id} has the same readers as the list (\"same\"): after an ownership move, the new Tenant's owner fetches the Application's earlier event that tenant_id lists for them, and the old Tenant's owner still fetches it (recorded with their Tenant); a stranger gets 404", async () => {
  const moved = await newApp(t, admin);
  const newOwner = await person(t);
  const patched = assertStatus(await call(t, 'PATCH', `/v1/applications/${moved.id}`, admin, { owner_user_id: newOwner.id }), 200);
  const [created] = await sql(t, `SELECT id, tenant_id FROM audit_events WHERE action = 'application.created' AND target_id = $1`, [moved.id]);
  assert.equal(created.tenant_id, moved.tenantId, 'recorded with the old Tenant');
  assert.ok((await ids(newOwner.token, `tenant_id=${patched.tenant_id}`)).includes(created.id), 'listed for the new Tenant');
  const fetched = assertStatus(await call(t, 'GET', `/v1/audit-events/${created.id}`, newOwner.token), 200);
  assert.deepEqual([fetched.id, fetched.action, fetched.application_id, fetched.tenant_id], [created.id, 'application.created', moved.id, moved.tenantId]);
  assert.ok(Date.parse(String((await call(t, 'GET', `/v1/audit-events/${created.id}`, newOwner.token)).headers['audit-hot-window-start'])) < Date.parse(fetched.timestamp), 'read within the new Tenant\'s hot window');
  assertStatus(await call(t, 'GET', `/v1/audit-events/${created.id}`, moved.owner.token), 200);
  assertError(await call(t, 'GET', `/v1/audit-events/${created.id}`, (await person(t)).token), 404, 'audit_event_not_found');
});

test("the Roles a PATCH moving an Application to another Tenant seeds or deletes (available_app_roles, a deleted Role named the default) are audited with the Tenant it moves to, as its application.updated: the old Tenant's owner no longer reads them", async () => {
  const moved = await newApp(t, admin);
  const slug = moved.id.slice('app_'.length);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${moved.id}`, admin, { available_app_roles: ['viewer', 'spare'] }), 200);
  assertStatus(await call(t, 'DELETE', `/v1/roles/role_${slug}_spare`, admin), 204);
  const newOwner = await person(t);
  const res = await call(t, 'PATCH', `/v1/applications/${moved.id}`, admin, { owner_user_id: newOwner.id, available_app_roles: ['editor', 'spare'], default_app_role: 'spare' });
  const patched = assertStatus(res, 200);
  assert.notEqual(patched.tenant_id, moved.tenantId, "moved to the new owner's Tenant");
  const rows = await sql(t, `SELECT id, action, target_id, tenant_id FROM audit_events WHERE application_id = $1 AND request_id = $2 ORDER BY action, target_id`, [moved.id, res.headers['request-id']]);
  assert.deepEqual(rows.map((r: any) => [r.action, r.target_id, r.tenant_id]), [
    ['application.updated', moved.id, patched.tenant_id],
    ['role.created', `role_${slug}_editor`, patched.tenant_id],
    ['role.created', `role_${slug}_spare`, patched.tenant_id],
    ['role.deleted', `role_${slug}_viewer`, patched.tenant_id],
  ]);
  const oldOwnerSees = await ids(moved.owner.token, `tenant_id=${moved.tenantId}&limit=100`);
  assert.deepEqual(rows.filter((r: any) => oldOwnerSees.includes(r.id)), [], "none of the move's rows is listed for the old Tenant's owner");
  const newOwnerSees = await ids(newOwner.token, `tenant_id=${patched.tenant_id}&limit=100`);
  assert.ok(rows.every((r: any) => newOwnerSees.includes(r.id)), "all of them are listed for the new Tenant's owner");
  const created = rows.find((r: any) => r.action === 'role.created')!;
  assert.equal(assertStatus(await call(t, 'GET', `/v1/audit-events/${created.id}`, viewer), 200).tenant_id, patched.tenant_id);
});

test('GET /v1/audit-events/{id} reads under the longest window the caller has for the event: a Starter Tenant owner who is also its target fetches a 100-day-old event, as it lists it with target_user_id=me', async () => {
  const owned = await newApp(t, admin);
  const ent = await grant(t, admin, owned.owner.id, owned.id);
  const [evt] = await sql(t, `SELECT id, tenant_id, target_user_id FROM audit_events WHERE action = 'entitlement.granted' AND target_id = $1`, [ent.id]);
  assert.deepEqual([evt.tenant_id, evt.target_user_id], [owned.tenantId, owned.owner.id], 'the event is about the owner and in the Starter Tenant');
  t.clock.advance(100 * DAY);
  const token = await login(t, owned.owner);
  assert.equal((await ids(token, 'target_user_id=me')).includes(evt.id), true, 'listed under the 365-day window of target_user_id=me');
  assert.equal((await ids(token, `tenant_id=${owned.tenantId}`)).includes(evt.id), false, 'archived for the Starter Tenant (30 days)');
  assert.equal(assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, token), 200).id, evt.id);
});

test('a filter only narrows: a Starter Tenant owner listing target_user_id=me&tenant_id=<own Tenant> gets the 100-day-old event about them in that Tenant that target_user_id=me lists and GET fetches (the longer window of the two, in Audit-Hot-Window-Start)', async () => {
  const owned = await newApp(t, admin);
  const ent = await grant(t, admin, owned.owner.id, owned.id);
  const [evt] = await sql(t, `SELECT id FROM audit_events WHERE action = 'entitlement.granted' AND target_id = $1`, [ent.id]);
  t.clock.advance(100 * DAY);
  const token = await login(t, owned.owner);
  assert.equal((await ids(token, 'target_user_id=me')).includes(evt.id), true, 'listed with target_user_id=me');
  const both = await list(token, `target_user_id=me&tenant_id=${owned.tenantId}`);
  assert.equal(assertStatus(both, 200).data.some((e: any) => e.id === evt.id), true, 'still listed with tenant_id added');
  assert.ok(assertStatus(both, 200).data.every((e: any) => e.target_user_id === owned.owner.id && e.tenant_id === owned.tenantId), 'both filters apply');
  near(both, t.clock.now().getTime() - 365 * DAY * 1000);
  // tenant_id alone keeps the Starter Tenant's 30 days.
  assert.equal((await ids(token, `tenant_id=${owned.tenantId}`)).includes(evt.id), false);
});

test('an audit row about a shared Application or Role, written by a caller of the other mode, counts in its snapshots the users of the row\'s mode, as its readers\' GET does ("Test credentials see only test rows and live credentials only live rows"): a test-mode key\'s Role and settings_schema changes of a live Application show live readers the live holder and the live stale override, not the test mode\'s zero', async () => {
  const testKey = await platformKey(t, undefined, 'test');
  const liveApp = await newApp(t, admin);
  const slug = liveApp.id.slice('app_'.length);
  const schema = { type: 'object', properties: { density: { type: 'string', enum: ['compact', 'comfortable'] } } };
  assertStatus(await call(t, 'PATCH', `/v1/applications/${liveApp.id}`, admin, { available_app_roles: ['editor'], settings_schema: schema }), 200);
  const holder = await person(t);
  await grant(t, admin, holder.id, liveApp.id);
  assertStatus(await call(t, 'POST', `/v1/users/${holder.id}/roles/role_${slug}_editor`, admin, {}), 201);
  assertStatus(await call(t, 'PATCH', `/v1/users/me/apps/${liveApp.id}/settings`, holder.token, { overrides: { density: 'compact' } }), 200);

  const role = await call(t, 'PATCH', `/v1/roles/role_${slug}_editor`, testKey, { description: 'by a test-mode key' });
  assert.equal(assertStatus(role, 200).assignment_count, 0, "the test-mode caller's answer counts its own mode's holders");
  const [roleRow] = assertStatus(await list(viewer, `target_id=role_${slug}_editor&action=role.updated`), 200).data;
  assert.equal(assertStatus(await call(t, 'GET', `/v1/roles/role_${slug}_editor`, admin), 200).assignment_count, 1);
  assert.deepEqual([roleRow.before.assignment_count, roleRow.after.assignment_count], [1, 1], "the live row counts the live holder, as a live GET does");

  const app = await call(t, 'PATCH', `/v1/applications/${liveApp.id}`, testKey, { settings_schema: {} });
  assert.deepEqual(assertStatus(app, 200).settings_schema_stats.stale_override_counts, {}, "the test-mode caller's answer counts its own mode's overrides");
  const [appRow] = assertStatus(await list(viewer, `target_id=${liveApp.id}&action=application.updated`), 200).data;
  assert.equal(appRow.request_id, app.headers['request-id']);
  assert.deepEqual(assertStatus(await call(t, 'GET', `/v1/applications/${liveApp.id}`, admin), 200).settings_schema_stats.stale_override_counts, { density: 1 });
  assert.deepEqual([appRow.before.settings_schema_stats.stale_override_counts, appRow.after.settings_schema_stats.stale_override_counts], [{}, { density: 1 }], "the live row counts the live user's override, as a live GET does");
});

test('"Audit-Hot-Window-Start gives the earliest available timestamp": an event recorded exactly at that instant is still listed and fetched (a Starter Tenant owner 30 days to the millisecond later), and a millisecond later it is neither', async () => {
  await withStoppedClock(t, async () => {
    const owned = await newApp(t, admin);
    const [evt] = await sql(t, `SELECT id, created_at FROM audit_events WHERE action = 'application.created' AND target_id = $1`, [owned.id]);
    t.clock.advance(30 * DAY);
    const token = await login(t, owned.owner);
    const atEdge = await list(token, `tenant_id=${owned.tenantId}&action=application.created`);
    assert.equal(atEdge.headers['audit-hot-window-start'], new Date(evt.created_at).toISOString(), 'the window starts at the event');
    assert.deepEqual(assertStatus(atEdge, 200).data.map((e: any) => e.id), [evt.id], 'listed at the window start');
    assertStatus(await call(t, 'GET', `/v1/audit-events/${evt.id}`, token), 200);
    t.clock.advance(0.001);
    assert.deepEqual(await ids(token, `tenant_id=${owned.tenantId}&action=application.created`), [], 'a millisecond older than the window start: not listed');
    assertError(await call(t, 'GET', `/v1/audit-events/${evt.id}`, token), 404, 'audit_event_not_found');
  });
});

test('pagination: newest first by timestamp then id; following next_cursor with limit=1 returns every row once, none repeated or skipped, also among rows of one instant (an Organization\'s creation and its creator\'s membership)', async () => {
  const user = await person(t);
  for (const name of ['Paged 1', 'Paged 2']) assertStatus(await call(t, 'POST', '/v1/organizations', user.token, { name }), 201);
  const q = `actor_id=${user.id}`;
  const all = assertStatus(await list(viewer, `${q}&limit=100`), 200).data;
  assert.equal(all.length, 4, 'two organization.created and two organization.member_added');
  for (let i = 1; i < all.length; i++) {
    const [a, b] = [all[i - 1], all[i]];
    assert.ok(a.timestamp > b.timestamp || (a.timestamp === b.timestamp && a.id > b.id), `newest first, ties by id: ${a.id} before ${b.id}`);
  }
  assert.ok(all[0].timestamp === all[1].timestamp, 'rows of one instant are paged across');
  const walked: string[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < all.length + 2; pages++) {
    const page: any = assertStatus(await list(viewer, `${q}&limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`), 200);
    walked.push(...page.data.map((e: any) => e.id));
    if (!page.page.has_more) {
      assert.equal(page.page.next_cursor, null);
      break;
    }
    cursor = page.page.next_cursor;
  }
  assert.deepEqual(walked, all.map((e: any) => e.id));
});

test('"Test data retention | purged nightly when older than 30 days": a test-mode audit row 29 days old survives the test purge and is still read by test-mode audit.view; 31 days old it is purged', async () => {
  const testKey = await platformKey(t, ['audit.view', 'webhooks.manage'], 'test');
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', testKey, { scope: 'platform', url: 'http://127.0.0.1:9/young', events: ['*'] }), 201);
  const query = `target_id=${sub.id}&action=webhook.created`;
  const [evt] = await ids(testKey, query);
  assert.ok(evt, 'webhook.created written in test mode');
  t.clock.advance(29 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.deepEqual(await ids(testKey, query), [evt], '29 days old: kept');
  t.clock.advance(2 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.deepEqual(await ids(testKey, query), [], '31 days old: purged');
});

// Last in the file: it moves the clock 31 days on for the test-data purge.
test('"Applications are shared catalog rows visible to both modes": an audit row about an Application or one of its Roles is of the Application\'s mode, whoever changes it; a test-mode key\'s suspension, PATCH and Role changes of a live Application are read by live audit readers and survive the purge of "test rows older than 30 days", and a live admin\'s suspension of a test_mode Application is read in test mode', async () => {
  const testKey = await platformKey(t, undefined, 'test');
  const testViewer = await platformKey(t, ['audit.view'], 'test');
  const liveApp = await newApp(t, admin);
  const slug = liveApp.id.slice('app_'.length);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${liveApp.id}`, testKey, { description: 'changed by a test-mode key', available_app_roles: ['viewer', 'spare'] }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/roles/role_${slug}_viewer`, testKey, { description: 'edited by a test-mode key' }), 200);
  assertStatus(await call(t, 'DELETE', `/v1/roles/role_${slug}_spare`, testKey), 204);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${liveApp.id}`, testKey, { review_status: 'suspended', review_notes: 'by a test-mode key' }), 200);
  const expected = [
    ['application.review_status_changed', liveApp.id], ['application.updated', liveApp.id], ['application.updated', liveApp.id],
    ['role.created', `role_${slug}_spare`], ['role.created', `role_${slug}_viewer`], ['role.deleted', `role_${slug}_spare`], ['role.updated', `role_${slug}_viewer`],
  ];
  const read = async (cred: string, appId: string) =>
    (assertStatus(await list(cred, `application_id=${appId}&limit=100`), 200).data as any[])
      .filter((e) => e.action !== 'application.created').map((e) => [e.action, e.target.id]).sort();
  assert.deepEqual(await read(viewer, liveApp.id), expected, "live audit readers read the live Application's changes made by a test-mode key");
  assert.deepEqual(await read(testViewer, liveApp.id), [], 'they are no test rows');
  const owner = assertStatus(await list(liveApp.owner.token, `tenant_id=${liveApp.tenantId}&action=application.review_status_changed`), 200).data;
  assert.deepEqual(owner.map((e: any) => e.after.review_status), ['suspended'], "the live Application's Tenant owner reads its suspension");

  const testApp = await newApp(t, testKey, await person(t, { mode: 'test' }));
  assertStatus(await call(t, 'PATCH', `/v1/applications/${testApp.id}`, admin, { review_status: 'suspended', review_notes: 'by a live admin' }), 200);
  assert.deepEqual((await read(testViewer, testApp.id)).map(([a]) => a), ['application.review_status_changed', 'application.updated'], "test-mode readers read their test_mode Application's suspension by a live admin");
  assert.deepEqual(await read(viewer, testApp.id), [], 'it is no live row');

  t.clock.advance(31 * DAY);
  await t.deps.jobs.runNow('test-purge');
  assert.deepEqual(await read(viewer, liveApp.id), expected, "the purge of test rows leaves the live Application's trail");
  assert.deepEqual(await read(testViewer, testApp.id), [], "the test_mode Application's trail is test data, purged with it");
});

test('"Platform Roles belong to neither mode: their rows take the caller\'s" (docs/decisions.md, Mode of an audit row): a platform Role created and deleted by a test-mode key is in the test-mode trail, not the live one; by a live key, the reverse', async () => {
  const testKey = await platformKey(t, undefined, 'test');
  const testViewer = await platformKey(t, ['audit.view'], 'test');
  for (const [cred, mode] of [[testKey, 'test'], [admin, 'live']] as const) {
    const role = assertStatus(await call(t, 'POST', '/v1/roles', cred, { name: `platform_${mode}_${Date.now().toString(36)}`, scope: 'platform', permissions: ['users.list'] }), 201);
    assertStatus(await call(t, 'DELETE', `/v1/roles/${role.id}`, cred), 204);
    const read = async (reader: string) => assertStatus(await list(reader, `target_id=${role.id}`), 200).data.map((e: any) => e.action).sort();
    assert.deepEqual(await read(mode === 'test' ? testViewer : viewer), ['role.created', 'role.deleted'], `${mode}: its own mode's trail`);
    assert.deepEqual(await read(mode === 'test' ? viewer : testViewer), [], `${mode}: not the other mode's`);
  }
});
