import { OWNED_APPLICATIONS_SQL } from '../../access/ownership.js';
import type { KeysetSql, Queryable } from '../../db/types.js';
import { selectPage } from '../../db/page.js';
import type { Delivery, Webhook, WebhookListQuery } from './schemas.js';

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
export function toWebhook(r: SubscriptionRow): Webhook {
  return {
    id: r.id,
    scope: r.scope,
    url: r.url,
    events: r.events,
    description: r.description,
    status: r.status,
    api_version: r.api_version,
    test_mode: r.test_mode,
    consecutive_failures: r.consecutive_failures,
    last_delivery_at: iso(r.last_delivery_at),
    created_at: r.created_at.toISOString(),
    updated_at: r.updated_at.toISOString(),
  };
}

/** The subscription by id, whoever may see it; `lock` holds its row (a write's FOR UPDATE, a delivery's FOR KEY SHARE). */
export async function findSubscription(db: Queryable, id: string, lock: '' | 'FOR UPDATE' | 'FOR KEY SHARE' = ''): Promise<SubscriptionRow | null> {
  const { rows } = await db.query<SubscriptionRow>(`SELECT ${SUBSCRIPTION_COLUMNS} FROM webhook_subscriptions w WHERE w.id = $1 ${lock}`, [id]);
  return rows[0] ?? null;
}

/** Who is asking, reduced to what subscription visibility depends on. */
export interface WebhookViewer {
  /** Platform webhooks.manage (a User or a platform-scope key). */
  manage: boolean;
  /** An app-scoped key's Application: it manages that Application's subscriptions, needing no permission. */
  keyApp: string | null;
  userId: string | null;
}

/** SQL over `w`: the subscriptions the viewer may see (webhooks.manage all; the own key its app; owners their apps). */
export function visibleCondition(viewer: WebhookViewer, params: unknown[]): string {
  if (viewer.manage) return 'TRUE';
  if (viewer.keyApp) return `w.application_id = $${params.push(viewer.keyApp)}`;
  if (viewer.userId) return `w.application_id IN (${OWNED_APPLICATIONS_SQL(params.push(viewer.userId))})`;
  return 'FALSE';
}

/** The subscription if the viewer may see it, else null. */
export async function findVisibleSubscription(db: Queryable, viewer: WebhookViewer, id: string): Promise<SubscriptionRow | null> {
  const params: unknown[] = [id];
  const condition = visibleCondition(viewer, params);
  const { rows } = await db.query<SubscriptionRow>(
    `SELECT ${SUBSCRIPTION_COLUMNS} FROM webhook_subscriptions w WHERE w.id = $1 AND ${condition}`,
    params,
  );
  return rows[0] ?? null;
}

/** A list's conditions (ANDed) and their parameters, before the keyset page's. */
export interface ListFilter {
  where: string[];
  params: unknown[];
}

/** The list's conditions over `w`: what the viewer may see, then the scope and status filters. */
export function subscriptionListFilter(viewer: WebhookViewer, q: Pick<WebhookListQuery, 'scope' | 'status'>): ListFilter {
  const params: unknown[] = [];
  const where = [visibleCondition(viewer, params)];
  if (q.scope) where.push(`w.scope = $${params.push(q.scope)}`);
  if (q.status) where.push(`w.status = $${params.push(q.status)}`);
  return { where, params };
}

export async function listSubscriptions(db: Queryable, filter: ListFilter, ks: KeysetSql): Promise<SubscriptionRow[]> {
  return selectPage<SubscriptionRow>(db, `SELECT ${SUBSCRIPTION_COLUMNS} FROM webhook_subscriptions w`, filter, ks);
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

/** PATCH: the new settings; `reset` (disabled → healthy) also clears the health counters. */
export async function updateSubscription(
  db: Queryable,
  id: string,
  next: { url: string; events: string[]; description: string | null; api_version: string },
  now: Date,
  reset: boolean,
): Promise<SubscriptionRow> {
  const { rows } = await db.query<SubscriptionRow>(
    `UPDATE webhook_subscriptions w SET url = $2, events = $3, description = $4, api_version = $5, updated_at = $6,
              status = CASE WHEN $7::boolean THEN 'healthy' ELSE w.status END,
              consecutive_failures = CASE WHEN $7::boolean THEN 0 ELSE w.consecutive_failures END,
              unhealthy_since = CASE WHEN $7::boolean THEN NULL ELSE w.unhealthy_since END,
              disabled_at = CASE WHEN $7::boolean THEN NULL ELSE w.disabled_at END,
              disabled_reason = CASE WHEN $7::boolean THEN NULL ELSE w.disabled_reason END,
              reenabled_at = CASE WHEN $7::boolean THEN $6 ELSE w.reenabled_at END
        WHERE w.id = $1 RETURNING ${SUBSCRIPTION_COLUMNS}`,
    [id, next.url, next.events, next.description, next.api_version, now, reset],
  );
  return rows[0]!;
}

/** Rotation: the new (sealed) secret signs; the previous one, as stored, keeps signing until `expires`. */
export async function updateSigningSecret(db: Queryable, id: string, sealed: string, previous: string, expires: Date, now: Date): Promise<void> {
  await db.query(
    `UPDATE webhook_subscriptions SET signing_secret = $2, previous_secret = $3, previous_secret_expires_at = $4, updated_at = $5 WHERE id = $1`,
    [id, sealed, previous, expires, now],
  );
}

/** Its queued deliveries go with it (cascade). */
export async function deleteSubscription(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM webhook_subscriptions WHERE id = $1', [id]);
}

/** The user who created an API key (a platform-scope subscription's creator when a key creates it). */
export async function findKeyCreator(db: Queryable, keyId: string): Promise<string | null> {
  const { rows } = await db.query<{ created_by_user_id: string }>('SELECT created_by_user_id FROM api_keys WHERE id = $1', [keyId]);
  return rows[0]?.created_by_user_id ?? null;
}

/** The Tenant of an Application (null for none, or for a null id). */
export async function findApplicationTenantId(db: Queryable, applicationId: string | null): Promise<string | null> {
  const { rows } = await db.query<{ tenant_id: string }>('SELECT tenant_id FROM applications WHERE id = $1', [applicationId]);
  return rows[0]?.tenant_id ?? null;
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
