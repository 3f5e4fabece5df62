import type { Ctx, Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { addSeconds } from '../../clock.js';
import { modeOf, type Tx } from '../../db/types.js';
import { recordAudit } from '../../audit/record.js';
import { enqueueMail } from '../../mail/outbox.js';
import { DELIVERY_LOG_DAYS, DISABLE_AFTER_UNHEALTHY_SECONDS } from './catalog.js';
import { findApplicationTenantId } from './store.js';
import {
  clearExpiredPreviousSecrets,
  deleteFinishedDeliveries,
  deleteRelayedEvents,
  failPendingEventDeliveries,
  findOwnerEmails,
  lockUnhealthySince,
  updateSubscriptionHealth,
  type HealthRow,
} from './health-store.js';

export type { HealthRow } from './health-store.js';

export interface HealthChange {
  status: HealthRow['status'];
  consecutiveFailures: number;
  unhealthySince: Date | null;
  /** Why it was disabled: a 410 from the receiver, or 5 days unhealthy. */
  reason: 'gone' | 'unhealthy' | null;
}

/** A system ctx in the subscription's mode whose audit rows and mails join the transaction. */
const ctxFor = (deps: Deps, tx: Tx, testMode: boolean, now: Date): Ctx => ({ ...systemCtx(deps, modeOf(testMode)), db: tx, now });

/** Writes a health change; a status move also gets its audit row (actor system) and, on disable, the owner's mail. */
export async function applyHealthChange(tx: Tx, deps: Deps, sub: HealthRow, change: HealthChange, now: Date): Promise<void> {
  const disabling = change.status === 'disabled' && sub.status !== 'disabled';
  await updateSubscriptionHealth(
    tx, sub.id, change.status, change.consecutiveFailures, change.status === 'unhealthy' ? change.unhealthySince : null, now, disabling, change.reason,
  );
  // The failure counter is bookkeeping, like last_delivery_at; status moves are the audited change.
  if (change.status === sub.status) return;
  const ctx = ctxFor(deps, tx, sub.test_mode, now);
  const tenantId = await findApplicationTenantId(tx, sub.application_id);
  await recordAudit(tx, ctx, {
    action: 'webhook.status_changed',
    target: { type: 'webhook', id: sub.id },
    applicationId: sub.application_id,
    tenantId,
    before: { status: sub.status, consecutive_failures: sub.consecutive_failures },
    after: { status: change.status, consecutive_failures: change.consecutiveFailures, ...(change.reason ? { reason: change.reason } : {}) },
  });
  deps.log.warn({ subscription_id: sub.id, from: sub.status, to: change.status, reason: change.reason }, 'webhook subscription health changed');
  if (!disabling) return;
  // Delivery stops: queued retries end here (a late result of an attempt in flight no longer holds
  // the claim, so it is dropped), and nothing resumes if the subscription is set healthy again.
  await failPendingEventDeliveries(tx, sub.id, now);
  for (const to of await findOwnerEmails(tx, sub)) {
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
    const rows = await lockUnhealthySince(tx, addSeconds(now, -DISABLE_AFTER_UNHEALTHY_SECONDS));
    for (const sub of rows) {
      await applyHealthChange(tx, deps, sub, { status: 'disabled', consecutiveFailures: sub.consecutive_failures, unhealthySince: null, reason: 'unhealthy' }, now);
    }
    return rows.length;
  });
  const logStart = addSeconds(now, -DELIVERY_LOG_DAYS * 86400);
  const pruned = await deleteFinishedDeliveries(system, logStart);
  const events = await deleteRelayedEvents(system, addSeconds(logStart, -86400));
  await clearExpiredPreviousSecrets(system, now);
  return { disabled, deliveries_pruned: pruned, events_pruned: events };
}
