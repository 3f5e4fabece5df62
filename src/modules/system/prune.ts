import type { Deps } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import {
  deleteDeadOneTimeTokensBatch, deleteEndedSessionsBatch, deleteExpiredBillingSimulatorSessions, deleteExpiredCounters,
  deleteExpiredIdempotencyKeys, deleteExpiredLoginLockouts, deleteOldEmailsBatch, deleteOldProcessorEventsBatch, deleteStaleEventClocks,
} from './store.js';

/**
 * Days a session is kept after its 90-day end, revoked or not: until then a replayed refresh token of
 * it is still recognised (and a used one audited) for as long as the token could have lived.
 */
export const ENDED_SESSION_RETENTION_DAYS = 30;
/** Days a mail that has left the outbox (sent, logged or failed for good) is kept, as the webhook delivery log. */
export const MAIL_RETENTION_DAYS = 30;
/**
 * Days a processor event's record is kept: its id makes a redelivery a duplicate, and Stripe retries an
 * event for 3 days at most; the order of events is judged on the Tenant's row, not on these records.
 */
export const PROCESSOR_EVENT_RETENTION_DAYS = 30;
const daysBefore = (d: Date, days: number) => new Date(d.getTime() - days * 86400_000);
/** Rows a pruning statement deletes at most: no one statement holds locks on (or, embedded, the connection over) a huge backlog. */
const PRUNE_BATCH = 5000;

/**
 * Drops idempotency records past their 24 hours, counter windows that have ended, idle login lockouts,
 * users' event clocks a day old, one-time tokens used or expired (unless a queued mail still carries
 * the link, which the relay must see dead), mails out of the outbox for 30 days, expired billing
 * simulator pages (they hold the caller's email), processor events' records after 30 days (every event
 * the processor sends is recorded, unknown types too), and sessions 30 days past their 90-day end with everything hanging off them (refresh tokens used or
 * not, app refresh tokens, authorization codes, hosted-page browser rows: ON DELETE CASCADE). Each
 * refresh writes a token row and each sign-in a session, so kept for ever they grew without bound.
 * Sessions, one-time tokens and mails go in batches, so no one statement holds locks on a huge backlog
 * (the first run after an upgrade finds every token and mail ever written).
 */
export async function pruneExpired(deps: Deps): Promise<{
  idempotency_keys: number; counters: number; login_lockouts: number; sessions: number; event_clocks: number;
  one_time_tokens: number; emails: number; billing_simulator_sessions: number; processor_events: number;
}> {
  const db = deps.database.scoped('system');
  const now = deps.clock.now();
  const keys = await deleteExpiredIdempotencyKeys(db, now);
  const counters = await deleteExpiredCounters(db, now);
  const lockouts = await deleteExpiredLoginLockouts(db, now);
  // A user's event clock (src/outbox/emit.ts) matters only to changes racing it; a day on, every
  // request's instant is past it.
  const clocks = await deleteStaleEventClocks(db, now);
  // A dead token works nowhere (a used or expired link is 400 invalid_token like an unknown one); an
  // email change's keeps the requested address, and every MFA sign-in writes one.
  const tokens = await inBatches(deleteDeadOneTimeTokensBatch, now);
  const mails = await inBatches(deleteOldEmailsBatch, daysBefore(now, MAIL_RETENTION_DAYS));
  const simulator = await deleteExpiredBillingSimulatorSessions(db, now);
  const processorEvents = await inBatches(deleteOldProcessorEventsBatch, daysBefore(now, PROCESSOR_EVENT_RETENTION_DAYS));
  const sessions = await inBatches(deleteEndedSessionsBatch, daysBefore(now, ENDED_SESSION_RETENTION_DAYS));
  return {
    idempotency_keys: keys, counters, login_lockouts: lockouts, sessions, event_clocks: clocks,
    one_time_tokens: tokens, emails: mails, billing_simulator_sessions: simulator, processor_events: processorEvents,
  };

  /** Runs `deleteBatch` (at `at`) a batch a statement until a batch comes up short. */
  async function inBatches(deleteBatch: (db: Queryable, at: Date, limit: number) => Promise<number>, at: Date): Promise<number> {
    let deleted = 0;
    for (;;) {
      const rowCount = await deleteBatch(db, at, PRUNE_BATCH);
      deleted += rowCount;
      if (rowCount < PRUNE_BATCH) return deleted;
    }
  }
}
