import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { addSeconds } from '../../clock.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { emit } from '../../outbox/emit.js';
import { keyset, toPage } from '../../http/pagination.js';
import { DELIVERY_LOG_DAYS } from './catalog.js';
import { visibleSubscription } from './access.js';
import { DELIVERY_COLUMNS, findDelivery, insertDelivery, toDelivery, type DeliveryRow } from './store.js';
import type { Delivery, DeliveryListQuery } from './schemas.js';
import { auditWebhook } from './service.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';

export const TEST_MESSAGE = 'This is a test event from Platform.';

const logStart = (ctx: Ctx) => addSeconds(ctx.now, -DELIVERY_LOG_DAYS * 86400);

/**
 * POST /v1/webhooks/{id}/test: a webhook.test event for this subscription only (written to the
 * outbox already relayed, so no other subscription gets it), sent through the real delivery path
 * regardless of the events filter and of status. One attempt; health is not touched.
 */
export async function sendTest(ctx: Ctx, id: string): Promise<Delivery> {
  return ctx.db.transaction(async (tx) => {
    const sub = await visibleSubscription(ctx, id, tx);
    // A delivery of an app-scope subscription is its Application's Tenant's data: none while it is migrating.
    if (sub.application_id) await assertAppTenantWritable(tx, sub.application_id);
    const c = inTx(ctx, tx);
    const eventId = await emit(tx, c, { type: 'webhook.test', applicationId: sub.application_id, data: { message: TEST_MESSAGE } });
    await tx.query('UPDATE outbox_events SET relayed_at = $2 WHERE id = $1', [eventId, ctx.now]);
    const delivery = await insertDelivery(tx, {
      id: newId('dlv'), subscriptionId: sub.id, eventId, eventType: 'webhook.test', kind: 'test', testMode: sub.test_mode, maxAttempts: 1, now: ctx.now,
    });
    await auditWebhook(tx, ctx, 'webhook.test_sent', sub, { after: { delivery_id: delivery.id, event_id: eventId } });
    return toDelivery(delivery);
  });
}

/** POST /v1/webhooks/{id}/deliveries/{deliveryId}/redeliver: the same event id, one attempt now, within the 30-day log. */
export async function redeliver(ctx: Ctx, id: string, deliveryId: string): Promise<Delivery> {
  const sub = await visibleSubscription(ctx, id);
  const original = await findDelivery(ctx.db, sub.id, deliveryId);
  if (!original || original.created_at < logStart(ctx)) throw new ApiError('delivery_not_found');
  return ctx.db.transaction(async (tx) => {
    if (sub.application_id) await assertAppTenantWritable(tx, sub.application_id);
    const { rowCount } = await tx.query('SELECT 1 FROM outbox_events WHERE id = $1', [original.event_id]);
    if (rowCount === 0) throw new ApiError('delivery_not_found', { message: 'The event of this delivery is no longer kept.' });
    const delivery = await insertDelivery(tx, {
      id: newId('dlv'),
      subscriptionId: sub.id,
      eventId: original.event_id,
      eventType: original.event_type,
      kind: 'redelivery',
      testMode: sub.test_mode,
      maxAttempts: 1,
      now: ctx.now,
    });
    await auditWebhook(tx, ctx, 'webhook.redelivered', sub, { after: { delivery_id: delivery.id, event_id: original.event_id, original_delivery_id: original.id } });
    return toDelivery(delivery);
  });
}

/** GET /v1/webhooks/{id}/deliveries: the 30-day log, newest first; filters event_id, status, since. */
export async function listDeliveries(ctx: Ctx, id: string, q: DeliveryListQuery) {
  const sub = await visibleSubscription(ctx, id);
  const params: unknown[] = [sub.id, logStart(ctx)];
  const where = ['d.subscription_id = $1', 'd.created_at >= $2'];
  if (q.event_id) where.push(`d.event_id = $${params.push(q.event_id)}`);
  if (q.status) where.push(`d.status = $${params.push(q.status)}`);
  if (q.since) where.push(`d.created_at >= $${params.push(q.since)}::timestamptz`);
  const ks = keyset(q, params.length + 1, 'd');
  const { rows } = await ctx.db.query<DeliveryRow>(
    `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE ${[...where, ks.condition].join(' AND ')} ${ks.orderLimit}`,
    [...params, ...ks.params],
  );
  return toPage(rows, ks.limit, toDelivery);
}
