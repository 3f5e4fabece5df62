import type { Queryable } from '../../db/types.js';

export interface HealthRow {
  id: string;
  scope: string;
  application_id: string | null;
  url: string;
  status: 'healthy' | 'unhealthy' | 'disabled';
  test_mode: boolean;
  consecutive_failures: number;
  unhealthy_since: Date | null;
  created_by_user_id: string | null;
}

const HEALTH_COLUMNS = 'id, scope, application_id, url, status, test_mode, consecutive_failures, unhealthy_since, created_by_user_id';

/**
 * Who is told that a subscription was disabled: for app scope the Application's owner (its user, or
 * the active org_admins of its Organization); for platform scope the user who created it.
 */
export async function findOwnerEmails(db: Queryable, sub: Pick<HealthRow, 'application_id' | 'created_by_user_id'>): Promise<string[]> {
  const { rows } = await db.query<{ email: string }>(
    `SELECT DISTINCT u.email FROM users u
      WHERE u.status <> 'deleted' AND (
            ($1::text IS NULL AND u.id = $2)
         OR u.id = ANY (ARRAY(SELECT a.owner_user_id FROM applications a WHERE a.id = $1
                      UNION ALL
                      SELECT m.user_id FROM organization_members m JOIN applications a ON a.owner_organization_id = m.organization_id
                       WHERE a.id = $1 AND m.role = 'org_admin' AND m.membership_status = 'active')))
      ORDER BY u.email`,
    [sub.application_id, sub.created_by_user_id],
  );
  return rows.map((r) => r.email);
}

/** Subscriptions of a batch of outcomes, locked in id order (as DELETE locks), FOR NO KEY UPDATE. */
export async function lockHealthRows(db: Queryable, subIds: string[]): Promise<HealthRow[]> {
  const { rows } = await db.query<HealthRow>(
    `SELECT id, scope, application_id, url, status, test_mode, consecutive_failures, unhealthy_since, created_by_user_id
         FROM webhook_subscriptions WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE`,
    [subIds],
  );
  return rows;
}

/** Status and counters; `disabling` also stamps disabled_at and disabled_reason. */
export async function updateSubscriptionHealth(
  db: Queryable,
  id: string,
  status: HealthRow['status'],
  failures: number,
  unhealthySince: Date | null,
  now: Date,
  disabling: boolean,
  reason: string | null,
): Promise<void> {
  await db.query(
    `UPDATE webhook_subscriptions SET status = $2, consecutive_failures = $3, unhealthy_since = $4, updated_at = $5,
            disabled_at = CASE WHEN $6::boolean THEN $5 ELSE disabled_at END,
            disabled_reason = CASE WHEN $6::boolean THEN $7 ELSE disabled_reason END
      WHERE id = $1`,
    [id, status, failures, unhealthySince, now, disabling, reason],
  );
}

export async function updateLastDeliveryAt(db: Queryable, subIds: string[], now: Date): Promise<void> {
  await db.query('UPDATE webhook_subscriptions SET last_delivery_at = $2 WHERE id = ANY($1::text[])', [subIds, now]);
}

/** A disabled subscription's queued event deliveries fail for good (their claims released). */
export async function failPendingEventDeliveries(db: Queryable, subscriptionId: string, now: Date): Promise<void> {
  await db.query(
    `UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, claimed_until = NULL, claim_token = NULL, completed_at = $2,
            error = left('subscription disabled' || COALESCE('; last error: ' || error, ''), 1024)
      WHERE subscription_id = $1 AND status = 'pending' AND kind = 'event'`,
    [subscriptionId, now],
  );
}

/** Subscriptions unhealthy since `since` or earlier, locked; SKIP LOCKED leaves those an outcome batch holds. */
export async function lockUnhealthySince(db: Queryable, since: Date): Promise<HealthRow[]> {
  const { rows } = await db.query<HealthRow>(
    `SELECT ${HEALTH_COLUMNS} FROM webhook_subscriptions
        WHERE status = 'unhealthy' AND unhealthy_since <= $1 ORDER BY id FOR NO KEY UPDATE SKIP LOCKED`,
    [since],
  );
  return rows;
}

/** Finished deliveries created before `before`; the count deleted. */
export async function deleteFinishedDeliveries(db: Queryable, before: Date): Promise<number> {
  const { rowCount } = await db.query(`DELETE FROM webhook_deliveries WHERE created_at < $1 AND status <> 'pending'`, [before]);
  return rowCount;
}

/** Outbox events relayed before `before`; the count deleted. */
export async function deleteRelayedEvents(db: Queryable, before: Date): Promise<number> {
  const { rowCount } = await db.query(`DELETE FROM outbox_events WHERE relayed_at < $1`, [before]);
  return rowCount;
}

/** Previous signing secrets whose overlap has ended. */
export async function clearExpiredPreviousSecrets(db: Queryable, now: Date): Promise<void> {
  await db.query(
    `UPDATE webhook_subscriptions SET previous_secret = NULL, previous_secret_expires_at = NULL WHERE previous_secret_expires_at <= $1`,
    [now],
  );
}
