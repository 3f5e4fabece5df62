import type { Queryable } from '../../db/types.js';
import type { Delivery, Webhook } from './schemas.js';

export interface SubscriptionRow {
  id: string;
  scope: string;
  application_id: string | null;
  url: string;
  events: string[];
  description: string | null;
  status: 'healthy' | 'unhealthy' | 'disabled';
  signing_secret: string;
  previous_secret: string | null;
  previous_secret_expires_at: Date | null;
  api_version: string;
  test_mode: boolean;
  consecutive_failures: number;
  unhealthy_since: Date | null;
  disabled_at: Date | null;
  disabled_reason: string | null;
  last_delivery_at: Date | null;
  created_by_user_id: string | null;
  created_at: Date;
  updated_at: Date;
}

export const SUBSCRIPTION_COLUMNS = `w.id, w.scope, w.application_id, w.url, w.events, w.description, w.status, w.signing_secret, w.previous_secret,
  w.previous_secret_expires_at, w.api_version, w.test_mode, w.consecutive_failures, w.unhealthy_since, w.disabled_at, w.disabled_reason,
  w.last_delivery_at, w.created_by_user_id, w.created_at, w.updated_at`;

const iso = (d: Date | null) => (d ? d.toISOString() : null);

/** The public shape; the signing secret only where the caller asks for it (create). */
export function toWebhook(r: SubscriptionRow, withSecret = false): Webhook {
  return {
    id: r.id,
    scope: r.scope,
    url: r.url,
    events: r.events,
    description: r.description,
    status: r.status,
    ...(withSecret ? { signing_secret: r.signing_secret } : {}),
    api_version: r.api_version,
    test_mode: r.test_mode,
    consecutive_failures: r.consecutive_failures,
    last_delivery_at: iso(r.last_delivery_at),
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}

export async function findSubscription(db: Queryable, id: string, forUpdate = false): Promise<SubscriptionRow | null> {
  const { rows } = await db.query<SubscriptionRow>(`SELECT ${SUBSCRIPTION_COLUMNS} FROM webhook_subscriptions w WHERE w.id = $1 ${forUpdate ? 'FOR UPDATE' : ''}`, [id]);
  return rows[0] ?? null;
}

export async function insertSubscription(db: Queryable, r: SubscriptionRow): Promise<void> {
  await db.query(
    `INSERT INTO webhook_subscriptions (id, scope, application_id, url, events, description, status, signing_secret, api_version, test_mode,
       created_by_user_id, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)`,
    [r.id, r.scope, r.application_id, r.url, r.events, r.description, r.status, r.signing_secret, r.api_version, r.test_mode, r.created_by_user_id, r.created_at],
  );
}

/** Subscriptions of the Tenant's Applications in this connection's mode (the webhooks plan cap). */
export async function countTenantSubscriptions(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM webhook_subscriptions w WHERE w.application_id IN (SELECT a.id FROM applications a WHERE a.tenant_id = $1)`,
    [tenantId],
  );
  return rows[0].n;
}

export interface DeliveryRow {
  id: string;
  subscription_id: string;
  event_id: string;
  event_type: string;
  kind: 'event' | 'test' | 'redelivery';
  status: 'pending' | 'succeeded' | 'failed';
  attempt: number;
  response_status: number | null;
  duration_ms: number | null;
  error: string | null;
  next_attempt_at: Date | null;
  created_at: Date;
}

export const DELIVERY_COLUMNS = `d.id, d.subscription_id, d.event_id, d.event_type, d.kind, d.status, d.attempt, d.response_status, d.duration_ms, d.error,
  d.next_attempt_at, d.created_at`;

export function toDelivery(r: DeliveryRow): Delivery {
  return {
    id: r.id,
    event_id: r.event_id,
    event_type: r.event_type,
    attempt: r.attempt,
    status: r.status,
    response_status: r.response_status,
    duration_ms: r.duration_ms,
    error: r.error,
    next_retry_at: r.status === 'pending' ? iso(r.next_attempt_at) : null,
    created_at: r.created_at.toISOString(),
  };
}

/** Queues one delivery of an event to one subscription (test calls and redeliveries: one attempt). */
export async function insertDelivery(
  db: Queryable,
  d: { id: string; subscriptionId: string; eventId: string; eventType: string; kind: DeliveryRow['kind']; testMode: boolean; maxAttempts: number; now: Date },
): Promise<DeliveryRow> {
  const { rows } = await db.query<DeliveryRow>(
    `INSERT INTO webhook_deliveries AS d (id, subscription_id, event_id, event_type, kind, test_mode, status, max_attempts, next_attempt_at, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $8) RETURNING ${DELIVERY_COLUMNS}`,
    [d.id, d.subscriptionId, d.eventId, d.eventType, d.kind, d.testMode, d.maxAttempts, d.now],
  );
  return rows[0];
}

export async function findDelivery(db: Queryable, subscriptionId: string, id: string): Promise<DeliveryRow | null> {
  const { rows } = await db.query<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries d WHERE d.id = $1 AND d.subscription_id = $2`, [id, subscriptionId]);
  return rows[0] ?? null;
}
