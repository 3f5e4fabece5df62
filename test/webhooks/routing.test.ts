// Routing (WH-5): which subscriptions receive which events — scope, access paths for user and
// membership events, the events filter and `*`, and test mode.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { appKey, assertStatus, buildApp, call, createWebhook, emitEvent, grant, newApp, person, platformKey, Receiver, runDelivery, sql, type AppFixture } from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
let appA: AppFixture;
let appB: AppFixture;
before(async () => {
  t = await buildApp();
  admin = await platformKey(t);
  receiver = await Receiver.start();
  appA = await newApp(t, admin);
  appB = await newApp(t, admin);
});
after(async () => {
  await receiver.close();
  await t.close();
});

const typesAt = (path: string) => receiver.at(path).map((r) => `${r.body.type}:${r.body.data.user_id ?? r.body.data.entitlement?.user_id ?? ''}`).sort();

test('platform scope gets every live event; app scope only its Application\'s, and user.* only with an access path (organization.member_*: the tests below); test mode only test events', async () => {
  const platform = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/platform') });
  const onlyA = await createWebhook(t, await appKey(t, appA.id), { url: receiver.url('/a') });
  const onlyB = await createWebhook(t, await appKey(t, appB.id), { url: receiver.url('/b') });
  const filtered = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/filtered'), events: ['access.granted'] });
  const testKey = await platformKey(t, ['webhooks.manage'], 'test');
  const testSub = await createWebhook(t, testKey, { scope: 'platform', url: receiver.url('/test-mode') });

  const withPath = await person(t);
  const withoutPath = await person(t);
  await grant(t, admin, withPath.id, appA.id); // entitlement.granted + access.granted about app A
  assertStatus(await call(t, 'POST', `/v1/users/${withPath.id}/suspend`, admin), 200); // user.suspended (+ access.revoked)
  assertStatus(await call(t, 'POST', `/v1/users/${withoutPath.id}/suspend`, admin), 200); // user.suspended, no path to A or B
  await emitEvent(t, 'role.assigned', { user_id: withoutPath.id, role_id: `role_${appB.id}_x`, application_id: appB.id }, { applicationId: appB.id });
  await emitEvent(t, 'user.deleted', { user_id: 'usr_testmode' }, { mode: 'test' });
  await runDelivery(t);

  const u = withPath.id;
  const w = withoutPath.id;
  assert.deepEqual(typesAt('/platform'), [`access.granted:${u}`, `access.revoked:${u}`, `entitlement.granted:${u}`, `role.assigned:${w}`, `user.suspended:${u}`, `user.suspended:${w}`]);
  assert.deepEqual(typesAt('/a'), [`access.granted:${u}`, `access.revoked:${u}`, `entitlement.granted:${u}`, `user.suspended:${u}`]);
  assert.deepEqual(typesAt('/b'), [`role.assigned:${w}`]);
  assert.deepEqual(typesAt('/filtered'), [`access.granted:${u}`]);
  assert.deepEqual(typesAt('/test-mode'), ['user.deleted:usr_testmode']);
  assert.ok(receiver.at('/test-mode').every((r) => r.body.test_mode === true), 'receiver.at(\'/test-mode\').every((r) => r.body.test_mode === true)');
  assert.ok(receiver.at('/platform').every((r) => r.body.test_mode === false), 'receiver.at(\'/platform\').every((r) => r.body.test_mode === false)');
  for (const s of [platform, onlyA, onlyB, filtered]) await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [s.id]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [testSub.id]);
});

