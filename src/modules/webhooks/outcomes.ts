import type { Deps } from '../../context.js';
import { addSeconds } from '../../clock.js';
import type { Tx } from '../../db/types.js';
import { RETRY_DELAYS_SECONDS, UNHEALTHY_AFTER_EXHAUSTED } from './catalog.js';
import type { Outcome } from './dispatch.js';
import { applyHealthChange, type HealthRow } from './health.js';
import { updateClaimedDeliveries } from './claim-store.js';
import { lockHealthRows, updateLastDeliveryAt } from './health-store.js';

interface Decided {
  outcome: Outcome;
  status: 'pending' | 'succeeded' | 'failed';
  next: Date | null;
  /** A delivery of an event that failed its last attempt (counts toward unhealthy). */
  exhausted: boolean;
  gone: boolean;
}

/** Where an attempt leaves its delivery: done, failed for good, or due again after the schedule's delay. */
function decide(o: Outcome): Decided {
  const d = o.delivery;
  const r = o.result;
  if (r?.ok) return { outcome: o, status: 'succeeded', next: null, exhausted: false, gone: false };
  // 410 Gone disables the subscription whatever the delivery (a test call too: "any | 410 Gone").
  const gone = r?.responseStatus === 410;
  const last = !r || gone || d.attempt >= d.max_attempts;
  if (last) return { outcome: o, status: 'failed', next: null, exhausted: !!r && !gone && d.kind === 'event', gone };
  const delay = RETRY_DELAYS_SECONDS[Math.min(d.attempt, RETRY_DELAYS_SECONDS.length) - 1];
  return { outcome: o, status: 'pending', next: addSeconds(d.last_attempt_at, delay), exhausted: false, gone: false };
}

/**
 * Writes a batch of finished attempts in one transaction: the delivery rows (only where this claim
 * still holds the lease), the subscriptions' last_delivery_at and health, their audit rows and the
 * owner's mail. Subscription rows are locked first, in id order, as DELETE does, so the two never
 * deadlock (FOR NO KEY UPDATE: the relay's KEY SHARE locks do not wait on it).
 */
export async function recordOutcomes(deps: Deps, outcomes: Outcome[]): Promise<void> {
  if (outcomes.length === 0) return;
  const decided = outcomes.map(decide);
  const now = deps.clock.now();
  await deps.database.scoped('system').transaction(async (tx) => {
    const subIds = [...new Set(outcomes.map((o) => o.delivery.subscription_id))].sort();
    const subs = await lockHealthRows(tx, subIds);
    const applied = await updateClaimedDeliveries(
      tx,
      decided.map((x) => ({
        id: x.outcome.delivery.id,
        token: x.outcome.token,
        status: x.status,
        next: x.next,
        responseStatus: x.outcome.result?.responseStatus ?? null,
        durationMs: x.outcome.result?.durationMs ?? null,
        error: x.outcome.result?.error ?? x.outcome.skipped ?? null,
      })),
      now,
    );
    const mine = new Set(applied.map((r) => r.id));
    await applySubscriptionEffects(tx, deps, subs, decided.filter((x) => mine.has(x.outcome.delivery.id)), now);
  });
}

async function applySubscriptionEffects(tx: Tx, deps: Deps, subs: HealthRow[], decided: Decided[], now: Date): Promise<void> {
  const touched = new Set<string>();
  for (const sub of subs) {
    const own = decided.filter((x) => x.outcome.delivery.subscription_id === sub.id);
    if (own.length === 0) continue;
    if (own.some((x) => x.outcome.result !== null)) touched.add(sub.id);
    const before = { status: sub.status, consecutive_failures: sub.consecutive_failures };
    let { status, consecutive_failures: failures } = sub;
    let unhealthySince = sub.unhealthy_since;
    let goneAt: Date | null = null;
    for (const x of own) {
      if (status === 'disabled') break;
      if (x.gone) {
        status = 'disabled';
        goneAt = now;
      } else if (x.outcome.delivery.kind !== 'event' || x.outcome.result === null) {
        continue; // test calls and redeliveries do not count toward health
      } else if (x.status === 'succeeded') {
        failures = 0;
        if (status === 'unhealthy') [status, unhealthySince] = ['healthy', null];
      } else if (x.exhausted) {
        failures += 1;
        if (status === 'healthy' && failures >= UNHEALTHY_AFTER_EXHAUSTED) [status, unhealthySince] = ['unhealthy', now];
      }
    }
    if (status === before.status && failures === before.consecutive_failures) continue;
    await applyHealthChange(tx, deps, sub, { status, consecutiveFailures: failures, unhealthySince, reason: goneAt ? 'gone' : null }, now);
  }
  if (touched.size > 0) {
    await updateLastDeliveryAt(tx, [...touched], now);
  }
}
