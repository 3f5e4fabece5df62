// The Webhook subscription status table (WH-3): 3 exhausted deliveries → unhealthy (delivery
// continues); 5 days unhealthy → disabled with the owner mailed (delivery stops); PATCH healthy
// resets without backfill; 410 Gone disables at once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { withStoppedClock, type TestApp } from '../helpers/app.js';
import { createApiKey, createUser } from '../helpers/fixtures.js';
import {
  assertStatus, call, DAY, deliveriesOf, emitEvent, mailsTo, newApp, person, platformKey, Receiver, RETRY_SCHEDULE, runDelivery, sql, startReceiverApp, stopReceiverApp,
} from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => ({ t, admin, receiver } = await startReceiverApp()));
after(() => stopReceiverApp({ t, receiver }));

const statusOf = async (id: string) => assertStatus(await call(t, 'GET', `/v1/webhooks/${id}`, admin), 200);

/** Runs deliveries through every retry of the schedule on the service clock. */
async function exhaustSchedule(): Promise<void> {
  await runDelivery(t);
  for (const s of RETRY_SCHEDULE) {
    t.clock.advance(s);
    await runDelivery(t);
  }
}

test('3 deliveries that exhausted every retry make a subscription unhealthy; it keeps receiving; 5 days later the health job disables it and mails the owner; PATCH healthy resets without backfill', async () => {
  const application = await newApp(t, admin);
  const key = await platformKey(t, ['webhooks.manage']);
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', key, { scope: application.id, url: receiver.url('/health'), events: ['access.revoked'] }), 201);
  receiver.routes.set('/health', (_req, res) => res.writeHead(500).end('down'));
  const revoke = (n: number) =>
    emitEvent(t, 'access.revoked', { user_id: `usr_h${n}`, application_id: application.id, reason: 'entitlement_revoked', entitlement_status: 'revoked' }, { applicationId: application.id });

  await revoke(1);
  await revoke(2);
  await exhaustSchedule();
  let state = await statusOf(sub.id);
  assert.equal(state.status, 'healthy');
  assert.equal(state.consecutive_failures, 2);

  await revoke(3);
  await exhaustSchedule();
  state = await statusOf(sub.id);
  assert.equal(state.status, 'unhealthy');
  assert.equal(state.consecutive_failures, 3);
  const [changed] = await sql(t, `SELECT actor_type, before, after, application_id, tenant_id FROM audit_events WHERE target_id = $1 AND action = 'webhook.status_changed'`, [sub.id]);
  assert.equal(changed.actor_type, 'system');
  assert.deepEqual([changed.before.status, changed.after.status], ['healthy', 'unhealthy']);
  assert.equal(changed.tenant_id, application.tenantId);

  await revoke(4);
  await runDelivery(t);
  assert.equal(receiver.at('/health').length, 19, 'an unhealthy subscription still receives');

  t.clock.advance(5 * DAY - 13 * 3600);
  await t.deps.jobs.runNow('webhook-health');
  assert.equal((await statusOf(sub.id)).status, 'unhealthy', 'not before 5 days');
  t.clock.advance(13 * 3600);
  const swept = await t.deps.jobs.runNow('webhook-health');
  assert.equal(swept.disabled, 1);
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  const mails = await mailsTo(t, application.owner.email);
  assert.equal(mails.filter((m) => m.template === 'webhook_disabled').length, 1);
  assert.match(mails.find((m) => m.template === 'webhook_disabled')!.text_body, new RegExp(sub.id));

  const seen = receiver.at('/health').length;
  await revoke(5);
  t.clock.advance(DAY);
  await runDelivery(t);
  assert.equal(receiver.at('/health').length, seen, 'a disabled subscription receives nothing (pending retries stop too)');

  receiver.routes.set('/health', (_req, res) => res.writeHead(200).end());
  const healed = assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, key, { status: 'healthy' }), 200);
  assert.equal(healed.status, 'healthy');
  assert.equal(healed.consecutive_failures, 0);
  await runDelivery(t);
  assert.equal(receiver.at('/health').length, seen, 'missed events are not backfilled');
  await revoke(6);
  await runDelivery(t);
  assert.equal(receiver.at('/health').length, seen + 1);
  assert.equal(receiver.at('/health').at(-1)!.body.data.user_id, 'usr_h6');
});

