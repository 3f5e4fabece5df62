import type { Queryable } from '../../db/types.js';

/**
 * Subscriptions that receive each event: same mode, not disabled, created (or last re-enabled:
 * missed events are not backfilled) no later than the event was written, the events filter (or
 * `*`), and the scope. Platform scope receives everything; app scope its Application's events,
 * plus user.* and organization.member_* when the user had an access path to it when the event was
 * written (path_application_ids, src/outbox/emit.ts). webhook.test is never fanned out.
 * KEY SHARE on the subscriptions: a concurrent DELETE waits for this fan-out (and then cascades to
 * its deliveries) or, if it committed first, the subscription is simply not matched.
 */
const MATCH_SQL = `
SELECT ev.id AS event_id, ev.type, ev.test_mode, s.id AS subscription_id
  FROM outbox_events ev
  JOIN webhook_subscriptions s ON s.test_mode = ev.test_mode AND s.status <> 'disabled'
   AND COALESCE(s.reenabled_at, s.created_at) <= ev.created_at
 WHERE ev.id = ANY($1::text[]) AND ev.type <> 'webhook.test'
   AND ('*' = ANY(s.events) OR ev.type = ANY(s.events))
   AND (s.application_id IS NULL
        OR s.application_id = ev.application_id
        OR (ev.application_id IS NULL AND s.application_id = ANY(ev.path_application_ids)))
 ORDER BY ev.seq
   FOR KEY SHARE OF s`;

/** One event and one subscription that receives it. */
export interface EventMatch {
  event_id: string;
  type: string;
  test_mode: boolean;
  subscription_id: string;
}

/** Committed, unrelayed events, oldest first; SKIP LOCKED leaves those another relay holds. */
export async function lockUnrelayedEvents(db: Queryable, batchSize: number): Promise<{ id: string }[]> {
  const { rows } = await db.query<{ id: string }>(
    `SELECT id FROM outbox_events WHERE relayed_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`,
    [batchSize],
  );
  return rows;
}

export async function findEventMatches(db: Queryable, eventIds: string[]): Promise<EventMatch[]> {
  const { rows } = await db.query<EventMatch>(MATCH_SQL, [eventIds]);
  return rows;
}

/** One pending delivery per match (`ids[i]` for `pairs[i]`), due at once. */
export async function insertEventDeliveries(db: Queryable, ids: string[], pairs: EventMatch[], maxAttempts: number, now: Date): Promise<void> {
  await db.query(
    `INSERT INTO webhook_deliveries (id, subscription_id, event_id, event_type, kind, test_mode, status, max_attempts, next_attempt_at, created_at)
         SELECT u.id, u.sub, u.evt, u.type, 'event', u.test, 'pending', $6, $7, $7
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::boolean[]) AS u(id, sub, evt, type, test)`,
    [ids, pairs.map((p) => p.subscription_id), pairs.map((p) => p.event_id), pairs.map((p) => p.type), pairs.map((p) => p.test_mode), maxAttempts, now],
  );
}

export async function markEventsRelayed(db: Queryable, ids: string[], now: Date): Promise<void> {
  await db.query('UPDATE outbox_events SET relayed_at = $2 WHERE id = ANY($1::text[])', [ids, now]);
}
