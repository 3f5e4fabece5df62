// The Webhook subscription status table (WH-3): 3 exhausted deliveries → unhealthy (delivery
// continues); 5 days unhealthy → disabled with the owner mailed (delivery stops); PATCH healthy
// resets without backfill; 410 Gone disables at once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { createApiKey, createUser } from '../helpers/fixtures.js';
import { assertStatus, buildApp, call, DAY, RETRY_SCHEDULE, deliveriesOf, emitEvent, mailsTo, newApp, platformKey, Receiver, runDelivery, sql } from './support.js';

let t: TestApp;
let admin: string;
let receiver: Receiver;
before(async () => {
  t = await buildApp();
  admin = await platformKey(t);
  receiver = await Receiver.start();
});
after(async () => {
  await receiver.close();
  await t.close();
});

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

test('a successful delivery resets consecutive_failures and returns an unhealthy subscription to healthy', async () => {
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', admin, { scope: 'platform', url: receiver.url('/recover'), events: ['user.reactivated'] }), 201);
  await sql(t, `UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 4, unhealthy_since = $2 WHERE id = $1`, [sub.id, t.clock.now()]);
  await emitEvent(t, 'user.reactivated', { user_id: 'usr_back' });
  await runDelivery(t);
  const state = await statusOf(sub.id);
  assert.equal(state.status, 'healthy');
  assert.equal(state.consecutive_failures, 0);
  await sql(t, 'DELETE FROM webhook_subscriptions WHERE id = $1', [sub.id]);
});

test('410 Gone on a test call ("any | 410 Gone response from the receiver | disabled immediately") disables the subscription too; a 500 on a test call changes nothing', async () => {
  const owner = await createUser(t);
  const creator = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], createdBy: owner.id })).secret;
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', creator, { scope: 'platform', url: receiver.url('/gone-test'), events: ['user.suspended'] }), 201);
  receiver.routes.set('/gone-test', (_req, res) => res.writeHead(500).end('down'));
  assertStatus(await call(t, 'POST', `/v1/webhooks/${sub.id}/test`, creator), 202);
  await runDelivery(t);
  assert.equal((await statusOf(sub.id)).status, 'healthy');
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

test('410 Gone disables the subscription at once (owner mailed), and later events are not delivered', async () => {
  const owner = await createUser(t);
  const creator = (await createApiKey(t, { scope: 'platform', permissions: ['webhooks.manage'], createdBy: owner.id })).secret;
  const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', creator, { scope: 'platform', url: receiver.url('/gone'), events: ['user.suspended'] }), 201);
  receiver.routes.set('/gone', (_req, res) => res.writeHead(410).end('gone'));
  await emitEvent(t, 'user.suspended', { user_id: 'usr_g1' });
  await runDelivery(t);
  const state = await statusOf(sub.id);
  assert.equal(state.status, 'disabled');
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