test('missed events are not backfilled: an event written while the subscription was disabled is not delivered, even when the relay reaches it only after PATCH status healthy', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/window'), events: ['user.suspended'] }), 201);
  receiver.routes.set('/window', (_req, res) => res.writeHead(200).end());
  await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = $2, disabled_reason = 'gone' WHERE id = $1`, [sub.id, t.clock.now()]);
  await emitEvent(t, 'user.suspended', { user_id: 'usr_missed' });
  t.clock.advance(1);
  assert.equal(assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'healthy' }), 200).status, 'healthy');
  await runDelivery(t);
  assert.deepEqual(receiver.at('/window'), [], 'written while disabled: not delivered');
  await emitEvent(t, 'user.suspended', { user_id: 'usr_after' });
  await runDelivery(t);
  assert.deepEqual(receiver.at('/window').map((r) => r.body.data.user_id), ['usr_after']);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"a re-enabled subscription receives only events written from the re-enable on" (docs/decisions.md, Health): an event written at the re-enable\'s own instant is delivered, one written the moment before it is not', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/reenable-instant'), events: ['user.suspended'] }), 201);
  await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = $2, disabled_reason = 'gone' WHERE id = $1`, [sub.id, t.clock.now()]);
  await withStoppedClock(t, async () => {
    t.clock.advance(1);
    await emitEvent(t, 'user.suspended', { user_id: 'usr_before_reenable' });
    t.clock.advance(0.001);
    assert.equal(assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'healthy' }), 200).status, 'healthy');
    await emitEvent(t, 'user.suspended', { user_id: 'usr_at_reenable' });
  });
  await runDelivery(t);
  assert.deepEqual(receiver.at('/reenable-instant').map((r) => r.body.data.user_id), ['usr_at_reenable']);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('a successful delivery resets consecutive_failures and returns an unhealthy subscription to healthy; on a healthy one it resets the count, so "3 consecutive deliveries" start again', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/recover'), events: ['user.reactivated'] }), 201);
  const counting = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/recover-healthy'), events: ['user.reactivated'] }), 201);
  await sql(t, `UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 4, unhealthy_since = $2 WHERE id = $1`, [sub.id, t.clock.now()]);
  await sql(t, `UPDATE webhook_subscriptions SET consecutive_failures = 2 WHERE id = $1`, [counting.id]);
  await emitEvent(t, 'user.reactivated', { user_id: 'usr_back' });
  await runDelivery(t);
  const state = await statusOf(sub.id);
  assert.equal(state.status, 'healthy');
  assert.equal(state.consecutive_failures, 0);
  const healthy = await statusOf(counting.id);
  assert.deepEqual([healthy.status, healthy.consecutive_failures], ['healthy', 0], 'two exhausted deliveries, then a success: the count starts again');
  assert.deepEqual(await sql(t, `SELECT action FROM audit_events WHERE target_id = $1 AND action = 'webhook.status_changed'`, [counting.id]), [], 'no status change');
  for (const id of [sub.id, counting.id]) await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [id]);
});