test('organization.member_* reach an app subscription when the Organization holds a grant to it, also member_removed after the membership ended', async () => {
  const admin2 = await person(t, { roles: ['superadmin'] });
  const member = await person(t);
  const sub = await createWebhook(t, await appKey(t, appA.id), { url: receiver.url('/org-a'), events: ['organization.member_added', 'organization.member_removed'] });
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', admin2.token, { name: 'Routing Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: appA.id }, { 'idempotency-key': `org-${org.id}` }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: member.id }), 201);
  assert.equal((await call(t, 'DELETE', `/v1/organizations/${org.id}/members/${member.id}`, admin)).statusCode, 204);
  await runDelivery(t);
  assert.deepEqual(typesAt('/org-a'), [`organization.member_added:${member.id}`, `organization.member_removed:${member.id}`]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('a member an allowlist org grant excludes has no access path: their user.* and organization.member_added do not reach the app subscription', async () => {
  const admin2 = await person(t, { roles: ['superadmin'] });
  const [included, excluded, newcomer] = [await person(t), await person(t), await person(t)];
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', admin2.token, { name: 'Allowlist Org' }), 201);
  for (const m of [included, excluded]) assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: m.id }), 201);
  const body = { application_id: appA.id, member_scope: 'allowlist', member_overrides: [included.id] };
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, body, { 'idempotency-key': `org-${org.id}` }), 201);
  const sub = await createWebhook(t, await appKey(t, appA.id), { url: receiver.url('/allowlist'), events: ['user.suspended', 'organization.member_added'] });
  for (const m of [included, excluded]) assertStatus(await call(t, 'POST', `/v1/users/${m.id}/suspend`, admin), 200);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: newcomer.id }), 201);
  await runDelivery(t);
  assert.deepEqual(typesAt('/allowlist'), [`user.suspended:${included.id}`]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"a grant whose member_scope or seat limit excludes them is no path" (docs/decisions.md, Routing): a member waiting as seat_limit on a restricted Tenant\'s organization-wide grant is not heard of by the app subscription; a seated member is', async () => {
  const app = await newApp(t, admin);
  const admin2 = await person(t, { roles: ['superadmin'] });
  const [seated, waiting] = [await person(t), await person(t)];
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', admin2.token, { name: 'Seat limit Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: seated.id }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: app.id }, { 'idempotency-key': `org-${org.id}` }), 201);
  const sub = await createWebhook(t, await appKey(t, app.id), { url: receiver.url('/seat-limit-path'), events: ['user.suspended'] });
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [app.tenantId]);
  try {
    assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: waiting.id }), 201);
    assert.equal((await sql(t, 'SELECT 1 FROM org_seat_limits WHERE user_id = $1', [waiting.id])).length, 1, 'precondition: the member waits as seat_limit');
    for (const m of [seated, waiting]) assertStatus(await call(t, 'POST', `/v1/users/${m.id}/suspend`, admin), 200);
    await runDelivery(t);
    assert.deepEqual(typesAt('/seat-limit-path'), [`user.suspended:${seated.id}`]);
  } finally {
    await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [app.tenantId]);
    await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
  }
});

test('a subscription receives only events written after it was created', async () => {
  await emitEvent(t, 'user.reactivated', { user_id: 'usr_before' });
  t.clock.advance(1);
  const sub = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/late'), events: ['user.reactivated'] });
  t.clock.advance(1);
  await emitEvent(t, 'user.reactivated', { user_id: 'usr_after' });
  await runDelivery(t);
  assert.deepEqual(typesAt('/late'), ['user.reactivated:usr_after']);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"a personal Entitlement in any status" is an access path (docs/decisions.md, Routing): user.* of users whose only grant to the Application is disabled or revoked still reach its app subscription; a user who never had one does not', async () => {
  const [disabled, revoked, never] = [await person(t), await person(t), await person(t)];
  const toDisable = await grant(t, admin, disabled.id, appA.id);
  const toRevoke = await grant(t, admin, revoked.id, appA.id);
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${toDisable.id}`, admin, { status: 'disabled', disabled_reason: 'paused' }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/entitlements/${toRevoke.id}`, admin, { status: 'revoked', disabled_reason: 'refund' }), 200);
  const sub = await createWebhook(t, await appKey(t, appA.id), { url: receiver.url('/any-status'), events: ['user.suspended'] });
  for (const u of [disabled, revoked, never]) assertStatus(await call(t, 'POST', `/v1/users/${u.id}/suspend`, admin), 200);
  await runDelivery(t);
  assert.deepEqual(typesAt('/any-status'), [`user.suspended:${disabled.id}`, `user.suspended:${revoked.id}`].sort());
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('a pending invitee of an Organization holding a grant has no access path: their user.* do not reach the app subscription, an active member\'s do', async () => {
  const admin2 = await person(t, { roles: ['superadmin'] });
  const [active, invited] = [await person(t), await person(t)];
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', admin2.token, { name: 'Pending Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: active.id }), 201);
  await sql(t, `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at) VALUES ($1, $2, 'member', 'pending', $3)`, [org.id, invited.id, t.clock.now()]);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: appA.id }, { 'idempotency-key': `org-${org.id}` }), 201);
  const sub = await createWebhook(t, await appKey(t, appA.id), { url: receiver.url('/pending'), events: ['user.suspended'] });
  for (const m of [active, invited]) assertStatus(await call(t, 'POST', `/v1/users/${m.id}/suspend`, admin), 200);
  await runDelivery(t);
  assert.deepEqual(typesAt('/pending'), [`user.suspended:${active.id}`]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"Test-mode keys create test-mode subscriptions that only receive test events": a test-mode grant\'s entitlement.granted and derived access.granted carry test_mode true and reach only the test-mode subscription', async () => {
  const testKey = await platformKey(t, ['entitlements.manage', 'webhooks.manage'], 'test');
  const events = ['entitlement.granted', 'access.granted'];
  const live = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/mode-live'), events });
  const testSub = await createWebhook(t, testKey, { scope: 'platform', url: receiver.url('/mode-test'), events });
  const user = await person(t, { mode: 'test' });
  await grant(t, testKey, user.id, appA.id);
  await runDelivery(t);
  assert.deepEqual(typesAt('/mode-test'), [`access.granted:${user.id}`, `entitlement.granted:${user.id}`]);
  assert.ok(receiver.at('/mode-test').every((r) => r.body.test_mode === true), 'every event is a test event');
  assert.deepEqual(typesAt('/mode-live'), [], 'a live subscription receives no test event');
  for (const s of [live, testSub]) await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [s.id]);
});

