import type { Ctx, Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { addSeconds } from '../../clock.js';
import { modeOf, type Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { enqueueMail } from '../../mail/outbox.js';
import { DELIVERY_LOG_DAYS, DISABLE_AFTER_UNHEALTHY_SECONDS } from './catalog.js';

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

export interface HealthChange {
  status: HealthRow['status'];
  consecutiveFailures: number;
  unhealthySince: Date | null;
  /** Why it was disabled: a 410 from the receiver, or 5 days unhealthy. */
  reason: 'gone' | 'unhealthy' | null;
}

const HEALTH_COLUMNS = 'id, scope, application_id, url, status, test_mode, consecutive_failures, unhealthy_since, created_by_user_id';

/** A system ctx in the subscription's mode whose audit rows and mails join the transaction. */
const ctxFor = (deps: Deps, tx: Tx, testMode: boolean, now: Date): Ctx => ({ ...systemCtx(deps, modeOf(testMode)), db: tx, now });

/**
 * Who is told that a subscription was disabled: for app scope the Application's owner (its user, or
 * the active org_admins of its Organization); for platform scope the user who created it.
 */
export async function ownerEmails(tx: Tx, sub: Pick<HealthRow, 'application_id' | 'created_by_user_id'>): Promise<string[]> {
  const { rows } = await tx.query<{ email: string }>(
    `SELECT DISTINCT u.email FROM users u
      WHERE u.status <> 'deleted' AND (
            ($1::text IS NULL AND u.id = $2)
         OR u.id IN (SELECT a.owner_user_id FROM applications a WHERE a.id = $1)
         OR u.id IN (SELECT m.user_id FROM organization_members m JOIN applications a ON a.owner_organization_id = m.organization_id
                      WHERE a.id = $1 AND m.role = 'org_admin' AND m.membership_status = 'active'))
      ORDER BY u.email`,
    [sub.application_id, sub.created_by_user_id],
  );
  return rows.map((r) => r.email);
}

/** Writes a health change; a status move also gets its audit row (actor system) and, on disable, the owner's mail. */
export async function applyHealthChange(tx: Tx, deps: Deps, sub: HealthRow, change: HealthChange, now: Date): Promise<void> {
  const disabling = change.status === 'disabled' && sub.status !== 'disabled';
  await tx.query(
    `UPDATE webhook_subscriptions SET status = $2, consecutive_failures = $3, unhealthy_since = $4, updated_at = $5,
            disabled_at = CASE WHEN $6::boolean THEN $5 ELSE disabled_at END,
            disabled_reason = CASE WHEN $6::boolean THEN $7 ELSE disabled_reason END
      WHERE id = $1`,
    [sub.id, change.status, change.consecutiveFailures, change.status === 'unhealthy' ? change.unhealthySince : null, now, disabling, change.reason],
  );
  // The failure counter is bookkeeping, like last_delivery_at; status moves are the audited change.
  if (change.status === sub.status) return;
  const ctx = ctxFor(deps, tx, sub.test_mode, now);
  const { rows } = await tx.query<{ tenant_id: string }>('SELECT tenant_id FROM applications WHERE id = $1', [sub.application_id]);
  await recordAudit(tx, ctx, {
    action: 'webhook.status_changed',
    target: { type: 'webhook', id: sub.id },
    applicationId: sub.application_id,
    tenantId: rows[0]?.tenant_id ?? null,
    before: { status: sub.status, consecutive_failures: sub.consecutive_failures },
    after: { status: change.status, consecutive_failures: change.consecutiveFailures, ...(change.reason ? { reason: change.reason } : {}) },
  });
  deps.log.warn({ subscription_id: sub.id, from: sub.status, to: change.status, reason: change.reason }, 'webhook subscription health changed');
  if (!disabling) return;
  // Delivery stops: queued retries end here (a late result of an attempt in flight no longer holds
  // the claim, so it is dropped), and nothing resumes if the subscription is set healthy again.
  await tx.query(
    `UPDATE webhook_deliveries SET status = 'failed', next_attempt_at = NULL, claimed_until = NULL, claim_token = NULL, completed_at = $2,
            error = left('subscription disabled' || COALESCE('; last error: ' || error, ''), 1024)
      WHERE subscription_id = $1 AND status = 'pending' AND kind = 'event'`,
    [sub.id, now],
  );
  for (const to of await ownerEmails(tx, sub)) {
    await enqueueMail(tx, ctx, { template: 'webhook_disabled', to, vars: { url: sub.url, subscriptionId: sub.id, reason: change.reason ?? 'unhealthy' } });
  }
}

/**
 * The webhook-health job: subscriptions unhealthy for 5 consecutive days are disabled (owner
 * mailed); the delivery log keeps 30 days; relayed outbox rows go once no redelivery can need them;
 * expired previous secrets are dropped.
 */
export async function runHealthSweep(deps: Deps): Promise<Record<string, number>> {
  const now = deps.clock.now();
  const system = deps.database.scoped('system');
  const disabled = await system.transaction(async (tx) => {
    const { rows } = await tx.query<HealthRow>(
      `SELECT ${HEALTH_COLUMNS} FROM webhook_subscriptions
        WHERE status = 'unhealthy' AND unhealthy_since <= $1 ORDER BY id FOR NO KEY UPDATE SKIP LOCKED`,
      [addSeconds(now, -DISABLE_AFTER_UNHEALTHY_SECONDS)],
    );
    for (const sub of rows) {
      await applyHealthChange(tx, deps, sub, { status: 'disabled', consecutiveFailures: sub.consecutive_failures, unhealthySince: null, reason: 'unhealthy' }, now);
    }
    return rows.length;
  });
  const logStart = addSeconds(now, -DELIVERY_LOG_DAYS * 86400);
  const pruned = await system.query(`DELETE FROM webhook_deliveries WHERE created_at < $1 AND status <> 'pending'`, [logStart]);
  const events = await system.query(`DELETE FROM outbox_events WHERE relayed_at < $1`, [addSeconds(logStart, -86400)]);
  await system.query(
    `UPDATE webhook_subscriptions SET previous_secret = NULL, previous_secret_expires_at = NULL WHERE previous_secret_expires_at <= $1`,
    [now],
  );
  return { disabled, deliveries_pruned: pruned.rowCount, events_pruned: events.rowCount };
}
