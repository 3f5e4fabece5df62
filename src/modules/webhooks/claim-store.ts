import type { Queryable } from '../../db/types.js';

export interface ClaimedDelivery {
  id: string;
  subscription_id: string;
  event_id: string;
  kind: 'event' | 'test' | 'redelivery';
  /** This attempt's number (the claim counted it). */
  attempt: number;
  max_attempts: number;
  test_mode: boolean;
  last_attempt_at: Date;
  url: string;
  sub_status: 'healthy' | 'unhealthy' | 'disabled';
  signing_secret: string;
  previous_secret: string | null;
  previous_secret_expires_at: Date | null;
  api_version: string;
  /** null when the event is no longer kept (the test purge removed it). */
  type: string | null;
  application_id: string | null;
  data: Record<string, unknown> | null;
  event_created_at: Date | null;
}

/** Attempts a worker may still start per subscription: `left` by subscription id, `fresh` for any other. */
export interface ClaimRoom {
  left: Record<string, number>;
  fresh: number;
}

const CLAIM_SELECT = `SELECT c.*, s.url, s.status AS sub_status, s.signing_secret, s.previous_secret, s.previous_secret_expires_at, s.api_version,
            e.type, e.application_id, e.data, e.created_at AS event_created_at
       FROM claimed c JOIN webhook_subscriptions s ON s.id = c.subscription_id LEFT JOIN outbox_events e ON e.id = c.event_id`;
// A claim counts its attempt, up to the last: a worker that died holding the last attempt leaves it to be sent
// again under the same number (the receiver may never have seen it), never as an attempt beyond the schedule.
const CLAIM_UPDATE = `UPDATE webhook_deliveries d SET claim_token = $2, claimed_until = $3, attempt = LEAST(d.attempt + 1, d.max_attempts), last_attempt_at = $1`;
const CLAIM_RETURNING = `RETURNING d.id, d.subscription_id, d.event_id, d.kind, d.attempt, d.max_attempts, d.test_mode, d.last_attempt_at`;
const DUE = `status = 'pending' AND next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until < $1)`;
/** A subscription's room in the claim statement: named in $5, else $6. */
const roomOf = (subscription: string) => `COALESCE(($5::jsonb ->> ${subscription})::int, $6)`;

/**
 * Claims due deliveries with FOR UPDATE SKIP LOCKED and the lease token `token` until `lease`, counting
 * the attempt in the same statement: the oldest due first, at most `limit`.
 */
export async function claimDueDeliveries(db: Queryable, now: Date, token: string, lease: Date, limit: number): Promise<ClaimedDelivery[]> {
  const { rows } = await db.query<ClaimedDelivery>(
    `WITH claimed AS (
         ${CLAIM_UPDATE}
          WHERE d.id IN (SELECT id FROM webhook_deliveries WHERE ${DUE} ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED)
          ${CLAIM_RETURNING})
       ${CLAIM_SELECT}`,
    [now, token, lease, limit],
  );
  return rows;
}