test('410 Gone on a test call ("any | 410 Gone response from the receiver | disabled immediately") disables the subscription too; a 500 on a test call changes nothing', async () => {
  const owner = await createUser(t);
  const creator = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], createdBy: owner.id })).secret;
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', creator, { scope: 'platform', url: receiver.url('/gone-test'), events: ['user.suspended'] }), 201);
  receiver.routes.set('/gone-test', (_req, res) => res.writeHead(500).end('down'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, creator), 202);
  await runDelivery(t);
  const unchanged = await statusOf(sub.id);
  assert.deepEqual([unchanged.status, unchanged.consecutive_failures], ['healthy', 0], 'a 500 on a test call changes nothing: no failure counted');
  assert.deepEqual(await sql(t, `SELECT action FROM audit_events WHERE target_id = $1 AND action = 'webhook.status_changed'`, [sub.id]), [], 'no status change audited');
  assert.deepEqual(await mailsTo(t, owner.email), [], 'no owner mail');
  receiver.routes.set('/gone-test', (_req, res) => res.writeHead(410).end('gone'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, creator), 202);
  await runDelivery(t);
  const state = await statusOf(sub.id);
  assert.equal(state.status, 'disabled');
  const [stored] = await sql(t, 'SELECT disabled_reason FROM webhook_subscriptions WHERE id = $1', [sub.id]);
  assert.equal(stored.disabled_reason, 'gone');
  assert.equal((await mailsTo(t, owner.email))[0]?.template, 'webhook_disabled');
  await emitEvent(t, 'user.suspended', { user_id: 'usr_g3' });
  await runDelivery(t);
  assert.equal(receiver.at('/gone-test').length, 2, 'the two test calls only');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('a test-mode subscription\'s health change is audited in test mode (docs/decisions.md, Mode of an audit row: "system jobs take the subject\'s"; Part A: test credentials see only test rows, live only live): its webhook.status_changed row is read by test-mode audit.view, not by live', async () => {
  const owner = await createUser(t);
  const creator = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], mode: 'test', createdBy: owner.id })).secret;
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', creator, { scope: 'platform', url: receiver.url('/gone-test-mode'), events: ['user.suspended'] }), 201);
  assert.equal(sub.test_mode, true);
  receiver.routes.set('/gone-test-mode', (_req, res) => res.writeHead(410).end('gone'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, creator), 202);
  await runDelivery(t);
  assert.equal(assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}`, creator), 200).status, 'disabled');
  const rows = await sql(t, `SELECT id, actor_type, test_mode FROM audit_events WHERE target_id = $1 AND action = 'webhook.status_changed'`, [sub.id]);
  assert.deepEqual(rows.map((r) => [r.actor_type, r.test_mode]), [['system', true]], 'one row, actor system, of the subscription\'s mode');
  const readIds = async (cred: string) => assertStatus(await call(t, 'GET', `/v1/audit-events?action=webhook.status_changed&target_id=${sub.id}`, cred), 200).data.map((e: any) => e.id);
  assert.deepEqual(await readIds(await platformKey(t, ['audit.view'], 'test')), [rows[0].id], 'test-mode audit.view reads it');
  assert.deepEqual(await readIds(await platformKey(t, ['audit.view'])), [], 'live audit.view does not');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"A 410 Gone disables the subscription on any of them" (docs/decisions.md, Test and redeliver): a redelivery answered 410 disables it at once, as a test call does', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/gone-redeliver'), events: ['user.suspended'] }), 201);
  receiver.routes.set('/gone-redeliver', (_req, res) => res.writeHead(200).end());
  await emitEvent(t, 'user.suspended', { user_id: 'usr_gone_redeliver' });
  await runDelivery(t);
  const [delivered] = await deliveriesOf(t, sub.id);
  assert.equal(delivered.status, 'succeeded');
  receiver.routes.set('/gone-redeliver', (_req, res) => res.writeHead(410).end('gone'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${delivered.id}/redeliver`, admin), 202);
  await runDelivery(t);
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  const [stored] = await sql(t, 'SELECT disabled_reason FROM webhook_subscriptions WHERE id = $1', [sub.id]);
  assert.equal(stored.disabled_reason, 'gone');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('410 Gone disables the subscription at once (owner mailed), and later events are not delivered; another 4xx (404) is a failure that is retried, the subscription staying healthy', async () => {
  const owner = await createUser(t);
  const creator = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], createdBy: owner.id })).secret;
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', creator, { scope: 'platform', url: receiver.url('/gone'), events: ['user.suspended'] }), 201);
  const missing = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/not-found'), events: ['user.suspended'] }), 201);
  receiver.routes.set('/gone', (_req, res) => res.writeHead(410).end('gone'));
  receiver.routes.set('/not-found', (_req, res) => res.writeHead(404).end('no such hook'));
  await emitEvent(t, 'user.suspended', { user_id: 'usr_g1' });
  await runDelivery(t);
  const state = await statusOf(sub.id);
  assert.equal(state.status, 'disabled');
  assert.deepEqual([(await statusOf(missing.id)).status, (await statusOf(missing.id)).consecutive_failures], ['healthy', 0], 'a 404 does not disable');
  const [retried] = await deliveriesOf(t, missing.id);
  assert.deepEqual([retried.status, retried.attempt, retried.response_status, retried.error], ['pending', 1, 404, 'no such hook'], 'a 404 is retried on the schedule');
  assert.deepEqual(await sql(t, `SELECT action FROM audit_events WHERE target_id = $1 AND action = 'webhook.status_changed'`, [missing.id]), []);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [missing.id]);
  const [row] = await deliveriesOf(t, sub.id);
  assert.equal(row.status, 'failed');
  assert.equal(row.response_status, 410);
  const [stored] = await sql(t, 'SELECT created_by_user_id, disabled_reason FROM webhook_subscriptions WHERE id = $1', [sub.id]);
  assert.equal(stored.created_by_user_id, owner.id, "a platform subscription belongs to the key's creator");
  assert.equal(stored.disabled_reason, 'gone');
  const [mail] = await mailsTo(t, owner.email);
  assert.equal(mail.template, 'webhook_disabled');
  assert.match(mail.text_body, /410 Gone/);
  await emitEvent(t, 'user.suspended', { user_id: 'usr_g2' });
  await runDelivery(t);
  assert.equal(receiver.at('/gone').length, 1);
  // "delivery stops": nothing is enqueued for a disabled subscription, so its log shows the 410 attempt only.
  const log = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, creator), 200).data;
  assert.deepEqual(log.map((d: { response_status: number | null }) => d.response_status), [410]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"5 consecutive days unhealthy": a delivery that exhausts its retries while the subscription is already unhealthy does not restart the 5 days', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/still-down'), events: ['role.removed'] }), 201);
  receiver.routes.set('/still-down', (_req, res) => res.writeHead(500).end('down'));
  const since = new Date(t.clock.now().getTime() - 4 * DAY * 1000);
  await sql(t, `UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 3, unhealthy_since = $2 WHERE id = $1`, [sub.id, since]);
  await emitEvent(t, 'role.removed', { user_id: 'usr_still_down', role_id: 'role_x', application_id: null });
  await exhaustSchedule(); // about 14.6 hours: 4 days 14.6 hours unhealthy
  let state = await statusOf(sub.id);
  assert.deepEqual([state.status, state.consecutive_failures], ['unhealthy', 4]);
  t.clock.advance(10 * 3600); // 5 days and a little since it became unhealthy
  await t.deps.jobs.runNow('webhook-health');
  state = await statusOf(sub.id);
  assert.equal(state.status, 'disabled', 'disabled 5 days after it became unhealthy, whatever failed meanwhile');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

