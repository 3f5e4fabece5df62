import type { Deps } from '../../context.js';
import { addSeconds, beyondStep, toUnixSeconds } from '../../clock.js';
import { renderEnvelope } from './catalog.js';
import { SIGNATURE_HEADER, signatureHeader } from './signature.js';
import { postAttempt, type AttemptResult } from './transport.js';

/** A claim outlives the 5-second attempt by far; a process that dies holding one loses it after this. */
export const CLAIM_LEASE_SECONDS = 60;

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

export interface Outcome {
  delivery: ClaimedDelivery;
  token: string;
  /** null: not sent (subscription disabled, event gone); `skipped` says why. */
  result: AttemptResult | null;
  skipped?: string;
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
 * Claims due deliveries with FOR UPDATE SKIP LOCKED and a lease token, counting the attempt in the
 * same statement, so concurrent workers in any number of processes never send one attempt twice.
 * With `room`, at most that many per subscription (oldest due first): a subscription with no room is
 * passed over, so the others' deliveries are claimed instead of waiting behind it.
 */
export async function claimDue(deps: Deps, limit: number, token: string, room?: ClaimRoom): Promise<ClaimedDelivery[]> {
  const now = deps.clock.now();
  const lease = addSeconds(now, CLAIM_LEASE_SECONDS);
  if (!room) {
    const { rows } = await deps.database.scoped('system').query<ClaimedDelivery>(
      `WITH claimed AS (
         ${CLAIM_UPDATE}
          WHERE d.id IN (SELECT id FROM webhook_deliveries WHERE ${DUE} ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED)
          ${CLAIM_RETURNING})
       ${CLAIM_SELECT}`,
      [now, token, lease, limit],
    );
    return rows;
  }
  // The oldest due deliveries are read first (a bounded window); when that window is full and yet
  // gives fewer than the limit, subscriptions without room fill it (a receiver that hangs, with a
  // backlog of thousands). Then each subscription with due deliveries is found with one index probe
  // and gets its oldest, up to its room, so the others never wait for a scan through that backlog.
  // The due condition is repeated where the rows are locked: FOR UPDATE re-checks it on a row another
  // process claimed meanwhile, and skips it.
  const { rows } = await deps.database.scoped('system').query<ClaimedDelivery>(
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
export async function dueAfterStepBack(deps: Deps): Promise<number> {
  const now = deps.clock.now();
  const { rowCount } = await deps.database.scoped('system').query(
    `UPDATE webhook_deliveries SET next_attempt_at = $1
      WHERE id IN (SELECT id FROM webhook_deliveries
                    WHERE status = 'pending' AND COALESCE(last_attempt_at, created_at) > $2 AND next_attempt_at >= COALESCE(last_attempt_at, created_at)
                      AND (claimed_until IS NULL OR claimed_until < $1)
                    FOR UPDATE SKIP LOCKED)`,
    [now, beyondStep(now, 0)],
  );
  return rowCount ?? 0;
}

/** The signing secrets in force now: the current one, plus the previous one during a rotation overlap. */
export function secretsOf(deps: Deps, d: Pick<ClaimedDelivery, 'subscription_id' | 'signing_secret' | 'previous_secret' | 'previous_secret_expires_at'>, now: Date): string[] {
  const previous = d.previous_secret && d.previous_secret_expires_at && d.previous_secret_expires_at > now ? [d.previous_secret] : [];
  return [d.signing_secret, ...previous].map((stored) => openSigningSecret(deps, d.subscription_id, stored));
}

// Signing secrets are stored sealed (src/auth/secret-box.ts), bound to their subscription; one stored
// before sealing existed is read as it is and sealed at start (resealSigningSecrets).
const secretContext = (subscriptionId: string) => `webhook:${subscriptionId}`;
export const sealSigningSecret = (deps: Deps, subscriptionId: string, secret: string): string => deps.secrets.seal(secret, secretContext(subscriptionId));
const openSigningSecret = (deps: Deps, subscriptionId: string, stored: string): string => deps.secrets.open(stored, secretContext(subscriptionId));

/** At start: signing secrets in the clear or sealed with an old key are sealed with the current one. */
export const resealSigningSecrets = (deps: Deps): Promise<number> =>
  deps.secrets.resealColumns('webhook_subscriptions', ['signing_secret', 'previous_secret'], secretContext);

/** Sends one claimed attempt (signed fresh) and reports what happened; never throws. */
export async function attemptDelivery(deps: Deps, d: ClaimedDelivery, token: string): Promise<Outcome> {
  if (d.type === null || d.data === null || d.event_created_at === null) return { delivery: d, token, result: null, skipped: 'the event is no longer kept' };
  // A disabled subscription gets nothing new; test calls and manual redeliveries still go out.
  if (d.sub_status === 'disabled' && d.kind === 'event') return { delivery: d, token, result: null, skipped: 'the subscription is disabled' };
  const body = renderEnvelope(
    { id: d.event_id, type: d.type, application_id: d.application_id, test_mode: d.test_mode, data: d.data, created_at: d.event_created_at },
    d.api_version,
  );
  const now = deps.clock.now();
  const headers = {
    'content-type': 'application/json',
    'user-agent': 'Platform-Webhooks/1.0',
    'platform-event-id': d.event_id,
    'platform-event-type': d.type,
    'platform-delivery-id': d.id,
    'platform-delivery-attempt': String(d.attempt),
    [SIGNATURE_HEADER.toLowerCase()]: signatureHeader(secretsOf(deps, d, now), toUnixSeconds(now), body),
  };
  const result = await postAttempt(deps, { url: d.url, headers, body });
  const line = {
    webhook_delivery_id: d.id,
    subscription_id: d.subscription_id,
    event_id: d.event_id,
    event_type: d.type,
    kind: d.kind,
    attempt: d.attempt,
    ok: result.ok,
    response_status: result.responseStatus,
    duration_ms: result.durationMs,
    ...(result.error ? { error: result.error } : {}),
  };
  if (result.ok) deps.log.info(line, 'webhook attempt succeeded');
  else deps.log.warn(line, 'webhook attempt failed');
  return { delivery: d, token, result };
}
