import type { Deps } from '../../context.js';
import { newId } from '../../ids.js';
import { MAX_ATTEMPTS } from './catalog.js';

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

/**
 * The outbox relay: claims committed, unrelayed events with SKIP LOCKED and, in the same
 * transaction, turns each into one pending delivery per matching subscription and marks it relayed.
 * A crash before commit leaves the events unrelayed; after commit the deliveries are durable. So an
 * event is fanned out exactly once, whichever process does it.
 */
export async function relayOutbox(deps: Deps, batchSize = 500): Promise<number> {
  return deps.database.scoped('system').transaction(async (tx) => {
    const { rows: events } = await tx.query<{ id: string }>(
      `SELECT id FROM outbox_events WHERE relayed_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`,
      [batchSize],
    );
    if (events.length === 0) return 0;
    const now = deps.clock.now();
    const ids = events.map((e) => e.id);
    const { rows: pairs } = await tx.query<{ event_id: string; type: string; test_mode: boolean; subscription_id: string }>(MATCH_SQL, [ids]);
    if (pairs.length > 0) {
      await tx.query(
        `INSERT INTO webhook_deliveries (id, subscription_id, event_id, event_type, kind, test_mode, status, max_attempts, next_attempt_at, created_at)
         SELECT u.id, u.sub, u.evt, u.type, 'event', u.test, 'pending', $6, $7, $7
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::boolean[]) AS u(id, sub, evt, type, test)`,
        [pairs.map(() => newId('dlv')), pairs.map((p) => p.subscription_id), pairs.map((p) => p.event_id), pairs.map((p) => p.type), pairs.map((p) => p.test_mode), MAX_ATTEMPTS, now],
      );
    }
    await tx.query('UPDATE outbox_events SET relayed_at = $2 WHERE id = ANY($1::text[])', [ids, now]);
    return events.length;
  });
}
