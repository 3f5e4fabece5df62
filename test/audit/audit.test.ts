// The audit log (Part B Audit): rows written with their change (actor, target, scope ids,
// before/after, request id), read-only (no write route; append-only in the database), filters,
// visibility per caller, pagination (the hot window and each row's mode: audit-windows-and-modes.test.ts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { createApiKey } from '../helpers/fixtures.js';
import { seedOrganization, seedTenant } from '../tenancy/support.js';
import { appKey, assertError, assertStatus, buildApp, call, emitEvent, grant, newApp, person, platformKey, Receiver, runDelivery, sql, type AppFixture } from '../webhooks/support.js';

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