/** As claimDueDeliveries, at most `room` per subscription: one with no room is passed over. */
export async function claimDueWithinRoom(db: Queryable, now: Date, token: string, lease: Date, limit: number, room: ClaimRoom): Promise<ClaimedDelivery[]> {
  // The oldest due deliveries are read first (a bounded window); when that window is full and yet
  // gives fewer than the limit, subscriptions without room fill it (a receiver that hangs, with a
  // backlog of thousands). Then each subscription with due deliveries is found with one index probe
  // and gets its oldest, up to its room, so the others never wait for a scan through that backlog.
  // The due condition is repeated where the rows are locked: FOR UPDATE re-checks it on a row another
  // process claimed meanwhile, and skips it.
  const { rows } = await db.query<ClaimedDelivery>(
    `WITH RECURSIVE head AS (
       SELECT id, subscription_id, next_attempt_at FROM webhook_deliveries WHERE ${DUE} ORDER BY next_attempt_at LIMIT $4 * 4),
     ranked AS (
       SELECT id, ${roomOf('subscription_id')} AS room, row_number() OVER (PARTITION BY subscription_id ORDER BY next_attempt_at, id) AS rn FROM head),
     fast AS (SELECT id FROM ranked WHERE rn <= room),
     starved AS (SELECT (SELECT count(*) FROM head) = $4 * 4 AND (SELECT count(*) FROM fast) < $4 AS yes),
     subs AS (
       (SELECT subscription_id AS sid FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= $1 ORDER BY subscription_id LIMIT 1)
       UNION ALL
       SELECT (SELECT subscription_id FROM webhook_deliveries
                WHERE status = 'pending' AND next_attempt_at <= $1 AND subscription_id > subs.sid ORDER BY subscription_id LIMIT 1)
         FROM subs WHERE subs.sid IS NOT NULL),
     per_sub AS (
       SELECT d.id FROM (SELECT sid FROM subs WHERE sid IS NOT NULL AND ${roomOf('sid')} > 0) s
        CROSS JOIN LATERAL (SELECT id FROM webhook_deliveries WHERE subscription_id = s.sid AND ${DUE}
                             ORDER BY next_attempt_at, id LIMIT ${roomOf('s.sid')}) d),
     picked AS (
       SELECT id FROM webhook_deliveries
        WHERE id = ANY (ARRAY(SELECT id FROM fast WHERE NOT (SELECT yes FROM starved)
                              UNION ALL SELECT id FROM per_sub WHERE (SELECT yes FROM starved)))
          AND ${DUE}
        ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED),
     claimed AS (
       ${CLAIM_UPDATE} WHERE d.id IN (SELECT id FROM picked)
       ${CLAIM_RETURNING})
     ${CLAIM_SELECT}`,
    [now, token, lease, limit, JSON.stringify(room.left), room.fresh],
  );
  return rows;
}

/**
 * Retries set before the clock stepped back are made due now. A retry lies at its attempt's start plus
 * that attempt's back-off (before the first attempt: at the delivery's creation), so one further ahead
 * than its own back-off plus the skew bound is one whose schedule was set more than the skew bound
 * ahead of now: no process within the skew of this one set it since (docs/decisions.md, "Clocks of
 * several processes"). One probe of webhook_deliveries_set_at_idx, an empty range unless the clock
 * stepped back; run by each delivery pass (every 15 s, and at once after a step, as every job), so the
 * claim statements, run several times a second by the worker, stay as they are. A claim still held
 * (work that may still run) is left to its lease. A retry made due here lies before the instant its
 * schedule was set, so a later pass leaves it where it is (and the condition, unlike one on
 * next_attempt_at, does not draw the planner to the due index, a scan of every waiting retry).
 */
export async function updateDueAfterStepBack(db: Queryable, now: Date, stepBound: Date): Promise<number> {
  const { rowCount } = await db.query(
    `UPDATE webhook_deliveries SET next_attempt_at = $1
      WHERE id IN (SELECT id FROM webhook_deliveries
                    WHERE status = 'pending' AND COALESCE(last_attempt_at, created_at) > $2 AND next_attempt_at >= COALESCE(last_attempt_at, created_at)
                      AND (claimed_until IS NULL OR claimed_until < $1)
                    FOR UPDATE SKIP LOCKED)`,
    [now, stepBound],
  );
  return rowCount;
}

/** Where one finished attempt leaves its delivery (written only while its claim still holds the lease). */
export interface DeliveryOutcome {
  id: string;
  token: string;
  status: 'pending' | 'succeeded' | 'failed';
  next: Date | null;
  responseStatus: number | null;
  durationMs: number | null;
  error: string | null;
}

/** Writes finished attempts and releases their claims; returns the deliveries whose claim still held. */
export async function updateClaimedDeliveries(db: Queryable, outcomes: DeliveryOutcome[], now: Date): Promise<{ id: string }[]> {
  const { rows } = await db.query<{ id: string }>(
    `UPDATE webhook_deliveries d SET status = u.status, next_attempt_at = u.next, response_status = u.rs,
              duration_ms = u.ms, error = u.err, claimed_until = NULL, claim_token = NULL,
              completed_at = CASE WHEN u.status = 'pending' THEN NULL ELSE $8::timestamptz END
         FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int[], $6::int[], $7::text[])
              AS u(id, token, status, next, rs, ms, err)
        WHERE d.id = u.id AND d.claim_token = u.token
        RETURNING d.id`,
    [
      outcomes.map((x) => x.id),
      outcomes.map((x) => x.token),
      outcomes.map((x) => x.status),
      outcomes.map((x) => x.next),
      outcomes.map((x) => x.responseStatus),
      outcomes.map((x) => x.durationMs),
      outcomes.map((x) => x.error),
      now,
    ],
  );
  return rows;
}
