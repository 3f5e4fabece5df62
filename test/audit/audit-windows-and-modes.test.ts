// The audit log (Part B Audit): the hot window and its header per caller, readers after an
// Application's ownership move, and the mode of each row (test and live trails, the test purge).
// Rows, filters and visibility: audit.test.ts.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { login } from '../helpers/fixtures.js';
import { appKey, assertError, assertStatus, buildApp, call, DAY, grant, newApp, person, platformKey, sql, type AppFixture } from '../webhooks/support.js';

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

const list = (cred: string, query = '') => call(t, 'GET', `/v1/audit-events${query ? `?${query}` : ''}`, cred);
/** The Audit-Hot-Window-Start header is `expected` (ms), give or take the real time the call took. */
function near(res: Awaited<ReturnType<typeof list>>, expected: number): void {
  const got = Date.parse(String(res.headers['audit-hot-window-start']));
  assert.ok(Math.abs(got - expected) < 5000, `Audit-Hot-Window-Start ${res.headers['audit-hot-window-start']} vs ${new Date(expected).toISOString()}`);
}
const ids = async (cred: string, query: string) => assertStatus(await list(cred, query), 200).data.map((e: any) => e.id);

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