/** A platform subscription to user.suspended whose first delivery failed (500): its retry is queued. */
async function subscriptionWithQueuedRetry(path: string, userId: string) {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url(path), events: ['user.suspended'] }), 201);
  receiver.routes.set(path, (_req, res) => res.writeHead(500).end('down'));
  const eventId = await emitEvent(t, 'user.suspended', { user_id: userId });
  await runDelivery(t);
  const queued = (await deliveriesOf(t, sub.id)).find((d) => d.event_id === eventId)!;
  assert.deepEqual([queued.status, queued.attempt], ['pending', 1], 'a retry is queued');
  return { sub, queued };
}

test('"disabled (delivery stops)": a retry queued before the subscription was disabled is not sent after PATCH status healthy ("missed events not backfilled")', async () => {
  const { sub, queued } = await subscriptionWithQueuedRetry('/queued', 'usr_queued');
  receiver.routes.set('/queued', (_req, res) => res.writeHead(410).end('gone'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
  await runDelivery(t);
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  assert.equal((await deliveriesOf(t, sub.id)).find((d) => d.id === queued.id)!.status, 'failed', 'the queued retry ended with the disable');

  receiver.routes.set('/queued', (_req, res) => res.writeHead(200).end());
  assertStatus(await call(t, 'PATCH', `/v1/webhooks/${sub.id}`, admin, { status: 'healthy' }), 200);
  t.clock.advance(DAY);
  await runDelivery(t);
  assert.equal(receiver.at('/queued').filter((r) => r.body.id === queued.event_id).length, 1, 'the event from before the disable is not sent again');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"owner emailed" when an Application owned by an Organization loses its subscription: its active org_admins are mailed, not plain or pending members', async () => {
  const orgAdmin = await person(t);
  const member = await createUser(t);
  const pendingAdmin = await createUser(t);
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', orgAdmin.token, { name: `Hooks ${Date.now()}` }), 201);
  for (const [userId, role, status] of [[member.id, 'member', 'active'], [pendingAdmin.id, 'org_admin', 'pending']]) {
    await sql(t, `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, $3, $4, $5, $5)`, [org.id, userId, role, status, t.clock.now()]);
  }
  const slug = `whorg${Date.now()}`;
  const application = assertStatus(await call(t, 'POST', '/v1/applications', admin, { slug, name: `App ${slug}`, launch_url: `https://${slug}.example.com/`, owner_organization_id: org.id }), 201);
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: application.id, url: receiver.url('/org-owned'), events: ['*'] }), 201);
  receiver.routes.set('/org-owned', (_req, res) => res.writeHead(410).end('gone'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
  await runDelivery(t);
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  assert.deepEqual((await mailsTo(t, orgAdmin.email)).map((m) => m.template), ['webhook_disabled']);
  assert.deepEqual(await mailsTo(t, member.email), []);
  assert.deepEqual(await mailsTo(t, pendingAdmin.email), []);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('a redelivery does not count toward health (docs/decisions.md "Test and redeliver"): a succeeding one leaves an unhealthy subscription unhealthy', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/redeliver-health'), events: ['user.deleted'] }), 201);
  receiver.routes.set('/redeliver-health', (_req, res) => res.writeHead(500).end('down'));
  await emitEvent(t, 'user.deleted', { user_id: 'usr_redeliver_health' });
  await runDelivery(t);
  const [original] = await deliveriesOf(t, sub.id);
  await sql(t, `UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 3, unhealthy_since = $2 WHERE id = $1`, [sub.id, t.clock.now()]);
  receiver.routes.set('/redeliver-health', (_req, res) => res.writeHead(200).end());
  const again = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/deliveries/${original.id}/redeliver`, admin), 202);
  await runDelivery(t);
  assert.equal((await deliveriesOf(t, sub.id)).find((d) => d.id === again.id)!.status, 'succeeded');
  const state = await statusOf(sub.id);
  assert.deepEqual([state.status, state.consecutive_failures], ['unhealthy', 3]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"disabled (delivery stops)": an event delivery still pending for a disabled subscription (the relay fanned the event out as a disable committed) is never sent; it fails without an attempt, leaving last_delivery_at at the last attempt', async () => {
  const { sub, queued } = await subscriptionWithQueuedRetry('/raced-disable', 'usr_raced_disable');
  const lastAttempt = (await statusOf(sub.id)).last_delivery_at;
  assert.notEqual(lastAttempt, null);
  // The state a relay leaves when its fan-out commits just after a disable failed the pending deliveries.
  await sql(t, `UPDATE webhook_subscriptions SET status = 'disabled', disabled_at = $2, disabled_reason = 'unhealthy' WHERE id = $1`, [sub.id, t.clock.now()]);
  receiver.routes.set('/raced-disable', (_req, res) => res.writeHead(200).end());
  t.clock.advance(RETRY_SCHEDULE[0]);
  await runDelivery(t);
  assert.equal(receiver.at('/raced-disable').length, 1, 'nothing is sent to a disabled subscription after its first attempt');
  const after = (await deliveriesOf(t, sub.id)).find((d) => d.id === queued.id)!;
  assert.deepEqual([after.status, after.attempt], ['failed', 2]);
  const state = await statusOf(sub.id);
  assert.deepEqual([state.status, state.last_delivery_at], ['disabled', lastAttempt], 'no attempt, so no new last_delivery_at');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"5 consecutive days unhealthy" on both sides of the edge: the health job disables a subscription unhealthy for 5 days, and not one a second short of them', async () => {
  const edge = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/five-days'), events: ['role.removed'] }), 201);
  const short = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/five-days-short'), events: ['role.removed'] }), 201);
  // On a stopped clock: the job must judge the very instant the rows were written against.
  await withStoppedClock(t, async () => {
    const now = t.clock.now().getTime();
    const unhealthy = `UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 3, unhealthy_since = $2 WHERE id = $1`;
    await sql(t, unhealthy, [edge.id, new Date(now - 5 * DAY * 1000)]);
    await sql(t, unhealthy, [short.id, new Date(now - 5 * DAY * 1000 + 1000)]);
    await t.deps.jobs.runNow('webhook-health');
  });
  assert.equal((await statusOf(edge.id)).status, 'disabled', 'unhealthy for 5 days: disabled');
  assert.equal((await statusOf(edge.id)).consecutive_failures, 3, 'the disable keeps the counter: only PATCH status healthy resets it ("counters reset")');
  assert.equal((await statusOf(short.id)).status, 'unhealthy', 'a second short of 5 days: still unhealthy');
  for (const sub of [edge, short]) await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"delivery log retained 30 days" prunes finished deliveries only: a retry still pending after 30 days (no worker ran meanwhile) survives the health job and is sent, with the same event id ("at-least-once")', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/late-retry'), events: ['user.reactivated'] }), 201);
  receiver.routes.set('/late-retry', (_req, res) => res.writeHead(500).end('down'));
  const eventId = await emitEvent(t, 'user.reactivated', { user_id: 'usr_late_retry' });
  await runDelivery(t);
  const [queued] = await deliveriesOf(t, sub.id);
  assert.deepEqual([queued.status, queued.attempt], ['pending', 1]);
  receiver.routes.set('/late-retry', (_req, res) => res.writeHead(200).end());
  t.clock.advance(30 * DAY + 3600);
  await t.deps.jobs.runNow('webhook-health');
  await runDelivery(t);
  assert.deepEqual(receiver.at('/late-retry').map((r) => r.body.id), [eventId, eventId], 'the retry goes out after the prune');
  const [sent] = await deliveriesOf(t, sub.id);
  assert.deepEqual([sent.id, sent.status, sent.attempt], [queued.id, 'succeeded', 2]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"Test and redeliver … allowed while disabled" (docs/decisions.md): a test call still waiting when the health job disables its subscription is sent all the same; only event deliveries are failed', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/pending-test-call'), events: ['role.removed'] }), 201);
  const accepted = await withStoppedClock(t, async () => {
    await sql(t, `UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 3, unhealthy_since = $2 WHERE id = $1`, [sub.id, new Date(t.clock.now().getTime() - 5 * DAY * 1000)]);
    const queued = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
    await t.deps.jobs.runNow('webhook-health');
    return queued;
  });
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  assert.deepEqual((await deliveriesOf(t, sub.id)).map((d) => [d.id, d.status, d.attempt]), [[accepted.id, 'pending', 0]], 'the disable leaves the test call waiting');
  await runDelivery(t);
  assert.deepEqual(receiver.at('/pending-test-call').map((r) => [r.body.type, r.headers['platform-delivery-id']]), [['webhook.test', accepted.id]]);
  assert.deepEqual((await deliveriesOf(t, sub.id)).map((d) => [d.status, d.response_status]), [['succeeded', 200]]);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"delivery log retained 30 days" to the second: a delivery exactly 30 days old is still listed and survives the health job; a second later it is pruned', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/thirty-days'), events: ['user.reactivated'] }), 201);
  await withStoppedClock(t, async () => {
    const eventId = await emitEvent(t, 'user.reactivated', { user_id: 'usr_thirty_days' });
    await runDelivery(t);
    t.clock.advance(30 * DAY);
    await t.deps.jobs.runNow('webhook-health');
    assert.deepEqual((await deliveriesOf(t, sub.id)).map((d) => [d.event_id, d.status]), [[eventId, 'succeeded']], 'kept by the health job');
    const listed = assertStatus(await call(t, 'GET', `/v1/webhooks/${sub.id}/deliveries`, admin), 200).data;
    assert.deepEqual(listed.map((d: any) => [d.event_id, d.status]), [[eventId, 'succeeded']]);
    t.clock.advance(1);
    await t.deps.jobs.runNow('webhook-health');
  });
  assert.deepEqual(await deliveriesOf(t, sub.id), []);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('docs/decisions.md "Retention of personal data": a relayed outbox event (its event data) is kept 31 days, one day past the delivery log\'s 30 days: the health job keeps it exactly 31 days after its relay and deletes it a millisecond later', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/thirty-one-days'), events: ['user.reactivated'] }), 201);
  const relayedAt = async (id: string) => (await sql<{ relayed_at: Date | null }>(t, 'SELECT relayed_at FROM outbox_events WHERE id = $1', [id])).map((r) => r.relayed_at?.getTime() ?? null);
  await withStoppedClock(t, async () => {
    const eventId = await emitEvent(t, 'user.reactivated', { user_id: 'usr_thirty_one_days' });
    await runDelivery(t);
    const relayed = t.clock.now().getTime();
    assert.deepEqual(await relayedAt(eventId), [relayed], 'relayed at the stopped instant');
    t.clock.advance(30 * DAY + 1);
    await t.deps.jobs.runNow('webhook-health');
    assert.deepEqual(await deliveriesOf(t, sub.id), [], 'the delivery log entry is gone after 30 days');
    assert.deepEqual(await relayedAt(eventId), [relayed], 'the event stays past the log');
    t.clock.advance(DAY - 1);
    await t.deps.jobs.runNow('webhook-health');
    assert.deepEqual(await relayedAt(eventId), [relayed], 'kept at exactly 31 days');
    t.clock.advance(0.001);
    await t.deps.jobs.runNow('webhook-health');
    assert.deepEqual(await relayedAt(eventId), [], 'deleted a millisecond after 31 days');
  });
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"disabled (delivery stops)" ends the queued retries only: a delivery that already succeeded or failed keeps its status and error in the delivery log; the webhook.status_changed audit row gives the reason gone', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/log-kept'), events: ['user.suspended'] }), 201);
  receiver.routes.set('/log-kept', (_req, res) => res.writeHead(200).end());
  const delivered = await emitEvent(t, 'user.suspended', { user_id: 'usr_log_kept_1' });
  await runDelivery(t);
  receiver.routes.set('/log-kept', (_req, res) => res.writeHead(500).end('down'));
  const retried = await emitEvent(t, 'user.suspended', { user_id: 'usr_log_kept_2' });
  await runDelivery(t);
  receiver.routes.set('/log-kept', (_req, res) => res.writeHead(410).end('gone'));
  const call410 = assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
  await runDelivery(t);
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  const log = await deliveriesOf(t, sub.id);
  const byEvent = (id: string) => log.find((d) => d.event_id === id)!;
  assert.deepEqual([byEvent(delivered).status, byEvent(delivered).response_status, byEvent(delivered).error], ['succeeded', 200, null], 'a delivery that succeeded stays succeeded');
  assert.deepEqual([byEvent(retried).status, byEvent(retried).error], ['failed', 'subscription disabled; last error: down'], 'the queued retry ends with the disable');
  assert.deepEqual([log.find((d) => d.id === call410.id)!.status, log.find((d) => d.id === call410.id)!.response_status], ['failed', 410]);
  const [changed] = await sql(t, `SELECT actor_type, before, after FROM audit_events WHERE target_id = $1 AND action = 'webhook.status_changed'`, [sub.id]);
  assert.equal(changed.actor_type, 'system');
  assert.deepEqual([changed.before.status, changed.after.status, changed.after.reason], ['healthy', 'disabled', 'gone']);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"owner emailed" never mails a deleted user: a platform subscription whose creator was deleted is disabled by 410 Gone with no mail to them', async () => {
  const owner = await createUser(t);
  const creator = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], createdBy: owner.id })).secret;
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', creator, { scope: 'platform', url: receiver.url('/creator-deleted'), events: ['user.suspended'] }), 201);
  await sql(t, `UPDATE users SET status = 'deleted' WHERE id = $1`, [owner.id]);
  receiver.routes.set('/creator-deleted', (_req, res) => res.writeHead(410).end('gone'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, admin), 202);
  await runDelivery(t);
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  assert.deepEqual(await mailsTo(t, owner.email), []);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"secret rotation overlap 24 hours": the health job drops the previous secret when the 24 hours end, to the second, not before', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/rotation-sweep'), events: ['user.suspended'] }), 201);
  const stored = async () => (await sql(t, 'SELECT previous_secret FROM webhook_subscriptions WHERE id = $1', [sub.id]))[0].previous_secret;
  await withStoppedClock(t, async () => {
    assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/rotate-secret`, admin), 200);
    t.clock.advance(DAY - 1);
    await t.deps.jobs.runNow('webhook-health');
    assert.notEqual(await stored(), null, 'a second before the 24 hours end: kept');
    t.clock.advance(1);
    await t.deps.jobs.runNow('webhook-health');
    assert.equal(await stored(), null, 'at 24 hours: dropped');
  });
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('"owner emailed" for app scope is the Application\'s owner only: the user whose key created the subscription is not mailed when they do not own the Application', async () => {
  const owner = await person(t);
  const application = await newApp(t, admin, owner);
  const operator = await createUser(t);
  const creator = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], createdBy: operator.id })).secret;
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', creator, { scope: application.id, url: receiver.url('/app-owner-only'), events: ['*'] }), 201);
  receiver.routes.set('/app-owner-only', (_req, res) => res.writeHead(410).end('gone'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, creator), 202);
  await runDelivery(t);
  assert.equal((await statusOf(sub.id)).status, 'disabled');
  assert.deepEqual((await mailsTo(t, owner.email)).map((m) => m.template), ['webhook_disabled'], 'the Application owner is mailed');
  assert.deepEqual(await mailsTo(t, operator.email), [], 'the creating operator is not');
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});
