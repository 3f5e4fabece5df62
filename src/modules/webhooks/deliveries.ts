import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { addSeconds } from '../../clock.js';
import { ApiError } from '../../errors.js';
import type { Tx } from '../../db/types.js';
import { newId } from '../../ids.js';
import { emit } from '../../outbox/emit.js';
import { keyset, toPage } from '../../http/pagination.js';
import { DELIVERY_LOG_DAYS } from './catalog.js';
import { shareVisibleSubscription, visibleSubscription } from './access.js';
import { findDelivery, insertDelivery, toDelivery } from './store.js';
import { countOutboxEvent, countPendingManual, deliveryListFilter, listDeliveryLog, lockManualDeliveries, markEventRelayed } from './delivery-store.js';
import type { Delivery, DeliveryListQuery } from './schemas.js';
import { auditWebhook } from './service.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';

export const TEST_MESSAGE = 'This is a test event from Platform.';

/** Test calls and redeliveries of one subscription waiting to be sent at once (docs/decisions.md). */
export const MANUAL_PENDING_LIMIT = 10;
const MANUAL_RETRY_AFTER_SECONDS = 5;

/**
 * Each test call or redelivery is a pending delivery that no business write stands behind, sent even
 * to a disabled subscription. Against a receiver that hangs (one attempt in flight per subscription
 * after a failure, 5 s each) they only pile up, and every worker's claim, in every process, scans past
 * the pile to reach other Tenants' deliveries. At most MANUAL_PENDING_LIMIT of them wait per
 * subscription; beyond it 429 rate_limited with Retry-After, nothing written. Serialized per
 * subscription (advisory lock), so concurrent calls cannot all see room for the last one.
 */
async function assertManualRoom(tx: Tx, subscriptionId: string): Promise<void> {
  await lockManualDeliveries(tx, subscriptionId);
  const pending = await countPendingManual(tx, subscriptionId);
  if (pending < MANUAL_PENDING_LIMIT) return;
  throw new ApiError('rate_limited', {
    message: `At most ${MANUAL_PENDING_LIMIT} test calls and redeliveries of one subscription wait to be sent at once.`,
    details: { pending, limit: MANUAL_PENDING_LIMIT },
    headers: { 'retry-after': String(MANUAL_RETRY_AFTER_SECONDS) },
  });
}

const logStart = (ctx: Ctx) => addSeconds(ctx.now, -DELIVERY_LOG_DAYS * 86400);

/**
 * POST /v1/webhooks/{id}/test: a webhook.test event for this subscription only (written to the
 * outbox already relayed, so no other subscription gets it), sent through the real delivery path
 * regardless of the events filter and of status. One attempt; health is not touched.
 */
export async function sendTest(ctx: Ctx, id: string): Promise<Delivery> {
  return ctx.db.transaction(async (tx) => {
    // Held until commit: a DELETE meanwhile waits and drops this delivery too, or went first (404).
    const sub = await shareVisibleSubscription(ctx, tx, id);
    // A delivery of an app-scope subscription is its Application's Tenant's data: none while it is migrating.
    if (sub.application_id) await assertAppTenantWritable(tx, sub.application_id);
    await assertManualRoom(tx, sub.id);
    const c = inTx(ctx, tx);
    const eventId = await emit(tx, c, { type: 'webhook.test', applicationId: sub.application_id, data: { message: TEST_MESSAGE } });
    await markEventRelayed(tx, eventId, ctx.now);
    const delivery = await insertDelivery(tx, {
      id: newId('dlv'), subscriptionId: sub.id, eventId, eventType: 'webhook.test', kind: 'test', testMode: sub.test_mode, maxAttempts: 1, now: ctx.now,
    });
    await auditWebhook(tx, ctx, 'webhook.test_sent', sub, { after: { delivery_id: delivery.id, event_id: eventId } });
    return toDelivery(delivery);
  });
}

/** POST /v1/webhooks/{id}/deliveries/{deliveryId}/redeliver: the same event id, one attempt now, within the 30-day log. */
export async function redeliver(ctx: Ctx, id: string, deliveryId: string): Promise<Delivery> {
  return ctx.db.transaction(async (tx) => {
    // Held until commit, as for a test call: a DELETE meanwhile waits for the redelivery, or went first (404).
    const sub = await shareVisibleSubscription(ctx, tx, id);
    const original = await findDelivery(tx, sub.id, deliveryId);
    if (!original || original.created_at < logStart(ctx)) throw new ApiError('delivery_not_found');
    if (sub.application_id) await assertAppTenantWritable(tx, sub.application_id);
    if ((await countOutboxEvent(tx, original.event_id)) === 0) throw new ApiError('delivery_not_found', { message: 'The event of this delivery is no longer kept.' });
    await assertManualRoom(tx, sub.id);
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
  const filter = deliveryListFilter(sub.id, logStart(ctx), q);
  const ks = keyset(q, filter.params.length + 1, 'd');
  const rows = await listDeliveryLog(ctx.db, filter, ks);
  return toPage(rows, ks.limit, toDelivery);
}
