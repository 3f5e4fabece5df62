import type { KeysetSql, Queryable } from '../../db/types.js';
import { selectPage } from '../../db/page.js';
import type { DeliveryListQuery } from './schemas.js';
import { DELIVERY_COLUMNS, type DeliveryRow, type ListFilter } from './store.js';

/** Serializes test calls and redeliveries of one subscription until commit (an advisory lock). */
export async function lockManualDeliveries(db: Queryable, subscriptionId: string): Promise<void> {
  await db.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`webhook-manual:${subscriptionId}`]);
}

/** Test calls and redeliveries of the subscription still waiting to be sent. */
export async function countPendingManual(db: Queryable, subscriptionId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = $1 AND status = 'pending' AND kind <> 'event'`,
    [subscriptionId],
  );
  return rows[0].n;
}

/** Marks one outbox event relayed (a test event: its one delivery is written by the caller). */
export async function markEventRelayed(db: Queryable, eventId: string, now: Date): Promise<void> {
  await db.query('UPDATE outbox_events SET relayed_at = $2 WHERE id = $1', [eventId, now]);
}

/** 1 while the outbox still keeps the event, else 0. */
export async function countOutboxEvent(db: Queryable, eventId: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM outbox_events WHERE id = $1', [eventId]);
  return rowCount;
}

/** The log's conditions over `d`: the subscription, the log window, then the event_id, status and since filters. */
export function deliveryListFilter(subscriptionId: string, logStart: Date, q: Pick<DeliveryListQuery, 'event_id' | 'status' | 'since'>): ListFilter {
  const params: unknown[] = [subscriptionId, logStart];
  const where = ['d.subscription_id = $1', 'd.created_at >= $2'];
  if (q.event_id) where.push(`d.event_id = $${params.push(q.event_id)}`);
  if (q.status) where.push(`d.status = $${params.push(q.status)}`);
  if (q.since) where.push(`d.created_at >= $${params.push(q.since)}::timestamptz`);
  return { where, params };
}

export async function listDeliveryLog(db: Queryable, filter: ListFilter, ks: KeysetSql): Promise<DeliveryRow[]> {
  return selectPage<DeliveryRow>(db, `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d`, filter, ks);
}