test('"Applications are shared catalog rows visible to both modes" and test-mode subscriptions "only receive test events": application.review_status_changed is an event of the Application\'s mode, whoever moderates it; a live admin suspending a test_mode Application reaches its test-mode subscriptions only, a test-mode key suspending a live Application its live subscriptions only', async () => {
  const testKey = await platformKey(t, undefined, 'test');
  const liveApp = await newApp(t, admin);
  const testApp = await newApp(t, testKey, await person(t, { mode: 'test' }));
  assert.equal(assertStatus(await call(t, 'GET', `/v1/applications/${testApp.id}`, admin), 200).test_mode, true, 'precondition: a test_mode Application, visible to live callers');
  const events = ['application.review_status_changed'];
  const subs = {
    livePlatform: await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/review-live-p'), events }),
    testPlatform: await createWebhook(t, testKey, { scope: 'platform', url: receiver.url('/review-test-p'), events }),
    liveAppLive: await createWebhook(t, await appKey(t, liveApp.id), { url: receiver.url('/review-live-app-live'), events }),
    liveAppTest: await createWebhook(t, await appKey(t, liveApp.id, [], 'test'), { url: receiver.url('/review-live-app-test'), events }),
    testAppTest: await createWebhook(t, await appKey(t, testApp.id, [], 'test'), { url: receiver.url('/review-test-app-test'), events }),
  };
  assertStatus(await call(t, 'PATCH', `/v1/applications/${testApp.id}`, admin, { review_status: 'suspended', review_notes: 'by a live admin' }), 200);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${liveApp.id}`, testKey, { review_status: 'suspended', review_notes: 'by a test-mode key' }), 200);
  // The suspensions are real in both modes: neither Application takes a new grant.
  assert.equal((await call(t, 'GET', `/v1/applications/${liveApp.id}`, admin)).json().review_status, 'suspended');
  await runDelivery(t);

  const got = (path: string) => receiver.at(path).map((r) => `${r.body.application_id === liveApp.id ? 'live app' : r.body.application_id === testApp.id ? 'test app' : '?'}:${r.body.test_mode}`).sort();
  assert.deepEqual(got('/review-live-p'), ['live app:false'], 'the live Application\'s suspension is a live event, the test_mode one\'s is not');
  assert.deepEqual(got('/review-test-p'), ['test app:true']);
  assert.deepEqual(got('/review-live-app-live'), ['live app:false'], 'the live Application\'s live subscription hears of its suspension');
  assert.deepEqual(got('/review-live-app-test'), [], 'a test-mode subscription receives no live event');
  assert.deepEqual(got('/review-test-app-test'), ['test app:true'], 'the test_mode Application\'s test-mode subscription hears of its suspension');
  for (const s of Object.values(subs)) await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [s.id]);
});

test('WH-5 "exact delivered sets" from real operations (no synthetic events): an app Role assigned to users with and without an access path reaches only its Application\'s subscription; a platform Role\'s role.assigned and role.removed only the platform one; a review status change its Application; an org grant\'s entitlement.granted, access.granted and a member\'s user.suspended / access.revoked the granted Application', async () => {
  const A = await newApp(t, admin);
  const B = await newApp(t, admin);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${A.id}`, admin, { available_app_roles: ['editor'] }), 200);
  const editor = `role_${A.id.slice('app_'.length)}_editor`;
  const subs = [
    await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/real-p') }),
    await createWebhook(t, await appKey(t, A.id), { url: receiver.url('/real-a') }),
    await createWebhook(t, await appKey(t, B.id), { url: receiver.url('/real-b') }),
  ];
  const u = await person(t);
  const w = await person(t);
  await grant(t, admin, u.id, A.id);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/roles/${editor}`, admin, {}), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${u.id}/roles/role_platform_support`, admin, {}), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${w.id}/roles/${editor}`, admin, {}), 201);
  assertStatus(await call(t, 'DELETE', `/v1/users/${u.id}/roles/role_platform_support`, admin), 204);
  assertStatus(await call(t, 'PATCH', `/v1/applications/${A.id}`, admin, { review_status: 'suspended', review_notes: 'x' }), 200);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', w.token, { name: 'O' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: B.id }, { 'idempotency-key': `k-${org.id}` }), 201);
  assertStatus(await call(t, 'POST', `/v1/users/${w.id}/suspend`, admin, {}), 200);
  await runDelivery(t);
  const who = (id: unknown) => (id === u.id ? 'u' : id === w.id ? 'w' : '-');
  const at = (path: string) => receiver.at(path).map((r) => `${r.body.type}:${r.body.application_id === A.id ? 'A' : r.body.application_id === B.id ? 'B' : '-'}:${who(r.body.data.user_id)}`).sort();
  const toA = ['access.granted:A:u', 'application.review_status_changed:A:-', 'entitlement.granted:A:-', 'role.assigned:A:u', 'role.assigned:A:w'];
  const toB = ['access.granted:B:w', 'access.revoked:B:w', 'entitlement.granted:B:-', 'user.suspended:-:w'];
  const platformOnly = ['organization.member_added:-:w', 'role.assigned:-:u', 'role.removed:-:u'];
  assert.deepEqual(at('/real-a'), toA);
  assert.deepEqual(at('/real-b'), toB);
  assert.deepEqual(at('/real-p'), [...toA, ...toB, ...platformOnly].sort());
  for (const s of subs) await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [s.id]);
});

test('"Test-mode keys create test-mode subscriptions that only receive test events": when seat-limit-release gives a test-mode member their seat (on a live Tenant), the access.granted is a test event and reaches only the test-mode subscription', async () => {
  const app = await newApp(t, admin);
  const testKey = await platformKey(t, undefined, 'test');
  const live = await createWebhook(t, admin, { scope: 'platform', url: receiver.url('/seat-live'), events: ['access.granted'] });
  const testSub = await createWebhook(t, testKey, { scope: 'platform', url: receiver.url('/seat-test'), events: ['access.granted'] });
  const owner = await person(t, { mode: 'test' });
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', owner.token, { name: 'Test-mode Org' }), 201);
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, testKey, { application_id: app.id }, { 'idempotency-key': `org-${org.id}` }), 201);
  // A restricted Tenant takes no new seat: the member joining now is marked seat_limit.
  await sql(t, 'UPDATE tenants SET restricted = true WHERE id = $1', [app.tenantId]);
  const member = await person(t, { mode: 'test' });
  assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, testKey, { user_id: member.id }), 201);
  assert.equal((await sql(t, 'SELECT 1 FROM org_seat_limits WHERE user_id = $1', [member.id])).length, 1, 'precondition: the member is marked seat_limit');
  await sql(t, 'UPDATE tenants SET restricted = false WHERE id = $1', [app.tenantId]);
  await t.deps.jobs.runNow('seat-limit-release');
  await runDelivery(t);

  assert.deepEqual(receiver.at('/seat-live').map((r) => r.body.data.user_id), [], 'a live subscription receives no event about a test-mode member');
  const got = receiver.at('/seat-test').filter((r) => r.body.data.user_id === member.id).map((r) => [r.body.type, r.body.test_mode, r.body.data.reason]);
  assert.deepEqual(got, [['access.granted', true, 'org_grant_changed']]);
  for (const s of [live, testSub]) await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [s.id]);
});
